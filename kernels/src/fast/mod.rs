//! The fast path: fused bf16 MoE forward and backward on tensor cores (issue #6), checked against the exact
//! oracle stage by stage (`check`).
//!
//! Pipeline (kernels in `cuda/fast/`):
//! - forward: routing to rows (`fr_count`, `fr_scan`, `fr_fill`: expert-major rows, tile list, no atomics);
//!   GEMM1 over (expert, 128-row tile) work gathering X rows by index, SwiGLU in its epilogue (stores H and A,
//!   bf16); GEMM2 (A·W2ᵀ, o rows, bf16, a workspace not kept for backward); the weighted combine, each token's
//!   k rows summed in slot order (`fc_combine`).
//! - backward: dA_raw = dY[token]·W2 gathering dY rows by index, with the SwiGLU backward in the epilogue
//!   (A recomputed from H; dA = w·dA_raw; writes dH and A' = w·A, and per-row partials of <dA_raw, A>, which
//!   equals <dY, o>, the routing-weight gradient, so o is never kept); `fc_slot_grad` sums the partials in
//!   tile order; dX rows = dH·W13; un-dispatch by `fc_combine` without weights; dW13 = dHᵀ·X[token] and
//!   dW2 = dY[token]ᵀ·A' as grouped weight-gradient GEMMs over each expert's rows.
//!
//! Kept for backward per token: the k rows of H (2·I bf16 each) and the routing metadata; X and dY belong
//! to the caller.

pub mod check;
mod layer;
mod source;

pub use layer::{FastDims, FastKernels, FastLayer, FastTrace, KernelTime};
