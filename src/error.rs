//! Errors of reading and writing case files. Every `Display` is one line naming the tensor (or metadata key)
//! and the problem, so a command-line tool can print it as `error: <message>`.

use moe_reference::config::ConfigError;

/// What is wrong with a case file (or with writing one).
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// The file could not be opened, read, written or renamed.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file ends before the data its header declares.
    #[error("truncated file: {0}")]
    Truncated(String),
    /// Not a readable safetensors file (bad header length, header not JSON, inconsistent offsets ...).
    #[error("malformed safetensors file: {0}")]
    Malformed(String),
    /// `moe.format` / `moe.config` metadata missing or unreadable.
    #[error("metadata: {0}")]
    Metadata(String),
    /// `moe.config` parsed but describes no valid layer.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The config's tensors would be absurdly large.
    #[error("case too large: moe.config {what} needs about {elements} f64 elements, more than the limit {limit}")]
    TooLarge { what: String, elements: u128, limit: u128 },
    /// A required tensor is not in the file.
    #[error("missing tensor `{name}`: {why}")]
    Missing { name: &'static str, why: String },
    /// A tensor whose name the case format does not define.
    #[error(
        "tensor `{name}` is not part of the case format (inputs x, w13, w2, topk_ids, topk_weights, router.weight, router.bias, dy; outputs y, grad.*; fwd.*, bwd.*, q.*, bound.*, emulated.*)"
    )]
    UnknownTensor { name: String },
    /// A tensor that `moe.config` rules out (given routing beside a routing config, a router without one).
    #[error("tensor `{name}` contradicts moe.config: {why}")]
    Contradicts { name: &'static str, why: String },
    /// A tensor's shape disagrees with `moe.config`.
    #[error("tensor `{name}`: wrong shape: expected {expected:?} (from moe.config), got {got:?}")]
    Shape { name: &'static str, expected: Vec<usize>, got: Vec<usize> },
    /// A tensor's dtype is not one this reader accepts for it.
    #[error("tensor `{name}`: unsupported dtype {got} (expected {expected})")]
    Dtype { name: &'static str, got: String, expected: &'static str },
    /// `topk_ids` names an expert that does not exist.
    #[error(
        "tensor `topk_ids`: token {token}, slot {slot}: expert id {id} out of range (experts {experts}; -1 marks an unused slot)"
    )]
    IdOutOfRange { token: usize, slot: usize, id: i64, experts: usize },
    /// `topk_ids` names the same expert twice for one token.
    #[error("tensor `topk_ids`: token {token}: expert id {id} repeated (slots {first} and {second})")]
    RepeatedId { token: usize, id: i64, first: usize, second: usize },
    /// NaN or infinity in an input (accepted with `allow_nonfinite`).
    #[error("tensor `{name}`: non-finite value {value} at index {index:?} (pass --allow-nonfinite to accept)")]
    NonFinite { name: &'static str, index: Vec<usize>, value: f64 },
    /// A value that cannot be stored (e.g. a row count beyond I32).
    #[error("cannot write tensor `{name}`: {why}")]
    Unwritable { name: String, why: String },
}

impl CaseError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> CaseError {
        CaseError::Io { path: path.display().to_string(), source }
    }
}

/// Replace line breaks and other control characters so a message stays on one line.
pub fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}
