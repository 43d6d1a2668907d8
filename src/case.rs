//! Case files (`shared/docs/golden-format.md`, format 1): reading one into validated
//! [`LayerInputs`], writing the oracle's outputs, and writing cases.
//!
//! Reading checks, in this order, before any tensor is converted: the safetensors framing (truncation,
//! header), the metadata (`moe.format`, `moe.config`, [`MoeConfig::validate`]), the total size the
//! config implies ([`MAX_ELEMENTS`]), which tensors are present (given or computed routing), and every
//! present tensor's dtype and shape against the config. Then tensors are converted to f64 and their values
//! are checked (expert ids, finiteness). Every error is one line naming the tensor and the problem.
//!
//! Writing goes to a temporary file in the destination's directory that is renamed over the destination
//! only when complete, so a failure never leaves a partial file.

use std::collections::BTreeMap;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use half::{bf16, f16};
use moe_reference::{Backward, Forward, LayerInputs, MoeConfig};
use ndarray::{Array1, Array2, ArrayD, CowArray, Ix1, Ix2, Ix3, IxDyn};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use crate::error::{one_line, CaseError};

/// The `moe.format` this crate reads and writes.
pub const FORMAT: &str = "1";
/// Metadata key of the format version.
pub const KEY_FORMAT: &str = "moe.format";
/// Metadata key of the layer configuration (JSON).
pub const KEY_CONFIG: &str = "moe.config";
/// Metadata key naming the program that wrote an output file.
pub const KEY_WRITER: &str = "moe.writer";
/// Upper bound on the f64 elements a case may imply (inputs, outputs and intermediates together).
pub const MAX_ELEMENTS: u128 = 1 << 34;

const MAX_HEADER: u64 = 100_000_000;

/// How strict reading is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Accept NaN and infinities in float inputs.
    pub allow_nonfinite: bool,
}

/// A case read from a file.
#[derive(Clone, Debug)]
pub struct Case {
    /// Validated layer inputs (shapes match `inputs.cfg`, ids valid, routing mode decided).
    pub inputs: LayerInputs,
    /// The `moe.config` string exactly as stored (copied into outputs).
    pub config_json: String,
    /// All metadata of the file.
    pub metadata: BTreeMap<String, String>,
    /// The stored dtype of every input tensor that was read.
    pub dtypes: BTreeMap<String, Dtype>,
}

impl Case {
    /// True when the layer computes its own routing (no `topk_ids`/`topk_weights` given).
    pub fn routes_itself(&self) -> bool {
        self.inputs.topk_ids.is_none()
    }
}

/// Float dtypes a case's inputs can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatDtype {
    F64,
    F32,
    BF16,
    F16,
}

