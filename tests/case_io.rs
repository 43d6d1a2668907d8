//! Case files: round trips through `write_case` / `read_case`, and one test per class of bad input, each
//! checking the one-line error names the tensor and the problem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::bf16;
use moe_oracle::case::{
    self, case_tensors, format_metadata, output_tensors, parse_case, read_case, to_bf16, to_f16, write_case,
    write_outputs, write_tensors, FloatDtype, ReadOptions, TensorData,
};
use moe_oracle::demo::random_inputs;
use moe_oracle::CaseError;
use moe_reference::config::{MoeConfig, Routing};
use moe_reference::{layer, LayerInputs, Options};
use ndarray::Array3;
use proptest::prelude::*;
use safetensors::{Dtype, SafeTensors};

fn cfg(tokens: usize, routed: bool) -> MoeConfig {
    MoeConfig { routing: routed.then_some(Routing::softmax()), recipe: "bf16".into(), ..MoeConfig::swiglu(tokens, 8, 4, 4, 2) }
}

fn given(tokens: usize) -> LayerInputs {
    random_inputs(&cfg(tokens, false), 7)
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn write(dir: &Path, name: &str, inputs: &LayerInputs) -> PathBuf {
    let p = dir.join(name);
    write_case(&p, inputs, FloatDtype::F64).unwrap();
    p
}

fn read(p: &Path) -> Result<case::Case, CaseError> {
    read_case(p, ReadOptions::default())
}

/// The error of reading `inputs` back, as its one-line message.
fn read_err(inputs: &LayerInputs) -> String {
    let d = tmp();
    let p = write(d.path(), "bad.safetensors", inputs);
    let e = read(&p).expect_err("should be rejected").to_string();
    assert!(!e.contains('\n'), "error must be one line: {e:?}");
    e
}

fn assert_has(msg: &str, frags: &[&str]) {
    for f in frags {
        assert!(msg.contains(f), "error {msg:?} lacks {f:?}");
    }
}

fn assert_same(a: &LayerInputs, b: &LayerInputs) {
    assert_eq!(a.cfg, b.cfg);
    assert_eq!(a.x, b.x);
    assert_eq!(a.w13, b.w13);
    assert_eq!(a.w2, b.w2);
    assert_eq!(a.topk_ids, b.topk_ids);
    assert_eq!(a.topk_weights, b.topk_weights);
    assert_eq!(a.router_weight, b.router_weight);
    assert_eq!(a.router_bias, b.router_bias);
    assert_eq!(a.dy, b.dy);
}

/// A safetensors file from raw parts: (name, dtype, shape, bytes).
fn raw_file(meta: &BTreeMap<String, String>, tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::to_value(meta).unwrap());
    let mut off = 0;
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + bytes.len()]}),
        );
        off += bytes.len();
        data.extend_from_slice(bytes);
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

fn f64_bytes(v: impl IntoIterator<Item = f64>) -> Vec<u8> {
    v.into_iter().flat_map(f64::to_le_bytes).collect()
}

// ---------------------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------------------

#[test]
fn round_trip_every_dtype() {
    // random_inputs draws bf16-valued floats, so every dtype stores them exactly.
    let d = tmp();
    for (routed, dt) in [
        (false, FloatDtype::F64),
        (false, FloatDtype::F32),
        (false, FloatDtype::BF16),
        (true, FloatDtype::BF16),
        (true, FloatDtype::F64),
    ] {
        let mut inp = random_inputs(&cfg(5, routed), 3);
        if routed {
            inp.router_bias = Some(ndarray::Array1::from(vec![0.0, 0.5, -0.25, 1.0]));
        }
        let p = d.path().join(format!("rt-{routed}-{dt:?}.safetensors"));
        write_case(&p, &inp, dt).unwrap();
        let c = read(&p).unwrap();
        assert_same(&inp, &c.inputs);
        assert_eq!(c.routes_itself(), routed);
        assert_eq!(c.dtypes["x"], dt.dtype());
        assert_eq!(c.metadata["moe.format"], "1");
        assert_eq!(serde_json::from_str::<MoeConfig>(&c.config_json).unwrap(), inp.cfg);
    }
}

