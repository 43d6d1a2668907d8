//! The fast kernels' sources, assembled into one NVRTC translation unit (NVRTC gets no include paths here).

const FILES: &[(&str, &str)] = &[
    ("fast/fast_route.cu", include_str!("../../cuda/fast/fast_route.cu")),
    ("fast/fast_gemm.cu", include_str!("../../cuda/fast/fast_gemm.cu")),
    ("fast/fast_wgmma.cu", include_str!("../../cuda/fast/fast_wgmma.cu")),
    ("fast/fast_ws.cu", include_str!("../../cuda/fast/fast_ws.cu")),
    ("fast/fast_combine.cu", include_str!("../../cuda/fast/fast_combine.cu")),
];

/// GEMM entry points (each takes one `FastGemmParams` by value and 96 KiB+ of dynamic shared memory).
pub const GEMMS: &[&str] = &["fg_gemm1_swiglu", "fg_rows_nt", "fg_rows_nn", "fg_dgrad_swiglu", "fg_wgrad"];
/// Hopper (sm_90a) wgmma GEMMs (each takes one `FastGemmParams` and `WG_SMEM` bytes of dynamic shared memory).
pub const WG_GEMMS: &[&str] = &["wg_gemm1_swiglu", "wg_rows", "wg_dgrad_swiglu", "wg_wgrad", "wg_rows_bmn"];
/// Persistent warp-specialised versions of the default engine's wgmma GEMMs (fast_ws.cu): one block of
/// `WS_THREADS` threads per SM, `WS_SMEM` bytes of dynamic shared memory each.
pub const WS_GEMMS: &[&str] = &["ws_gemm1_swiglu", "ws_rows", "ws_rows_bmn", "ws_wgrad"];
/// Threads of a persistent GEMM block: one producer and two consumer warpgroups.
pub const WS_THREADS: u32 = 384;
/// Dynamic shared memory of the wgmma GEMMs: 4 stages of (128 + 256) x 64 bf16, plus 1 KiB to align to 1024.
pub const WG_SMEM: usize = 4 * (128 + 256) * 64 * 2 + 1024;
/// The persistent GEMMs': `WG_SMEM` plus two 16 KiB staging buffers for the TMA-store epilogue (230,400 bytes;
/// with the kernels' ~1 KiB of static shared memory, inside the 227 KiB a block may have on sm_90).
pub const WS_SMEM: usize = WG_SMEM + 2 * 16384;
/// The other entry points.
pub const OTHERS: &[&str] = &["fr_count", "fr_scan", "fr_fill", "fc_combine", "fc_slot_grad", "fc_fill_random", "fc_fill_normal", "fc_transpose", "fc_swiglu_bwd_rows", "fc_scatter_rows", "ws_clk_dump"];

/// All fast kernels as one source, with the pipeline depth fixed at compile time.
pub fn translation_unit(stages: usize) -> String {
    crate::source::assemble(format!("#define FG_STAGES {stages}\n"), FILES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loaded_entry_point_is_defined_once_in_the_translation_unit() {
        let src = translation_unit(3);
        for name in GEMMS.iter().chain(WG_GEMMS).chain(WS_GEMMS).chain(OTHERS) {
            let defs: Vec<&str> = src.lines().filter(|l| l.contains("__global__") && l.contains(&format!(" {name}("))).collect();
            assert_eq!(defs.len(), 1, "{name} must be defined exactly once as a kernel");
            assert!(defs[0].starts_with("extern \"C\""), "{name} must have C linkage to be loaded by name");
        }
        assert!(src.starts_with("#define FG_STAGES 3\n"));
        assert!(!src.contains("#include \"bf16.cuh\""), "the header is inlined, not included");
    }
}
