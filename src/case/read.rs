//! Reading a case file into validated [`LayerInputs`], in the order the module documentation gives.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use half::{bf16, f16};
use moe_reference::recipe::NAMED;
use moe_reference::{LayerInputs, MoeConfig};
use ndarray::{Array2, ArrayD, Ix1, Ix2, Ix3, IxDyn};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensors};

use crate::check::coords::unflatten;
use crate::error::{one_line, CaseError};

use super::header::check_header;
use super::{Case, ReadOptions, FORMAT, KEY_CONFIG, KEY_FORMAT, MAX_ELEMENTS};

/// Upper bound on a safetensors header (JSON) this reader accepts.
const MAX_HEADER: u64 = 100_000_000;

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
    let mut names = meta.offset_keys();
    names.sort();
    if let Some(name) = names.iter().find(|n| !is_case_tensor(n)) {
        return Err(CaseError::UnknownTensor { name: one_line(name) });
    }
    let given = decide_mode(
        &cfg,
        info("topk_ids").is_some(),
        info("topk_weights").is_some(),
        info("router.weight").is_some(),
        info("router.bias").is_some(),
    )?;

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
    // Checked here first so that every problem names its tensor; the crate's own checks then agree.
    check_header(&bytes[8..8 + n], len - 8 - n)?;
    match SafeTensors::read_metadata(bytes) {
        Ok((n2, meta)) => {
            debug_assert_eq!(n, n2);
            Ok((n, meta))
        }
        Err(err) => Err(CaseError::Malformed(one_line(&err.to_string()))),
    }
}

/// The keys of `moe.config`, all required (`golden-format.md`).
const CONFIG_KEYS: [&str; 9] =
    ["tokens", "hidden", "intermediate", "experts", "top_k", "activation", "routing", "recipe", "ep_ranks"];
/// The keys of `routing` when it is not null, of its `groups`, and of the clamped activation's parameters.
const ROUTING_KEYS: [&str; 4] = ["score", "normalize_topk", "scaling", "groups"];
const GROUPS_KEYS: [&str; 2] = ["n_group", "topk_group"];
const CLAMPED_KEYS: [&str; 2] = ["alpha", "limit"];

/// Parse `moe.config` JSON (every key of the format present, no other, a named recipe), validate it and
/// check the size it implies.
pub fn parse_config(json: &str) -> Result<MoeConfig, CaseError> {
    let invalid = |e: serde_json::Error| {
        CaseError::Metadata(format!("`{KEY_CONFIG}` is not a valid config: {}", one_line(&e.to_string())))
    };
    let v: serde_json::Value = serde_json::from_str(json).map_err(invalid)?;
    if !v.is_object() {
        return Err(CaseError::Metadata(format!("`{KEY_CONFIG}` is not a JSON object")));
    }
    // Objects of `moe.config` and their keys: unknown keys first, then (once serde has reported wrong types
    // and values in its terms) keys that serde would quietly default.
    use serde_json::Value;
    let routing = v.get("routing").and_then(Value::as_object);
    let parts = [
        ("", v.as_object(), &CONFIG_KEYS[..]),
        ("routing ", routing, &ROUTING_KEYS[..]),
        ("routing.groups ", routing.and_then(|r| r.get("groups")).and_then(Value::as_object), &GROUPS_KEYS[..]),
        (
            "activation.swiglu_clamped ",
            v.get("activation").and_then(|a| a.get("swiglu_clamped")).and_then(Value::as_object),
            &CLAMPED_KEYS[..],
        ),
    ];
    let list = |keys: &[&str]| keys.join(", ");
    for (what, obj, keys) in parts {
        if let Some(k) = obj.and_then(|o| o.keys().find(|k| !keys.contains(&k.as_str()))) {
            return Err(CaseError::Metadata(format!(
                "`{KEY_CONFIG}` {what}has unknown key `{}` (keys: {})",
                one_line(k),
                list(keys)
            )));
        }
    }
    // From the text, not the value: serde reports a key given twice, which the value has dropped.
    let cfg: MoeConfig = serde_json::from_str(json).map_err(invalid)?;
    for (what, obj, keys) in parts {
        if let Some(k) = obj.and_then(|o| keys.iter().find(|k| !o.contains_key(**k))) {
            return Err(CaseError::Metadata(format!("`{KEY_CONFIG}` {what}lacks `{k}` (keys: {})", list(keys))));
        }
    }
    check_recipe(&cfg)?;
    cfg.validate()?;
    check_size(&cfg)?;
    Ok(cfg)
}

/// The config's recipe is one of [`NAMED`].
fn check_recipe(cfg: &MoeConfig) -> Result<(), CaseError> {
    if NAMED.contains(&cfg.recipe.as_str()) {
        return Ok(());
    }
    Err(CaseError::Metadata(format!(
        "`{KEY_CONFIG}` recipe {:?} is not a known recipe (known: {})",
        one_line(&cfg.recipe),
        NAMED.join(", ")
    )))
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

/// The inputs of a case, by name (a candidate may hold them too: `check::candidate::accepted`).
pub(crate) const INPUTS: [&str; 8] = ["x", "w13", "w2", "topk_ids", "topk_weights", "router.weight", "router.bias", "dy"];
/// Prefixes of the annexes a case or candidate file may hold beside the format's tensors: quantised copies
/// (`run --recipe --intermediates`), bounds (`--bounds`, golden files) and the emulated kernel's results
/// (golden files).
pub(crate) const ANNEX_PREFIXES: [&str; 3] = ["q.", "bound.", "emulated."];

/// Whether `name` lies under `prefix` with something after it.
pub(crate) fn under(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|rest| !rest.is_empty())
}

/// Whether `name` is a tensor of the case format: an input, `y`, an output or intermediate (`grad.*`,
/// `fwd.*`, `bwd.*`), or an annex ([`ANNEX_PREFIXES`]).
fn is_case_tensor(name: &str) -> bool {
    INPUTS.contains(&name)
        || name == "y"
        || ["grad.", "fwd.", "bwd."].iter().chain(&ANNEX_PREFIXES).any(|p| under(p, name))
}

/// Decide between given routing (`true`) and in-layer routing (`false`) from which tensors exist.
fn decide_mode(
    cfg: &MoeConfig,
    has_ids: bool,
    has_weights: bool,
    has_router: bool,
    has_bias: bool,
) -> Result<bool, CaseError> {
    if cfg.routing.is_some() && (has_ids || has_weights) {
        return Err(CaseError::Contradicts {
            name: if has_ids { "topk_ids" } else { "topk_weights" },
            why: "routing is set, and `topk_ids`/`topk_weights` are given only when routing is null".into(),
        });
    }
    if cfg.routing.is_none() && (has_router || has_bias) {
        return Err(CaseError::Contradicts {
            name: if has_router { "router.weight" } else { "router.bias" },
            why: "routing is null (the routing is given by `topk_ids`/`topk_weights`), so there is no router".into(),
        });
    }
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
    check_recipe(cfg)?;
    decide_mode(
        cfg,
        inputs.topk_ids.is_some(),
        inputs.topk_weights.is_some(),
        inputs.router_weight.is_some(),
        inputs.router_bias.is_some(),
    )?;
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
        check_inputs_finite(inputs)?;
    }
    Ok(())
}

/// Every float input is finite; the error names the first tensor and element that is not.
pub fn check_inputs_finite(inputs: &LayerInputs) -> Result<(), CaseError> {
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