#[test]
fn f16_inputs_are_read() {
    let mut inp = given(3);
    // Values exactly representable in f16 (bf16 values of this size are not always).
    inp.x.mapv_inplace(|v| to_f16(v).to_f64());
    inp.w13.mapv_inplace(|v| to_f16(v).to_f64());
    inp.w2.mapv_inplace(|v| to_f16(v).to_f64());
    inp.topk_weights.as_mut().unwrap().mapv_inplace(|v| to_f16(v).to_f64());
    inp.dy.as_mut().unwrap().mapv_inplace(|v| to_f16(v).to_f64());
    let d = tmp();
    let p = d.path().join("f16.safetensors");
    write_case(&p, &inp, FloatDtype::F16).unwrap();
    let c = read(&p).unwrap();
    assert_same(&inp, &c.inputs);
    assert_eq!(c.dtypes["w2"], Dtype::F16);
}

#[test]
fn extra_tensors_and_metadata_are_ignored() {
    let inp = given(4);
    let mut tensors = case_tensors(&inp, FloatDtype::F32);
    let junk = Array3::<f64>::zeros((2, 0, 3));
    // The format's outputs, intermediates, quantised copies, and golden files' emulated results and bounds.
    for name in ["y", "grad.x", "fwd.anything", "bwd.da", "q.x", "q.x.scale", "bound.y", "emulated.grad.w2"] {
        tensors.push((name.into(), TensorData::f64(&junk)));
    }
    let mut meta = format_metadata(&case::config_json(&inp.cfg));
    meta.insert("seed".into(), "42".into());
    let d = tmp();
    let p = d.path().join("extra.safetensors");
    write_tensors(&p, &meta, &tensors).unwrap();
    let c = read(&p).unwrap();
    assert_same(&inp, &c.inputs);
    assert_eq!(c.metadata["seed"], "42");
}

#[test]
fn unknown_tensor_names_are_refused() {
    let inp = random_inputs(&cfg(4, true), 2);
    let junk = Array3::<f64>::zeros((2, 0, 3));
    // `router.bais`: a misspelt selection bias, silently skipped, would change the routing.
    for name in ["extra", "router.bais", "X", "grad.", "ys", "bounds.y"] {
        let mut tensors = case_tensors(&inp, FloatDtype::F64);
        tensors.push((name.into(), TensorData::f64(&junk)));
        let d = tmp();
        let p = d.path().join("u.safetensors");
        write_tensors(&p, &format_metadata(&case::config_json(&inp.cfg)), &tensors).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert_has(&e, &[&format!("tensor `{name}` is not part of the case format"), "router.bias", "bound.*"]);
        assert!(!e.contains('\n'));
    }
}

#[test]
fn given_routing_beside_a_routing_config_is_refused() {
    // The format: routing is null when topk_ids/topk_weights are given.
    let mut inp = given(4);
    inp.cfg.routing = cfg(4, true).routing;
    assert_has(&read_err(&inp), &["tensor `topk_ids` contradicts moe.config", "routing is set"]);
    let mut with_router = random_inputs(&cfg(4, true), 3);
    with_router.topk_ids = inp.topk_ids.clone();
    with_router.topk_weights = inp.topk_weights.clone();
    assert_has(&read_err(&with_router), &["tensor `topk_ids` contradicts moe.config"]);
    with_router.topk_ids = None;
    assert_has(&read_err(&with_router), &["tensor `topk_weights` contradicts moe.config"]);
    // In-memory inputs the same way.
    let e = case::validate_inputs(&inp, ReadOptions::default()).unwrap_err().to_string();
    assert_eq!(e, read_err(&inp));
}

#[test]
fn a_router_without_a_routing_config_is_refused() {
    let routed = random_inputs(&cfg(4, true), 3);
    let mut inp = given(4);
    inp.router_weight = routed.router_weight.clone();
    assert_has(&read_err(&inp), &["tensor `router.weight` contradicts moe.config", "routing is null"]);
    let mut inp = given(4);
    inp.router_bias = Some(ndarray::Array1::zeros(4));
    assert_has(&read_err(&inp), &["tensor `router.bias` contradicts moe.config", "no router"]);
    let e = case::validate_inputs(&inp, ReadOptions::default()).unwrap_err().to_string();
    assert_eq!(e, read_err(&inp));
}

