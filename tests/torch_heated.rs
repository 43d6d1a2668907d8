//! `kernels/tools/torch_moe_heated.py` (the shared PyTorch baseline with `--heat-ms`, for `bench-gpu
//! --heat-ms`): run against a stub baseline and a stub `torch` (no GPU, no PyTorch needed), it must pass the
//! baseline's arguments through, leave the timing unchanged at 0 ms, run the timed work for the heat before the
//! timed reps otherwise, report each heat's passes (and joules, read from a stand-in NVML) on stderr, and
//! reject a bad value or a missing baseline with one `error:` line and status 2.
//! Skips with a visible `SKIP` line when python3 is missing; `REQUIRE_PYTHON=1` makes that a failure.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Stands in for torch_moe_baseline.py: the same `bench(fn, warm, rep)` and `main()` shape; prints how often
/// the timed function ran in all and within the reps.
const STUB_BASELINE: &str = r#"
import argparse, json, torch
def bench(fn, warm=3, rep=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    before = calls[0]
    for _ in range(rep):
        fn()
    return calls[0] - before
calls = [0]
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset")
    ap.add_argument("--tokens", type=int)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    def f():
        calls[0] += 1
    in_reps = bench(f)
    print(json.dumps({"preset": a.preset, "tokens": a.tokens, "compile": a.compile, "calls": calls[0], "in_reps": in_reps}))
"#;

fn wrapper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/tools/torch_moe_heated.py")
}

/// A temporary directory with the stub baseline and a stub `torch` package; None (after a SKIP line) without python3.
fn setup() -> Option<tempfile::TempDir> {
    if !support::python3_runs("torch_moe_heated.py") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("base.py"), STUB_BASELINE).unwrap();
    std::fs::write(dir.path().join("torch.py"), "class cuda:\n    @staticmethod\n    def synchronize():\n        pass\n").unwrap();
    Some(dir)
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new("python3").arg(wrapper()).args(["--baseline-script", dir.join("base.py").to_str().unwrap()]).args(args).env("PYTHONPATH", dir).output().unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap()
}

#[test]
fn heat_runs_the_work_before_the_reps_and_passes_the_arguments_on() {
    let Some(dir) = setup() else { return };
    let cold = json(&run(dir.path(), &["--heat-ms", "0", "--preset", "qwen3-30b-a3b", "--tokens", "7"]));
    assert_eq!((cold["preset"].as_str(), cold["tokens"].as_u64(), cold["compile"].as_bool()), (Some("qwen3-30b-a3b"), Some(7), Some(false)));
    assert_eq!((cold["calls"].as_u64(), cold["in_reps"].as_u64()), (Some(23), Some(20)), "0 ms: the baseline's own 3 warm-up calls and 20 reps");
    let hot = json(&run(dir.path(), &["--heat-ms", "30", "--compile", "--preset", "p", "--tokens", "1"]));
    assert_eq!(hot["compile"].as_bool(), Some(true));
    assert_eq!(hot["in_reps"].as_u64(), Some(20), "the timed reps are the baseline's");
    assert!(hot["calls"].as_u64().unwrap() > 100, "30 ms of heat ran the work many times before the reps: {hot}");
}

/// Each heat reports its passes on stderr (bench-gpu copies the line into its log), with joules where NVML
/// is there and one line saying why not otherwise; no heat, no lines.
#[test]
fn heat_reports_its_passes_and_energy_on_stderr() {
    let Some(dir) = setup() else { return };
    let cold = run(dir.path(), &["--heat-ms", "0", "--preset", "p", "--tokens", "1"]);
    assert!(cold.status.success() && cold.stderr.is_empty(), "{}", String::from_utf8_lossy(&cold.stderr));
    let hot = run(dir.path(), &["--heat-ms", "30", "--preset", "p", "--tokens", "1"]);
    let calls = json(&hot)["calls"].as_u64().unwrap();
    let err = String::from_utf8_lossy(&hot.stderr);
    let heat: Vec<&str> = err.lines().filter(|l| l.starts_with("heat: ")).collect();
    assert_eq!(heat.len(), 1, "one heat for the stub's one timed phase: {err}");
    let passes: u64 = heat[0]["heat: ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert_eq!(passes, calls - 23, "the passes counted are the calls beyond the 3 warm-up calls and 20 reps: {err}");
    assert!(heat[0].contains(" ms before the timed reps"), "{err}");
    let no_energy = err.lines().filter(|l| l.starts_with("energy: not measured (")).count();
    assert!((no_energy == 1) != heat[0].contains(" J per pass, "), "joules, or one line saying why not: {err}");
}

#[test]
fn bad_heat_or_a_missing_baseline_is_one_error_line_and_status_2() {
    let Some(dir) = setup() else { return };
    let missing = Command::new("python3").arg(wrapper()).args(["--heat-ms", "5", "--baseline-script", "/nonexistent/base.py"]).output().unwrap();
    for (o, want) in [
        (run(dir.path(), &["--heat-ms", "-1"]), "--heat-ms -1.0: expected 0 to 600000"),
        (run(dir.path(), &["--heat-ms", "nan"]), "--heat-ms nan"),
        (run(dir.path(), &["--heat-ms", "700000"]), "expected 0 to 600000"),
        (missing, "does not exist"),
    ] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(o.stdout.is_empty(), "no output on failure");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(want), "expected {want:?} in {err}");
    }
}

/// With NVML there (the stand-in of tests/support/nvml_stub.c, found through LD_LIBRARY_PATH as the real one
/// would be), the heat line carries the joules between the counter's reads around the heat: the stub's counter
/// grows by 1000 mJ a read, so exactly 1.0 J.
#[test]
fn heat_reads_the_energy_counter_around_the_heat() {
    let Some(dir) = setup() else { return };
    let Some(_) = support::build_nvml_stub(dir.path(), "torch_moe_heated.py energy") else { return };
    let o = Command::new("python3")
        .arg(wrapper())
        .args(["--baseline-script", dir.path().join("base.py").to_str().unwrap(), "--heat-ms", "20", "--preset", "p", "--tokens", "1"])
        .env("PYTHONPATH", dir.path())
        .env("LD_LIBRARY_PATH", dir.path())
        .output()
        .unwrap();
    let calls = json(&o)["calls"].as_u64().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let passes = calls - 23;
    let want = format!("heat: {passes} passes in ");
    let line = err.lines().find(|l| l.starts_with(&want)).unwrap_or_else(|| panic!("no {want:?} in {err}"));
    let per_pass = format!(": 1.0 J, {:.3} J per pass, ", 1.0 / passes as f64);
    assert!(line.contains(&per_pass) && line.ends_with(" W mean"), "expected {per_pass:?} in {line:?}");
    assert!(!err.contains("energy: not measured"), "{err}");
}
