//! Expert parallelism made explicit: which rank owns which tokens and experts, which rows each rank sends to
//! each other rank in dispatch and combine, forward and backward, how many bytes that is, and a run of the
//! layer rank by rank through exactly those exchanges ([`run`]), whose results must equal the single-rank
//! oracle bit for bit.
//!
//! The model (DeepEP's and Megatron's expert-parallel MoE layer): R ranks. Rank s owns the tokens of its
//! block ([`EpPlan::token_block`]: contiguous, sizes differing by at most one, so a rank may own none) and the
//! experts `s·E/R .. (s+1)·E/R` (the case format's `ep_ranks`). Forward: dispatch sends `x[t]` for every used
//! slot (t, j) from t's owner to the owner of expert `topk_ids[t, j]`, which keeps the rows it receives in
//! expert-major order (its receive buffer is its block of the single-rank rows, [`crate::dispatch::Rank`]);
//! the expert owner runs GEMM1, SwiGLU and GEMM2 on them; combine sends every row's `o` back to the token's
//! owner, which sums its k slots. Backward: dispatch of `do = w·dy` (weighted by the token owner), the
//! experts' backward and their weight gradients on the expert owner, `dx` rows back to the token owner,
//! which un-dispatches them. An expert lives on one rank, so its weight gradient is never summed across
//! ranks: a gradient that comes out R times (or twice) too large is a reduction too many, and [`run`]'s
//! equality with the single-rank layer is what a test holds it to. The router's weight is replicated, so its
//! gradient is the sum over every rank's tokens (an all-reduce), rounded once here.

use std::ops::Range;

use ndarray::{s, Array2, Array3, ArrayView2, ArrayViewMut2, Axis};

use crate::dispatch::{RankLayout, RowMap};
use crate::exact;
use crate::gemm;
use crate::layer::{self, LayerInputs, Options};
use crate::{act, route};

/// Who owns what, and which dispatched rows travel between which two ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpPlan {
    pub ranks: usize,
    pub tokens: usize,
    /// The experts of each rank and the rows it receives (its block of the expert-major rows).
    pub layout: RankLayout,
    /// For each dispatched row: the rank that owns its token (the sender in dispatch, the receiver in combine).
    pub row_src: Vec<usize>,
    /// For each dispatched row: the rank that owns its expert.
    pub row_dst: Vec<usize>,
}

/// Bytes moved between ranks, `[from][to]`, in each of the four exchanges of a forward and backward pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traffic {
    /// Forward dispatch: x rows, token owner -> expert owner.
    pub dispatch_fwd: Vec<Vec<u64>>,
    /// Forward combine: o rows, expert owner -> token owner.
    pub combine_fwd: Vec<Vec<u64>>,
    /// Backward dispatch: do rows, token owner -> expert owner.
    pub dispatch_bwd: Vec<Vec<u64>>,
    /// Backward combine (un-dispatch): dx rows, expert owner -> token owner.
    pub combine_bwd: Vec<Vec<u64>>,
}

impl Traffic {
    /// Bytes that leave their rank (the diagonal, a rank's rows to itself, stays local), over all four exchanges.
    pub fn off_rank_total(&self) -> u64 {
        [&self.dispatch_fwd, &self.combine_fwd, &self.dispatch_bwd, &self.combine_bwd]
            .iter()
            .flat_map(|m| m.iter().enumerate().flat_map(|(a, row)| row.iter().enumerate().filter(move |(b, _)| *b != a).map(|(_, v)| *v)))
            .sum()
    }
}

impl EpPlan {
    /// The plan for `ranks` ranks over the rows of a routing. Errors (one line) where the experts do not split
    /// evenly over the ranks or `ranks` is 0.
    pub fn new(rows: &RowMap, ranks: usize) -> Result<EpPlan, String> {
        if ranks == 0 || !rows.experts.is_multiple_of(ranks) {
            return Err(format!("ep_ranks {ranks}: the {} experts must split evenly over one or more ranks", rows.experts));
        }
        let layout = rows.ranks(ranks);
        let mut plan = EpPlan { ranks, tokens: rows.tokens, layout, row_src: Vec::new(), row_dst: Vec::new() };
        plan.row_src = rows.row_token.iter().map(|&t| plan.token_owner(t)).collect();
        plan.row_dst = vec![0; rows.rows()];
        for (d, rank) in plan.layout.ranks.iter().enumerate() {
            plan.row_dst[rank.rows.clone()].iter_mut().for_each(|x| *x = d);
        }
        Ok(plan)
    }

