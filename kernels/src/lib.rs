//! `moe-kernels`: CUDA kernels of the MoE layer, compiled at run time by NVRTC (through `cudarc`) for the
//! device found, and the host side that runs them on case-file-shaped data.
//!
//! The crate builds on machines without CUDA: the driver and NVRTC are loaded when first needed, and their
//! absence is an [`GpuError::NoDriver`] / [`GpuError::NoNvrtc`], not a panic. Kernels live in `cuda/`, one
//! file per kernel family, and mirror the reference's stages (`dispatch`, grouped GEMM, SwiGLU, combine) so
//! that a mismatch points at one place in each.

pub mod check;
pub mod energy;
pub mod fast;
mod device;
mod error;
mod forward;
mod layer_api;
mod source;

pub use device::Gpu;
pub use error::GpuError;
pub use forward::{GpuBackward, GpuForward, Routing};
pub use layer_api::{check_lengths, MoeBackward, MoeForward, MoeInputs, MoeIntermediates, MoeLayer, NOT_STORED};

/// Whether GPU tests must run (`REQUIRE_GPU=1`) rather than skip when no GPU is usable.
pub fn gpu_required() -> bool {
    std::env::var("REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Print a test's SKIP line where `cargo test` shows it: straight to the process's stderr. (The test harness
/// captures `eprintln!` and `println!` and shows them only for failing tests, so a skip printed with them
/// was invisible in a passing run, CI's included.)
pub fn skip_notice(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIP {line}");
}

/// The GPU for a test, or `None` after printing a visible SKIP line; panics when `REQUIRE_GPU=1`.
pub fn gpu_for_test(test: &str) -> Option<Gpu> {
    match Gpu::open(0) {
        Ok(g) => Some(g),
        Err(e) if !gpu_required() => {
            skip_notice(&format!("{test}: no usable GPU ({e}); set REQUIRE_GPU=1 to make this a failure"));
            None
        }
        Err(e) => panic!("REQUIRE_GPU=1 but no usable GPU: {e}"),
    }
}
