//! A candidate file: what a kernel under test wrote, in the case format's names (`y`, `grad.*`, `fwd.*`,
//! `bwd.*`), any subset of them, in any float dtype (F64, F32, BF16, F16).
//!
//! Per-row intermediates may come in the kernel's own row order; the candidate then also holds
//! `fwd.row_token` and `fwd.row_slot` (I32 [M]), and its rows are put into the oracle's expert-major order
//! here, once, so that everything downstream compares like with like. The kernel's row number of every
//! oracle row is kept for reporting.
//!
//! Everything is validated before any value is converted: a checked tensor of the wrong shape or of a
//! non-float dtype, or a row map that is not a permutation of the oracle's rows, is a [`CandidateError`]
//! (one line; exit status 2).

use std::collections::BTreeMap;
use std::path::Path;

use moe_reference::dispatch::RowMap;
use moe_reference::MoeConfig;
use ndarray::{ArrayD, Axis, IxDyn};
use safetensors::Dtype;

use crate::case;
use crate::error::CaseError;

/// The tensors `check` compares, in pipeline order (forward, then backward).
pub const CHECKED: [&str; 13] = [
    "fwd.h",
    "fwd.a",
    "fwd.o",
    "y",
    "bwd.do",
    "bwd.da",
    "bwd.dh",
    "bwd.dx_rows",
    "grad.topk_weights",
    "grad.w2",
    "grad.w13",
    "grad.x",
    "grad.router.weight",
];

/// Row-map tensors (the kernel's row order).
pub const ROW_TOKEN: &str = "fwd.row_token";
pub const ROW_SLOT: &str = "fwd.row_slot";

/// Why a candidate cannot be checked.
#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    #[error("candidate {path}: {source}")]
    File { path: String, source: CaseError },
    #[error("candidate {path}: tensor `{name}`: wrong shape: expected {expected:?}, got {got:?}")]
    Shape { path: String, name: String, expected: Vec<usize>, got: Vec<usize> },
    #[error("candidate {path}: tensor `{name}`: unsupported dtype {got} (expected F64, F32, BF16 or F16)")]
    Dtype { path: String, name: String, got: String },
    #[error("candidate {path}: {why}")]
    RowMap { path: String, why: String },
}

/// Whether a tensor is per dispatched row ([M, ...]): the ones the row map reorders.
pub fn is_row_tensor(name: &str) -> bool {
    name.starts_with("fwd.") || name.starts_with("bwd.")
}

/// The shape the case format gives `name` for a layer with `m` dispatched rows.
pub fn expected_shape(name: &str, cfg: &MoeConfig, m: usize) -> Option<Vec<usize>> {
    let (t, h, i, e, k) = (cfg.tokens, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
    Some(match name {
        "y" | "grad.x" => vec![t, h],
        "grad.w13" => vec![e, 2 * i, h],
        "grad.w2" => vec![e, h, i],
        "grad.topk_weights" => vec![t, k],
        "grad.router.weight" => vec![e, h],
        "fwd.h" | "bwd.dh" => vec![m, 2 * i],
        "fwd.a" | "bwd.da" => vec![m, i],
        "fwd.o" | "bwd.do" | "bwd.dx_rows" => vec![m, h],
        _ => return None,
    })
}

/// A read candidate: its checked tensors as f64, row tensors in the oracle's row order.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub path: String,
    pub tensors: BTreeMap<String, ArrayD<f64>>,
    /// Stored dtype of each checked tensor.
    pub dtypes: BTreeMap<String, Dtype>,
    /// `kernel_row[r]` = the candidate's row holding oracle row `r` (None: candidate rows are in oracle order).
    pub kernel_row: Option<Vec<usize>>,
    /// Tensors in the file that are neither checked nor the row map (inputs, `q.*`, `bound.*` ...).
    pub ignored: Vec<String>,
}

impl Candidate {
    pub fn get(&self, name: &str) -> Option<&ArrayD<f64>> {
        self.tensors.get(name)
    }

    /// A rank-2 view of a held tensor.
    pub fn get2(&self, name: &str) -> Option<ndarray::ArrayView2<'_, f64>> {
        self.tensors.get(name).and_then(|a| a.view().into_dimensionality().ok())
    }
}

