//! How far a kernel's f32 routing weights may lie from the oracle's at the same logits, relative to each
//! weight; the magnitudes the routing backward sums, and its f32 evaluation's allowance
//! ([`logit_grad_allowance`]).
//!
//! The kernel is modelled operation by operation: `expf` within 2 ulp, every other operation correctly
//! rounded, sums in any order.
//! - Softmax: it forms x = l − max in f32. That rounding moves exp(x) by |x|·u relative, which no fixed
//!   allowance covers: at logit spreads of 10 a plausible kernel errs by 35 u.
//! - The softmax denominator: summed over all E experts in any order, its error is (E − 1)·u plus the terms'
//!   own, unless the top k are renormalised, which divides it out.
//! - Where exp over- or underflows (sigmoid: l < −80; softmax: l < max − 80) the kernel's score may be 0:
//!   the whole weight is allowed there.
//!
//! Every allowance is at least the 32 u it was before session 33. `reference/tests/route_f32_eval.rs` checks
//! it against such kernels (sequential and tree sums, a full softmax renormalised or one over the top k).
//! It assumes exact logits: the emulator does not model the router's GEMM.

use ndarray::{Array2, ArrayView1, ArrayView2};

use crate::act::sigmoid;
use crate::config::{Routing, Score};
use crate::route::Routed;

const U32: f64 = 1.0 / (1u64 << 24) as f64;
/// What every weight is allowed at least (the allowance before session 33).
const FLOOR: f64 = 32.0 * U32;

/// Relative allowance of each combine weight [T, k] (chosen experts `ids`, -1 slots get 0) for a kernel that
/// routes itself in f32 from `logits` [T, E].
pub fn weight_allowance(cfg: &Routing, logits: ArrayView2<f64>, ids: ArrayView2<i32>) -> Array2<f64> {
    let mut out = Array2::zeros(ids.dim());
    for (t, mut row) in out.outer_iter_mut().enumerate() {
        let chosen: Vec<usize> = ids.row(t).iter().filter(|&&i| i >= 0).map(|&i| i as usize).collect();
        let per = per_expert(cfg.score, logits.row(t));
        // the renormalisation's sum over the chosen: their own errors (weighted mean ≤ the largest), its
        // k − 1 roundings and the division
        let renorm = if cfg.normalize_topk {
            chosen.iter().map(|&e| per[e]).fold(0.0, f64::max) + chosen.len() as f64 * U32 + U32
        } else {
            0.0
        };
        let denom = match cfg.score {
            // S = Σ exp(x_e): the terms' errors (their weighted mean) and E − 1 roundings; then p = e / S
            Score::Softmax if !cfg.normalize_topk => softmax_sum_error(logits.row(t), &per) + U32,
            Score::Softmax => U32, // p = e / S: S cancels in the renormalisation, the division's rounding not
            Score::Sigmoid => 0.0,
        };
        for (j, &id) in ids.row(t).iter().enumerate() {
            if id >= 0 {
                // + the scaling's rounding
                // (times 1 + 2^-20 for the products of the relative errors, all below 2^-10)
                row[j] = ((per[id as usize] + denom + renorm + U32) * (1.0 + 2f64.powi(-20))).max(FLOOR);
            }
        }
    }
    out
}

