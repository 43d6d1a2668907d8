//! `moe-oracle run --recipe`: emulated outputs written like a candidate (F32), quantised operands with
//! their block metadata, bounds on request, the exact comparison table; recipes from names and JSON files;
//! bad recipes rejected with one line and exit 2.

use std::path::Path;

use safetensors::{Dtype, SafeTensors};

mod cli_common;
use cli_common::*;

#[test]
fn fp8_block_run_writes_f32_outputs_quantised_operands_and_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fp8.safetensors");
    let o = oracle(&["run", "--demo", "--recipe", "fp8-block", "--intermediates", "--bounds", "-q", "-o", p(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The emulation times forward and backward as one; the summary must not call the backward skipped.
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains("forward and backward") && !summary.contains("skipped"), "{summary}");
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    for n in ["y", "grad.x", "grad.w13", "fwd.h", "bwd.dh"] {
        assert_eq!(st.tensor(n).unwrap().dtype(), Dtype::F32, "{n}");
    }
    for n in ["bound.y", "bound.grad.x", "bound.fwd.h"] {
        let t = st.tensor(n).unwrap();
        assert_eq!(t.dtype(), Dtype::F64, "{n}");
        assert!(t.data().chunks_exact(8).all(|c| f64::from_le_bytes(c.try_into().unwrap()) >= 0.0), "{n} negative");
    }
    assert_eq!(st.tensor("q.x").unwrap().dtype(), Dtype::F8_E4M3);
    assert_eq!(st.tensor("q.x.scale").unwrap().dtype(), Dtype::F32);
    assert_eq!(st.tensor("q.w13").unwrap().shape().len(), 3);
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let m = meta.metadata().as_ref().unwrap();
    assert_eq!(m.get("q.x.block").map(String::as_str), Some("1x128"));
    assert_eq!(m.get("q.w13.block").map(String::as_str), Some("128x128"));
    assert!(m.get("moe.recipe").unwrap().contains("deepgemm"));
}

#[test]
fn mxfp8_scales_are_ue8m0_codes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mx.safetensors");
    let o = oracle(&["run", "--demo", "--recipe", "mxfp8", "--intermediates", "-q", "-o", p(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("q.x.scale").unwrap().dtype(), Dtype::F8_E8M0);
}

#[test]
fn compare_exact_reports_no_violation_and_a_json_recipe_gives_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let show = oracle(&["recipes", "--show", "fp8-bwd"]);
    assert!(show.status.success());
    let json = dir.path().join("r.json");
    std::fs::write(&json, &show.stdout).unwrap();
    let (a, b) = (dir.path().join("a.safetensors"), dir.path().join("b.safetensors"));
    let o = oracle(&["run", "--demo", "--recipe", "fp8-bwd", "--compare-exact", "-q", "-o", p(&a)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<&str> = table.lines().take_while(|l| !l.starts_with("moe-oracle run")).filter(|l| l.trim_start().starts_with("grad.") || l.trim_start().starts_with("y ")).collect();
    assert!(rows.len() >= 5, "{table}");
    for r in rows {
        let viol: usize = r.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert_eq!(viol, 0, "{r}");
    }
    let o = oracle(&["run", "--demo", "--recipe", p(&json), "-q", "-o", p(&b)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o2 = oracle(&["run", "--demo", "--recipe", "fp8-bwd", "-q", "-o", p(&a)]);
    assert!(o2.status.success());
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn bad_recipes_exit_2_with_one_line_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.safetensors");
    let bad = dir.path().join("bad.json");
    let mut r: serde_json::Value = serde_json::from_slice(&oracle(&["recipes", "--show", "fp8-block"]).stdout).unwrap();
    r["gemm1"]["a"]["block"] = "1x0".into();
    std::fs::write(&bad, r.to_string()).unwrap();
    let badmodel = dir.path().join("badmodel.json");
    r["gemm1"]["a"]["block"] = "1x128".into();
    r["gemm2"]["accumulate"] = "abacus".into();
    std::fs::write(&badmodel, r.to_string()).unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{ not json").unwrap();
    for (recipe, frag) in [("fp7", "unknown recipe"), (p(&bad), "block"), (p(&badmodel), "abacus"), (p(&junk), "junk.json")] {
        let o = oracle(&["run", "--demo", "--recipe", recipe, "-q", "-o", p(&out)]);
        assert_eq!(o.status.code(), Some(2), "{recipe}");
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].starts_with("error:") && lines[0].contains(frag), "{err}");
        assert!(!out.exists());
    }
}

/// `check --same-schedule`: the emulated fp8-block kernel passes it; a kernel that forgets the FP8
/// promotion (chains all of K in the 13-bit tensor-core accumulator) fails it.
#[test]
fn same_schedule_check_accepts_the_schedule_and_rejects_a_missing_promotion() {
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("case.safetensors");
    let o = oracle(&[
        "golden", "--preset", "qwen3-30b-a3b", "--recipe", "fp8-block", "--tokens", "16", "--experts", "16", "--hidden", "512",
        "--intermediate", "256", "-q", "-o", p(&case),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let same = dir.path().join("same.safetensors");
    let fast = dir.path().join("fast.safetensors");
    let run = |extra: &[&str], out: &Path| {
        let mut args = vec!["run", p(&case), "--recipe", "fp8-block", "--intermediates", "-q", "-o", p(out)];
        args.extend_from_slice(extra);
        let o = oracle(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run(&[], &same);
    run(&["--accumulate", "hopper-fp8-fast"], &fast);
    let check = |cand: &Path, strict: bool| {
        let mut args = vec!["check", p(&case), "--candidate", p(cand), "--recipe", "fp8-block"];
        if strict {
            args.push("--same-schedule");
        }
        oracle(&args).status.code()
    };
    assert_eq!(check(&same, false), Some(0));
    assert_eq!(check(&same, true), Some(0));
    assert_eq!(check(&fast, true), Some(1), "a missing promotion is not the recipe's schedule");

    // `diagnose --same-schedule` localises it: GEMM1 is the first stage replayed from known operands
    // (the case's x and w13) whose result leaves the emulation by more than storage rounding.
    let diagnose = |cand: &Path, strict: bool| {
        let json = dir.path().join("diag.json");
        let mut args = vec!["diagnose", p(&case), "--candidate", p(cand), "--recipe", "fp8-block", "--json", p(&json)];
        if strict {
            args.push("--same-schedule");
        }
        let o = oracle(&args);
        let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        (o.status.code(), report["first_bad_stage"].clone())
    };
    assert_eq!(diagnose(&same, true), (Some(0), serde_json::Value::Null));
    assert_eq!(diagnose(&fast, true), (Some(1), serde_json::json!("fwd.h")));
}
