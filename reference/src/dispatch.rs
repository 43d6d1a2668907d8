//! Dispatch (tokens to expert-major rows) and combine (rows back to tokens), their adjoints, and the
//! expert-parallel layout.
//!
//! Rows are ordered by expert, then token, then slot; a slot with id `-1` makes no row. With `ep_ranks`
//! ranks, rank `r` owns experts `r·E/R .. (r+1)·E/R`, so its receive buffer is the contiguous block of rows
//! of those experts. Every reduction here is exact ([`crate::exact`]), so results do not depend on how rows
//! are split over ranks or threads.

use ndarray::{Array2, ArrayView1, ArrayView2, Axis};
use rayon::prelude::*;

use crate::exact::{certify, small_dot};

/// Which (token, slot) each dispatched row is, and where each expert's rows start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowMap {
    pub tokens: usize,
    pub top_k: usize,
    pub experts: usize,
    pub row_token: Vec<usize>,
    pub row_slot: Vec<usize>,
    /// Rows of expert `e` are `expert_offsets[e]..expert_offsets[e+1]`.
    pub expert_offsets: Vec<usize>,
    /// `slot_row[t*k + j]` = the row of (t, j), or None for a `-1` slot.
    pub slot_row: Vec<Option<usize>>,
}

impl RowMap {
    /// Build the expert-major row order from validated ids (`-1` or in `0..experts`, no repeats per token).
    pub fn build(topk_ids: ArrayView2<i32>, experts: usize) -> RowMap {
        let (tokens, top_k) = topk_ids.dim();
        let mut counts = vec![0usize; experts];
        for &id in topk_ids.iter() {
            if id >= 0 {
                counts[id as usize] += 1;
            }
        }
        let mut expert_offsets = vec![0usize; experts + 1];
        for e in 0..experts {
            expert_offsets[e + 1] = expert_offsets[e] + counts[e];
        }
        let m = expert_offsets[experts];
        let mut next = expert_offsets[..experts].to_vec();
        let mut row_token = vec![0usize; m];
        let mut row_slot = vec![0usize; m];
        let mut slot_row = vec![None; tokens * top_k];
        // Visiting tokens in order, then slots in order, fills each expert's rows in (token, slot) order.
        for t in 0..tokens {
            for j in 0..top_k {
                let id = topk_ids[[t, j]];
                if id < 0 {
                    continue;
                }
                let r = next[id as usize];
                next[id as usize] += 1;
                row_token[r] = t;
                row_slot[r] = j;
                slot_row[t * top_k + j] = Some(r);
            }
        }
        RowMap { tokens, top_k, experts, row_token, row_slot, expert_offsets, slot_row }
    }

    /// Number of dispatched rows M.
    pub fn rows(&self) -> usize {
        self.row_token.len()
    }

    pub fn expert_rows(&self, e: usize) -> std::ops::Range<usize> {
        self.expert_offsets[e]..self.expert_offsets[e + 1]
    }

    /// The expert-parallel layout for `ranks` ranks.
    pub fn ranks(&self, ranks: usize) -> RankLayout {
        assert!(ranks >= 1 && self.experts % ranks == 0, "experts must split evenly over ranks");
        let per = self.experts / ranks;
        let ranks = (0..ranks)
            .map(|r| {
                let experts = r * per..(r + 1) * per;
                let rows = self.expert_offsets[experts.start]..self.expert_offsets[experts.end];
                Rank { experts, rows }
            })
            .collect();
        RankLayout { ranks }
    }

    /// Gather `x[token]` for every row: the dispatched activations [M, H].
    pub fn gather(&self, x: ArrayView2<f64>) -> Array2<f64> {
        let mut out = crate::bigmem::zeros((self.rows(), x.ncols()));
        for (r, mut row) in out.axis_iter_mut(Axis(0)).enumerate() {
            row.assign(&x.row(self.row_token[r]));
        }
        out
    }

    /// Per-row combine weight (the token's weight for that slot).
    pub fn row_weights(&self, weights: ArrayView2<f64>) -> Vec<f64> {
        (0..self.rows()).map(|r| weights[[self.row_token[r], self.row_slot[r]]]).collect()
    }

    /// `y[t] = Σ_j w[t, j] · rows[row(t, j)]`, each entry one correctly rounded exact sum (certified in
    /// f64 where it can be, else Shewchuk's partials: the same bits either way).
    pub fn combine(&self, rows: ArrayView2<f64>, weights: ArrayView2<f64>) -> Array2<f64> {
        let h = rows.ncols();
        let k = self.top_k;
        let mut y = crate::bigmem::zeros((self.tokens, h));
        y.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each(|(t, mut yt)| {
            let slots: Vec<(f64, ArrayView1<f64>)> =
                (0..k).filter_map(|j| self.slot_row[t * k + j].map(|r| (weights[[t, j]], rows.row(r)))).collect();
            for (c, out) in yt.iter_mut().enumerate() {
                let pairs = || slots.iter().map(|(w, row)| (*w, row[c]));
                *out = certify::dot_few(pairs()).unwrap_or_else(|| small_dot(pairs()));
            }
        });
        y
    }

    /// The adjoint of [`combine`](Self::combine) in its rows argument: `out[row(t, j)] = w[t, j] · dy[t]`
    /// (one rounded product per element). This is `bwd.do`.
    pub fn dispatch_weighted(&self, dy: ArrayView2<f64>, weights: ArrayView2<f64>) -> Array2<f64> {
        let mut out = crate::bigmem::zeros((self.rows(), dy.ncols()));
        out.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each(|(r, mut row)| {
            let (t, j) = (self.row_token[r], self.row_slot[r]);
            let w = weights[[t, j]];
            for (o, &d) in row.iter_mut().zip(dy.row(t).iter()) {
                *o = w * d;
            }
        });
        out
    }

    /// `out[t, j] = <a[t], rows[row(t, j)]>` exactly (0 for `-1` slots): the combine's adjoint in its
    /// weights argument, i.e. `grad.topk_weights` when `a = dy` and `rows = o`.
    pub fn slot_dots(&self, a: ArrayView2<f64>, rows: ArrayView2<f64>) -> Array2<f64> {
        let k = self.top_k;
        let mut out = crate::bigmem::zeros((self.tokens, k));
        out.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each(|(t, mut o)| {
            for j in 0..k {
                if let Some(r) = self.slot_row[t * k + j] {
                    let (x, y) = (a.row(t), rows.row(r));
                    let certified = match (x.as_slice(), y.as_slice()) {
                        (Some(x), Some(y)) => certify::dot_slices(x, y),
                        _ => None,
                    };
                    o[j] = certified.unwrap_or_else(|| small_dot(x.iter().copied().zip(y.iter().copied())));
                }
            }
        });
        out
    }
}

/// One expert-parallel rank: the experts it owns and the block of rows it receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rank {
    pub experts: std::ops::Range<usize>,
    pub rows: std::ops::Range<usize>,
}

/// All ranks, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankLayout {
    pub ranks: Vec<Rank>,
}

impl RankLayout {
    /// Rows each rank receives (its receive-buffer length).
    pub fn counts(&self) -> Vec<usize> {
        self.ranks.iter().map(|r| r.rows.len()).collect()
    }
}
