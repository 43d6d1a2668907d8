//! Writing outputs and cases: tensors in their stored dtypes, atomically (a temporary file renamed over the
//! destination only when complete).

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use half::{bf16, f16};
use moe_reference::formats::{self, Format, Overflow};
use moe_reference::{Backward, Forward, LayerInputs, MoeConfig};
use ndarray::{Array1, CowArray, IxDyn};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::Dtype;

use crate::error::{one_line, CaseError};

use super::{FloatDtype, FORMAT, KEY_CONFIG, KEY_FORMAT, KEY_WRITER};

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

/// f64 to bf16, correctly rounded (ties to even), overflow to infinity, gradual underflow: the reference
/// crate's bit-faithful cast ([`formats::encode`]); NaN becomes bf16's canonical quiet NaN.
pub fn to_bf16(v: f64) -> bf16 {
    if v.is_nan() {
        return bf16::NAN;
    }
    bf16::from_bits(formats::encode(Format::Bf16, v, Overflow::NonSaturating))
}

/// f64 to f16, correctly rounded (ties to even), overflow to infinity, gradual underflow (as [`to_bf16`]).
pub fn to_f16(v: f64) -> f16 {
    if v.is_nan() {
        return f16::NAN;
    }
    f16::from_bits(formats::encode(Format::F16, v, Overflow::NonSaturating))
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

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values from the formats' definitions (bf16: 7 stored bits, smallest normal 2^-126, smallest
    // subnormal 2^-133; f16: 10 bits, 2^-14, 2^-24, largest finite 65504), not from the code under test.
    #[test]
    fn bf16_rounds_to_nearest_even_with_gradual_underflow() {
        let p = |e: i32| f64::powi(2.0, e);
        assert_eq!(to_bf16(1.0 + p(-8)).to_f64(), 1.0, "a tie goes to the even neighbour");
        assert_eq!(to_bf16(1.0 + p(-8) + p(-40)).to_f64(), 1.0 + p(-7), "past the tie, up");
        assert_eq!(to_bf16(1.0 + 3.0 * p(-8)).to_f64(), 1.0 + p(-6), "a tie from an odd neighbour goes up");
        assert_eq!(to_bf16(p(-133)).to_f64(), p(-133), "the smallest subnormal");
        assert_eq!(to_bf16(p(-134)).to_f64(), 0.0, "half of it ties to zero");
        assert_eq!(to_bf16(3.0 * p(-134)).to_f64(), p(-132), "1.5 subnormal quanta tie up to 2");
        assert_eq!(to_bf16(-(p(-126) - p(-134))).to_f64(), -p(-126), "rounds up into the normals");
        assert!(to_bf16(p(128)).to_f64().is_infinite());
        assert!(to_bf16(f64::NAN).is_nan());
    }

    #[test]
    fn f16_rounds_to_nearest_even_with_gradual_underflow_and_overflow() {
        let p = |e: i32| f64::powi(2.0, e);
        assert_eq!(to_f16(1.0 + p(-11)).to_f64(), 1.0);
        assert_eq!(to_f16(1.0 + p(-11) + p(-45)).to_f64(), 1.0 + p(-10));
        assert_eq!(to_f16(p(-24)).to_f64(), p(-24));
        assert_eq!(to_f16(p(-25)).to_f64(), 0.0);
        assert_eq!(to_f16(3.0 * p(-25)).to_f64(), p(-23));
        assert_eq!(to_f16(65504.0).to_f64(), 65504.0);
        assert_eq!(to_f16(65519.9).to_f64(), 65504.0, "below the tie with infinity");
        assert_eq!(to_f16(65520.0).to_f64(), f64::INFINITY, "the tie goes to the even neighbour, infinity");
        assert_eq!(to_f16(-70000.0).to_f64(), f64::NEG_INFINITY);
        assert!(to_f16(f64::NAN).is_nan());
    }
}