impl FloatDtype {
    pub fn dtype(self) -> Dtype {
        match self {
            FloatDtype::F64 => Dtype::F64,
            FloatDtype::F32 => Dtype::F32,
            FloatDtype::BF16 => Dtype::BF16,
            FloatDtype::F16 => Dtype::F16,
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------------------

/// Read and validate a case file.
pub fn read_case(path: &Path, opts: ReadOptions) -> Result<Case, CaseError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(|e| CaseError::io(path, e))?;
    parse_case(&bytes, opts)
}

/// Tensor roles of a case, with the dtypes accepted for each.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Float,
    I32,
}

const FLOAT_DTYPES: &str = "F64, F32, BF16 or F16";

/// Parse and validate a case from the bytes of a safetensors file.
pub fn parse_case(bytes: &[u8], opts: ReadOptions) -> Result<Case, CaseError> {
    let (header_len, meta) = parse_framing(bytes)?;
    let data = &bytes[8 + header_len..];

    // Metadata.
    let metadata: BTreeMap<String, String> =
        meta.metadata().as_ref().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
    match metadata.get(KEY_FORMAT) {
        None => {
            return Err(CaseError::Metadata(format!("missing `{KEY_FORMAT}` in __metadata__ (not a MoE case file?)")))
        }
        Some(v) if v != FORMAT => {
            return Err(CaseError::Metadata(format!(
                "`{KEY_FORMAT}` is {:?}, this reader understands {FORMAT:?}",
                one_line(v)
            )))
        }
        Some(_) => {}
    }
    let config_json = metadata
        .get(KEY_CONFIG)
        .ok_or_else(|| CaseError::Metadata(format!("missing `{KEY_CONFIG}` in __metadata__")))?
        .clone();
    let cfg = parse_config(&config_json)?;

    // Which tensors are needed, their dtypes and shapes: all from the header, before converting anything.
    let (t, h, i, e, k) = (cfg.tokens, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
    let info = |name: &str| meta.info(name);
    let given =
        decide_mode(&cfg, info("topk_ids").is_some(), info("topk_weights").is_some(), info("router.weight").is_some())?;

    let specs: [(&'static str, Kind, Vec<usize>, bool); 8] = [
        ("x", Kind::Float, vec![t, h], true),
        ("w13", Kind::Float, vec![e, 2 * i, h], true),
        ("w2", Kind::Float, vec![e, h, i], true),
        ("topk_ids", Kind::I32, vec![t, k], given),
        ("topk_weights", Kind::Float, vec![t, k], given),
        ("router.weight", Kind::Float, vec![e, h], !given),
        ("router.bias", Kind::Float, vec![e], false),
        ("dy", Kind::Float, vec![t, h], false),
    ];
    let mut dtypes = BTreeMap::new();
    for (name, kind, shape, required) in &specs {
        match info(name) {
            None if *required => {
                return Err(CaseError::Missing { name, why: "required by the case format".into() });
            }
            None => {}
            Some(ti) => {
                check_dtype(name, *kind, ti.dtype)?;
                if ti.shape != *shape {
                    return Err(CaseError::Shape { name, expected: shape.clone(), got: ti.shape.clone() });
                }
                dtypes.insert(name.to_string(), ti.dtype);
            }
        }
    }

    // Convert.
    let raw = |name: &str| -> Option<(&TensorInfo, &[u8])> {
        meta.info(name).map(|ti| (ti, &data[ti.data_offsets.0..ti.data_offsets.1]))
    };
    let float = |name: &str| raw(name).map(|(ti, b)| ArrayD::from_shape_vec(IxDyn(&ti.shape), floats(ti.dtype, b)));
    let f2 = |name: &str| float(name).map(|a| a.expect("shape checked").into_dimensionality::<Ix2>().expect("rank 2"));
    let f3 = |name: &str| float(name).map(|a| a.expect("shape checked").into_dimensionality::<Ix3>().expect("rank 3"));
    let f1 = |name: &str| float(name).map(|a| a.expect("shape checked").into_dimensionality::<Ix1>().expect("rank 1"));

    let topk_ids = if given {
        raw("topk_ids").map(|(ti, b)| {
            let v: Vec<i32> = b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
            Array2::from_shape_vec((ti.shape[0], ti.shape[1]), v).expect("shape checked")
        })
    } else {
        None
    };
    let inputs = LayerInputs {
        x: f2("x").expect("checked present"),
        w13: f3("w13").expect("checked present"),
        w2: f3("w2").expect("checked present"),
        topk_ids,
        topk_weights: if given { f2("topk_weights") } else { None },
        router_weight: f2("router.weight"),
        router_bias: f1("router.bias"),
        dy: f2("dy"),
        cfg,
    };
    check_values(&inputs, opts)?;
    Ok(Case { inputs, config_json, metadata, dtypes })
}

/// Check the safetensors framing and parse the header; returns (header length, header).
pub(crate) fn parse_framing(bytes: &[u8]) -> Result<(usize, Metadata), CaseError> {
    let len = bytes.len();
    if len < 8 {
        return Err(CaseError::Truncated(format!("{len} bytes, shorter than the 8-byte header length")));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    if n > MAX_HEADER {
        return Err(CaseError::Malformed(format!("header length {n} exceeds {MAX_HEADER} bytes")));
    }
    let n = n as usize;
    if 8 + n > len {
        return Err(CaseError::Truncated(format!(
            "header declares {n} bytes, only {} follow the length field",
            len - 8
        )));
    }
    match SafeTensors::read_metadata(bytes) {
        Ok((n2, meta)) => {
            debug_assert_eq!(n, n2);
            Ok((n, meta))
        }
        Err(SafeTensorError::MetadataIncompleteBuffer) => {
            // The header parsed; the data section's length disagrees with the offsets it declares.
            let have = len - 8 - n;
            let need = declared_data_len(&bytes[8..8 + n]);
            match need {
                Some(need) if need > have => {
                    Err(CaseError::Truncated(format!("tensor data needs {need} bytes, file has {have}")))
                }
                Some(need) => Err(CaseError::Malformed(format!(
                    "{} bytes after the last tensor's data (tensors cover {need} of {have})",
                    have - need
                ))),
                None => Err(CaseError::Malformed("data section does not match the header".into())),
            }
        }
        Err(err) => Err(CaseError::Malformed(one_line(&err.to_string()))),
    }
}

/// The end of the data section according to a (parseable) header.
fn declared_data_len(header: &[u8]) -> Option<usize> {
    let v: serde_json::Value = serde_json::from_slice(header).ok()?;
    let mut end = 0usize;
    for (name, t) in v.as_object()? {
        if name == "__metadata__" {
            continue;
        }
        let e = t.get("data_offsets")?.get(1)?.as_u64()? as usize;
        end = end.max(e);
    }
    Some(end)
}

/// Parse `moe.config` JSON, validate it and check the size it implies.
pub fn parse_config(json: &str) -> Result<MoeConfig, CaseError> {
    let cfg: MoeConfig = serde_json::from_str(json).map_err(|e| {
        CaseError::Metadata(format!("`{KEY_CONFIG}` is not a valid config: {}", one_line(&e.to_string())))
    })?;
    cfg.validate()?;
    check_size(&cfg)?;
    Ok(cfg)
}

/// Reject configs whose tensors (inputs, outputs, intermediates) would exceed [`MAX_ELEMENTS`] elements.
pub fn check_size(cfg: &MoeConfig) -> Result<(), CaseError> {
    let (t, h, i, e, k) =
        (cfg.tokens as u128, cfg.hidden as u128, cfg.intermediate as u128, cfg.experts as u128, cfg.top_k as u128);
    let m = t.saturating_mul(k);
    let terms = [
        // x, dy, y, grad.x, gathered rows
        t.saturating_mul(h).saturating_mul(4),
        // w13, w2 and their gradients
        e.saturating_mul(i).saturating_mul(h).saturating_mul(6),
        // router weight, its gradient, logits, scores, dlogits
        e.saturating_mul(h).saturating_mul(2),
        t.saturating_mul(e).saturating_mul(3),
        // per-row intermediates: h, a, o, do, da, dh, dx_rows, x_rows
        m.saturating_mul(i.saturating_mul(6).saturating_add(h.saturating_mul(4))),
        // topk ids, weights, their gradient
        m.saturating_mul(3),
    ];
    let total = terms.iter().fold(0u128, |a, &b| a.saturating_add(b));
    if total > MAX_ELEMENTS {
        return Err(CaseError::TooLarge {
            what: format!("(tokens {t}, hidden {h}, intermediate {i}, experts {e}, top_k {k})"),
            elements: total,
            limit: MAX_ELEMENTS,
        });
    }
    Ok(())
}

/// Decide between given routing (`true`) and in-layer routing (`false`) from which tensors exist.
fn decide_mode(cfg: &MoeConfig, has_ids: bool, has_weights: bool, has_router: bool) -> Result<bool, CaseError> {
    match (has_ids, has_weights) {
        (true, true) => Ok(true),
        (true, false) => Err(CaseError::Missing { name: "topk_weights", why: "required with `topk_ids`".into() }),
        (false, true) => Err(CaseError::Missing { name: "topk_ids", why: "required with `topk_weights`".into() }),
        (false, false) => {
            if cfg.routing.is_none() {
                Err(CaseError::Missing {
                    name: "topk_ids",
                    why: "moe.config routing is null, so `topk_ids` and `topk_weights` are required".into(),
                })
            } else if !has_router {
                Err(CaseError::Missing {
                    name: "router.weight",
                    why: "moe.config sets routing and no `topk_ids`/`topk_weights` are given".into(),
                })
            } else {
                Ok(false)
            }
        }
    }
}

fn check_dtype(name: &'static str, kind: Kind, dtype: Dtype) -> Result<(), CaseError> {
    let ok = match kind {
        Kind::Float => matches!(dtype, Dtype::F64 | Dtype::F32 | Dtype::BF16 | Dtype::F16),
        Kind::I32 => dtype == Dtype::I32,
    };
    if ok {
        Ok(())
    } else {
        Err(CaseError::Dtype {
            name,
            got: format!("{dtype:?}"),
            expected: if kind == Kind::Float { FLOAT_DTYPES } else { "I32" },
        })
    }
}

/// Little-endian float data of an accepted dtype, as f64 (every conversion exact).
pub(crate) fn floats(dtype: Dtype, b: &[u8]) -> Vec<f64> {
    match dtype {
        Dtype::F64 => b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
        Dtype::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        Dtype::BF16 => b.chunks_exact(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64()).collect(),
        Dtype::F16 => b.chunks_exact(2).map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64()).collect(),
        _ => unreachable!("dtype checked before conversion"),
    }
}

/// Validate in-memory inputs: the config, sizes, shapes, routing mode, ids and (unless allowed) finiteness.
/// What [`parse_case`] guarantees, for inputs built in code.
pub fn validate_inputs(inputs: &LayerInputs, opts: ReadOptions) -> Result<(), CaseError> {
    let cfg = &inputs.cfg;
    cfg.validate()?;
    check_size(cfg)?;
    decide_mode(cfg, inputs.topk_ids.is_some(), inputs.topk_weights.is_some(), inputs.router_weight.is_some())?;
    let (t, h, i, e, k) = (cfg.tokens, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
    let shape = |name: &'static str, got: &[usize], expected: Vec<usize>| {
        if got == expected.as_slice() {
            Ok(())
        } else {
            Err(CaseError::Shape { name, expected, got: got.to_vec() })
        }
    };
    shape("x", inputs.x.shape(), vec![t, h])?;
    shape("w13", inputs.w13.shape(), vec![e, 2 * i, h])?;
    shape("w2", inputs.w2.shape(), vec![e, h, i])?;
    if let Some(a) = &inputs.topk_ids {
        shape("topk_ids", a.shape(), vec![t, k])?;
    }
    if let Some(a) = &inputs.topk_weights {
        shape("topk_weights", a.shape(), vec![t, k])?;
    }
    if let Some(a) = &inputs.router_weight {
        shape("router.weight", a.shape(), vec![e, h])?;
    }
    if let Some(a) = &inputs.router_bias {
        shape("router.bias", a.shape(), vec![e])?;
    }
    if let Some(a) = &inputs.dy {
        shape("dy", a.shape(), vec![t, h])?;
    }
    check_values(inputs, opts)
}

/// Expert ids and finiteness (shapes already match the config).
fn check_values(inputs: &LayerInputs, opts: ReadOptions) -> Result<(), CaseError> {
    if let Some(ids) = &inputs.topk_ids {
        check_ids(ids, inputs.cfg.experts)?;
    }
    if !opts.allow_nonfinite {
        check_finite("x", inputs.x.shape(), inputs.x.iter())?;
        check_finite("w13", inputs.w13.shape(), inputs.w13.iter())?;
        check_finite("w2", inputs.w2.shape(), inputs.w2.iter())?;
        if let Some(a) = &inputs.topk_weights {
            check_finite("topk_weights", a.shape(), a.iter())?;
        }
        if let Some(a) = &inputs.router_weight {
            check_finite("router.weight", a.shape(), a.iter())?;
        }
        if let Some(a) = &inputs.router_bias {
            check_finite("router.bias", a.shape(), a.iter())?;
        }
        if let Some(a) = &inputs.dy {
            check_finite("dy", a.shape(), a.iter())?;
        }
    }
    Ok(())
}

/// Every id is -1 or in `0..experts`, and no expert appears twice in one token.
pub fn check_ids(ids: &Array2<i32>, experts: usize) -> Result<(), CaseError> {
    // seen[e] = (token + 1, slot) of the last use of expert e.
    let mut seen: Vec<(usize, usize)> = vec![(0, 0); experts];
    for (t, row) in ids.outer_iter().enumerate() {
        for (j, &id) in row.iter().enumerate() {
            if id == -1 {
                continue;
            }
            if id < 0 || id as usize >= experts {
                return Err(CaseError::IdOutOfRange { token: t, slot: j, id: id as i64, experts });
            }
            let s = &mut seen[id as usize];
            if s.0 == t + 1 {
                return Err(CaseError::RepeatedId { token: t, id: id as i64, first: s.1, second: j });
            }
            *s = (t + 1, j);
        }
    }
    Ok(())
}

fn check_finite<'a>(
    name: &'static str,
    shape: &[usize],
    values: impl Iterator<Item = &'a f64>,
) -> Result<(), CaseError> {
    for (flat, &v) in values.enumerate() {
        if !v.is_finite() {
            return Err(CaseError::NonFinite { name, index: unflatten(flat, shape), value: v });
        }
    }
    Ok(())
}

/// Row-major multi-index of a flat position.
fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = flat % n;
            flat /= n;
        }
    }
    idx
}