#[test]
fn zero_tokens_is_valid_and_runs() {
    let d = tmp();
    for routed in [false, true] {
        let inp = random_inputs(&cfg(0, routed), 1);
        let p = write(d.path(), &format!("empty-{routed}.safetensors"), &inp);
        let c = read(&p).unwrap();
        assert_eq!(c.inputs.x.dim(), (0, 8));
        let fwd = layer::forward(&c.inputs, Options::default());
        let bwd = layer::backward(&c.inputs, &fwd, c.inputs.dy.as_ref().unwrap().view(), Options::default());
        let out = d.path().join(format!("empty-out-{routed}.safetensors"));
        write_outputs(&out, &c.config_json, &output_tensors(&fwd, Some(&bwd), true).unwrap()).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("y").unwrap().shape(), &[0, 8]);
        assert_eq!(st.tensor("fwd.h").unwrap().shape(), &[0, 8]);
        assert_eq!(st.tensor("fwd.row_token").unwrap().shape(), &[0]);
        assert_eq!(st.tensor("fwd.expert_offsets").unwrap().shape(), &[5]);
        assert_eq!(st.tensor("grad.w13").unwrap().shape(), &[4, 8, 8]);
        assert!(st.tensor("grad.w13").unwrap().data().iter().all(|&b| b == 0));
    }
}

#[test]
fn all_unused_slots_are_valid() {
    let mut inp = given(4);
    let ids = inp.topk_ids.as_mut().unwrap();
    ids.row_mut(1).fill(-1);
    ids[[2, 1]] = -1;
    let c = read(&write(tmp().path(), "m1.safetensors", &inp)).unwrap();
    assert_eq!(c.inputs.topk_ids, inp.topk_ids);
    let fwd = layer::forward(&c.inputs, Options::default());
    assert_eq!(fwd.rows.rows(), 8 - 3);
    assert!(fwd.y.row(1).iter().all(|&v| v == 0.0));
    // Every slot unused.
    let mut inp = given(3);
    inp.topk_ids.as_mut().unwrap().fill(-1);
    let c = read(&write(tmp().path(), "m2.safetensors", &inp)).unwrap();
    let fwd = layer::forward(&c.inputs, Options::default());
    assert_eq!(fwd.rows.rows(), 0);
}

#[test]
fn outputs_have_format_names_and_metadata() {
    let inp = random_inputs(&cfg(6, true), 2);
    let d = tmp();
    let fwd = layer::forward(&inp, Options::default());
    let bwd = layer::backward(&inp, &fwd, inp.dy.as_ref().unwrap().view(), Options::default());
    let cfg_json = "{\"tokens\":6,\"hidden\":8,\"intermediate\":4,\"experts\":4,\"top_k\":2,\"activation\":\"swiglu\",\"routing\":{\"score\":\"softmax\",\"normalize_topk\":true,\"scaling\":1.0,\"groups\":null}}";
    let out = d.path().join("out.safetensors");
    write_outputs(&out, cfg_json, &output_tensors(&fwd, Some(&bwd), true).unwrap()).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let m = meta.metadata().as_ref().unwrap();
    assert_eq!(m["moe.format"], "1");
    assert_eq!(m["moe.config"], cfg_json);
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<&str> = st.names();
    names.sort();
    let mut want = vec![
        "y",
        "grad.x",
        "grad.w13",
        "grad.w2",
        "grad.topk_weights",
        "grad.router.weight",
        "topk_ids",
        "topk_weights",
        "fwd.row_token",
        "fwd.row_slot",
        "fwd.expert_offsets",
        "fwd.h",
        "fwd.a",
        "fwd.o",
        "fwd.logits",
        "fwd.scores",
        "bwd.do",
        "bwd.da",
        "bwd.dh",
        "bwd.dx_rows",
        "bwd.dlogits",
    ];
    want.sort();
    assert_eq!(names, want);
    for (name, t) in st.tensors() {
        let int = matches!(name.as_str(), "topk_ids" | "fwd.row_token" | "fwd.row_slot" | "fwd.expert_offsets");
        assert_eq!(t.dtype(), if int { Dtype::I32 } else { Dtype::F64 }, "{name}");
    }
    let y = st.tensor("y").unwrap();
    assert_eq!(y.shape(), &[6, 8]);
    let yv: Vec<f64> = y.data().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(yv, fwd.y.iter().copied().collect::<Vec<_>>());
    assert_eq!(st.tensor("bwd.dlogits").unwrap().shape(), &[6, 4]);
    // Nothing but the output in the directory (the temporary file was renamed).
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

#[test]
fn failed_write_leaves_nothing() {
    let d = tmp();
    let inp = given(2);
    let p = d.path().join("no-such-dir").join("case.safetensors");
    let e = write_case(&p, &inp, FloatDtype::F64).unwrap_err().to_string();
    assert!(e.contains("no-such-dir"), "{e}");
    assert!(!p.exists());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

// ---------------------------------------------------------------------------------------------------------
// Bad inputs
// ---------------------------------------------------------------------------------------------------------

#[test]
fn truncated_file() {
    let d = tmp();
    let p = write(d.path(), "t.safetensors", &given(4));
    let bytes = std::fs::read(&p).unwrap();
    for cut in [bytes.len() - 1, bytes.len() - 100, 40, 5, 0] {
        let e = parse_case(&bytes[..cut], ReadOptions::default()).unwrap_err().to_string();
        assert_has(&e, &["truncated file"]);
    }
    // Trailing junk is malformed, not truncated.
    let mut more = bytes.clone();
    more.extend_from_slice(b"junk");
    let e = parse_case(&more, ReadOptions::default()).unwrap_err().to_string();
    assert_has(&e, &["malformed safetensors file", "4 bytes after"]);
    // From a file on disk too.
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    assert_has(&read(&p).unwrap_err().to_string(), &["truncated file"]);
}

#[test]
fn header_garbage() {
    let mut bytes = 16u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"not json at all!");
    let e = parse_case(&bytes, ReadOptions::default()).unwrap_err().to_string();
    assert_has(&e, &["malformed safetensors file"]);
    assert!(!e.contains('\n'));
    // Absurd header length.
    let bytes = u64::MAX.to_le_bytes().to_vec();
    assert_has(&parse_case(&bytes, ReadOptions::default()).unwrap_err().to_string(), &["malformed"]);
}

/// `bytes` (a safetensors file) with its header JSON text replaced by `edit`'s.
fn with_header(bytes: &[u8], edit: impl FnOnce(&str) -> String) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let h = edit(std::str::from_utf8(&bytes[8..8 + n]).unwrap().trim_end());
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    out
}

