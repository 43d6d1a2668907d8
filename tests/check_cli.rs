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

/// The good candidate's tensors as F64, for files built by hand.
fn f64_tensors(s: &Setup) -> Vec<(String, TensorData<'static>)> {
    s.base.tensors.iter().map(|(n, a)| (n.clone(), TensorData::F64(CowArray::from(a.clone())))).collect()
}

/// A tensor name outside the case format (a typo, a stray name) is bad input naming it, not silently
/// skipped; the format's other names (inputs, router intermediates, `q.*`, `bound.*`, `emulated.*`) are
/// accepted and listed as not compared.
#[test]
fn names_outside_the_format_are_bad_input_and_the_rest_listed_as_not_compared() {
    let s = setup("bf16");
    let c = s.base.inputs.cfg.clone();
    let d = s.dir.path();
    let report = d.join("r.json");
    let gw13 = s.base.tensors["grad.w13"].clone();
    for (i, (name, frag)) in
        [("bogus.tensor", "`bogus.tensor` is not a name of the case format"), ("grad.W13", "did you mean `grad.w13`"), ("grad.w_13", "`grad.w_13`")]
            .into_iter()
            .enumerate()
    {
        let mut t = f64_tensors(&s);
        t.retain(|(n, _)| n != "grad.w13");
        t.push((name.to_string(), TensorData::F64(CowArray::from(gw13.clone()))));
        let cand = write_raw(d, &format!("name{i}.st"), &c, t);
        assert_bad_input(&oracle(&["check", p(&s.case), "--candidate", p(&cand), "--json", p(&report)]), frag, &report);
        assert_bad_input(&oracle(&["diagnose", p(&s.case), "--candidate", p(&cand), "--json", p(&report)]), frag, &report);
    }
    let mut t = f64_tensors(&s);
    let small = || TensorData::f64_owned(Array2::<f64>::zeros((2, 2)));
    for n in ["x", "fwd.logits", "q.x", "q.x.scale", "bound.y", "emulated.y"] {
        t.push((n.to_string(), small()));
    }
    let cand = write_raw(d, "accepted.st", &c, t);
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand), "--json", p(&report)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\n  not compared: fwd.logits, x, bound.* (1), emulated.* (1), q.* (2)\n"), "{out}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["ignored"].as_array().unwrap().len(), 6, "{}", r["ignored"]);
}

/// A candidate with the tensors of `tensors` in the kernel row order `order` (oracle rows), its row map,
/// and `offsets` as `fwd.expert_offsets`.
fn write_with_offsets(s: &Setup, name: &str, order: Option<&[usize]>, offsets: TensorData<'static>) -> std::path::PathBuf {
    let rows = &s.base.em.fwd.rows;
    let mut t = f64_tensors(s);
    if let Some(order) = order {
        for (n, a) in t.iter_mut().filter(|(n, _)| n.starts_with("fwd.") || n.starts_with("bwd.")) {
            *a = TensorData::F64(CowArray::from(s.base.tensors[n.as_str()].select(ndarray::Axis(0), order)));
        }
        let pick = |v: &[usize]| Array1::from_iter(order.iter().map(|&r| v[r] as i32));
        t.push(("fwd.row_token".into(), TensorData::i32_owned(pick(&rows.row_token))));
        t.push(("fwd.row_slot".into(), TensorData::i32_owned(pick(&rows.row_slot))));
    }
    t.push(("fwd.expert_offsets".into(), offsets));
    write_raw(s.dir.path(), name, &s.base.inputs.cfg, t)
}

