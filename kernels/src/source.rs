//! The CUDA sources, assembled into one translation unit for NVRTC (which gets no include paths here).

const HEADER: &str = include_str!("../cuda/bf16.cuh");
const FILES: &[(&str, &str)] = &[
    ("route_rows.cu", include_str!("../cuda/route_rows.cu")),
    ("dispatch.cu", include_str!("../cuda/dispatch.cu")),
    ("grouped_gemm.cu", include_str!("../cuda/grouped_gemm.cu")),
    ("swiglu.cu", include_str!("../cuda/swiglu.cu")),
    ("combine.cu", include_str!("../cuda/combine.cu")),
    ("combine_bwd.cu", include_str!("../cuda/combine_bwd.cu")),
];

/// Kernel entry points, loaded by name.
pub const KERNELS: &[&str] = &[
    "expert_counts",
    "expert_offsets",
    "fill_rows",
    "clear_slot_rows",
    "gather_rows",
    "grouped_gemm_nt",
    "grouped_gemm_nn",
    "grouped_wgrad",
    "swiglu_fwd",
    "swiglu_bwd",
    "combine_fwd",
    "dispatch_weighted",
    "slot_dots",
    "undispatch",
];

/// All kernels as one source: the shared header once, then every file without its `#include` of it.
pub fn translation_unit() -> String {
    assemble(String::new(), FILES)
}

/// `prefix`, the shared `bf16.cuh` header once, then each of `files` without its `#include` of the header
/// (NVRTC gets no include paths). The fast kernels' sources are assembled the same way.
pub(crate) fn assemble(prefix: String, files: &[(&str, &str)]) -> String {
    let mut src = prefix;
    src.push_str(&HEADER.replace("#pragma once", ""));
    for (name, text) in files {
        src.push_str(&format!("\n// ---- {name}\n"));
        for line in text.lines() {
            if !line.trim_start().starts_with("#include \"bf16.cuh\"") {
                src.push_str(line);
                src.push('\n');
            }
        }
    }
    src
}