// ---------------------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------------------

/// A tensor to write, borrowed or owned, in its stored dtype (row-major, any number of dimensions).
#[derive(Clone, Debug)]
pub enum TensorData<'a> {
    F64(CowArray<'a, f64, IxDyn>),
    F32(CowArray<'a, f32, IxDyn>),
    BF16(CowArray<'a, bf16, IxDyn>),
    F16(CowArray<'a, f16, IxDyn>),
    I32(CowArray<'a, i32, IxDyn>),
    /// Data of any dtype, written as given (little-endian, as a safetensors file stores it): tensors copied
    /// unchanged from another file. `bytes` must hold exactly the shape's elements.
    Raw { dtype: Dtype, shape: Vec<usize>, bytes: std::borrow::Cow<'a, [u8]> },
}

impl<'a> TensorData<'a> {
    /// Borrow an f64 array (any dimension) as an F64 tensor.
    pub fn f64<D: ndarray::Dimension>(a: &'a ndarray::Array<f64, D>) -> TensorData<'a> {
        TensorData::F64(CowArray::from(a.view().into_dyn()))
    }

    /// Own an f64 array as an F64 tensor.
    pub fn f64_owned<D: ndarray::Dimension>(a: ndarray::Array<f64, D>) -> TensorData<'a> {
        TensorData::F64(CowArray::from(a.into_dyn()))
    }

    /// Own an i32 array as an I32 tensor.
    pub fn i32_owned<D: ndarray::Dimension>(a: ndarray::Array<i32, D>) -> TensorData<'a> {
        TensorData::I32(CowArray::from(a.into_dyn()))
    }

    /// An f64 array stored as `dtype` (rounded to nearest, ties to even, when it is narrower).
    pub fn float_as<D: ndarray::Dimension>(a: &'a ndarray::Array<f64, D>, dtype: FloatDtype) -> TensorData<'a> {
        match dtype {
            FloatDtype::F64 => TensorData::f64(a),
            FloatDtype::F32 => TensorData::F32(CowArray::from(a.mapv(|v| v as f32).into_dyn())),
            FloatDtype::BF16 => TensorData::BF16(CowArray::from(a.mapv(to_bf16).into_dyn())),
            FloatDtype::F16 => TensorData::F16(CowArray::from(a.mapv(to_f16).into_dyn())),
        }
    }

    pub fn dtype(&self) -> Dtype {
        match self {
            TensorData::F64(_) => Dtype::F64,
            TensorData::F32(_) => Dtype::F32,
            TensorData::BF16(_) => Dtype::BF16,
            TensorData::F16(_) => Dtype::F16,
            TensorData::I32(_) => Dtype::I32,
            TensorData::Raw { dtype, .. } => *dtype,
        }
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            TensorData::F64(a) => a.shape(),
            TensorData::F32(a) => a.shape(),
            TensorData::BF16(a) => a.shape(),
            TensorData::F16(a) => a.shape(),
            TensorData::I32(a) => a.shape(),
            TensorData::Raw { shape, .. } => shape,
        }
    }

    fn elem_bytes(&self) -> usize {
        match self {
            TensorData::F64(_) => 8,
            TensorData::F32(_) | TensorData::I32(_) => 4,
            TensorData::BF16(_) | TensorData::F16(_) => 2,
            TensorData::Raw { dtype, .. } => dtype.bitsize() / 8,
        }
    }

    fn byte_len(&self) -> usize {
        match self {
            TensorData::Raw { bytes, .. } => bytes.len(),
            _ => self.shape().iter().product::<usize>() * self.elem_bytes(),
        }
    }

    fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        fn put<T: Copy, const N: usize>(
            w: &mut impl Write,
            it: impl Iterator<Item = T>,
            f: impl Fn(T) -> [u8; N],
        ) -> std::io::Result<()> {
            let mut buf = Vec::with_capacity(1 << 16);
            for v in it {
                buf.extend_from_slice(&f(v));
                if buf.len() >= (1 << 16) - N {
                    w.write_all(&buf)?;
                    buf.clear();
                }
            }
            w.write_all(&buf)
        }
        match self {
            TensorData::F64(a) => put(w, a.iter().copied(), f64::to_le_bytes),
            TensorData::F32(a) => put(w, a.iter().copied(), f32::to_le_bytes),
            TensorData::BF16(a) => put(w, a.iter().copied(), |v: bf16| v.to_bits().to_le_bytes()),
            TensorData::F16(a) => put(w, a.iter().copied(), |v: f16| v.to_bits().to_le_bytes()),
            TensorData::I32(a) => put(w, a.iter().copied(), i32::to_le_bytes),
            TensorData::Raw { bytes, .. } => w.write_all(bytes),
        }
    }
}

/// f64 rounded to the nearest value with `mant` stored significand bits (ties to even), exponent unbounded.
fn round_significand(v: f64, mant: u32) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let drop = 52 - mant;
    let b = v.to_bits();
    let lsb = (b >> drop) & 1;
    let r = (b + (1u64 << (drop - 1)) - 1 + lsb) & !((1u64 << drop) - 1);
    f64::from_bits(r)
}

/// f64 to bf16, correctly rounded (ties to even), overflow to infinity, gradual underflow.
pub fn to_bf16(v: f64) -> bf16 {
    if v.is_nan() {
        return bf16::NAN;
    }
    let min_normal = f64::powi(2.0, -126);
    let r = if v.abs() < min_normal {
        // Subnormal range: multiples of 2^-133.
        let q = f64::powi(2.0, -133);
        (v / q).round_ties_even() * q
    } else {
        round_significand(v, 7)
    };
    // `r` is representable in bf16 (or beyond its range, where f32 and then bf16 give infinity).
    bf16::from_f32(r as f32)
}

/// f64 to f16, correctly rounded (ties to even), overflow to infinity, gradual underflow.
pub fn to_f16(v: f64) -> f16 {
    if v.is_nan() {
        return f16::NAN;
    }
    let min_normal = f64::powi(2.0, -14);
    let r = if v.abs() < min_normal {
        let q = f64::powi(2.0, -24);
        (v / q).round_ties_even() * q
    } else {
        round_significand(v, 10)
    };
    if r.abs() > 65504.0 {
        return if r > 0.0 { f16::INFINITY } else { f16::NEG_INFINITY };
    }
    f16::from_f32(r as f32)
}

/// Write tensors and string metadata as a safetensors file, atomically (temporary file, then rename).
/// Tensors are laid out by decreasing element size, then name, so every tensor's data is aligned.
pub fn write_tensors(
    path: &Path,
    metadata: &BTreeMap<String, String>,
    tensors: &[(String, TensorData<'_>)],
) -> Result<(), CaseError> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        tensors[b].1.elem_bytes().cmp(&tensors[a].1.elem_bytes()).then(tensors[a].0.cmp(&tensors[b].0))
    });
    for w in order.windows(2) {
        if tensors[w[0]].0 == tensors[w[1]].0 {
            return Err(CaseError::Unwritable { name: tensors[w[0]].0.clone(), why: "name given twice".into() });
        }
    }
    let mut infos = Vec::with_capacity(tensors.len());
    let mut offset = 0usize;
    for &ix in &order {
        let (name, t) = &tensors[ix];
        let n = t.byte_len();
        infos.push((
            name.clone(),
            TensorInfo { dtype: t.dtype(), shape: t.shape().to_vec(), data_offsets: (offset, offset + n) },
        ));
        offset += n;
    }
    let header_err =
        |e: &dyn std::fmt::Display| CaseError::Unwritable { name: "(header)".into(), why: one_line(&e.to_string()) };
    // The header as JSON with sorted keys, so equal contents give identical files. (safetensors' own
    // `Metadata` serialises `__metadata__` from a HashMap, in random order.)
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::to_value(metadata).map_err(|e| header_err(&e))?);
    for (name, info) in &infos {
        header.insert(name.clone(), serde_json::to_value(info).map_err(|e| header_err(&e))?);
    }
    // Check it the way readers will (offsets contiguous, sizes consistent, no overflow).
    Metadata::new(None, infos).map_err(|e| header_err(&e))?;
    let mut header = serde_json::to_vec(&header).map_err(|e| header_err(&e))?;
    header.resize(header.len().next_multiple_of(8), b' ');

    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let file_name = path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    let prefix = format!(".{file_name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // Ordinary file permissions (0666 less the umask), not the temporary file's private 0600.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = builder.tempfile_in(dir).map_err(|e| CaseError::io(dir, e))?;
    {
        let mut w = BufWriter::with_capacity(1 << 20, tmp.as_file());
        let res = (|| {
            w.write_all(&(header.len() as u64).to_le_bytes())?;
            w.write_all(&header)?;
            for &ix in &order {
                tensors[ix].1.write_to(&mut w)?;
            }
            w.flush()
        })();
        res.map_err(|e| CaseError::io(tmp.path(), e))?;
    }
    tmp.persist(path).map_err(|e| CaseError::io(path, e.error))?;
    Ok(())
}

/// Metadata of a file in this format: `moe.format`, `moe.config`, and the writer.
pub fn format_metadata(config_json: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert(KEY_FORMAT.to_string(), FORMAT.to_string());
    m.insert(KEY_CONFIG.to_string(), config_json.to_string());
    m.insert(KEY_WRITER.to_string(), concat!("moe-oracle ", env!("CARGO_PKG_VERSION")).to_string());
    m
}

/// Write the oracle's outputs ([`output_tensors`]) with the format metadata and the case's config string.
pub fn write_outputs(path: &Path, config_json: &str, tensors: &[(String, TensorData<'_>)]) -> Result<(), CaseError> {
    write_tensors(path, &format_metadata(config_json), tensors)
}

/// [`write_outputs`] with extra metadata entries (e.g. `q.<name>.block`, the recipe).
pub fn write_outputs_meta(
    path: &Path,
    config_json: &str,
    extra: &BTreeMap<String, String>,
    tensors: &[(String, TensorData<'_>)],
) -> Result<(), CaseError> {
    let mut meta = format_metadata(config_json);
    meta.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    write_tensors(path, &meta, tensors)
}

fn to_i32(name: &str, v: &[usize]) -> Result<Array1<i32>, CaseError> {
    v.iter()
        .map(|&x| i32::try_from(x))
        .collect::<Result<Vec<i32>, _>>()
        .map(Array1::from)
        .map_err(|_| CaseError::Unwritable { name: name.into(), why: "value exceeds the I32 range".into() })
}

/// The tensors of an output file, named as in the format: `y`; with a backward pass `grad.x`, `grad.w13`,
/// `grad.w2`, `grad.topk_weights` and (when the router's gradient was computed) `grad.router.weight`;
/// `topk_ids` (I32) and `topk_weights` when the layer routed itself; with `intermediates` also `fwd.*`
/// and `bwd.*` (plus `fwd.logits`, `fwd.scores` [T, E] and `bwd.dlogits` [T, E] when routing ran).
pub fn output_tensors<'a>(
    fwd: &'a Forward,
    bwd: Option<&'a Backward>,
    intermediates: bool,
) -> Result<Vec<(String, TensorData<'a>)>, CaseError> {
    let mut out: Vec<(String, TensorData<'a>)> = Vec::new();
    let mut put = |name: &str, t: TensorData<'a>| out.push((name.to_string(), t));
    put("y", TensorData::f64(&fwd.y));
    if let Some(b) = bwd {
        put("grad.x", TensorData::f64(&b.grad_x));
        put("grad.w13", TensorData::f64(&b.grad_w13));
        put("grad.w2", TensorData::f64(&b.grad_w2));
        put("grad.topk_weights", TensorData::f64(&b.grad_topk_weights));
        if let Some(g) = &b.grad_router_weight {
            put("grad.router.weight", TensorData::f64(g));
        }
    }
    if fwd.routed.is_some() {
        put("topk_ids", TensorData::I32(CowArray::from(fwd.topk_ids.view().into_dyn())));
        put("topk_weights", TensorData::f64(&fwd.topk_weights));
    }
    if intermediates {
        put("fwd.row_token", TensorData::i32_owned(to_i32("fwd.row_token", &fwd.rows.row_token)?));
        put("fwd.row_slot", TensorData::i32_owned(to_i32("fwd.row_slot", &fwd.rows.row_slot)?));
        put("fwd.expert_offsets", TensorData::i32_owned(to_i32("fwd.expert_offsets", &fwd.rows.expert_offsets)?));
        put("fwd.h", TensorData::f64(&fwd.h));
        put("fwd.a", TensorData::f64(&fwd.a));
        put("fwd.o", TensorData::f64(&fwd.o));
        if let Some(l) = &fwd.logits {
            put("fwd.logits", TensorData::f64(l));
        }
        if let Some(r) = &fwd.routed {
            put("fwd.scores", TensorData::f64(&r.scores));
        }
        if let Some(b) = bwd {
            put("bwd.do", TensorData::f64(&b.do_));
            put("bwd.da", TensorData::f64(&b.da));
            put("bwd.dh", TensorData::f64(&b.dh));
            put("bwd.dx_rows", TensorData::f64(&b.dx_rows));
            if let Some(d) = &b.dlogits {
                put("bwd.dlogits", TensorData::f64(d));
            }
        }
    }
    Ok(out)
}

/// The input tensors of a case, floats stored as `dtype`.
pub fn case_tensors(inputs: &LayerInputs, dtype: FloatDtype) -> Vec<(String, TensorData<'_>)> {
    let mut out = vec![
        ("x".to_string(), TensorData::float_as(&inputs.x, dtype)),
        ("w13".to_string(), TensorData::float_as(&inputs.w13, dtype)),
        ("w2".to_string(), TensorData::float_as(&inputs.w2, dtype)),
    ];
    if let Some(a) = &inputs.topk_ids {
        out.push(("topk_ids".into(), TensorData::I32(CowArray::from(a.view().into_dyn()))));
    }
    if let Some(a) = &inputs.topk_weights {
        out.push(("topk_weights".into(), TensorData::float_as(a, dtype)));
    }
    if let Some(a) = &inputs.router_weight {
        out.push(("router.weight".into(), TensorData::float_as(a, dtype)));
    }
    if let Some(a) = &inputs.router_bias {
        out.push(("router.bias".into(), TensorData::float_as(a, dtype)));
    }
    if let Some(a) = &inputs.dy {
        out.push(("dy".into(), TensorData::float_as(a, dtype)));
    }
    out
}

/// Write a case file from in-memory inputs, floats stored as `dtype` (rounded when narrower). Writes what it
/// is given without validating it (tests write invalid cases on purpose); see [`validate_inputs`].
pub fn write_case(path: &Path, inputs: &LayerInputs, dtype: FloatDtype) -> Result<(), CaseError> {
    write_case_with_metadata(path, inputs, dtype, &BTreeMap::new())
}

/// [`write_case`] with extra metadata entries (seed, generator, preset name ...).
pub fn write_case_with_metadata(
    path: &Path,
    inputs: &LayerInputs,
    dtype: FloatDtype,
    extra: &BTreeMap<String, String>,
) -> Result<(), CaseError> {
    let cfg_json = config_json(&inputs.cfg);
    let mut meta = extra.clone();
    meta.insert(KEY_FORMAT.to_string(), FORMAT.to_string());
    meta.insert(KEY_CONFIG.to_string(), cfg_json);
    write_tensors(path, &meta, &case_tensors(inputs, dtype))
}

/// The `moe.config` JSON of a config.
pub fn config_json(cfg: &MoeConfig) -> String {
    serde_json::to_string(cfg).expect("MoeConfig serialises")
}
