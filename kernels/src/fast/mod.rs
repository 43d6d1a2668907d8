//! The fast path: fused bf16 MoE forward and backward on tensor cores (issue #6), checked against the exact
//! oracle stage by stage (`check`).
//!
//! Pipeline (kernels in `cuda/fast/`):
//! - forward: routing to rows (`fr_count`, `fr_scan`, `fr_fill`: expert-major rows, tile list, no atomics);
//!   GEMM1 over (expert, 128-row tile) work gathering X rows by index, SwiGLU in its epilogue (stores H and A,
//!   bf16); GEMM2 (A·W2ᵀ, o rows, bf16, a workspace not kept for backward); the weighted combine, each token's
//!   k rows summed in slot order (`fc_combine`).
//! - backward: dA_raw = dY[token]·W2 gathering dY rows by index, then the SwiGLU backward (A recomputed from
//!   H; dA = w·dA_raw; writes dH and A' = w·A, and per-row sums of <dA_raw, A>, which equals <dY, o>, the
//!   routing-weight gradient, so o is never kept); `fc_slot_grad` adds each slot's row partials in order; dX rows = dH·W13; un-dispatch by `fc_combine` without weights; dW13 = dHᵀ·X[token] and
//!   dW2 = dY[token]ᵀ·A' as grouped weight-gradient GEMMs over each expert's rows.
//!
//! Engines (`FastLayer::use_wgmma*`): every GEMM above exists on `mma.sync` (`fast_gemm.cu`, any GPU of
//! compute capability 8.0+) and on Hopper `wgmma` (`fast_wgmma.cu`). The default on sm_90a is all-wgmma with
//! the weights read as stored (MN-major B operands) and the SwiGLU backward as a row-wise kernel after a bf16
//! dA_raw GEMM (`fc_swiglu_bwd_rows`); the variant with transposed weights and the SwiGLU backward fused in
//! the dA epilogue is kept for comparison (measured slower: the epilogue is latency-bound at one block per SM).
//!
//! Kept for backward per token: the k rows of H (2·I bf16 each) and the routing metadata; X and dY belong
//! to the caller.

pub mod case;
pub mod check;
mod kernels;
mod layer;
mod source;
mod tma;
mod trace;

pub use kernels::{FastKernels, KernelSettings};
pub use layer::{Engine, FastBuffers, FastDims, FastLayer, InputDist, Inputs, KernelTime, TileOrder, ENGINES, NOT_REPEATABLE};
pub use trace::FastTrace;