    /// The tokens rank `s` owns: the first `T % R` ranks one more than the others.
    pub fn token_block(&self, s: usize) -> Range<usize> {
        let (base, extra) = (self.tokens / self.ranks, self.tokens % self.ranks);
        let start = s * base + s.min(extra);
        start..start + base + usize::from(s < extra)
    }

    pub fn token_owner(&self, t: usize) -> usize {
        (0..self.ranks).find(|&s| self.token_block(s).contains(&t)).expect("token in range")
    }

    /// The rows rank `s` sends to rank `d` in dispatch (and gets back from it in combine), in expert-major
    /// order: the order they take in `d`'s receive buffer.
    pub fn pair_rows(&self, s: usize, d: usize) -> Vec<usize> {
        (0..self.row_src.len()).filter(|&r| self.row_src[r] == s && self.row_dst[r] == d).collect()
    }

    /// Rows sent, `[from token owner][to expert owner]`.
    pub fn counts(&self) -> Vec<Vec<usize>> {
        let mut c = vec![vec![0usize; self.ranks]; self.ranks];
        for (&s, &d) in self.row_src.iter().zip(&self.row_dst) {
            c[s][d] += 1;
        }
        c
    }

    /// Bytes of each exchange for rows of `hidden` elements of `elem_bytes` bytes (2 for bf16). Routing
    /// metadata (a row's token and slot) and the backward's one scalar per row for the routing-weight gradient
    /// are not counted: a few bytes against `hidden · elem_bytes`.
    pub fn traffic(&self, hidden: usize, elem_bytes: usize) -> Traffic {
        let row = (hidden * elem_bytes) as u64;
        let there: Vec<Vec<u64>> = self.counts().iter().map(|r| r.iter().map(|&n| n as u64 * row).collect()).collect();
        let back: Vec<Vec<u64>> = (0..self.ranks).map(|d| (0..self.ranks).map(|s| there[s][d]).collect()).collect();
        Traffic { dispatch_fwd: there.clone(), combine_fwd: back.clone(), dispatch_bwd: there, combine_bwd: back }
    }
}

/// What [`run`] computes: the layer's outputs and gradients, assembled from the ranks' parts.
#[derive(Clone, Debug)]
pub struct RankRun {
    pub plan: EpPlan,
    pub y: Array2<f64>,
    pub grad_x: Option<Array2<f64>>,
    pub grad_w13: Option<Array3<f64>>,
    pub grad_w2: Option<Array3<f64>>,
    pub grad_topk_weights: Option<Array2<f64>>,
    pub grad_router_weight: Option<Array2<f64>>,
}

/// A [M, width] array of NaN: a rank's view of the dispatched rows, where only the rows it received (or
/// computed) are numbers, so that any use of a row that did not travel to it poisons its results.
fn poisoned(m: usize, width: usize) -> Array2<f64> {
    Array2::from_elem((m, width), f64::NAN)
}

/// A combine-direction exchange: what token owner `s` holds after every expert owner `d` has sent it the rows
/// `pairs[s][d]` of its buffer `at[d]` (a poisoned view outside them).
fn rows_back(pairs: &[Vec<Vec<usize>>], at: &[Array2<f64>], s: usize) -> Array2<f64> {
    let (m, width) = at[0].dim();
    let mut back = poisoned(m, width);
    for (d, src) in at.iter().enumerate() {
        for &r in &pairs[s][d] {
            back.row_mut(r).assign(&src.row(r));
        }
    }
    back
}

