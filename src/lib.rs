//! `moe-oracle`: case files, the command-line tools, and (later) checking and diagnosis.
//!
//! - [`case`]: read a case file (`shared/docs/golden-format.md`) into validated
//!   [`moe_reference::LayerInputs`]; write outputs and cases.
//! - [`cli`]: the `moe-oracle` command line (`run`, `demo`).
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