/// `bytes` with `edit` applied to its header as a JSON value.
fn with_header_value(bytes: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    with_header(bytes, |h| {
        let mut v: serde_json::Value = serde_json::from_str(h).unwrap();
        edit(&mut v);
        v.to_string()
    })
}

/// A file of this header and `data_len` zero bytes of data.
fn file_of(header: &str, data_len: usize) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend(std::iter::repeat_n(0u8, data_len));
    out
}

fn parse_err(bytes: &[u8]) -> String {
    let e = parse_case(bytes, ReadOptions::default()).expect_err("should be rejected").to_string();
    assert!(!e.contains('\n'), "error must be one line: {e:?}");
    e
}

#[test]
fn header_entries_name_their_tensor_and_problem() {
    use serde_json::json;
    let d = tmp();
    let bytes = std::fs::read(write(d.path(), "h.safetensors", &given(2))).unwrap();
    parse_case(&with_header(&bytes, |h| h.to_string()), ReadOptions::default()).unwrap();
    // F64 [2, 8] is 128 bytes, [2, 7] would be 112 (the safetensors crate names no tensor here).
    let e = parse_err(&with_header_value(&bytes, |v| v["x"]["shape"] = json!([2, 7])));
    assert_has(&e, &["malformed", "tensor `x`: shape [2, 7] of F64 needs 112 bytes", "hold 128"]);
    let e = parse_err(&with_header_value(&bytes, |v| v["x"]["dtype"] = json!("F128")));
    assert_has(&e, &["tensor `x`: dtype \"F128\" is not a safetensors dtype"]);
    let e = parse_err(&with_header_value(&bytes, |v| v["x"]["extra_field"] = json!(1)));
    assert_has(&e, &["tensor `x`: unknown field `extra_field`", "allowed: dtype, shape, data_offsets"]);
    let e = parse_err(&with_header_value(&bytes, |v| {
        v["x"].as_object_mut().unwrap().remove("shape");
    }));
    assert_has(&e, &["tensor `x`: header entry lacks `shape`"]);
    let e = parse_err(&with_header_value(&bytes, |v| v["x"]["shape"] = json!([2, -8])));
    assert_has(&e, &["tensor `x`: shape [2,-8] is not a list of non-negative integers"]);
    let e = parse_err(&with_header_value(&bytes, |v| v["x"]["data_offsets"] = json!([0])));
    assert_has(&e, &["tensor `x`: data_offsets [0] is not a pair"]);
    let e = parse_err(&with_header_value(&bytes, |v| v["x"] = json!([1, 2])));
    assert_has(&e, &["tensor `x`: header entry is an array"]);
    // A key twice: JSON parsers keep one of them, so the file means different things to different readers.
    let e = parse_err(&with_header(&bytes, |h| {
        let v: serde_json::Value = serde_json::from_str(h).unwrap();
        h.replacen("\"x\":{", &format!("\"x\":{},\"x\":{{", v["x"]), 1)
    }));
    assert_has(&e, &["tensor `x` appears twice in the header"]);
    let e = parse_err(&with_header(&bytes, |h| {
        let v: serde_json::Value = serde_json::from_str(h).unwrap();
        let mut other = v["x"].clone();
        other["data_offsets"] = json!([0, 0]);
        other["shape"] = json!([0, 8]);
        h.replacen("\"x\":{", &format!("\"x\":{other},\"x\":{{"), 1)
    }));
    assert_has(&e, &["tensor `x` appears twice in the header"]);
    let e = parse_err(&with_header(&bytes, |h| {
        h.replacen("\"moe.format\":", "\"moe.format\":\"2\",\"moe.format\":", 1)
    }));
    assert_has(&e, &["`__metadata__` gives `moe.format` twice"]);
    let e = parse_err(&with_header_value(&bytes, |v| v["__metadata__"]["seed"] = json!(42)));
    assert_has(&e, &["`__metadata__` entry `seed` is 42, not a string"]);
}

