//! Case files (`shared/docs/golden-format.md`, format 1): reading one into validated
//! [`LayerInputs`], writing the oracle's outputs, and writing cases.
//!
//! Reading checks, in this order, before any tensor is converted: the safetensors framing (truncation;
//! the header entry by entry: no key twice, only `dtype`/`shape`/`data_offsets`, a known dtype whose size
//! fills the offsets, data without overlaps or holes), the metadata (`moe.format`; `moe.config` with
//! exactly the format's keys, also inside `routing` and the activation, a named recipe,
//! [`MoeConfig::validate`]), the total size the config implies ([`MAX_ELEMENTS`]), which tensors are
//! present (only the format's names; given routing only with `routing` null, a router only with it set),
//! and every present tensor's dtype and shape against the config. Then tensors are converted to f64 and
//! their values are checked (expert ids, finiteness). Every error is one line naming the tensor and the
//! problem.
//!
//! Writing goes to a temporary file in the destination's directory that is renamed over the destination
//! only when complete, so a failure never leaves a partial file.
//!
//! Reading is in `read.rs`, writing in `write.rs`; this file holds the format's constants and the types both
//! share.

use std::collections::BTreeMap;

use moe_reference::LayerInputs;
use safetensors::Dtype;

mod header;
mod read;
mod write;

pub use read::*;
pub use write::*;

/// The `moe.format` this crate reads and writes.
pub const FORMAT: &str = "1";
/// Metadata key of the format version.
pub const KEY_FORMAT: &str = "moe.format";
/// Metadata key of the layer configuration (JSON).
pub const KEY_CONFIG: &str = "moe.config";
/// Metadata key naming the program that wrote an output file.
pub const KEY_WRITER: &str = "moe.writer";
/// Upper bound on the f64 elements a case may imply (inputs, outputs and intermediates together).
pub const MAX_ELEMENTS: u128 = 1 << 34;

/// How strict reading is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Accept NaN and infinities in float inputs.
    pub allow_nonfinite: bool,
}

/// A case read from a file.
#[derive(Clone, Debug)]
pub struct Case {
    /// Validated layer inputs (shapes match `inputs.cfg`, ids valid, routing mode decided).
    pub inputs: LayerInputs,
    /// The `moe.config` string exactly as stored (copied into outputs).
    pub config_json: String,
    /// All metadata of the file.
    pub metadata: BTreeMap<String, String>,
    /// The stored dtype of every input tensor that was read.
    pub dtypes: BTreeMap<String, Dtype>,
}

impl Case {
    /// True when the layer computes its own routing (no `topk_ids`/`topk_weights` given).
    pub fn routes_itself(&self) -> bool {
        self.inputs.topk_ids.is_none()
    }
}

/// Float dtypes a case's inputs can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatDtype {
    F64,
    F32,
    BF16,
    F16,
}

impl FloatDtype {
    pub fn dtype(self) -> Dtype {
        match self {
            FloatDtype::F64 => Dtype::F64,
            FloatDtype::F32 => Dtype::F32,
            FloatDtype::BF16 => Dtype::BF16,
            FloatDtype::F16 => Dtype::F16,
        }
    }
}
