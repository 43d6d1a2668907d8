//! The router: logits -> scores -> top-k selection -> combine weights, and the gradient back to the logits.
//!
//! - `softmax`: `p = softmax(logits)`, computed as `exp(l - max) / Σ exp(l - max)` with the sum exact.
//! - `sigmoid` (DeepSeek-V3): `s = sigmoid(logits)`.
//! Selection uses `score + bias` (bias: selection only, no gradient); with groups, each group is scored by
//! the sum of its top-2 selection scores and only the best `topk_group` groups stay eligible. Top-k takes
//! the highest scores, ties to the lower expert index. Weights are the unbiased scores of the chosen experts,
//! divided by their (exact) sum when `normalize_topk`, times `scaling`.
//!
//! Error: `exp` and the division are f64 operations (each within 1 ulp), sums are exact, so every score
//! and weight is within a few ulps (relative) of the real value at the f64 logits.

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};

use crate::act::sigmoid;
use crate::config::{Routing, Score};
use crate::exact;

/// What routing produced for every token.
#[derive(Clone, Debug)]
pub struct Routed {
    /// Router scores (softmax probabilities or sigmoids) [T, E].
    pub scores: Array2<f64>,
    /// Chosen experts [T, k], in order of decreasing selection score.
    pub topk_ids: Array2<i32>,
    /// Combine weights [T, k].
    pub topk_weights: Array2<f64>,
}

fn scores_of(score: Score, logits: ArrayView1<f64>) -> Vec<f64> {
    match score {
        Score::Sigmoid => logits.iter().map(|&l| sigmoid(l)).collect(),
        Score::Softmax => {
            let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let ex: Vec<f64> = logits.iter().map(|&l| (l - max).exp()).collect();
            let total = exact::sum(ex.iter().copied());
            ex.iter().map(|&v| v / total).collect()
        }
    }
}

/// Indices of the `k` largest values among the eligible ones, ties to the lower index.
fn top_k_indices(values: &[f64], eligible: &[bool], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).filter(|&e| eligible[e]).collect();
    idx.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// Route every token: `logits` [T, E], optional selection `bias` [E].
pub fn forward(cfg: &Routing, k: usize, logits: ArrayView2<f64>, bias: Option<ArrayView1<f64>>) -> Routed {
    let (t, e) = logits.dim();
    let mut scores = Array2::zeros((t, e));
    let mut topk_ids = Array2::from_elem((t, k), -1i32);
    let mut topk_weights = Array2::zeros((t, k));
    for tok in 0..t {
        let s = scores_of(cfg.score, logits.row(tok));
        let sel: Vec<f64> = match bias {
            Some(b) => s.iter().zip(b.iter()).map(|(x, y)| x + y).collect(),
            None => s.clone(),
        };
        let mut eligible = vec![true; e];
        if let Some(g) = cfg.groups {
            let per = e / g.n_group;
            let group_score: Vec<f64> = (0..g.n_group)
                .map(|gi| {
                    let members = &sel[gi * per..(gi + 1) * per];
                    let top = top_k_indices(members, &vec![true; per], 2.min(per));
                    exact::sum(top.iter().map(|&i| members[i]))
                })
                .collect();
            let keep = top_k_indices(&group_score, &vec![true; g.n_group], g.topk_group);
            for (ex, el) in eligible.iter_mut().enumerate() {
                *el = keep.contains(&(ex / per));
            }
        }
        let ids = top_k_indices(&sel, &eligible, k);
        let chosen: Vec<f64> = ids.iter().map(|&i| s[i]).collect();
        let denom = if cfg.normalize_topk { exact::sum(chosen.iter().copied()) } else { 1.0 };
        for (j, (&id, &v)) in ids.iter().zip(chosen.iter()).enumerate() {
            topk_ids[[tok, j]] = id as i32;
            let w = if cfg.normalize_topk { v / denom } else { v };
            topk_weights[[tok, j]] = w * cfg.scaling;
        }
        scores.row_mut(tok).assign(&Array1::from(s));
    }
    Routed { scores, topk_ids, topk_weights }
}

/// Gradient at the logits [T, E] from the gradient at the combine weights [T, k].
///
/// Written to keep relative accuracy when a score saturates (p or s near 1), where the textbook forms
/// `s·(1 − s)` and `ds_e − Σ_f p_f·ds_f` cancel:
/// - sigmoid: `σ'(l) = σ(l)·σ(−l)`, both factors accurate;
/// - softmax: `ds_e − Σ_f p_f·ds_f = Σ_{f chosen} p_f·(ds_e − ds_f) + ds_e·Σ_{f not chosen} p_f` (equal because
///   the probabilities sum to one), the unchosen mass summed exactly rather than formed as `1 − Σ chosen`;
/// - renormalisation likewise: `dq_i − Σ_j dq_j·q_j = Σ_j q_j·(dq_i − dq_j)`.
pub fn backward(cfg: &Routing, routed: &Routed, logits: ArrayView2<f64>, grad_weights: ArrayView2<f64>) -> Array2<f64> {
    let (t, e) = routed.scores.dim();
    let k = routed.topk_ids.ncols();
    let mut dlogits = Array2::zeros((t, e));
    for tok in 0..t {
        let s = routed.scores.row(tok);
        let ids: Vec<usize> = routed.topk_ids.row(tok).iter().map(|&i| i as usize).collect();
        // w_j = scaling * q_j, q_j = v_j / S (normalised) or v_j, v_j = s[ids_j].
        let dq: Vec<f64> = (0..k).map(|j| cfg.scaling * grad_weights[[tok, j]]).collect();
        let v: Vec<f64> = ids.iter().map(|&i| s[i]).collect();
        let dv: Vec<f64> = if cfg.normalize_topk {
            let total = exact::sum(v.iter().copied());
            let q: Vec<f64> = v.iter().map(|&x| x / total).collect();
            (0..k)
                .map(|i| exact::dot((0..k).map(|j| (q[j], dq[i] - dq[j]))) / total)
                .collect()
        } else {
            dq
        };
        let mut row = dlogits.row_mut(tok);
        match cfg.score {
            Score::Sigmoid => {
                for (&i, &d) in ids.iter().zip(dv.iter()) {
                    let l = logits[[tok, i]];
                    row[i] = d * (sigmoid(l) * sigmoid(-l));
                }
            }
            Score::Softmax => {
                let mut chosen = vec![false; e];
                ids.iter().for_each(|&i| chosen[i] = true);
                let unchosen_mass = exact::sum((0..e).filter(|&f| !chosen[f]).map(|f| s[f]));
                // Unchosen experts: ds_e = 0, so dl_e = −p_e·Σ_f p_f·ds_f.
                let inner = exact::dot(ids.iter().zip(dv.iter()).map(|(&f, &d)| (s[f], d)));
                for ex in 0..e {
                    if !chosen[ex] {
                        row[ex] = -(s[ex] * inner);
                    }
                }
                for (j, &i) in ids.iter().enumerate() {
                    let centred = exact::dot(
                        ids.iter().zip(dv.iter()).map(|(&f, &d)| (s[f], dv[j] - d)).chain(std::iter::once((dv[j], unchosen_mass))),
                    );
                    row[i] = s[i] * centred;
                }
            }
        }
    }
    dlogits
}