/// The layer (forward, and backward when `inp.dy` is given) run rank by rank over `ranks` expert-parallel
/// ranks. Every rank reads only its own tokens' rows of x and dy, the rows sent to it, and its own experts'
/// weights; each exchange copies exactly [`EpPlan::pair_rows`] between two ranks' buffers. Every entry is
/// exact-then-rounded, as in [`layer`], so the results equal [`layer::forward`] and [`layer::backward`]'s bit for
/// bit whatever `ranks` is: a test compares them.
pub fn run(inp: &LayerInputs, opt: Options, ranks: usize) -> Result<RankRun, String> {
    let cfg = &inp.cfg;
    let (hd, id, e_n, k) = (cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
    let mm = |a: ArrayView2<f64>, b: ArrayView2<f64>, out: ArrayViewMut2<f64>| gemm::matmul_nt_into(opt.engine, a, b, None, out);
    // routing is per token: each token owner routes its own tokens (one call here gives the same rows)
    let (routed, logits, ids, weights) = layer::route_inputs(inp, opt);
    let rows = RowMap::build(ids.view(), e_n);
    let plan = EpPlan::new(&rows, ranks)?;
    let m = rows.rows();
    let local = |s: usize, a: &Array2<f64>| a.slice(s![plan.token_block(s), ..]).to_owned();
    // the rows between every two ranks, found once for all four exchanges
    let pairs: Vec<Vec<Vec<usize>>> = (0..ranks).map(|s| (0..ranks).map(|d| plan.pair_rows(s, d)).collect()).collect();

    // forward dispatch: x rows from their token's owner into the expert owner's receive buffer
    let mut x_recv: Vec<Array2<f64>> = (0..ranks).map(|_| poisoned(m, hd)).collect();
    for (s, to) in pairs.iter().enumerate() {
        let xs = local(s, &inp.x);
        let t0 = plan.token_block(s).start;
        for (recv, sent) in x_recv.iter_mut().zip(to) {
            for &r in sent {
                recv.row_mut(r).assign(&xs.row(rows.row_token[r] - t0));
            }
        }
    }
    // each expert owner: GEMM1, SwiGLU, GEMM2 on its rows
    let mut h_at: Vec<Array2<f64>> = Vec::with_capacity(ranks);
    let mut a_at: Vec<Array2<f64>> = Vec::with_capacity(ranks);
    let mut o_at: Vec<Array2<f64>> = Vec::with_capacity(ranks);
    for (d, rank) in plan.layout.ranks.iter().enumerate() {
        let (mut h, mut a, mut o) = (poisoned(m, 2 * id), poisoned(m, id), poisoned(m, hd));
        for e in rank.experts.clone() {
            let r = rows.expert_rows(e);
            mm(x_recv[d].slice(s![r.clone(), ..]), inp.w13.index_axis(Axis(0), e), h.slice_mut(s![r.clone(), ..]));
            for row in r.clone() {
                for i in 0..id {
                    a[[row, i]] = act::forward(cfg.activation, h[[row, i]], h[[row, id + i]]);
                }
            }
            mm(a.slice(s![r.clone(), ..]), inp.w2.index_axis(Axis(0), e), o.slice_mut(s![r, ..]));
        }
        h_at.push(h);
        a_at.push(a);
        o_at.push(o);
    }
    // forward combine: o rows back to the token owner, which sums its k slots (kept there for backward's
    // routing-weight gradient)
    let mut y = Array2::<f64>::zeros((cfg.tokens, hd));
    let o_back: Vec<Array2<f64>> = (0..ranks).map(|s| rows_back(&pairs, &o_at, s)).collect();
    for (s, back) in o_back.iter().enumerate() {
        for t in plan.token_block(s) {
            let slots: Vec<(f64, usize)> = (0..k).filter_map(|j| rows.slot_row[t * k + j].map(|r| (weights[[t, j]], r))).collect();
            for c in 0..hd {
                y[[t, c]] = exact::dot(slots.iter().map(|&(w, r)| (w, back[[r, c]])));
            }
        }
    }
    let Some(dy) = inp.dy.as_ref() else {
        return Ok(RankRun { plan, y, grad_x: None, grad_w13: None, grad_w2: None, grad_topk_weights: None, grad_router_weight: None });
    };

    // backward at the token owners: the routing-weight gradient <dy_t, o> from the returned rows, and
    // do = w·dy dispatched to the expert owners
    let mut grad_tw = Array2::<f64>::zeros((cfg.tokens, k));
    let mut do_recv: Vec<Array2<f64>> = (0..ranks).map(|_| poisoned(m, hd)).collect();
    for (s, o_s) in o_back.iter().enumerate() {
        let dys = local(s, dy);
        let t0 = plan.token_block(s).start;
        for t in plan.token_block(s) {
            for j in 0..k {
                if let Some(r) = rows.slot_row[t * k + j] {
                    grad_tw[[t, j]] = exact::dot((0..hd).map(|c| (dys[[t - t0, c]], o_s[[r, c]])));
                }
            }
        }
        for (recv, sent) in do_recv.iter_mut().zip(&pairs[s]) {
            for &r in sent {
                let (t, j) = (rows.row_token[r], rows.row_slot[r]);
                let w = weights[[t, j]];
                recv.row_mut(r).iter_mut().zip(dys.row(t - t0).iter()).for_each(|(o, &g)| *o = w * g);
            }
        }
    }
    // backward at the expert owners: dA, dH, dX rows, and their own experts' weight gradients
    let mut grad_w13 = Array3::<f64>::zeros((e_n, 2 * id, hd));
    let mut grad_w2 = Array3::<f64>::zeros((e_n, hd, id));
    let mut dx_at: Vec<Array2<f64>> = Vec::with_capacity(ranks);
    for (d, rank) in plan.layout.ranks.iter().enumerate() {
        let (mut da, mut dh, mut dx) = (poisoned(m, id), poisoned(m, 2 * id), poisoned(m, hd));
        for e in rank.experts.clone() {
            let r = rows.expert_rows(e);
            mm(do_recv[d].slice(s![r.clone(), ..]), inp.w2.index_axis(Axis(0), e).t(), da.slice_mut(s![r.clone(), ..]));
            for row in r.clone() {
                for i in 0..id {
                    let (g, u) = act::backward(cfg.activation, h_at[d][[row, i]], h_at[d][[row, id + i]], da[[row, i]]);
                    dh[[row, i]] = g;
                    dh[[row, id + i]] = u;
                }
            }
            mm(do_recv[d].slice(s![r.clone(), ..]).t(), a_at[d].slice(s![r.clone(), ..]).t(), grad_w2.index_axis_mut(Axis(0), e));
            mm(dh.slice(s![r.clone(), ..]), inp.w13.index_axis(Axis(0), e).t(), dx.slice_mut(s![r.clone(), ..]));
            mm(dh.slice(s![r.clone(), ..]).t(), x_recv[d].slice(s![r, ..]).t(), grad_w13.index_axis_mut(Axis(0), e));
        }
        dx_at.push(dx);
    }
    // un-dispatch: dx rows back to the token owner, which sums its k slots (plus dlogits·R for a routed case,
    // in the same rounding)
    let dlogits = match (&routed, &cfg.routing, &logits) {
        (Some(routed), Some(rcfg), Some(logits)) => Some(route::backward(rcfg, routed, logits.view(), grad_tw.view())),
        _ => None,
    };
    let mut grad_x = Array2::<f64>::zeros((cfg.tokens, hd));
    for s in 0..ranks {
        let back = rows_back(&pairs, &dx_at, s);
        for t in plan.token_block(s) {
            let slots: Vec<usize> = (0..k).filter_map(|j| rows.slot_row[t * k + j]).collect();
            for c in 0..hd {
                let dxs = slots.iter().map(|&r| (back[[r, c]], 1.0));
                grad_x[[t, c]] = match (&dlogits, &inp.router_weight) {
                    (Some(dl), Some(rw)) => exact::dot(dxs.chain((0..e_n).map(|e| (dl[[t, e]], rw[[e, c]])))),
                    _ => exact::dot(dxs),
                };
            }
        }
    }
    // the replicated router: its gradient summed over every rank's tokens (an all-reduce), rounded once
    let grad_router_weight = dlogits.as_ref().map(|dl| gemm::matmul_nt_with(opt.engine, dl.t(), inp.x.t()));
    Ok(RankRun {
        plan,
        y,
        grad_x: Some(grad_x),
        grad_w13: Some(grad_w13),
        grad_w2: Some(grad_w2),
        grad_topk_weights: Some(grad_tw),
        grad_router_weight,
    })
}
