//! The `moe-oracle` binary: demo, run on written cases, and bad input (exit 2, one stderr line, no output).

use std::path::Path;
use std::process::Output;

use moe_oracle::case::{self, write_case, FloatDtype};
use moe_oracle::demo::random_inputs;
use moe_reference::config::{Activation, MoeConfig, Routing, Score};
use moe_reference::{layer, LayerInputs, Options};
use safetensors::{Dtype, SafeTensors};

mod cli_common;
use cli_common::*;

fn cfg(tokens: usize, routed: bool) -> MoeConfig {
    MoeConfig {
        activation: Activation::SwigluClamped { alpha: 1.702, limit: 7.0 },
        routing: routed.then_some(Routing { score: Score::Sigmoid, normalize_topk: true, scaling: 2.5, groups: None }),
        recipe: "bf16".into(),
        ep_ranks: 2,
        ..MoeConfig::swiglu(tokens, 8, 4, 4, 2)
    }
}

fn f64s(st: &SafeTensors, name: &str) -> Vec<f64> {
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), Dtype::F64, "{name}");
    t.data().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn names(st: &SafeTensors) -> Vec<String> {
    let mut n: Vec<String> = st.names().into_iter().map(String::from).collect();
    n.sort();
    n
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// A failed run: status 2, exactly one `error:` line on stderr containing `frag`, no output file and no
/// leftover temporary file.
fn assert_fails(o: &Output, out: &Path, frag: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line, got {err:?}");
    assert!(lines[0].starts_with("error: "), "{err:?}");
    assert!(lines[0].contains(frag), "{err:?} lacks {frag:?}");
    assert!(!out.exists(), "output written despite the error");
    if let Some(dir) = out.parent().filter(|d| d.is_dir()) {
        for f in std::fs::read_dir(dir).unwrap() {
            let name = f.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!name.ends_with(".tmp"), "temporary file left behind: {name}");
        }
    }
}

