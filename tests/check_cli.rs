//! `moe-oracle check` and `diagnose` through the binary: exit status 0 for a correct candidate, 1 for a
//! violation (NaN included), 2 with one `error:` line and no report for bad input; the JSON reports'
//! fields; candidates in BF16/F16/F64 and in the kernel's own row order; the PNG heat map.

mod common_mut;

use std::path::Path;
use std::process::{Command, Output};

use common_mut::*;
use moe_oracle::case::{self, FloatDtype, TensorData};
use ndarray::{Array1, Array2, ArrayD, CowArray, Ix2};

mod cli_common;
use cli_common::*;

/// Status 2, exactly one stderr line starting `error:` and containing `frag`, no report written.
fn assert_bad_input(o: &Output, frag: &str, report: &Path) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {err:?}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(frag), "{:?} should mention {frag:?}", lines[0]);
    assert!(!report.exists(), "no report on bad input");
}

struct Setup {
    dir: tempfile::TempDir,
    case: std::path::PathBuf,
    base: Base,
}

fn setup(recipe: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(10, 32, 16, 4, 2, recipe);
    let inp = inputs(&c, 5);
    let case = write_case(dir.path(), "c", &inp);
    Setup { case, base: base(&inp), dir }
}

#[test]
fn correct_candidate_passes_in_every_dtype_and_row_order() {
    let s = setup("bf16");
    let c = &s.base.inputs.cfg;
    // bf16 storage: every bf16-stored tensor is exact in BF16; the f32-stored ones (weight gradients,
    // grad.topk_weights) are not, so the BF16 and F16 candidates carry only the bf16-stored tensors.
    let bf16_stored: std::collections::BTreeMap<String, ArrayD<f64>> =
        s.base.tensors.iter().filter(|(n, _)| !matches!(n.as_str(), "grad.w13" | "grad.w2" | "grad.topk_weights")).map(|(n, a)| (n.clone(), a.clone())).collect();
    for (name, tensors, dtype) in [
        ("f32", &s.base.tensors, FloatDtype::F32),
        ("f64", &s.base.tensors, FloatDtype::F64),
        ("bf16", &bf16_stored, FloatDtype::BF16),
    ] {
        let cand = write_candidate(s.dir.path(), name, c, tensors, None, dtype);
        let json = s.dir.path().join(format!("{name}.json"));
        let o = oracle(&["check", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(r["verdict"], "pass");
        assert_eq!(r["tensors"].as_array().unwrap().len(), tensors.len(), "{name}");
    }
    // The kernel's own row order (reversed), with the row map.
    let rows = &s.base.em.fwd.rows;
    let order: Vec<usize> = (0..rows.rows()).rev().collect();
    let cand = write_candidate(s.dir.path(), "perm", c, &s.base.tensors, Some((&order, &rows.row_token, &rows.row_slot)), FloatDtype::F32);
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand)]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    // The same rows without the map are in the wrong order: a violation.
    let mut t = s.base.tensors.clone();
    for n in ["fwd.h", "fwd.a", "fwd.o", "bwd.do", "bwd.da", "bwd.dh", "bwd.dx_rows"] {
        let a = t[n].select(ndarray::Axis(0), &order);
        t.insert(n.into(), a);
    }
    let cand = write_candidate(s.dir.path(), "perm_nomap", c, &t, None, FloatDtype::F32);
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand)]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_subset_is_checked_and_the_rest_listed_as_not_checked() {
    let s = setup("bf16");
    let mut t = s.base.tensors.clone();
    t.retain(|n, _| n == "y" || n == "grad.w2");
    let cand = write_candidate(s.dir.path(), "sub", &s.base.inputs.cfg, &t, None, FloatDtype::F32);
    let json = s.dir.path().join("sub.json");
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(0));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let checked: Vec<&str> = r["tensors"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(checked, ["y", "grad.w2"]);
    let not: Vec<&str> = r["not_checked"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(not.contains(&"fwd.h") && not.contains(&"grad.x"), "{not:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("not checked: "));
}

#[test]
fn violation_reports_the_worst_element_in_model_terms() {
    let s = setup("bf16");
    let c = &s.base.inputs.cfg;
    let rows = &s.base.em.fwd.rows;
    let mut t = s.base.tensors.clone();
    let mut h = t["fwd.h"].clone().into_dimensionality::<Ix2>().unwrap();
    let r = 3;
    h[[r, c.intermediate + 5]] += 1.0; // up half, intermediate 5
    t.insert("fwd.h".into(), h.into_dyn());
    let mut y = t["y"].clone().into_dimensionality::<Ix2>().unwrap();
    y[[2, 7]] = f64::NAN;
    t.insert("y".into(), y.into_dyn());
    let cand = write_candidate(s.dir.path(), "bad", c, &t, None, FloatDtype::F32);
    let json = s.dir.path().join("bad.json");
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "a violation is a verdict, not an error: {}", stderr(&o));
    let rep: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(rep["verdict"], "fail");
    let by = |n: &str| rep["tensors"].as_array().unwrap().iter().find(|t| t["name"] == n).unwrap().clone();
    let fh = by("fwd.h");
    assert_eq!(fh["verdict"], "fail");
    assert_eq!(fh["violations"], 1);
    let w = &fh["worst"];
    assert_eq!(w["row"], r);
    assert_eq!(w["token"], rows.row_token[r]);
    assert_eq!(w["slot"], rows.row_slot[r]);
    let e = (0..c.experts).find(|&e| rows.expert_rows(e).contains(&r)).unwrap();
    assert_eq!(w["expert"], e);
    assert_eq!(w["half"], "up");
    assert_eq!(w["intermediate"], 5);
    assert!((fh["max_abs_error"].as_f64().unwrap() - 1.0).abs() < 0.1, "{fh}");
    let y = by("y");
    assert_eq!(y["verdict"], "fail");
    assert_eq!(y["non_finite"], 1);
    assert_eq!(y["worst"]["token"], 2);
    assert_eq!(y["worst"]["hidden"], 7);
    assert!(y["max_ratio"].is_null(), "infinite ratio is null in JSON");
    assert_eq!(by("fwd.a")["verdict"], "pass");
}

fn write_raw(dir: &Path, name: &str, c: &moe_reference::MoeConfig, tensors: Vec<(String, TensorData<'static>)>) -> std::path::PathBuf {
    let path = dir.join(name);
    case::write_outputs(&path, &case::config_json(c), &tensors).unwrap();
    path
}

#[test]
fn bad_input_is_exit_2_with_one_line() {
    let s = setup("bf16");
    let c = s.base.inputs.cfg.clone();
    let d = s.dir.path();
    let report = d.join("r.json");
    let run = |cand: &Path| oracle(&["check", p(&s.case), "--candidate", p(cand), "--json", p(&report)]);

    assert_bad_input(&run(&d.join("missing.safetensors")), "missing.safetensors", &report);

    let y = s.base.tensors["y"].clone().into_dimensionality::<Ix2>().unwrap();
    let wrong = write_raw(d, "shape.st", &c, vec![("y".into(), TensorData::f64_owned(y.slice(ndarray::s![..4, ..]).to_owned()))]);
    assert_bad_input(&run(&wrong), "wrong shape", &report);

    let ints = write_raw(d, "int.st", &c, vec![("y".into(), TensorData::i32_owned(Array2::<i32>::zeros((c.tokens, c.hidden))))]);
    assert_bad_input(&run(&ints), "unsupported dtype", &report);

    let empty = write_raw(d, "empty.st", &c, vec![("x".into(), TensorData::f64_owned(Array2::<f64>::zeros((2, 2))))]);
    assert_bad_input(&run(&empty), "holds none of the tensors", &report);

    let garbage = d.join("garbage.st");
    std::fs::write(&garbage, b"not a safetensors file").unwrap();
    assert_bad_input(&run(&garbage), "garbage.st", &report);

    // Row maps that are not a permutation of the dispatched rows.
    let m = s.base.em.fwd.rows.rows();
    let h = s.base.tensors["fwd.h"].clone();
    let with_map = |tok: Vec<i32>, slot: Vec<i32>| {
        vec![
            ("fwd.h".to_string(), TensorData::F64(CowArray::from(h.clone()))),
            ("fwd.row_token".to_string(), TensorData::i32_owned(Array1::from(tok))),
            ("fwd.row_slot".to_string(), TensorData::i32_owned(Array1::from(slot))),
        ]
    };
    let rows = &s.base.em.fwd.rows;
    let tok: Vec<i32> = rows.row_token.iter().map(|&t| t as i32).collect();
    let slot: Vec<i32> = rows.row_slot.iter().map(|&t| t as i32).collect();
    let mut dup = tok.clone();
    dup[1] = dup[0];
    let mut dup_slot = slot.clone();
    dup_slot[1] = dup_slot[0];
    let dup = write_raw(d, "dup.st", &c, with_map(dup, dup_slot));
    assert_bad_input(&run(&dup), "row map", &report);
    let mut far = tok.clone();
    far[0] = c.tokens as i32;
    let far = write_raw(d, "far.st", &c, with_map(far, slot.clone()));
    assert_bad_input(&run(&far), "row map", &report);
    let short = write_raw(d, "short.st", &c, with_map(tok[..m - 1].to_vec(), slot[..m - 1].to_vec()));
    assert_bad_input(&run(&short), "fwd.row_token", &report);
    let only_tok = write_raw(
        d,
        "onlytok.st",
        &c,
        vec![("fwd.h".into(), TensorData::F64(CowArray::from(h.clone()))), ("fwd.row_token".into(), TensorData::i32_owned(Array1::from(tok)))],
    );
    assert_bad_input(&run(&only_tok), "together", &report);

    // Unknown recipe, unwritable report.
    let good = write_candidate(d, "good", &c, &s.base.tensors, None, FloatDtype::F32);
    assert_bad_input(&oracle(&["check", p(&s.case), "--candidate", p(&good), "--recipe", "fp7", "--json", p(&report)]), "unknown recipe", &report);
    let o = oracle(&["check", p(&s.case), "--candidate", p(&good), "--json", "/nonexistent-dir/r.json"]);
    assert_eq!(o.status.code(), Some(2));
    // The same bad inputs for diagnose.
    assert_bad_input(&oracle(&["diagnose", p(&s.case), "--candidate", p(&wrong), "--json", p(&report)]), "wrong shape", &report);
    assert_bad_input(&oracle(&["diagnose", p(&s.case), "--candidate", p(&ints), "--json", p(&report)]), "unsupported dtype", &report);
}

#[test]
fn diagnose_reports_json_fields_and_writes_a_png() {
    let s = setup("bf16");
    let c = &s.base.inputs.cfg;
    let rows = &s.base.em.fwd.rows;
    let e = (0..c.experts).max_by_key(|&e| rows.expert_rows(e).len()).unwrap();
    let mut t = s.base.tensors.clone();
    let mut a = t["fwd.a"].clone().into_dimensionality::<Ix2>().unwrap();
    for r in rows.expert_rows(e) {
        for i in 4..8 {
            a[[r, i]] *= 3.0;
        }
    }
    t.insert("fwd.a".into(), a.into_dyn());
    let cand = write_candidate(s.dir.path(), "d", c, &t, None, FloatDtype::F32);
    let json = s.dir.path().join("d.json");
    let png = s.dir.path().join("d.png");
    let o = oracle(&["diagnose", p(&s.case), "--candidate", p(&cand), "--json", p(&json), "--plot", p(&png)]);
    assert_eq!(o.status.code(), Some(1), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let d: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(d["first_bad_stage"], "fwd.a");
    assert_eq!(d["experts"], serde_json::json!([e]));
    let want_tokens: std::collections::BTreeSet<usize> = rows.expert_rows(e).map(|r| rows.row_token[r]).collect();
    let got_tokens: std::collections::BTreeSet<usize> = d["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    assert_eq!(got_tokens, want_tokens);
    assert_eq!(d["features"], serde_json::json!([{"axis": "intermediate", "start": 4, "end": 8}]));
    assert!(d.get("pattern").is_some());
    // fwd.a was replayed from the candidate's own fwd.h.
    let fa = d["stages"].as_array().unwrap().iter().find(|s| s["name"] == "fwd.a").unwrap().clone();
    assert_eq!(fa["inputs"], serde_json::json!([["fwd.h", "candidate"]]), "{fa}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert!(w > 0 && h > 0 && h as usize % c.experts == 0, "{w}x{h}");
    // Where python3 has zlib, decode the image data independently.
    let py = Command::new("python3")
        .args(["-c", "import sys,zlib,struct;d=open(sys.argv[1],'rb').read();i=8;z=b''\nwhile i<len(d):\n n=struct.unpack('>I',d[i:i+4])[0];t=d[i+4:i+8];z+=d[i+8:i+8+n] if t==b'IDAT' else b'';i+=12+n\nprint(len(zlib.decompress(z)))", p(&png)])
        .output();
    match py {
        Ok(o) if o.status.success() => {
            let n: usize = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
            assert_eq!(n, h as usize * (1 + 3 * w as usize));
        }
        _ => moe_kernels::skip_notice("python3 not available to decode the PNG independently"),
    }

    // A correct candidate: exit 0, first_bad_stage null.
    let good = write_candidate(s.dir.path(), "g", c, &s.base.tensors, None, FloatDtype::F32);
    let o = oracle(&["diagnose", p(&s.case), "--candidate", p(&good), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(0));
    let d: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(d["first_bad_stage"].is_null() && d["pattern"].is_null());
    assert_eq!(d["experts"], serde_json::json!([]));
}

/// Writes a case (default T=256, H=1024, I=512, E=16, k=4, bf16; `MOE_TIMING_SHAPE=T,H,I,E,k` overrides),
/// inputs stored as BF16 (they are bf16 values), and its emulated candidate with intermediates to
/// `$MOE_TIMING_DIR`, for timing `check` and `diagnose` by hand and for runs on the GPU machine.
#[test]
#[ignore]
fn write_medium_case_for_timing() {
    let Ok(dir) = std::env::var("MOE_TIMING_DIR") else {
        moe_kernels::skip_notice("set MOE_TIMING_DIR");
        return;
    };
    let dir = Path::new(&dir);
    let shape: Vec<usize> = std::env::var("MOE_TIMING_SHAPE")
        .unwrap_or_else(|_| "256,1024,512,16,4".into())
        .split(',')
        .map(|v| v.trim().parse().expect("MOE_TIMING_SHAPE=T,H,I,E,k"))
        .collect();
    let c = cfg(shape[0], shape[1], shape[2], shape[3], shape[4], "bf16");
    let inp = inputs(&c, 9);
    let case = dir.join("medium.case.safetensors");
    case::write_case(&case, &inp, FloatDtype::BF16).unwrap();
    let b = base(&inp);
    let cand = write_candidate(dir, "medium", &c, &b.tensors, None, FloatDtype::F32);
    println!("wrote {} and {}", case.display(), cand.display());
}

#[test]
fn diagnose_without_intermediates_names_the_output() {
    let s = setup("bf16");
    let c = &s.base.inputs.cfg;
    let mut t = s.base.tensors.clone();
    t.retain(|n, _| !n.starts_with("fwd.") && !n.starts_with("bwd."));
    let mut g = t["grad.x"].clone().into_dimensionality::<Ix2>().unwrap();
    g.row_mut(4).mapv_inplace(|v| v * 0.5);
    t.insert("grad.x".into(), g.into_dyn());
    let cand = write_candidate(s.dir.path(), "outs", c, &t, None, FloatDtype::F32);
    let json = s.dir.path().join("o.json");
    let o = oracle(&["diagnose", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    let d: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(d["first_bad_stage"], "grad.x");
    assert_eq!(d["tokens"], serde_json::json!([4]));
    let gx = d["stages"].as_array().unwrap().iter().find(|s| s["name"] == "grad.x").unwrap().clone();
    assert_eq!(gx["inputs"], serde_json::json!([["bwd.dx_rows", "emulated"]]), "{gx}");
    let fh = d["stages"].as_array().unwrap().iter().find(|s| s["name"] == "fwd.h").unwrap().clone();
    assert_eq!(fh["verdict"], "not in candidate");
}

#[test]
fn forward_only_case_lists_gradients_as_not_checked() {
    let s = setup("bf16");
    let mut inp = s.base.inputs.clone();
    inp.dy = None;
    let case = write_case(s.dir.path(), "fwd_only", &inp);
    let cand = write_candidate(s.dir.path(), "all", &inp.cfg, &s.base.tensors, None, FloatDtype::F32);
    let json = s.dir.path().join("f.json");
    let o = oracle(&["check", p(&case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let not = r["not_checked"].as_array().unwrap();
    assert!(not.iter().any(|n| n["name"] == "grad.x" && n["why"].as_str().unwrap().contains("no dy")), "{not:?}");
    let o = oracle(&["diagnose", p(&case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let d: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let gx = d["stages"].as_array().unwrap().iter().find(|s| s["name"] == "grad.x").unwrap().clone();
    assert_eq!(gx["verdict"], "not replayed");
}
