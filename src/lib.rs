//! `moe-oracle`: case files, the command-line tools, checking and diagnosis.
//!
//! - [`case`]: read a case file (`shared/docs/golden-format.md`) into validated
//!   [`moe_reference::LayerInputs`]; write outputs and cases.
//! - [`cli`]: the `moe-oracle` command line; [`paths`], [`memory`] and [`overflow`]: what every command
//!   refuses before (or instead of) writing: outputs naming an input, cases too large for the memory,
//!   finite inputs whose exact results leave f64.
//! - [`check`], [`diagnose`]: a kernel's candidate file against the oracle's bounds, and where it goes wrong.
//! - [`emulated`]: the layer as a low-precision recipe computes it; [`golden`]: the golden cases.
//! - [`gpu`], [`bench_gpu`]: the GPU kernels through the command line, and their benchmark; [`ep_plan`]:
//!   expert-parallel exchange sizes.
//! - [`demo`]: the built-in demo case and a tiny seeded generator.

pub mod bench_gpu;
pub mod case;
pub mod check;
pub mod cli;
pub mod demo;
pub mod diagnose;
pub mod emulated;
pub mod ep_plan;
pub mod error;
pub mod golden;
pub mod gpu;
pub mod memory;
pub mod overflow;
pub mod paths;

pub use case::{read_case, write_case, write_outputs, Case, FloatDtype, ReadOptions, TensorData};
pub use error::CaseError;