/// Read and validate a candidate for a layer whose dispatched rows are `rows`.
pub fn read_candidate(path: &Path, cfg: &MoeConfig, rows: &RowMap) -> Result<Candidate, CandidateError> {
    let p = path.display().to_string();
    let file_err = |e: CaseError| CandidateError::File { path: p.clone(), source: e };
    let bytes = std::fs::read(path).map_err(|e| file_err(CaseError::io(path, e)))?;
    let (header_len, meta) = case::parse_framing(&bytes).map_err(file_err)?;
    let data = &bytes[8 + header_len..];
    let m = rows.rows();

    // Validate every checked tensor's dtype and shape first.
    let mut names: Vec<String> = meta.tensors().keys().cloned().collect();
    names.sort();
    let mut ignored = Vec::new();
    let mut dtypes = BTreeMap::new();
    for name in &names {
        let ti = meta.info(name).expect("listed");
        let Some(shape) = expected_shape(name, cfg, m) else {
            if name != ROW_TOKEN && name != ROW_SLOT {
                ignored.push(name.clone());
            }
            continue;
        };
        if !matches!(ti.dtype, Dtype::F64 | Dtype::F32 | Dtype::BF16 | Dtype::F16) {
            return Err(CandidateError::Dtype { path: p, name: name.clone(), got: format!("{:?}", ti.dtype) });
        }
        if ti.shape != shape {
            return Err(CandidateError::Shape { path: p, name: name.clone(), expected: shape, got: ti.shape.clone() });
        }
        dtypes.insert(name.clone(), ti.dtype);
    }

    // The kernel's row order, when given.
    let ints = |name: &str| -> Result<Option<Vec<i32>>, CandidateError> {
        let Some(ti) = meta.info(name) else { return Ok(None) };
        if ti.dtype != Dtype::I32 {
            return Err(CandidateError::RowMap { path: p.clone(), why: format!("`{name}` must be I32, got {:?}", ti.dtype) });
        }
        if ti.shape != [m] {
            return Err(CandidateError::RowMap {
                path: p.clone(),
                why: format!("`{name}` must have shape [{m}] (one entry per dispatched row), got {:?}", ti.shape),
            });
        }
        let b = &data[ti.data_offsets.0..ti.data_offsets.1];
        Ok(Some(b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()))
    };
    let kernel_row = match (ints(ROW_TOKEN)?, ints(ROW_SLOT)?) {
        (None, None) => None,
        (Some(tok), Some(slot)) => Some(row_permutation(&tok, &slot, rows).map_err(|why| CandidateError::RowMap { path: p.clone(), why })?),
        _ => {
            return Err(CandidateError::RowMap {
                path: p,
                why: format!("`{ROW_TOKEN}` and `{ROW_SLOT}` must be given together"),
            })
        }
    };

    // Convert, reordering row tensors into the oracle's order.
    let mut tensors = BTreeMap::new();
    for (name, &dtype) in &dtypes {
        let ti = meta.info(name).expect("listed");
        let v = case::floats(dtype, &data[ti.data_offsets.0..ti.data_offsets.1]);
        let a = ArrayD::from_shape_vec(IxDyn(&ti.shape), v).expect("shape checked against the data by the framing");
        let a = match (&kernel_row, is_row_tensor(name)) {
            (Some(kr), true) => a.select(Axis(0), kr),
            _ => a,
        };
        tensors.insert(name.clone(), a);
    }
    Ok(Candidate { path: p, tensors, dtypes, kernel_row, ignored })
}

/// `kernel_row[r]` for every oracle row `r`, from the kernel's (token, slot) of each of its rows; an error
/// (one line) unless they name every dispatched (token, slot) exactly once.
pub fn row_permutation(tok: &[i32], slot: &[i32], rows: &RowMap) -> Result<Vec<usize>, String> {
    let (t_n, k) = (rows.tokens, rows.top_k);
    let mut kernel_row = vec![usize::MAX; rows.rows()];
    for (kr, (&t, &j)) in tok.iter().zip(slot).enumerate() {
        if t < 0 || t as usize >= t_n || j < 0 || j as usize >= k {
            return Err(format!("row map: kernel row {kr} names token {t}, slot {j}, outside {t_n} tokens x {k} slots"));
        }
        let Some(r) = rows.slot_row[t as usize * k + j as usize] else {
            return Err(format!("row map: kernel row {kr} names token {t}, slot {j}, which is an unused (-1) slot"));
        };
        if kernel_row[r] != usize::MAX {
            return Err(format!("row map: token {t}, slot {j} appears in kernel rows {} and {kr}", kernel_row[r]));
        }
        kernel_row[r] = kr;
    }
    Ok(kernel_row)
}