/// A token's largest logit (softmax's shift).
fn row_max(l: ArrayView1<f64>) -> f64 {
    l.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Each expert's score's relative error from its own evaluation (before any sum or division by one).
fn per_expert(score: Score, l: ArrayView1<f64>) -> Vec<f64> {
    match score {
        Score::Softmax => {
            let max = row_max(l);
            // exp's 2 ulp (4 u) and the rounding of x = l − max, |x|·u, through exp (first order, times
            // 1 + |x|·u for the rest); all of it where exp(x) may be subnormal or 0
            l.iter().map(|&v| if max - v > 80.0 { 1.0 } else { 4.0 * U32 + (max - v) * U32 * (1.0 + (max - v) * U32) }).collect()
        }
        // 1 / (1 + exp(−l)): exp's 4 u, the sum's u, the reciprocal's 2 u; all of it where exp overflows
        Score::Sigmoid => l.iter().map(|&v| if v < -80.0 { 1.0 } else { 7.0 * U32 }).collect(),
    }
}

/// The softmax denominator's relative error: its terms' (weighted by their share) and E − 1 roundings.
fn softmax_sum_error(l: ArrayView1<f64>, per: &[f64]) -> f64 {
    let max = row_max(l);
    let (mut s, mut se) = (0.0, 0.0);
    for (&v, &p) in l.iter().zip(per) {
        let e = (v - max).exp();
        s += e;
        se += e * p;
    }
    se / s * (1.0 + 1e-12) + (l.len().saturating_sub(1)) as f64 * U32
}

/// Bounds on the magnitudes of the terms the routing backward sums, per (token, expert), for gradient
/// magnitudes `g` at the combine weights (see [`crate::route::backward`]): with `dq = scaling·g`,
/// `DV_i = (|dq_i| + Σ_j q_j·|dq_j|)/S` when renormalised (else `|dq_i|`); sigmoid `DV_i·σ(l)σ(−l)`;
/// softmax chosen `p_i·(Σ_f p_f·(DV_i + DV_f) + DV_i·(unchosen mass))`, unchosen `p_e·Σ_f p_f·DV_f`.
pub fn backward_magnitude(cfg: &Routing, routed: &Routed, logits: ArrayView2<f64>, g: ArrayView2<f64>) -> Array2<f64> {
    let (t_n, e_n) = routed.scores.dim();
    let k = routed.topk_ids.ncols();
    let mut out = crate::bigmem::zeros((t_n, e_n));
    for t in 0..t_n {
        let s = routed.scores.row(t);
        let ids: Vec<usize> = routed.topk_ids.row(t).iter().map(|&i| i as usize).collect();
        let dq: Vec<f64> = (0..k).map(|j| cfg.scaling.abs() * g[[t, j]]).collect();
        let v: Vec<f64> = ids.iter().map(|&i| s[i]).collect();
        // DV, and DV_j·v_j (= (|dq_j| + Σ q·|dq|)·(v_j/S) when renormalised: with v_j/S formed first, a
        // tiny score sum S cannot overflow DV to infinity and make inf·0 = NaN downstream).
        let (dv, dv_v): (Vec<f64>, Vec<f64>) = if cfg.normalize_topk {
            let total: f64 = v.iter().sum();
            let inner: f64 = (0..k).map(|j| v[j] / total * dq[j]).sum();
            ((0..k).map(|i| (dq[i] + inner) / total).collect(), (0..k).map(|i| (dq[i] + inner) * (v[i] / total)).collect())
        } else {
            let dv_v = (0..k).map(|i| dq[i] * v[i]).collect();
            (dq, dv_v)
        };
        let mut row = out.row_mut(t);
        match cfg.score {
            Score::Sigmoid => {
                for (j, &i) in ids.iter().enumerate() {
                    row[i] = dv_v[j] * sigmoid(-logits[[t, i]]);
                }
            }
            Score::Softmax => {
                let chosen_sum: f64 = ids.iter().zip(&dv).map(|(&f, &d)| s[f] * d).sum();
                let mass: f64 = (0..e_n).filter(|e| !ids.contains(e)).map(|e| s[e]).sum();
                for e in 0..e_n {
                    row[e] = s[e] * chosen_sum;
                }
                let psum: f64 = ids.iter().map(|&f| s[f]).sum();
                for (j, &i) in ids.iter().enumerate() {
                    row[i] = s[i] * (chosen_sum + dv[j] * psum + dv[j] * mass);
                }
            }
        }
    }
    out * 1.01
}

/// The f32 evaluation's allowance of the logits' gradient [T, E], for `mag` from [`backward_magnitude`] and
/// `evals` evaluations (1 for a bound against the oracle, 2 for a deviation from the emulator, which
/// evaluates too): 64 u of the terms' magnitude each, as before session 33, plus what the scores' own f32
/// errors add. Every term of expert e's gradient carries its score, whose rounding of l − max moves it by
/// |x_e|·u (softmax), and the chosen experts' scores enter every term through the inner sums: together
/// (|x_e| + 2·max over the chosen |x_f|)·u of the magnitude. A sigmoid's derivative formed as s·(1 − s)
/// (PyTorch's) errs by ~8 u·s absolute, beyond any relative allowance as s → 1: 8 u of |DV_e|·s_e. Where a
/// score may vanish (softmax x < −80; sigmoid |l| > 80, one of σ(l), σ(−l) then 0) the whole magnitude is
/// allowed.
pub fn logit_grad_allowance(cfg: &Routing, logits: ArrayView2<f64>, ids: ArrayView2<i32>, mag: &Array2<f64>, evals: f64) -> Array2<f64> {
    let mut out = mag * (evals * 64.0 * U32) + evals * 2f64.powi(-140);
    for (t, mut row) in out.outer_iter_mut().enumerate() {
        let l = logits.row(t);
        let max = row_max(l);
        let top = ids.row(t).iter().filter(|&&i| i >= 0).map(|&i| max - l[i as usize]).fold(0.0, f64::max);
        for (e, a) in row.iter_mut().enumerate() {
            let m = mag[[t, e]];
            let vanish = match cfg.score {
                Score::Softmax => max - l[e] > 80.0 || top > 80.0,
                Score::Sigmoid => l[e].abs() > 80.0,
            };
            *a += if vanish {
                m
            } else if cfg.score == Score::Softmax {
                evals * m * U32 * ((max - l[e]) + 2.0 * top) * (1.0 + 2f64.powi(-20))
            } else {
                // m = DV_e·s_e·σ(−l_e) (0 for an unchosen expert)
                evals * 8.0 * U32 * m / sigmoid(-l[e])
            };
        }
    }
    out
}
