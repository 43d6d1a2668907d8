//! The fast kernels' CUDA source compiles for sm_90a on a machine without a GPU (NVRTC to PTX, then ptxas:
//! `kernels/tools/nvrtc_check.py`), in the default build, with clusters of two (`WS_CLUSTER=2`), without the
//! dynamic tile scheduler (`WS_DYNAMIC=0`), with every partial row group stored by the direct epilogue
//! (`WS_PARTIAL_STAGED=0`; the default copies GEMM2's and dX's out of the staging boxes), with the empty
//! warpgroups' and k-slices' wgmma skipped (`WS_SKIP_EMPTY_WG=1 WS_SKIP_EMPTY_K=1`, the skipping warpgroup's
//! waits sleeping between polls: `WS_SKIP_WAIT_BACKOFF=64`), with no register spills, no wgmma that ptxas serialises (note C7520:
//! in session 9 a branch around the MMA cost the clustered GEMMs ~40% of their main-loop cycles, and nothing
//! but ptxas's note showed it; C7515 for the persistent GEMMs), and no persistent GEMM larger than
//! `MAX_INSTRUCTIONS` SASS instructions (session 15: instruction-cache bound at 43,504).
//! Needs python3 and NVRTC + ptxas from pip, which `.ci/run` installs into `$MOE_CUDA_TOOLS` (default
//! `~/.cache/moe-oracle-cuda`; `/tmp/cuda` is tried too); skips with a visible message without them, and fails
//! instead with `REQUIRE_NVRTC=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tools() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("MOE_CUDA_TOOLS").map(PathBuf::from).into_iter().collect();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join(".cache/moe-oracle-cuda"));
    }
    dirs.push(PathBuf::from("/tmp/cuda"));
    dirs.into_iter().find(|d| d.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12").exists() && d.join("nvidia/cuda_nvcc/bin/ptxas").exists())
}

fn script() -> Option<PathBuf> {
    // the working directory is the package (cargo test) or the repository root (a staged binary)
    ["tools/nvrtc_check.py", "kernels/tools/nvrtc_check.py"].into_iter().map(PathBuf::from).find(|p| p.exists())
}

/// The check's output for one build, or why it could not run.
fn compile(defines: &[&str]) -> Result<String, String> {
    let (Some(tools), Some(script)) = (tools(), script()) else {
        return Err("NVRTC and ptxas not found (pip install --target ~/.cache/moe-oracle-cuda nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12), or not run from the repository".into());
    };
    let out = Command::new("python3").arg(&script).arg("--cuda").arg(&tools).args(defines).output().map_err(|e| format!("python3: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "nvrtc_check.py {defines:?} failed ({}):\n{text}", out.status);
    Ok(text)
}

#[test]
fn fast_kernels_compile_for_sm90a_without_spills_or_serialised_wgmma() {
    let builds: [&[&str]; 5] = [
        &[],
        &["-DWS_CLUSTER=2"],
        &["-DWS_DYNAMIC=0"],
        &["-DWS_PARTIAL_STAGED=0"],
        &["-DWS_SKIP_EMPTY_WG=1", "-DWS_SKIP_EMPTY_K=1", "-DWS_SKIP_WAIT_BACKOFF=64"],
    ];
    let results: Vec<Result<String, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = builds.iter().map(|d| s.spawn(move || compile(d))).collect();
        handles.into_iter().map(|h| h.join().expect("compile thread")).collect()
    });
    for (defines, result) in builds.iter().zip(results) {
        let text = match result {
            Ok(t) => t,
            Err(why) if std::env::var("REQUIRE_NVRTC").as_deref() == Ok("1") => panic!("REQUIRE_NVRTC=1: {why}"),
            Err(why) => {
                moe_kernels::skip_notice(&format!("cuda_compiles: {why}"));
                return;
            }
        };
        assert!(!text.contains("C7520"), "{defines:?}: ptxas serialised wgmma instructions:\n{text}");
        // (C7519: ptxas inserted a warpgroup.arrive of its own before a wgmma, e.g. where a branch around the
        // MMA joins; WS_SKIP_EMPTY_WG's branch holds the fence, the MMA and the commit together to avoid it)
        assert!(!text.contains("C7519"), "{defines:?}: ptxas injected warpgroup.arrive:\n{text}");
        // every persistent GEMM was compiled and reported
        for k in PERSISTENT_GEMMS {
            assert!(text.lines().any(|l| l.starts_with(&format!("{k} ")) && l.contains("registers")), "{defines:?}: no ptxas report for {k}:\n{text}");
        }
        for line in text.lines().filter(|l| l.contains("spill stores")) {
            assert!(line.contains(" 0 bytes spill stores, 0 bytes spill loads"), "{defines:?}: register spills: {line}");
        }
        // a persistent GEMM's wgmma serialised for any reason (C7515: non-wgmma code defining accumulators
        // inside the pipeline)
        for line in text.lines().filter(|l| l.contains("C7515")) {
            assert!(!line.contains("'ws_"), "{defines:?}: ptxas serialised a persistent GEMM's wgmma: {line}");
        }
        // code size: session 15's fused dA epilogue, unrolled over the accumulators, was 43,504 instructions
        // and ran 4x slower than the kernels it replaced; the largest persistent GEMM today is GEMM1 (~11,000)
        for k in PERSISTENT_GEMMS {
            let n: usize = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k} ")).and_then(|r| r.trim().strip_prefix("code ")).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()))
                .unwrap_or_else(|| panic!("{defines:?}: no code size for {k}:\n{text}"));
            assert!(n <= MAX_INSTRUCTIONS, "{defines:?}: {k} is {n} SASS instructions (limit {MAX_INSTRUCTIONS}): its hot code may not fit the instruction cache");
        }
    }
}

/// The persistent GEMMs (`moe_kernels::fast`'s source::WS_GEMMS, which a test cannot reach).
const PERSISTENT_GEMMS: [&str; 4] = ["ws_gemm1_swiglu", "ws_rows", "ws_rows_bmn", "ws_wgrad"];

/// The most SASS instructions a persistent GEMM may have (see the test).
const MAX_INSTRUCTIONS: usize = 16384;
