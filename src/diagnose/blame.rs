//! Blame: which experts, tokens and feature ranges a stage's violations fall on.
//!
//! Per-row tensors and weight gradients name their expert directly, so every expert with a violation is
//! blamed. Token-level tensors (`y`, `grad.x`) mix the k experts of a token; there an expert is blamed
//! when the share of its tokens that violate is at least half the largest share of any expert, which
//! singles out one broken expert without blaming every expert its tokens also visit.

use ndarray::ArrayD;
use serde::Serialize;

use crate::check::coords::row_experts;
use moe_reference::dispatch::RowMap;

/// A contiguous range of features `[start, end)` along an axis (`hidden` or `intermediate`, with the
/// `gate`/`up` half for 2I axes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FeatureRange {
    pub axis: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub half: Option<&'static str>,
    pub start: usize,
    pub end: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Blame {
    pub experts: Vec<usize>,
    pub tokens: Vec<usize>,
    pub features: Vec<FeatureRange>,
}

/// Violation mask of got against exact within bound (NaN and infinities violate).
pub fn violations(got: &ArrayD<f64>, exact: &ArrayD<f64>, bound: &ArrayD<f64>) -> Vec<bool> {
    got.iter().zip(exact.iter()).zip(bound.iter()).map(|((&g, &x), &b)| !((g - x).abs() <= b)).collect()
}

/// Contiguous runs of the set indices, as `[start, end)`.
fn runs(set: &[bool]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, &on) in set.iter().chain(std::iter::once(&false)).enumerate() {
        match (on, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Feature ranges from a set over an axis of `width` (2I axes split into gate and up halves).
fn ranges(set: &[bool], axis: &'static str, two_halves: Option<usize>) -> Vec<FeatureRange> {
    match two_halves {
        Some(i) => {
            let mut v: Vec<FeatureRange> =
                runs(&set[..i]).into_iter().map(|(s, e)| FeatureRange { axis, half: Some("gate"), start: s, end: e }).collect();
            v.extend(runs(&set[i..]).into_iter().map(|(s, e)| FeatureRange { axis, half: Some("up"), start: s, end: e }));
            v
        }
        None => runs(set).into_iter().map(|(s, e)| FeatureRange { axis, half: None, start: s, end: e }).collect(),
    }
}

/// Blame the violations `bad` (flat, row-major) of tensor `name` of `shape`.
pub fn blame(name: &str, shape: &[usize], bad: &[bool], rows: &RowMap, topk_ids: &ndarray::Array2<i32>, intermediate: usize) -> Blame {
    let mut experts = vec![false; rows.experts];
    let mut tokens = vec![false; rows.tokens];
    let (feat_axis, width) = match name {
        "grad.w13" | "grad.w2" => (1, shape[1]),
        _ => (shape.len() - 1, shape[shape.len() - 1]),
    };
    let mut feats = vec![false; width];
    let strides: Vec<usize> = (0..shape.len()).map(|d| shape[d + 1..].iter().product()).collect();
    let row_exp = row_experts(rows);
    let mut token_hits = vec![false; rows.tokens];
    for (flat, _) in bad.iter().enumerate().filter(|(_, &b)| b) {
        let idx: Vec<usize> = (0..shape.len()).map(|d| (flat / strides[d]) % shape[d]).collect();
        feats[idx[feat_axis]] = true;
        match name {
            "y" | "grad.x" => token_hits[idx[0]] = true,
            "grad.topk_weights" => {
                tokens[idx[0]] = true;
                let id = topk_ids[[idx[0], idx[1]]];
                if id >= 0 {
                    experts[id as usize] = true;
                }
            }
            "grad.w13" | "grad.w2" | "grad.router.weight" => experts[idx[0]] = true,
            _ => {
                experts[row_exp[idx[0]]] = true;
                tokens[rows.row_token[idx[0]]] = true;
            }
        }
    }
    if matches!(name, "y" | "grad.x") {
        tokens = token_hits.clone();
        // Share of each expert's tokens that violate.
        let k = rows.top_k;
        let mut hit = vec![0usize; rows.experts];
        let mut all = vec![0usize; rows.experts];
        for t in 0..rows.tokens {
            for j in 0..k {
                let id = topk_ids[[t, j]];
                if id >= 0 {
                    all[id as usize] += 1;
                    hit[id as usize] += usize::from(token_hits[t]);
                }
            }
        }
        let share: Vec<f64> = (0..rows.experts).map(|e| if all[e] == 0 { 0.0 } else { hit[e] as f64 / all[e] as f64 }).collect();
        let top = share.iter().cloned().fold(0.0, f64::max);
        for e in 0..rows.experts {
            experts[e] = top > 0.0 && share[e] >= 0.5 * top;
        }
    }
    let two_halves = match name {
        "fwd.h" | "bwd.dh" | "grad.w13" => Some(intermediate),
        _ => None,
    };
    let axis = match name {
        "fwd.a" | "bwd.da" => "intermediate",
        "fwd.h" | "bwd.dh" | "grad.w13" => "intermediate",
        _ => "hidden",
    };
    let pick = |v: &[bool]| v.iter().enumerate().filter(|(_, &b)| b).map(|(i, _)| i).collect::<Vec<_>>();
    Blame { experts: pick(&experts), tokens: pick(&tokens), features: ranges(&feats, axis, two_halves) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_half_open_and_split_by_halves() {
        assert_eq!(runs(&[false, true, true, false, true]), vec![(1, 3), (4, 5)]);
        let r = ranges(&[true, false, false, true], "intermediate", Some(2));
        assert_eq!(r, vec![
            FeatureRange { axis: "intermediate", half: Some("gate"), start: 0, end: 1 },
            FeatureRange { axis: "intermediate", half: Some("up"), start: 1, end: 2 },
        ]);
    }
}