/// `fwd.expert_offsets` is the kernel's dispatch: compared exactly with the oracle's (a wrong entry is a
/// violation, and `diagnose` names the dispatch as the first bad stage), checked against the kernel's row
/// map, and bad input when not I32 [E+1].
#[test]
fn expert_offsets_are_compared_exactly_and_against_the_row_map() {
    let s = setup("bf16");
    let c = &s.base.inputs.cfg;
    let d = s.dir.path();
    let rows = &s.base.em.fwd.rows;
    let json = d.join("o.json");
    let off: Vec<i32> = rows.expert_offsets.iter().map(|&o| o as i32).collect();
    let ints = |v: Vec<i32>| TensorData::i32_owned(Array1::from(v));
    let by = |r: &serde_json::Value, n: &str| r["tensors"].as_array().unwrap().iter().find(|t| t["name"] == n).cloned();

    let good = write_with_offsets(&s, "off_good.st", None, ints(off.clone()));
    let o = oracle(&["check", p(&s.case), "--candidate", p(&good), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let t = by(&r, "fwd.expert_offsets").expect("the offsets are checked");
    assert_eq!((t["verdict"].as_str(), t["elements"].as_u64()), (Some("pass"), Some(c.experts as u64 + 1)));

    // One entry off by one: a violation at that entry, and the dispatch is the first bad stage.
    let mut bad = off.clone();
    bad[3] += 1;
    let cand = write_with_offsets(&s, "off_bad.st", None, ints(bad));
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(1), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("fwd.expert_offsets   FAIL"), "{}", String::from_utf8_lossy(&o.stdout));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["verdict"], "fail");
    let t = by(&r, "fwd.expert_offsets").unwrap();
    assert_eq!(t["violations"], 1);
    assert_eq!(t["worst"]["index"], serde_json::json!([3]));
    assert_eq!(t["worst"]["got"], off[3] as f64 + 1.0);
    assert_eq!(t["worst"]["exact"], off[3] as f64);
    assert_eq!(t["worst"]["bound"], 0.0);
    let o = oracle(&["diagnose", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(1), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let dg: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(dg["first_bad_stage"], "fwd.expert_offsets");
    assert_eq!(dg["experts"], serde_json::json!([2, 3]));
    assert_eq!(dg["stages"][0]["name"], "fwd.expert_offsets");

    // The kernel's own row order: rows reversed within each expert agree with the offsets; all rows
    // reversed put the last expert's rows in the first expert's range.
    let within: Vec<usize> = (0..c.experts).flat_map(|e| rows.expert_rows(e).rev()).collect();
    let cand = write_with_offsets(&s, "off_within.st", Some(&within), ints(off.clone()));
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let reversed: Vec<usize> = (0..rows.rows()).rev().collect();
    let cand = write_with_offsets(&s, "off_rev.st", Some(&reversed), ints(off.clone()));
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(1), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let t = by(&r, "fwd.expert_offsets").unwrap();
    assert_eq!(t["verdict"], "fail");
    assert!(t["worst"]["kernel_row"].is_u64(), "{t}");
    assert_eq!(by(&r, "fwd.h").unwrap()["verdict"], "pass", "the row map itself is consistent");
    let o = oracle(&["diagnose", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(1));
    let dg: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(dg["first_bad_stage"], "fwd.expert_offsets");

    // Not I32 [E+1]: bad input naming the tensor.
    let report = d.join("r.json");
    let short = write_with_offsets(&s, "off_short.st", None, ints(off[..c.experts].to_vec()));
    assert_bad_input(&oracle(&["check", p(&s.case), "--candidate", p(&short), "--json", p(&report)]), "`fwd.expert_offsets`: must have shape", &report);
    let floats = write_with_offsets(&s, "off_f64.st", None, TensorData::f64_owned(Array1::from_iter(off.iter().map(|&v| v as f64))));
    assert_bad_input(&oracle(&["diagnose", p(&s.case), "--candidate", p(&floats), "--json", p(&report)]), "`fwd.expert_offsets`: must be I32", &report);
}

/// A candidate's `moe.config` must describe the case's layer (the recipe may differ); a candidate without
/// metadata is fine.
#[test]
fn a_candidate_config_contradicting_the_case_is_bad_input() {
    use moe_reference::config::{Activation, Routing};
    let s = setup("bf16");
    let c = s.base.inputs.cfg.clone();
    let d = s.dir.path();
    let report = d.join("r.json");
    let run = |cand: &Path| oracle(&["check", p(&s.case), "--candidate", p(cand), "--json", p(&report)]);
    for (i, (cc, frag)) in [
        (moe_reference::MoeConfig { tokens: 8, ..c.clone() }, "`moe.config` contradicts the case's: tokens is 8 in the candidate, 10 in the case"),
        (moe_reference::MoeConfig { top_k: 1, ..c.clone() }, "top_k is 1 in the candidate, 2 in the case"),
        (moe_reference::MoeConfig { ep_ranks: 2, ..c.clone() }, "ep_ranks is 2 in the candidate, 1 in the case"),
        (moe_reference::MoeConfig { activation: Activation::SwigluClamped { alpha: 1.702, limit: 7.0 }, ..c.clone() }, "activation is"),
        (moe_reference::MoeConfig { routing: Some(Routing::softmax()), ..c.clone() }, "routing is"),
    ]
    .into_iter()
    .enumerate()
    {
        let cand = write_raw(d, &format!("cfg{i}.st"), &cc, f64_tensors(&s));
        assert_bad_input(&run(&cand), frag, &report);
    }
    let garbage = d.join("cfg_garbage.st");
    case::write_outputs(&garbage, "{\"tokens\": 10", &f64_tensors(&s)).unwrap();
    assert_bad_input(&run(&garbage), "`moe.config` is not a valid config", &report);
    assert_bad_input(&oracle(&["diagnose", p(&s.case), "--candidate", p(&garbage), "--json", p(&report)]), "moe.config", &report);

    // Another recipe, or no metadata at all: accepted.
    let other = write_raw(d, "cfg_recipe.st", &moe_reference::MoeConfig { recipe: "fp8-block".into(), ..c.clone() }, f64_tensors(&s));
    assert_eq!(run(&other).status.code(), Some(0));
    let bare = d.join("cfg_bare.st");
    case::write_tensors(&bare, &Default::default(), &f64_tensors(&s)).unwrap();
    let o = run(&bare);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// What the repository's writers produce is accepted: `run --intermediates` (the exact oracle, with the
/// offsets), `run --recipe R --intermediates --bounds` (quantised copies and bounds), and the golden files
/// (inputs, routing, emulated results and bounds), each checked as its own candidate.
#[test]
fn every_writer_in_the_repository_makes_an_accepted_candidate() {
    let s = setup("fp8-block");
    let d = s.dir.path();
    let json = d.join("w.json");
    let exact = d.join("exact.st");
    assert!(oracle(&["run", p(&s.case), "--intermediates", "-q", "-o", p(&exact)]).status.success());
    let em = d.join("em.st");
    let o = oracle(&["run", p(&s.case), "--recipe", "fp8-block", "--intermediates", "--bounds", "-q", "-o", p(&em)]);
    assert!(o.status.success(), "{}", stderr(&o));
    for cand in [&exact, &em] {
        let o = oracle(&["check", p(&s.case), "--candidate", p(cand), "--json", p(&json)]);
        assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let t = r["tensors"].as_array().unwrap().iter().find(|t| t["name"] == "fwd.expert_offsets").cloned();
        assert_eq!(t.map(|t| t["verdict"].clone()), Some("pass".into()), "{}", p(cand));
    }
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let mut n = 0;
    for f in std::fs::read_dir(&golden).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "safetensors") {
            let o = oracle(&["check", p(&f), "--candidate", p(&f)]);
            assert_eq!(o.status.code(), Some(0), "{}: {}{}", f.display(), String::from_utf8_lossy(&o.stdout), stderr(&o));
            n += 1;
        }
    }
    assert!(n >= 10, "{n} golden files");
}

/// A fused kernel may feed a stage its accumulator before rounding it for the file: y summed from
/// unrounded expert outputs, grad.x from unrounded dx_rows. `check` passes such a candidate, and
/// `diagnose` must not name a bad stage either: its replay allows each stored input its storage rounding
/// (before, it named grad.x or bwd.da first in about a third of such kernels, session 37).
#[test]
fn diagnose_allows_a_fused_kernel_its_unrounded_intermediates() {
    let s = setup("bf16");
    let inp = &s.base.inputs;
    let rows = &s.base.em.fwd.rows;
    let (t_n, k, hd) = (inp.cfg.tokens, inp.cfg.top_k, inp.cfg.hidden);
    let bf16 = |v: f64| f64::from(case::to_bf16(v));
    // A value that rounds to the stored bf16 `r`, 0.45 of half an ulp away in the direction `sign`.
    let unrounded = |r: f64, sign: f64| {
        if r == 0.0 {
            return r;
        }
        r + sign * 0.45 * 2f64.powi(r.abs().log2().floor() as i32 - 8)
    };
    let mut t = s.base.tensors.clone();
    let o = t["fwd.o"].clone().into_dimensionality::<Ix2>().unwrap();
    let dx = t["bwd.dx_rows"].clone().into_dimensionality::<Ix2>().unwrap();
    let w = inp.topk_weights.as_ref().unwrap();
    let (mut y, mut gx) = (Array2::<f64>::zeros((t_n, hd)), Array2::<f64>::zeros((t_n, hd)));
    for tok in 0..t_n {
        for c in 0..hd {
            let slots: Vec<(usize, usize)> = (0..k).filter_map(|j| rows.slot_row[tok * k + j].map(|r| (j, r))).collect();
            // Deviations that add up: the worst a fused kernel's unrounded rows can do.
            let wj = |j: usize| f64::from(case::to_bf16(w[[tok, j]]));
            y[[tok, c]] = bf16(slots.iter().map(|&(j, r)| wj(j) * unrounded(o[[r, c]], wj(j).signum())).sum());
            gx[[tok, c]] = bf16(slots.iter().map(|&(_, r)| unrounded(dx[[r, c]], 1.0)).sum());
        }
    }
    t.insert("y".into(), y.into_dyn());
    t.insert("grad.x".into(), gx.into_dyn());
    let cand = write_candidate(s.dir.path(), "fused", &inp.cfg, &t, None, FloatDtype::F32);
    let o = oracle(&["check", p(&s.case), "--candidate", p(&cand)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let json = s.dir.path().join("fused.json");
    let o = oracle(&["diagnose", p(&s.case), "--candidate", p(&cand), "--json", p(&json)]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    let d: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(d["first_bad_stage"].is_null(), "{}", d["first_bad_stage"]);
}
