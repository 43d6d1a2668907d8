//! `moe-oracle run CASE --device cuda --kernels fast`: argument and shape errors are one `error:` line, exit
//! 2, no output file (on any machine); with a GPU (REQUIRE_GPU=1 makes it required) the candidate, with and
//! without intermediates, given and host-routed, passes `moe-oracle check CASE --candidate CAND --recipe
//! bf16` (the oracle's bounds; the kernels' own stage-by-stage check is `kernels/tests/layer_api.rs`).

use std::path::{Path, PathBuf};
use std::process::Output;

use moe_oracle::case::{self, FloatDtype};
use moe_oracle::demo;
use safetensors::SafeTensors;

mod cli_common;
use cli_common::*;

fn write_case(dir: &Path, name: &str, given_routing: bool, hidden: usize, seed: u64) -> PathBuf {
    let mut cfg = demo::demo_config();
    cfg.hidden = hidden;
    if given_routing {
        cfg.routing = None; // random_inputs then draws topk_ids / topk_weights itself
    }
    let inputs = demo::random_inputs(&cfg, seed);
    let path = dir.join(name);
    case::write_case(&path, &inputs, FloatDtype::BF16).expect("write case");
    path
}

/// One `error:` line containing `want`, status 2, and no output file.
fn assert_fails(res: &Output, out: &Path, want: &str) {
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert_eq!(res.status.code(), Some(2), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains(want), "expected '{want}' in: {stderr}");
    assert!(!out.exists(), "no output on failure");
}

fn gpu_present() -> bool {
    moe_kernels::Gpu::open(0).is_ok()
}

#[test]
fn fast_kernels_need_the_cuda_device() {
    let dir = tempfile::tempdir().unwrap();
    let c = write_case(dir.path(), "case.safetensors", true, 64, 5);
    let out = dir.path().join("cand.safetensors");
    let (c, o) = (c.to_str().unwrap(), out.to_str().unwrap());
    assert_fails(&oracle(&["run", c, "-o", o, "--kernels", "fast"]), &out, "--kernels fast needs --device cuda");
    assert_fails(&oracle(&["run", c, "-o", o, "--device", "cpu", "--kernels", "fast"]), &out, "--kernels fast needs --device cuda");
    if !gpu_present() {
        // the demo case may run on the fast path too; without a GPU that is the one-line GPU error
        assert_fails(&oracle(&["run", "--demo", "-o", o, "--device", "cuda", "--kernels", "fast"]), &out, "GPU");
    }
    assert_fails(&oracle(&["run", c, "-o", o, "--device", "cuda", "--kernels", "quick"]), &out, "invalid value 'quick'");
}

#[test]
fn fast_kernels_reject_unsupported_shapes_before_the_gpu() {
    // H = 12 is not a multiple of 8: rejected on the host, so the message is the same with or without a GPU
    let dir = tempfile::tempdir().unwrap();
    let c = write_case(dir.path(), "h12.safetensors", true, 12, 5);
    let out = dir.path().join("cand.safetensors");
    let res = oracle(&["run", c.to_str().unwrap(), "-o", out.to_str().unwrap(), "--device", "cuda", "--kernels", "fast"]);
    assert_fails(&res, &out, "multiples of 8; the case has H = 12, I = 32");
}

fn fast_candidate_passes_check(given_routing: bool, intermediates: bool, test: &str) {
    let dir = tempfile::tempdir().unwrap();
    let c = write_case(dir.path(), "case.safetensors", given_routing, 64, 7);
    let out = dir.path().join("cand.safetensors");
    let (cs, o) = (c.to_str().unwrap(), out.to_str().unwrap());
    let mut args = vec!["run", cs, "-o", o, "--device", "cuda", "--kernels", "fast", "-q"];
    if intermediates {
        args.push("--intermediates");
    }
    let res = oracle(&args);
    if !gpu_present() {
        assert!(!moe_kernels::gpu_required(), "REQUIRE_GPU=1 but no GPU: {}", String::from_utf8_lossy(&res.stderr));
        moe_kernels::skip_notice(&format!("{test}: no GPU; checking the error path instead"));
        assert_fails(&res, &out, "GPU");
        return;
    }
    assert_eq!(res.status.code(), Some(0), "{}", String::from_utf8_lossy(&res.stderr));
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut want = vec!["y", "grad.x", "grad.w13", "grad.w2", "grad.topk_weights"];
    if !given_routing {
        want.push("grad.router.weight");
    }
    if intermediates {
        want.extend(["fwd.row_token", "fwd.row_slot", "fwd.expert_offsets", "fwd.h", "fwd.a", "fwd.o", "bwd.dh", "bwd.dx_rows"]);
    }
    for name in &want {
        assert!(st.tensor(name).is_ok(), "candidate lacks {name}");
    }
    for name in ["bwd.do", "bwd.da"] {
        assert!(st.tensor(name).is_err(), "the fast path does not store {name}; the candidate must not invent it");
    }
    let res = oracle(&["check", cs, "--candidate", o, "--recipe", "bf16"]);
    let stdout = String::from_utf8_lossy(&res.stdout);
    assert_eq!(res.status.code(), Some(0), "check failed:\n{stdout}\n{}", String::from_utf8_lossy(&res.stderr));
    eprintln!("{test}: check passed:\n{stdout}");
}

#[test]
fn fast_candidate_with_given_routing_passes_check() {
    fast_candidate_passes_check(true, false, "fast_candidate_with_given_routing_passes_check");
}

#[test]
fn fast_candidate_with_intermediates_passes_check() {
    fast_candidate_passes_check(true, true, "fast_candidate_with_intermediates_passes_check");
}

#[test]
fn routed_fast_candidate_passes_check() {
    fast_candidate_passes_check(false, true, "routed_fast_candidate_passes_check");
}