#[test]
fn header_data_layout_problems_name_their_tensor() {
    let t = |name: &str, dtype: &str, shape: &str, b: usize, e: usize| {
        format!("\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":{shape},\"data_offsets\":[{b},{e}]}}")
    };
    let f = |entries: &[String], data: usize| file_of(&format!("{{{}}}", entries.join(",")), data);
    let a = t("a", "F32", "[2]", 0, 8);
    let e = parse_err(&f(&[a.clone(), t("b", "F32", "[2]", 4, 12)], 12));
    assert_has(&e, &["tensor `b`: data_offsets [4, 12] overlap those of tensor `a` [0, 8]"]);
    let e = parse_err(&f(&[a.clone(), t("b", "F32", "[2]", 12, 20)], 20));
    assert_has(&e, &["bytes 8..12 of the data section belong to no tensor", "tensor `b` at [12, 20]"]);
    let e = parse_err(&f(&[t("a", "F32", "[2]", 4, 12)], 12));
    assert_has(&e, &["bytes 0..4 of the data section belong to no tensor", "tensor `a`"]);
    let e = parse_err(&f(&[t("a", "F32", "[2]", 8, 0)], 8));
    assert_has(&e, &["tensor `a`: data_offsets [8, 0] end before they begin"]);
    let e = parse_err(&f(&[t("big", "F32", "[4294967296,4294967296,16]", 0, 8)], 8));
    assert_has(&e, &["tensor `big`: shape [4294967296, 4294967296, 16] of F32 is too large to address"]);
    let e = parse_err(&f(&[t("nib", "F4", "[3]", 0, 1)], 1));
    assert_has(&e, &["tensor `nib`: shape [3] of F4 is not a whole number of bytes"]);
    let e = parse_err(&f(&[a.clone(), t("b", "F32", "[2]", 8, 16)], 12));
    assert_has(&e, &["truncated file", "needs 16 bytes (tensor `b` ends there), file has 12"]);
    // Empty tensors may share an offset; the layout is otherwise read as the safetensors crate reads it.
    let ok = f(&[t("e1", "F32", "[0]", 8, 8), a.clone(), t("e2", "F64", "[3,0]", 8, 8)], 8);
    assert_has(&parse_err(&ok), &["missing `moe.format`"]);
}

#[test]
fn metadata_problems() {
    let inp = given(2);
    let tensors = case_tensors(&inp, FloatDtype::F64);
    let d = tmp();
    let p = d.path().join("m.safetensors");
    let cfg_json = case::config_json(&inp.cfg);

    write_tensors(&p, &BTreeMap::new(), &tensors).unwrap();
    assert_has(&read(&p).unwrap_err().to_string(), &["metadata", "moe.format"]);

    let mut meta = format_metadata(&cfg_json);
    meta.insert("moe.format".into(), "2".into());
    write_tensors(&p, &meta, &tensors).unwrap();
    assert_has(&read(&p).unwrap_err().to_string(), &["moe.format", "\"2\""]);

    let mut meta = format_metadata(&cfg_json);
    meta.remove("moe.config");
    write_tensors(&p, &meta, &tensors).unwrap();
    assert_has(&read(&p).unwrap_err().to_string(), &["missing `moe.config`"]);

    let meta = format_metadata("{\"tokens\": 2,\n \"activation\": \"relu\"}");
    write_tensors(&p, &meta, &tensors).unwrap();
    let e = read(&p).unwrap_err().to_string();
    assert_has(&e, &["moe.config", "not a valid config"]);
    assert!(!e.contains('\n'));
}

