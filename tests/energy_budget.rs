//! `kernels/tools/energy_budget.py` on the logs of session 29's H200 call (kept in
//! kernels/tools/sessions/logs/s28a/): each GEMM's pJ/FLOP and excess joules against cuBLAS's, and the
//! joules a target ratio leaves. The expected figures below are worked by hand from the numbers in those
//! logs (FLOPs 2·M·N·K with M = 131072 rows), not taken from the script's output. Bad input gives one
//! `error:` line, status 2 and nothing on stdout.
//! Skips with a visible `SKIP` line when python3 is missing; `REQUIRE_PYTHON=1` makes that a failure.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn log(name: &str) -> PathBuf {
    root().join("kernels/tools/sessions/logs/s28a").join(name)
}

/// The script's output for these arguments; None (after a SKIP line) without python3.
fn run(args: &[&str]) -> Option<Output> {
    if !support::python3_runs("energy_budget.py") {
        return None;
    }
    Some(Command::new("python3").arg(root().join("kernels/tools/energy_budget.py")).args(args).output().unwrap())
}

fn stdout_of(args: &[&str]) -> Option<String> {
    let o = run(args)?;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(String::from_utf8(o.stdout).unwrap())
}

/// The line of `out` that starts with `label` after the indent, split into fields.
fn fields<'a>(out: &'a str, label: &str) -> Vec<&'a str> {
    out.lines().find(|l| l.split_whitespace().next() == Some(label)).unwrap_or_else(|| panic!("no {label} line in {out}")).split_whitespace().collect()
}

#[test]
fn gemms_are_set_beside_cublas_at_their_shapes() {
    let (bench, cublas) = (log("bench-30b-energy.log"), log("cublas-qwen3-30b-a3b.log"));
    let Some(out) = stdout_of(&[bench.to_str().unwrap(), cublas.to_str().unwrap(), "--target", "2"]) else { return };
    // gemm1+swiglu: 1.1214 J for 2·131072·1536·2048 = 824.63 GFLOP = 1.360 pJ/FLOP; cuBLAS's 131072x1536x2048
    // 1.0900 pJ/FLOP takes 0.8989 J, so 0.2226 J more.
    assert_eq!(fields(&out, "gemm1+swiglu"), ["gemm1+swiglu", "1.612", "1.1214", "1.360", "1.090", "(same", "shape)", "+0.223"]);
    // dA_raw: 0.6273 J for 2·131072·768·2048 = 412.32 GFLOP = 1.521 pJ/FLOP; cuBLAS 1.0597: 0.4369 J, 0.1904 more.
    assert_eq!(fields(&out, "dA_raw"), ["dA_raw", "0.873", "0.6273", "1.521", "1.060", "(same", "shape)", "+0.190"]);
    // wgrad_w13 has GEMM1's and dX's three dimensions; the lower of their pJ/FLOP (GEMM1's 1.0900) is its
    // analogue: 1.0118 J - 0.8989 J = 0.1129 J.
    assert_eq!(fields(&out, "wgrad_w13"), ["wgrad_w13", "1.510", "1.0118", "1.227", "1.090", "(analogue", ")", "+0.113"]);
    // wgrad_w2 has dA's and GEMM2's; dA's 1.0597 is the lower: 0.5137 J - 0.4369 J = 0.0768 J.
    assert_eq!(fields(&out, "wgrad_w2")[7], "+0.077");
    // The memory-bound kernels: combine 0.0923 + swiglu_bwd_rows 0.2653 + gather_x 0.1036 + undispatch 0.1008.
    assert!(out.contains("the other metered kernels 0.562 J"), "{out}");
    // Over the heats: 5.422 J ours, 8.442 J compiled; 2x needs 8.442 / 2 = 4.221 J.
    assert!(out.contains("ours 5.422 J, compiled torch 8.442 J, ratio 1.56x"), "{out}");
    assert!(out.contains("2x needs at most 4.221 J a pass"), "{out}");
}

#[test]
fn the_target_sets_the_budget() {
    let (bench, cublas) = (log("bench-235b-energy.log"), log("cublas-qwen3-235b-a22b.log"));
    let Some(out) = stdout_of(&[bench.to_str().unwrap(), cublas.to_str().unwrap(), "--target", "1.5"]) else { return };
    // 26.149 J / 1.5 = 17.433 J.
    assert!(out.contains("1.5x needs at most 17.433 J a pass"), "{out}");
    // 235b gemm1: 4.0221 J for 2·131072·3072·4096 = 3298.53 GFLOP; cuBLAS 1.0324 pJ/FLOP: 3.4054 J; 0.6167 more.
    assert_eq!(fields(&out, "gemm1+swiglu")[7], "+0.617");
}

#[test]
fn bad_input_is_one_error_line_and_status_2() {
    let (bench, cublas) = (log("bench-30b-energy.log"), log("cublas-qwen3-30b-a3b.log"));
    // the same bench log without its per-kernel energy block (bench-gpu run without --kernel-energy-ms)
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("bench-plain.log");
    let text = std::fs::read_to_string(&bench).unwrap();
    std::fs::write(&plain, text.lines().filter(|l| !l.starts_with("energy per kernel (")).collect::<Vec<_>>().join("\n")).unwrap();
    let (b, c, a) = (bench.to_str().unwrap(), cublas.to_str().unwrap(), plain.to_str().unwrap());
    let cases: [(&[&str], &str); 6] = [
        (&[b], "the following arguments are required: cublas_log"),
        (&[c, b], "not a bench-gpu log"),
        (&[a, c], "no 'energy per kernel (' block"),
        (&[b, b], "no cuBLAS shape"),
        (&[b, "/nonexistent/cublas.log"], "cannot read /nonexistent/cublas.log"),
        (&[b, c, "--target", "0"], "--target must be a positive ratio"),
    ];
    for (args, want) in cases {
        let Some(o) = run(args) else { return };
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: no output on failure");
        let lines: Vec<_> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].starts_with("error: ") && lines[0].contains(want), "{args:?}: expected {want:?} in {err}");
    }
}
