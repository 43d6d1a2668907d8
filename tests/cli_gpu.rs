//! `moe-oracle run CASE --device cuda`: without a GPU, one clear error line, exit 2, no output; with one
//! (REQUIRE_GPU=1 makes it required), a candidate file whose values agree with the oracle. The kernels'
//! own tests check every stage against per-element bounds; this checks the command around them.

use std::process::Command;

use moe_oracle::case::{self, FloatDtype};
use moe_oracle::demo;
use safetensors::SafeTensors;

mod cli_common;

fn given_routing_case(dir: &std::path::Path) -> std::path::PathBuf {
    let mut cfg = demo::demo_config();
    cfg.routing = None; // random_inputs then draws topk_ids / topk_weights itself
    let inputs = demo::random_inputs(&cfg, 5);
    let path = dir.join("case.safetensors");
    case::write_case(&path, &inputs, FloatDtype::BF16).expect("write case");
    path
}

fn gpu_present() -> bool {
    moe_kernels::Gpu::open(0).is_ok()
}

/// The demo's case with its router (softmax top-k): routed on the host, experts on the GPU.
fn routed_case(dir: &std::path::Path) -> std::path::PathBuf {
    let cfg = demo::demo_config();
    assert!(cfg.routing.is_some());
    let inputs = demo::random_inputs(&cfg, 6);
    let path = dir.join("routed.safetensors");
    case::write_case(&path, &inputs, FloatDtype::BF16).expect("write case");
    path
}

#[test]
fn run_on_cuda_device() {
    let dir = tempfile::tempdir().unwrap();
    run_case_on_cuda(dir.path(), given_routing_case(dir.path()), &["y", "grad.x", "grad.w13", "grad.w2"]);
}

#[test]
fn run_routed_case_on_cuda_device() {
    let dir = tempfile::tempdir().unwrap();
    run_case_on_cuda(dir.path(), routed_case(dir.path()), &["y", "grad.x", "grad.w13", "grad.w2", "grad.router.weight", "topk_weights"]);
}

/// `run --demo --device cuda`: the built-in demo case on the GPU (it used to run on the CPU silently).
#[test]
fn run_demo_on_cuda_device() {
    let dir = tempfile::tempdir().unwrap();
    run_on_cuda(dir.path(), &["--demo"], &["y", "grad.x", "grad.w13", "grad.w2", "grad.router.weight"]);
}

fn run_case_on_cuda(dir: &std::path::Path, case_path: std::path::PathBuf, compared: &[&str]) {
    run_on_cuda(dir, &[case_path.to_str().unwrap()], compared)
}

/// `moe-oracle run SOURCE --device cuda` against `moe-oracle run SOURCE` (SOURCE: a case path or `--demo`).
fn run_on_cuda(dir: &std::path::Path, source: &[&str], compared: &[&str]) {
    let out = dir.join("gpu.safetensors");
    let res = Command::new(cli_common::bin())
        .arg("run")
        .args(source)
        .args(["-o", out.to_str().unwrap(), "--device", "cuda", "--intermediates", "-q"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    if !gpu_present() {
        assert!(!moe_kernels::gpu_required(), "REQUIRE_GPU=1 but no GPU: {stderr}");
        moe_kernels::skip_notice(&format!("run {source:?} --device cuda: no GPU; checking the error path instead"));
        assert_eq!(res.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().filter(|l| l.starts_with("error:")).count(), 1, "{stderr}");
        assert!(stderr.contains("GPU"), "{stderr}");
        assert!(!out.exists(), "no output on failure");
        return;
    }
    assert_eq!(res.status.code(), Some(0), "{stderr}");
    // The oracle on the same case.
    let oracle_out = dir.join("oracle.safetensors");
    let res = Command::new(cli_common::bin())
        .arg("run")
        .args(source)
        .args(["-o", oracle_out.to_str().unwrap(), "-q"])
        .output()
        .unwrap();
    assert_eq!(res.status.code(), Some(0));
    let (g, o) = (std::fs::read(&out).unwrap(), std::fs::read(&oracle_out).unwrap());
    let (g, o) = (SafeTensors::deserialize(&g).unwrap(), SafeTensors::deserialize(&o).unwrap());
    for name in ["y", "grad.x", "grad.w13", "grad.w2", "grad.topk_weights", "fwd.h", "bwd.dx_rows"] {
        assert!(g.tensor(name).is_ok(), "candidate lacks {name}");
    }
    for &name in compared {
        let gv: Vec<f64> = g.tensor(name).unwrap().data().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect();
        let ov: Vec<f64> = o.tensor(name).unwrap().data().chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
        let norm = ov.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-30);
        let diff = gv.iter().zip(&ov).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
        // bf16 storage of every intermediate: a relative Frobenius error of a few 2^-8 at most
        assert!(diff / norm < 0.02, "{name}: relative error {:.3e}", diff / norm);
        eprintln!("{name}: relative Frobenius error vs oracle {:.2e}", diff / norm);
    }
}