/// `moe.config` of a routed case with `edit` applied to its JSON.
fn config_with(edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> String {
    let mut c = cfg(2, true);
    c.routing.as_mut().unwrap().groups = Some(moe_reference::config::Groups { n_group: 2, topk_group: 1 });
    c.activation = moe_reference::config::Activation::SwigluClamped { alpha: 1.702, limit: 7.0 };
    let mut v = serde_json::to_value(&c).unwrap();
    edit(v.as_object_mut().unwrap());
    v.to_string()
}

fn config_err(json: &str) -> String {
    let e = case::parse_config(json).expect_err("should be rejected").to_string();
    assert!(!e.contains('\n'), "error must be one line: {e:?}");
    e
}

#[test]
fn config_keys_are_those_of_the_format() {
    use serde_json::json;
    case::parse_config(&config_with(|_| {})).unwrap();
    let e = config_err(&config_with(|m| {
        m.insert("topk".into(), json!(2));
    }));
    assert_has(&e, &["`moe.config` has unknown key `topk`", "keys: tokens, hidden", "ep_ranks"]);
    for key in ["recipe", "ep_ranks", "routing"] {
        let e = config_err(&config_with(|m| {
            m.remove(key);
        }));
        assert_has(&e, &[&format!("`moe.config` lacks `{key}`")]);
    }
    // Inside routing, its groups and the clamped activation's parameters.
    let e = config_err(&config_with(|m| {
        m["routing"].as_object_mut().unwrap().insert("groqps".into(), json!(null));
    }));
    assert_has(&e, &["`moe.config` routing has unknown key `groqps`", "score, normalize_topk, scaling, groups"]);
    let e = config_err(&config_with(|m| {
        m["routing"].as_object_mut().unwrap().remove("groups");
    }));
    assert_has(&e, &["`moe.config` routing lacks `groups`"]);
    let e = config_err(&config_with(|m| {
        m["routing"]["groups"].as_object_mut().unwrap().insert("top_group".into(), json!(1));
    }));
    assert_has(&e, &["`moe.config` routing.groups has unknown key `top_group`"]);
    let e = config_err(&config_with(|m| {
        m["activation"]["swiglu_clamped"].as_object_mut().unwrap().insert("beta".into(), json!(1.0));
    }));
    assert_has(&e, &["`moe.config` activation.swiglu_clamped has unknown key `beta`"]);
    // Not an object at all.
    assert_has(&config_err("[1, 2]"), &["`moe.config` is not a JSON object"]);
    // A key twice (JSON parsers keep one of them).
    let twice = config_with(|_| {}).replacen("{", "{\"tokens\":3,", 1);
    assert_has(&config_err(&twice), &["moe.config", "duplicate field `tokens`"]);
}

#[test]
fn config_recipe_must_be_named() {
    let e = config_err(&config_with(|m| {
        m.insert("recipe".into(), "bogus".into());
    }));
    assert_has(&e, &["`moe.config` recipe \"bogus\" is not a known recipe", "fp32, bf16, fp8-block"]);
    // Through a case file, and for inputs built in code.
    let mut inp = given(2);
    inp.cfg.recipe = "fp7".into();
    assert_has(&read_err(&inp), &["`moe.config` recipe \"fp7\" is not a known recipe"]);
    let e = case::validate_inputs(&inp, ReadOptions::default()).unwrap_err().to_string();
    assert_eq!(e, read_err(&inp));
    for r in moe_reference::recipe::NAMED {
        case::parse_config(&config_with(|m| {
            m.insert("recipe".into(), r.into());
        }))
        .unwrap();
    }
}

#[test]
fn missing_x() {
    let inp = given(3);
    let tensors: Vec<_> = case_tensors(&inp, FloatDtype::F64).into_iter().filter(|(n, _)| n != "x").collect();
    let d = tmp();
    let p = d.path().join("nox.safetensors");
    write_tensors(&p, &format_metadata(&case::config_json(&inp.cfg)), &tensors).unwrap();
    assert_has(&read(&p).unwrap_err().to_string(), &["missing tensor `x`"]);
}

#[test]
fn missing_routing_tensors() {
    let mut inp = given(3);
    inp.topk_weights = None;
    assert_has(&read_err(&inp), &["missing tensor `topk_weights`", "topk_ids"]);
    let mut inp = given(3);
    inp.topk_ids = None;
    assert_has(&read_err(&inp), &["missing tensor `topk_ids`"]);
    let mut inp = given(3);
    inp.topk_ids = None;
    inp.topk_weights = None;
    assert_has(&read_err(&inp), &["missing tensor `topk_ids`", "routing is null"]);
    let mut inp = random_inputs(&cfg(3, true), 1);
    inp.router_weight = None;
    assert_has(&read_err(&inp), &["missing tensor `router.weight`"]);
}

#[test]
fn wrong_shape_of_w2() {
    let mut inp = given(3);
    inp.w2 = Array3::zeros((4, 4, 8)); // [E, I, H] instead of [E, H, I]
    assert_has(&read_err(&inp), &["tensor `w2`", "wrong shape", "expected [4, 8, 4]", "got [4, 4, 8]"]);
    let mut inp = random_inputs(&cfg(3, true), 1);
    inp.router_bias = Some(ndarray::Array1::zeros(3));
    assert_has(&read_err(&inp), &["tensor `router.bias`", "expected [4]", "got [3]"]);
}

#[test]
fn i64_dtype_for_x() {
    let inp = given(2);
    let meta = format_metadata(&case::config_json(&inp.cfg));
    let f = |a: &[f64]| f64_bytes(a.iter().copied());
    let ids: Vec<u8> = inp.topk_ids.as_ref().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect();
    let x_i64: Vec<u8> = inp.x.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect();
    let bytes = raw_file(
        &meta,
        &[
            ("x", "I64", vec![2, 8], x_i64),
            ("w13", "F64", vec![4, 8, 8], f(inp.w13.as_slice().unwrap())),
            ("w2", "F64", vec![4, 8, 4], f(inp.w2.as_slice().unwrap())),
            ("topk_ids", "I32", vec![2, 2], ids.clone()),
            ("topk_weights", "F64", vec![2, 2], f(inp.topk_weights.as_ref().unwrap().as_slice().unwrap())),
        ],
    );
    let e = parse_case(&bytes, ReadOptions::default()).unwrap_err().to_string();
    assert_has(&e, &["tensor `x`", "unsupported dtype I64", "F64, F32, BF16 or F16"]);

    // topk_ids must be I32.
    let ids_i64: Vec<u8> = inp.topk_ids.as_ref().unwrap().iter().flat_map(|&v| (v as i64).to_le_bytes()).collect();
    let bytes = raw_file(
        &meta,
        &[
            ("x", "F64", vec![2, 8], f(inp.x.as_slice().unwrap())),
            ("w13", "F64", vec![4, 8, 8], f(inp.w13.as_slice().unwrap())),
            ("w2", "F64", vec![4, 8, 4], f(inp.w2.as_slice().unwrap())),
            ("topk_ids", "I64", vec![2, 2], ids_i64),
            ("topk_weights", "F64", vec![2, 2], f(inp.topk_weights.as_ref().unwrap().as_slice().unwrap())),
        ],
    );
    let e = parse_case(&bytes, ReadOptions::default()).unwrap_err().to_string();
    assert_has(&e, &["tensor `topk_ids`", "unsupported dtype I64", "expected I32"]);
}

#[test]
fn expert_id_out_of_range() {
    let mut inp = given(4);
    inp.topk_ids.as_mut().unwrap()[[2, 1]] = 4;
    assert_has(&read_err(&inp), &["tensor `topk_ids`", "token 2, slot 1", "expert id 4 out of range"]);
    let mut inp = given(4);
    inp.topk_ids.as_mut().unwrap()[[0, 0]] = -2;
    assert_has(&read_err(&inp), &["token 0, slot 0", "expert id -2 out of range"]);
}

#[test]
fn repeated_expert_id() {
    let mut inp = given(4);
    let ids = inp.topk_ids.as_mut().unwrap();
    ids[[3, 0]] = 1;
    ids[[3, 1]] = 1;
    assert_has(&read_err(&inp), &["tensor `topk_ids`", "token 3", "expert id 1 repeated"]);
    // -1 may repeat.
    let mut inp = given(4);
    inp.topk_ids.as_mut().unwrap().row_mut(3).fill(-1);
    read(&write(tmp().path(), "ok.safetensors", &inp)).unwrap();
}

#[test]
fn top_k_larger_than_experts() {
    let mut c = cfg(2, false);
    c.top_k = 5;
    let inp = random_inputs(&c, 1);
    assert_has(&read_err(&inp), &["moe.config", "top_k 5 exceeds experts 4"]);
}

#[test]
fn absurd_sizes() {
    let mut inp = given(2);
    inp.cfg.tokens = 1 << 40;
    assert_has(&read_err(&inp), &["case too large"]);
    let mut inp = given(2);
    inp.cfg.experts = usize::MAX / 2 + 1;
    inp.cfg.top_k = 1;
    assert_has(&read_err(&inp), &["case too large"]);
}

#[test]
fn nan_in_w13() {
    let mut inp = given(3);
    inp.w13[[1, 2, 3]] = f64::NAN;
    let e = read_err(&inp);
    assert_has(&e, &["tensor `w13`", "non-finite value NaN", "index [1, 2, 3]"]);
    let d = tmp();
    let p = write(d.path(), "nan.safetensors", &inp);
    let c = read_case(&p, ReadOptions { allow_nonfinite: true }).unwrap();
    assert!(c.inputs.w13[[1, 2, 3]].is_nan());
    // Infinity in dy.
    let mut inp = given(3);
    inp.dy.as_mut().unwrap()[[2, 0]] = f64::NEG_INFINITY;
    assert_has(&read_err(&inp), &["tensor `dy`", "non-finite value -inf", "index [2, 0]"]);
}

#[test]
fn validate_inputs_matches_reader() {
    let mut inp = given(3);
    case::validate_inputs(&inp, ReadOptions::default()).unwrap();
    inp.topk_ids.as_mut().unwrap()[[0, 1]] = 9;
    let e = case::validate_inputs(&inp, ReadOptions::default()).unwrap_err().to_string();
    assert_eq!(e, read_err(&inp));
}

// ---------------------------------------------------------------------------------------------------------
// Rounding to bf16 when writing narrower cases
// ---------------------------------------------------------------------------------------------------------

fn check_nearest_bf16(v: f64) {
    let b = to_bf16(v);
    let bv = b.to_f64();
    if !bv.is_finite() {
        assert!(v.abs() >= bf16::MAX.to_f64(), "{v} -> {bv}");
        return;
    }
    let err = (bv - v).abs();
    for nb in [b.to_bits().wrapping_add(1), b.to_bits().wrapping_sub(1)] {
        let n = bf16::from_bits(nb).to_f64();
        if n.is_finite() {
            let ne = (n - v).abs();
            assert!(err <= ne, "{v}: chose {bv}, {n} is nearer");
            if err == ne && bv != n {
                assert_eq!(b.to_bits() & 1, 0, "{v}: tie must go to even");
            }
        }
    }
}

#[test]
fn bf16_rounding_edges() {
    for v in [1.0 + f64::powi(2.0, -8), 1.0 + 3.0 * f64::powi(2.0, -8), 3.0e38, 3.4e38, -1e-39, 5e-324, 1e-45, 0.0] {
        check_nearest_bf16(v);
    }
    assert_eq!(to_bf16(1.0 + f64::powi(2.0, -8)).to_f64(), 1.0);
    assert_eq!(to_bf16(1.0 + f64::powi(2.0, -8) + f64::powi(2.0, -40)).to_f64(), 1.0 + f64::powi(2.0, -7));
    assert!(to_bf16(f64::NAN).is_nan());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn bf16_is_nearest(m in -1.0f64..1.0, e in -140i32..130) {
        check_nearest_bf16(m * f64::powi(2.0, e));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn round_trip_random_shapes(t in 0usize..5, h in 1usize..6, i in 1usize..5, e in 1usize..5, k in 1usize..4,
                                routed in any::<bool>(), seed in any::<u64>(), dt in 0usize..3) {
        prop_assume!(k <= e);
        let c = MoeConfig { tokens: t, hidden: h, intermediate: i, experts: e, top_k: k, ..cfg(t, routed) };
        let inp = random_inputs(&c, seed);
        let dt = [FloatDtype::F64, FloatDtype::F32, FloatDtype::BF16][dt];
        let d = tmp();
        let p = d.path().join("c.safetensors");
        write_case(&p, &inp, dt).unwrap();
        let back = read(&p).unwrap();
        assert_same(&inp, &back.inputs);
    }
}