#[test]
fn demo_writes_outputs() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("demo.safetensors");
    let case_out = d.path().join("demo-case.safetensors");
    let o = oracle(&["demo", "-o", p(&out), "--save-case", p(&case_out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains("|y|"), "{summary}");
    assert!(summary.contains("[16, 64]"), "{summary}");
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("y").unwrap().shape(), &[16, 64]);
    assert_eq!(st.tensor("grad.router.weight").unwrap().shape(), &[8, 64]);
    assert_eq!(st.tensor("topk_ids").unwrap().dtype(), Dtype::I32);
    assert!(f64s(&st, "y").iter().any(|&v| v != 0.0));

    // The saved case reproduces the same outputs through `run`, bit for bit.
    let out2 = d.path().join("rerun.safetensors");
    let o = oracle(&["run", p(&case_out), "-o", p(&out2), "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "-q prints nothing on stderr: {}", stderr(&o));
    let bytes2 = std::fs::read(&out2).unwrap();
    let st2 = SafeTensors::deserialize(&bytes2).unwrap();
    assert_eq!(names(&st), names(&st2));
    for n in ["y", "grad.x", "grad.w13", "grad.w2", "grad.topk_weights", "grad.router.weight"] {
        assert_eq!(f64s(&st, n), f64s(&st2, n), "{n}");
    }

    // `run --demo` is the same demo.
    let out3 = d.path().join("run-demo.safetensors");
    let o = oracle(&["run", "--demo", "-o", p(&out3)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(&out3).unwrap() == bytes, "the demo is deterministic");
}

#[test]
fn run_given_routing_with_intermediates() {
    let d = tempfile::tempdir().unwrap();
    let mut inp = random_inputs(&cfg(6, false), 11);
    inp.topk_ids.as_mut().unwrap()[[4, 1]] = -1;
    let case_path = d.path().join("case.safetensors");
    write_case(&case_path, &inp, FloatDtype::BF16).unwrap();
    let out = d.path().join("out.safetensors");
    let o = oracle(&["run", p(&case_path), "-o", p(&out), "--intermediates"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let bytes = std::fs::read(&out).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let m = meta.metadata().as_ref().unwrap();
    assert_eq!(m["moe.format"], "1");
    assert_eq!(m["moe.config"], case::config_json(&inp.cfg));
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(
        names(&st),
        sorted(&[
            "y",
            "grad.x",
            "grad.w13",
            "grad.w2",
            "grad.topk_weights",
            "fwd.row_token",
            "fwd.row_slot",
            "fwd.expert_offsets",
            "fwd.h",
            "fwd.a",
            "fwd.o",
            "bwd.do",
            "bwd.da",
            "bwd.dh",
            "bwd.dx_rows",
        ])
    );
    let m_rows = 6 * 2 - 1;
    let shapes: [(&str, Vec<usize>); 15] = [
        ("y", vec![6, 8]),
        ("grad.x", vec![6, 8]),
        ("grad.w13", vec![4, 8, 8]),
        ("grad.w2", vec![4, 8, 4]),
        ("grad.topk_weights", vec![6, 2]),
        ("fwd.row_token", vec![m_rows]),
        ("fwd.row_slot", vec![m_rows]),
        ("fwd.expert_offsets", vec![5]),
        ("fwd.h", vec![m_rows, 8]),
        ("fwd.a", vec![m_rows, 4]),
        ("fwd.o", vec![m_rows, 8]),
        ("bwd.do", vec![m_rows, 8]),
        ("bwd.da", vec![m_rows, 4]),
        ("bwd.dh", vec![m_rows, 8]),
        ("bwd.dx_rows", vec![m_rows, 8]),
    ];
    for (name, shape) in shapes {
        let t = st.tensor(name).unwrap();
        assert_eq!(t.shape(), shape.as_slice(), "{name}");
        let int = name.starts_with("fwd.row_") || name == "fwd.expert_offsets";
        assert_eq!(t.dtype(), if int { Dtype::I32 } else { Dtype::F64 }, "{name}");
    }
    // Same numbers as the library.
    let fwd = layer::forward(&inp, Options::default());
    let bwd = layer::backward(&inp, &fwd, inp.dy.as_ref().unwrap().view(), Options::default());
    assert_eq!(f64s(&st, "y"), fwd.y.iter().copied().collect::<Vec<_>>());
    assert_eq!(f64s(&st, "grad.w13"), bwd.grad_w13.iter().copied().collect::<Vec<_>>());
}

#[test]
fn run_routed_forward_only_and_engines_agree() {
    let d = tempfile::tempdir().unwrap();
    let mut inp: LayerInputs = random_inputs(&cfg(5, true), 4);
    inp.dy = None;
    inp.router_bias = Some(ndarray::Array1::from(vec![0.0, 0.25, -0.5, 0.125]));
    let case_path = d.path().join("routed.safetensors");
    write_case(&case_path, &inp, FloatDtype::F32).unwrap();
    let mut outs = Vec::new();
    for engine in ["ozaki", "reference"] {
        let out = d.path().join(format!("out-{engine}.safetensors"));
        let o = oracle(&["run", p(&case_path), "-o", p(&out), "--engine", engine]);
        assert!(o.status.success(), "{}", stderr(&o));
        outs.push(std::fs::read(&out).unwrap());
    }
    assert!(outs[0] == outs[1], "engines give identical files");
    let st = SafeTensors::deserialize(&outs[0]).unwrap();
    assert_eq!(names(&st), sorted(&["y", "topk_ids", "topk_weights"]));
    assert_eq!(st.tensor("topk_ids").unwrap().dtype(), Dtype::I32);
    assert_eq!(st.tensor("topk_ids").unwrap().shape(), &[5, 2]);
    assert_eq!(st.tensor("topk_weights").unwrap().shape(), &[5, 2]);
}

#[test]
fn zero_token_case_runs() {
    let d = tempfile::tempdir().unwrap();
    let inp = random_inputs(&cfg(0, true), 4);
    let case_path = d.path().join("empty.safetensors");
    write_case(&case_path, &inp, FloatDtype::F64).unwrap();
    let out = d.path().join("out.safetensors");
    let o = oracle(&["run", p(&case_path), "-o", p(&out), "--intermediates"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("y").unwrap().shape(), &[0, 8]);
    assert_eq!(st.tensor("fwd.h").unwrap().shape(), &[0, 8]);
    assert_eq!(st.tensor("bwd.dlogits").unwrap().shape(), &[0, 4]);
}

#[test]
fn bad_inputs_exit_2_with_one_line() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.safetensors");
    let good = random_inputs(&cfg(4, false), 5);
    let case_path = d.path().join("case.safetensors");

    // Missing file.
    let o = oracle(&["run", p(&d.path().join("nope.safetensors")), "-o", p(&out)]);
    assert_fails(&o, &out, "nope.safetensors");

    // Truncated file.
    write_case(&case_path, &good, FloatDtype::F64).unwrap();
    let bytes = std::fs::read(&case_path).unwrap();
    std::fs::write(&case_path, &bytes[..bytes.len() - 3]).unwrap();
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&out)]), &out, "truncated file");

    // Garbage.
    std::fs::write(&case_path, b"\x10\x00\x00\x00\x00\x00\x00\x00{{{{{{{{{{{{{{{{").unwrap();
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&out)]), &out, "malformed safetensors file");

    // Expert id out of range.
    let mut bad = good.clone();
    bad.topk_ids.as_mut().unwrap()[[1, 0]] = 17;
    write_case(&case_path, &bad, FloatDtype::F64).unwrap();
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&out)]), &out, "token 1, slot 0: expert id 17");

    // NaN, then accepted with --allow-nonfinite.
    let mut bad = good.clone();
    bad.w13[[0, 1, 2]] = f64::NAN;
    write_case(&case_path, &bad, FloatDtype::BF16).unwrap();
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&out)]), &out, "tensor `w13`: non-finite value NaN");
    let o = oracle(&["run", p(&case_path), "-o", p(&out), "--allow-nonfinite", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.exists());
    std::fs::remove_file(&out).unwrap();

    // An invalid config (k > E).
    let mut bad = good.clone();
    bad.cfg.top_k = 9;
    write_case(&case_path, &bad, FloatDtype::F64).unwrap();
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&out)]), &out, "top_k 9 exceeds experts 4");

    // Output directory missing: refused before computing.
    write_case(&case_path, &good, FloatDtype::F64).unwrap();
    let nowhere = d.path().join("no-dir").join("out.safetensors");
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&nowhere)]), &nowhere, "does not exist");

    // Usage errors are one line and status 2 too.
    assert_fails(&oracle(&["run", p(&case_path)]), &out, "--output");
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&out), "--engine", "blas"]), &out, "blas");
    assert_fails(&oracle(&["frobnicate"]), &out, "frobnicate");

    // The good case still runs.
    let o = oracle(&["run", p(&case_path), "-o", p(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn failed_run_keeps_previous_output_intact() {
    // A failure never touches an existing output file (outputs are written by rename).
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.safetensors");
    std::fs::write(&out, b"previous").unwrap();
    let mut bad = random_inputs(&cfg(3, false), 5);
    bad.topk_ids.as_mut().unwrap()[[0, 0]] = bad.topk_ids.as_ref().unwrap()[[0, 1]];
    let case_path = d.path().join("case.safetensors");
    write_case(&case_path, &bad, FloatDtype::F64).unwrap();
    let o = oracle(&["run", p(&case_path), "-o", p(&out)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("repeated"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), b"previous");
}

#[test]
fn help_exits_zero() {
    let o = oracle(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("run"));
    let o = oracle(&["run", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("--allow-nonfinite"));
}

#[test]
fn refused_before_the_work_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.safetensors");
    let good = random_inputs(&cfg(4, false), 5);
    let case_path = d.path().join("case.safetensors");
    write_case(&case_path, &good, FloatDtype::F64).unwrap();
    let before = std::fs::read(&case_path).unwrap();

    // An output naming the input (spelt differently) would replace it: refused, the case untouched.
    let same = d.path().join(".").join("case.safetensors");
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&same)]), &out, "is the input");
    assert_eq!(std::fs::read(&case_path).unwrap(), before);
    let o = oracle(&["cast", p(&case_path), "-o", p(&case_path), "--format", "bf16"]);
    assert_fails(&o, &out, "is the input");
    assert_eq!(std::fs::read(&case_path).unwrap(), before);
    let o = oracle(&["demo", "-o", p(&out), "--save-case", p(&out)]);
    assert_fails(&o, &out, "also given as the output");

    // A bad recipe is refused before the case is read (no progress line before the error).
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&out), "--recipe", "bogus"]), &out, "unknown recipe 'bogus'");

    // More memory than allowed: refused from the config alone (this 4-token case needs ~0.01 MiB).
    let o = oracle(&["run", p(&case_path), "-o", p(&out), "--max-memory-gib", "1e-9"]);
    assert_fails(&o, &out, "(estimate), more than");
    assert_fails(&oracle(&["run", p(&case_path), "-o", p(&out), "--max-memory-gib", "0"]), &out, "above 0");
    let o = oracle(&["run", p(&case_path), "-o", p(&out), "--max-memory-gib", "1", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_file(&out).unwrap();

    // No subcommand: say so.
    assert_fails(&oracle(&[]), &out, "a subcommand is required: run, demo");

    // --device cuda on a machine without a GPU: the GPU's error alone, no progress line before it (the
    // GPU is opened before the "read" line is printed). With a GPU this part has nothing to refuse.
    if moe_kernels::Gpu::open(0).is_err() {
        for kernels in ["simple", "fast"] {
            let o = oracle(&["run", p(&case_path), "-o", p(&out), "--device", "cuda", "--kernels", kernels]);
            assert_fails(&o, &out, "GPU: ");
        }
        assert_fails(&oracle(&["run", "--demo", "--device", "cuda", "-o", p(&out)]), &out, "GPU: ");
    } else {
        eprintln!("skipped: --device cuda without a GPU (this machine has one)");
    }
}

#[test]
fn finite_inputs_whose_exact_results_overflow_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.safetensors");
    let mut big = random_inputs(&cfg(4, false), 5);
    // Each factor finite, their products beyond f64 (the clamped SwiGLU would bound a large x alone).
    big.x.mapv_inplace(|v| v * 1e200);
    big.w13.mapv_inplace(|v| v * 1e200);
    let case_path = d.path().join("big.safetensors");
    write_case(&case_path, &big, FloatDtype::F64).unwrap();
    let o = oracle(&["run", p(&case_path), "-o", p(&out), "-q"]);
    assert_fails(&o, &out, "leave f64's range");
    // `check` cannot hold a candidate to such a case either (the candidate: a good case's exact run).
    let good_path = d.path().join("good.safetensors");
    write_case(&good_path, &random_inputs(&cfg(4, false), 5), FloatDtype::F64).unwrap();
    let cand = d.path().join("cand.safetensors");
    assert!(oracle(&["run", p(&good_path), "-o", p(&cand), "-q"]).status.success());
    let o = oracle(&["check", p(&case_path), "--candidate", p(&cand)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("leave f64's range"), "{}", stderr(&o));
}
