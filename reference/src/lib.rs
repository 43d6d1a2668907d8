//! `moe-reference`: the exact CPU oracle of a Mixture-of-Experts layer, forward and backward.
//!
//! Every dot product, GEMM entry and reduction is the correctly rounded f64 value of the exact real
//! result of its f64 inputs ([`exact`], [`gemm`]), so results do not depend on order, blocking, thread count
//! or the number of expert-parallel ranks. Transcendentals (exp in softmax and sigmoid, SiLU) are computed in
//! f64 (see [`act`] and [`route`] for their error). Pure computation: no I/O.
//!
//! Pipeline (names follow the case-file format, `shared/docs/golden-format.md`):
//! [`route`] (logits, scores, top-k, weights) -> [`dispatch`] (expert-major rows, ranks) -> GEMM1
//! ([`gemm`]) -> SwiGLU ([`act`]) -> GEMM2 -> combine ([`dispatch`]); [`layer`] composes them and their
//! backward; [`ep`] runs the same layer rank by rank through explicit expert-parallel exchanges.

pub mod accum;
pub mod act;
pub mod bigmem;
pub mod config;
pub mod dispatch;
pub mod exact;
pub mod formats;
pub mod gemm;
pub mod emulate;
pub mod ep;
pub mod layer;
pub mod quant;
pub mod recipe;
pub mod route;
pub mod scratch;
#[cfg(test)]
pub(crate) mod test_rng;

pub use config::{Activation, MoeConfig, Routing};
pub use layer::{Backward, Forward, LayerInputs, Options};
