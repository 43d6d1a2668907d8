//! The default exact engine: one exact slice pair, an ordinary f64 GEMM for what the slices leave, and a
//! certified rounding of their sum.
//!
//! Each operand row is rounded once onto an integer grid (`cap`, one slice of [`super::slicing`]'s kind,
//! `s` bits below the row's largest exponent); what that leaves is the row's `rest` (zero for a bf16-valued
//! row that fits). With `s_a + s_b + ceil(log2 K) <= 53` the f64 GEMM `P = cap_a · cap_bᵀ` is exact, and
//!
//!   `A·Bᵀ = cap_a·cap_bᵀ + rest_a·Bᵀ + cap_a·rest_bᵀ`.
//!
//! The last two terms are computed in plain f64 (a dense GEMM when a rest is dense, sparse products when it
//! holds a few elements) as `T`, with the a-priori bound `|T - exact| <= β`:
//! `β = γ_a ‖rest_a‖‖b‖ + γ_b ‖cap_a‖‖rest_b‖ + floor` (Higham's bound for any summation order, γ counting
//! the roundings each side's products pass through; the inner products bounded by Cauchy-Schwarz on row
//! norms rounded upwards; the floor for products that fall below the normal range). `s + e = P + T`
//! exactly (TwoSum); the exact value lies within `|e| + β` of `s`, so when that is less than half the gap
//! around `s`, `s` *is* the correctly rounded result. The certificate fails for a few per cent of the
//! entries at K = 1536-2048 and far fewer at small K; those go to a second level ([`refine`]), and the
//! very few it cannot settle to the superaccumulator. The result is the same bits as [`super::slow`] for
//! every input: each certificate is a proof, not an estimate, and the last fallback is the reference.
//!
//! Against [`super::ozaki`] (every slice pair exact, its tails exact on the side) this needs two f64 GEMM
//! passes instead of three for an f64 operand against a bf16 one, and three instead of eight or nine for
//! two f64 operands; elements far below their row's maximum cost a few f64 products instead of a
//! superaccumulator per output entry.

use ndarray::{ArrayView2, ArrayViewMut2};
use rayon::prelude::*;

use super::ozaki::{f64_gemm_block, f64_gemm_strided, pair_budget, range_ok, ranges_ok, tile_shape, OutPtr, OzakiPlan};
use crate::exact::certify::{certify, gamma, settled, two_sum};
use super::slicing::{grid_sigma, row_max_exp, row_need_bound, RowStats};
use crate::exact::{pow2, ExactSum};

/// Relative costs in f64 multiply-adds; they steer the slice widths, never the result.
const COST_SPARSE_PRODUCT: f64 = 8.0;
/// A failed certificate costs about 30 multiply-adds of a blocked f64 GEMM per element of K (the second
/// level, vectorised; 1.6 us per entry at K = 1536 on the development machine); the superaccumulator is
/// rarer still.
const COST_EXACT_PRODUCT: f64 = 30.0;
const COST_CERTIFY: f64 = 6.0;
/// A rest holding more than this fraction of its operand's elements is multiplied as a dense GEMM.
const DENSE_FRACTION: f64 = 1.0 / 32.0;

/// Slice widths for `a` and `b` (one slice each).
fn choose(a: &RowStats, b: &RowStats, m: usize, n: usize, k: usize) -> Option<(u32, u32, bool, bool)> {
    let w = pair_budget(k);
    if w < 8 {
        return None;
    }
    let (mf, nf, kf) = (m as f64, n as f64, k as f64);
    let rest_cost = |tails: f64, rows: f64, other: f64| {
        if tails == 0.0 {
            0.0
        } else if tails > DENSE_FRACTION * rows * kf {
            mf * nf * kf
        } else {
            tails * other * COST_SPARSE_PRODUCT
        }
    };
    let mut best: Option<(f64, (u32, u32))> = None;
    for s_a in 1..w {
        let s_b = w - s_a;
        if s_a > 51 || s_b > 51 {
            continue; // the slicing's rounding trick needs |x| < 2^(unit + 51)
        }
        let (ta, tb) = (a.elems_beyond(s_a as usize), b.elems_beyond(s_b as usize));
        // A rest is below 2^-s of its row's maximum: β is about 2^-s·2n·sqrt(K) ulps of a result of
        // typical magnitude for random signs (n the roundings a product passes through: K when the tail
        // GEMM was one block); results well below typical have smaller ulps. Measured on normal f64
        // against bf16 at K = 768 with s = 21 and n = K: 13% of the entries fail, 48·n·sqrt(K)·2^-s.
        // A sparse rest's norm is smaller by the square root of the fraction of elements it holds.
        // A sparse rest's products also pass through fewer roundings: about `4·fraction·K + 1` (the most
        // per row, not the mean).
        let n_dense = dense_roundings(k, 1) as f64;
        let weight = |tails: f64, rows: f64| {
            let frac = (tails / (rows * kf)).min(1.0);
            if frac > DENSE_FRACTION {
                n_dense
            } else {
                frac.sqrt() * (4.0 * frac * kf + 1.0).min(n_dense)
            }
        };
        let rel = f64::max(pow2(-(s_a as i32)) * weight(ta, mf), pow2(-(s_b as i32)) * weight(tb, nf));
        let fail = (48.0 * kf.sqrt() * rel).min(1.0);
        let cost = mf * nf * kf
            + rest_cost(ta, mf, nf)
            + rest_cost(tb, nf, mf)
            + fail * mf * nf * kf * COST_EXACT_PRODUCT
            + mf * nf * COST_CERTIFY;
        if best.is_none_or(|(c, _)| cost < c) {
            best = Some((cost, (s_a, s_b)));
        }
    }
    let (s_a, s_b) = best?.1;
    let dense_a = a.elems_beyond(s_a as usize) > DENSE_FRACTION * mf * kf;
    let dense_b = b.elems_beyond(s_b as usize) > DENSE_FRACTION * nf * kf;
    range_ok(a, b, &OzakiPlan { s_a, n_a: 1, s_b, n_b: 1 }).then_some((s_a, s_b, dense_a, dense_b))
}

/// What rounding a row onto its grid leaves.
enum Rest {
    /// Every row fits its grid.
    None,
    /// Per row, (column, value) of the few elements that do not.
    Sparse(Vec<Vec<(u32, f64)>>),
    /// [rows, K] row-major.
    Dense(Vec<f64>),
}

/// An operand split into its grid part and its rest, with upper bounds on the rows' 2-norms.
struct Split<'a> {
    /// The operand, rows contiguous (the caller's memory, or a copy when it came transposed).
    orig: std::borrow::Cow<'a, [f64]>,
    /// The grid part; None when every row fits its grid (then it is `orig`).
    cap: Option<Vec<f64>>,
    /// Exponent of each row's grid unit (`emax + 1 - s`; None for an all-zero row).
    unit0: Vec<Option<i32>>,
    /// Each row's largest exponent (None for an all-zero row).
    emax: Vec<Option<i32>>,
    s: u32,
    rest: Rest,
    norm_cap: Vec<f64>,
    /// Zero exactly for rows without a rest.
    norm_rest: Vec<f64>,
}

/// An upper bound on the 2-norm of `row` (0 only for an all-zero row), every |x| of which is below
/// 2^(e+1). Scaled by 2^-e so the squares neither overflow nor, except for elements far below 2^e,
/// underflow; each lost square is below 2^-1074, and the f64 sum and square root are covered by the
/// margins. Eight lanes, so it vectorises.
fn norm_up(row: &[f64], e: i32) -> f64 {
    const L: usize = 8;
    let chunks = row.chunks_exact(L);
    let tail = chunks.remainder();
    let e = e.clamp(-1000, 1000);
    let (down, up) = (pow2(-e), pow2(e));
    let mut sq = [0.0f64; L];
    for c in chunks {
        for l in 0..L {
            let y = c[l] * down; // exact: a power of two, results in the normal range or lost below 2^-537
            sq[l] += y * y;
        }
    }
    let sum = tail.iter().fold(sq.iter().sum::<f64>(), |acc, &v| acc + (v * down) * (v * down));
    let lenf = row.len() as f64;
    if sum == 0.0 && row.iter().all(|&v| v == 0.0) {
        return 0.0; // only an all-zero row: tiny elements whose squares were lost still count below
    }
    let sum_up = (sum + lenf * pow2(-1074)) * (1.0 + (lenf + 2.0 * L as f64) * pow2(-52));
    sum_up.sqrt() * (1.0 + pow2(-50)) * up
}

impl<'a> Split<'a> {
    /// Split `x` (rows contiguous, or the transpose of a matrix whose rows are) on grids of `s` bits below
    /// each row's largest exponent; `dense` chooses how the rest is kept (the planner's estimate: a few
    /// elements as lists, most as a matrix). None when an element is Inf or NaN.
    ///
    /// One pass over the operand's memory: a block of rows is brought into cache (and, for a transposed
    /// operand, into row order: the copy `orig` that the tail and the fallbacks read), and each row's
    /// largest exponent, whether it fits its grid, its split and its norms are found while it is there.
    /// For the layer's per-expert GEMMs the weight operand is 12-25 MB, far beyond the caches, and this
    /// split ran at memory speed once per scan.
    fn new(x: ArrayView2<'a, f64>, s: u32, dense: bool) -> Option<Split<'a>> {
        let (rows, k) = (x.nrows(), x.ncols());
        let mut owned = (!x.is_standard_layout()).then(|| super::scratch::take(rows * k));
        let borrowed: &'a [f64] = if owned.is_none() { x.to_slice().expect("rows contiguous") } else { &[] };
        let mut cap: Option<Vec<f64>> = None;
        let mut dense_rest = dense.then(|| super::scratch::take(rows * k));
        let mut sparse_rest: Vec<Vec<(u32, f64)>> = if dense { Vec::new() } else { vec![Vec::new(); rows] };
        let mut row_buf = vec![0.0f64; k];
        let (mut norm_cap, mut norm_rest) = (vec![0.0f64; rows], vec![0.0f64; rows]);
        let (mut emax, mut unit0) = (vec![None; rows], vec![None; rows]);
        const BLOCK: usize = 32;
        for r0 in (0..rows).step_by(BLOCK) {
            let r1 = (r0 + BLOCK).min(rows);
            if let Some(o) = owned.as_mut() {
                super::transpose_rows_into(x, r0, r1, o);
            }
            let data: &[f64] = match &owned {
                Some(o) => o,
                None => borrowed,
            };
            for r in r0..r1 {
                let src = &data[r * k..(r + 1) * k];
                let e = row_max_exp(src)?;
                emax[r] = e;
                unit0[r] = e.map(|e| e + 1 - s as i32);
                let fits = e.is_none_or(|e| row_need_bound(src, e) <= s as i32);
                if !fits && cap.is_none() {
                    // the first row that does not fit: the grid part needs its own copy from here on
                    let mut c = super::scratch::take(rows * k);
                    c[..r * k].copy_from_slice(&data[..r * k]);
                    cap = Some(c);
                }
                let t = match &mut dense_rest {
                    Some(d) => &mut d[r * k..(r + 1) * k],
                    None => &mut row_buf[..],
                };
                match (e, cap.as_mut()) {
                    (Some(e), Some(cap)) if !fits => {
                        let c = &mut cap[r * k..(r + 1) * k];
                        // |x| < 2^(u+s) <= 2^(u+51): see `grid_sigma`; cap and rest are exact.
                        let u = e + 1 - s as i32;
                        let sigma = grid_sigma(u);
                        if dense {
                            for ((c, t), &v) in c.iter_mut().zip(t.iter_mut()).zip(src) {
                                let q = (v + sigma) - sigma;
                                *c = q;
                                *t = v - q;
                            }
                            norm_rest[r] = norm_up(t, u);
                        } else {
                            let list = &mut sparse_rest[r];
                            split_row_sparse(src, c, sigma, list);
                            t[..list.len()].iter_mut().zip(list.iter()).for_each(|(t, &(_, v))| *t = v);
                            norm_rest[r] = norm_up(&t[..list.len()], u);
                        }
                        norm_cap[r] = norm_up(c, e);
                    }
                    (_, cap) => {
                        if let Some(cap) = cap {
                            cap[r * k..(r + 1) * k].copy_from_slice(src);
                        }
                        if dense {
                            t.fill(0.0);
                        }
                        norm_cap[r] = e.map_or(0.0, |e| norm_up(src, e));
                    }
                }
            }
        }
        let orig = match owned {
            Some(o) => std::borrow::Cow::Owned(o),
            None => std::borrow::Cow::Borrowed(borrowed),
        };
        let rest = match (cap.is_some(), dense_rest) {
            (false, d) => {
                if let Some(d) = d {
                    super::scratch::give(d);
                }
                Rest::None
            }
            (true, Some(d)) => Rest::Dense(d),
            (true, None) => Rest::Sparse(sparse_rest),
        };
        Some(Split { orig, cap, unit0, emax, s, rest, norm_cap, norm_rest })
    }

    /// The grid part, rows contiguous.
    fn cap(&self) -> &[f64] {
        self.cap.as_deref().unwrap_or(&self.orig)
    }

    /// The smallest and largest row exponent (None when every row is zero).
    fn emax_range(&self) -> Option<(i32, i32)> {
        let mut it = self.emax.iter().flatten();
        let first = *it.next()?;
        Some(it.fold((first, first), |(lo, hi), &e| (lo.min(e), hi.max(e))))
    }

    /// Row `r` of the rest as a dense row, in `buf` when it has to be expanded.
    fn rest_row<'b>(&'b self, r: usize, k: usize, buf: &'b mut Vec<f64>) -> &'b [f64] {
        match &self.rest {
            Rest::Dense(d) => &d[r * k..(r + 1) * k],
            Rest::Sparse(rows) => {
                buf.clear();
                buf.resize(k, 0.0);
                for &(c, v) in &rows[r] {
                    buf[c as usize] = v;
                }
                buf
            }
            Rest::None => {
                buf.clear();
                buf.resize(k, 0.0);
                buf
            }
        }
    }

    /// The most rest elements of any row, when the rest is sparse (0 otherwise).
    fn max_sparse(&self) -> usize {
        match &self.rest {
            Rest::Sparse(rows) => rows.iter().map(Vec::len).max().unwrap_or(0),
            _ => 0,
        }
    }

    fn kind(&self) -> &'static str {
        match self.rest {
            Rest::None => "none",
            Rest::Sparse(_) => "sparse",
            Rest::Dense(_) => "dense",
        }
    }

    fn recycle(self) {
        if let std::borrow::Cow::Owned(v) = self.orig {
            super::scratch::give(v);
        }
        if let Some(v) = self.cap {
            super::scratch::give(v);
        }
        if let Rest::Dense(v) = self.rest {
            super::scratch::give(v);
        }
    }
}

/// Round `src` onto the grid of `sigma` (see [`grid_sigma`]) into `cap`, and append the (column, value) of
/// each non-zero remainder to `list`. Remainders are rare, so each chunk of eight is scanned for them only
/// when the OR of its remainders' bits says it holds one: the rounding loop stays branch-free and vectorises.
fn split_row_sparse(src: &[f64], cap: &mut [f64], sigma: f64, list: &mut Vec<(u32, f64)>) {
    const L: usize = 8;
    let mut scan = |base: usize, src: &[f64], cap: &[f64]| {
        for (j, (&v, &q)) in src.iter().zip(cap).enumerate() {
            let t = v - q;
            if t != 0.0 {
                list.push(((base + j) as u32, t));
            }
        }
    };
    let n = src.len() / L * L;
    for (i, (c, x)) in cap[..n].chunks_exact_mut(L).zip(src[..n].chunks_exact(L)).enumerate() {
        let mut any = 0u64;
        for l in 0..L {
            let q = (x[l] + sigma) - sigma;
            c[l] = q;
            any |= (x[l] - q).to_bits();
        }
        if any != 0 {
            scan(i * L, x, c);
        }
    }
    for (c, &v) in cap[n..].iter_mut().zip(&src[n..]) {
        *c = (v + sigma) - sigma;
    }
    scan(n, &src[n..], &cap[n..]);
}

/// Contraction block of the dense tail GEMMs. Higham's bound grows with the roundings a product can pass
/// through; summed in blocks, that is at most a block's plus one per block instead of K, so at K = 1536
/// the bound β is about five times smaller, and so is the share of entries whose certificate fails
/// (measured on dx_rows-shaped data: see BENCHMARKS.md, session 12). A block is long enough that the f64
/// GEMM keeps its speed.
const TAIL_BLOCK: usize = 256;

/// The most roundings a product of a dense tail part passes through before the sparse products join:
/// `TAIL_BLOCK - 1` inside its block's GEMM (any order), one when the block is added to the tail, and one
/// for each later block (`parts` dense parts of `k` each, in blocks of `TAIL_BLOCK`).
fn dense_roundings(k: usize, parts: usize) -> usize {
    if parts == 0 {
        return 0;
    }
    let blocks = parts * k.div_ceil(TAIL_BLOCK);
    TAIL_BLOCK.min(k) + blocks
}

/// Per-thread scratch of the tile loop.
#[derive(Default)]
struct TileScratch {
    p: Vec<f64>,
    t: Vec<f64>,
    /// one block's product of a dense tail part
    tb: Vec<f64>,
    fails: Vec<(usize, usize)>,
    rest_a: Vec<f64>,
    rest_b: Vec<f64>,
    floor_b: Vec<f64>,
}

/// How one call went, for the probe and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CertifiedStats {
    /// Slice widths, or None when the call deferred to another engine (non-finite inputs, or magnitudes
    /// beyond the grids' range).
    pub widths: Option<(u32, u32)>,
    /// Entries whose first certificate failed.
    pub fallbacks: usize,
    /// Of those, the entries the second level settled ([`refine`]); the rest went to the superaccumulator.
    pub refined: usize,
}

pub(super) fn matmul_nt(a: ArrayView2<f64>, b: ArrayView2<f64>, mut c: ArrayViewMut2<f64>) -> CertifiedStats {
    let (m, n, k) = (a.nrows(), b.nrows(), a.ncols());
    static PROBE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let probe = *PROBE.get_or_init(|| std::env::var_os("MOE_ORACLE_GEMM_PROBE").is_some());
    let t0 = std::time::Instant::now();
    // The plan from samples of rows; every row's exponent comes with the split, which checks the plan's
    // range and finds any Inf or NaN.
    let (sa, sb) = (RowStats::sampled(a), RowStats::sampled(b));
    if !sa.finite() || !sb.finite() {
        super::slow::matmul_nt(a, b, None, c);
        return CertifiedStats::default();
    }
    let deferred = |c: ArrayViewMut2<f64>| {
        super::matmul_nt_into(super::Engine::Ozaki, a, b, None, c);
        CertifiedStats::default()
    };
    let Some((s_a, s_b, dense_a, dense_b)) = choose(&sa, &sb, m, n, k) else {
        return deferred(c);
    };
    let (Some(xa), Some(xb)) = (Split::new(a, s_a, dense_a), Split::new(b, s_b, dense_b)) else {
        // (the Splits' scratch memory is simply dropped on this rare path)
        super::slow::matmul_nt(a, b, None, c);
        return CertifiedStats::default();
    };
    if !ranges_ok(xa.emax_range(), xb.emax_range(), &OzakiPlan { s_a, n_a: 1, s_b, n_b: 1 }) {
        xa.recycle();
        xb.recycle();
        return deferred(c);
    }
    let t_split = t0.elapsed();
    let (a_data, b_data): (&[f64], &[f64]) = (&xa.orig, &xb.orig);

    // β = g_a·‖rest_a‖‖b‖ + g_b·‖cap_a‖‖rest_b‖ + floor, the floor only where a rest touches the entry.
    // Order of the tail's sum: the dense parts' products (K each, in blocks of TAIL_BLOCK), then each
    // sparse product added one by one. A dense product passes through at most `dense_k + sparse + 1`
    // roundings, a sparse one through at most `sparse + 1` (Higham, Lemma 3.3): the sparse rests, whose
    // products meet the full-size other operand, get the much smaller γ. Cauchy-Schwarz bounds the sum of
    // the blocks' |products| by the same row norms as the whole.
    let dense_parts = matches!(xa.rest, Rest::Dense(_)) as usize + matches!(xb.rest, Rest::Dense(_)) as usize;
    let dense_k = dense_roundings(k, dense_parts);
    let sparse = xa.max_sparse() + xb.max_sparse();
    let (g_dense, g_sparse) = (gamma(dense_k + sparse + 1), gamma(sparse + 1));
    let g_a = if matches!(xa.rest, Rest::Dense(_)) { g_dense } else { g_sparse };
    let g_b = if matches!(xb.rest, Rest::Dense(_)) { g_dense } else { g_sparse };
    // (the floor counts every product, each of which may lose up to 2^-1075 below the normal range)
    let floor = ((k * dense_parts + sparse) as f64 + 8.0) * pow2(-1074);
    let norm_b: Vec<f64> = xb.norm_cap.iter().zip(&xb.norm_rest).map(|(c, r)| (c + r) * (1.0 + pow2(-50))).collect();

    let (mb, nb) = tile_shape(m, n, 2);
    let (row_blocks, col_blocks) = (m.div_ceil(mb), n.div_ceil(nb));
    assert!(c.ncols() <= 1 || c.strides()[1] == 1, "output rows must be contiguous");
    let ldc = c.strides()[0];
    let out_base = OutPtr(c.as_mut_ptr());
    let fallbacks = std::sync::atomic::AtomicUsize::new(0);
    let refined_count = std::sync::atomic::AtomicUsize::new(0);
    // with the probe: CPU nanoseconds in the GEMMs (exact pair and tail), the certificates, the refinements
    let clock = [(); 3].map(|_| std::sync::atomic::AtomicU64::new(0));
    let lap = |i: usize, t: &mut Option<std::time::Instant>| {
        if let Some(t) = t {
            clock[i].fetch_add(t.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
            *t = std::time::Instant::now();
        }
    };

    (0..row_blocks * col_blocks).into_par_iter().for_each_init(TileScratch::default, |s, tile| {
        let (r0, c0) = ((tile / col_blocks) * mb, (tile % col_blocks) * nb);
        let (r1, c1) = ((r0 + mb).min(m), (c0 + nb).min(n));
        let (tm, tn) = (r1 - r0, c1 - c0);
        let mut tt = probe.then(std::time::Instant::now);
        s.p.resize(tm * tn, 0.0);
        s.t.resize(tm * tn, 0.0);
        f64_gemm_block(&mut s.p, &xa.cap()[r0 * k..], tm, &xb.cap()[c0 * k..], tn, k);
        // T = rest_a·Bᵀ + cap_a·rest_bᵀ. A dense part goes in blocks of TAIL_BLOCK along K, each block's
        // product computed on its own and then added to T, so that the products of a block meet only the
        // block's roundings and one per later block (see `dense_roundings`).
        let mut t_written = false;
        let dense_parts = [
            match &xa.rest {
                Rest::Dense(ra) => Some((&ra[r0 * k..], &b_data[c0 * k..])),
                _ => None,
            },
            match &xb.rest {
                Rest::Dense(rb) => Some((&xa.cap()[r0 * k..], &rb[c0 * k..])),
                _ => None,
            },
        ];
        for (lhs, rhs) in dense_parts.into_iter().flatten() {
            for k0 in (0..k).step_by(TAIL_BLOCK) {
                let kl = TAIL_BLOCK.min(k - k0);
                if !t_written {
                    f64_gemm_strided(&mut s.t, &lhs[k0..], k, tm, &rhs[k0..], k, tn, kl);
                    t_written = true;
                } else {
                    s.tb.resize(tm * tn, 0.0);
                    f64_gemm_strided(&mut s.tb, &lhs[k0..], k, tm, &rhs[k0..], k, tn, kl);
                    s.t.iter_mut().zip(&s.tb).for_each(|(t, b)| *t += b);
                }
            }
        }
        if !t_written {
            s.t.fill(0.0);
        }
        if let Rest::Sparse(ra) = &xa.rest {
            for r in r0..r1 {
                let trow = &mut s.t[(r - r0) * tn..(r - r0 + 1) * tn];
                for &(kk, v) in &ra[r] {
                    for (j, t) in trow.iter_mut().enumerate() {
                        *t += v * b_data[(c0 + j) * k + kk as usize];
                    }
                }
            }
        }
        if let Rest::Sparse(rb) = &xb.rest {
            for j in c0..c1 {
                for &(kk, v) in &rb[j] {
                    for r in r0..r1 {
                        s.t[(r - r0) * tn + (j - c0)] += xa.cap()[r * k + kk as usize] * v;
                    }
                }
            }
        }

        lap(0, &mut tt);
        // Certify each entry; collect the ones that fail.
        s.fails.clear();
        let (nbt, nblt) = (&norm_b[c0..c1], &xb.norm_rest[c0..c1]);
        s.floor_b.clear();
        s.floor_b.extend(nblt.iter().map(|&v| if v != 0.0 { floor } else { 0.0 }));
        for r in r0..r1 {
            let (nal, nac) = (xa.norm_rest[r], xa.norm_cap[r]);
            let (ga_nal, gb_nac) = (g_a * nal, g_b * nac);
            let floor_r = if nal != 0.0 { floor } else { 0.0 };
            // SAFETY: row r, columns c0..c1 of the output belong to this tile only, and lie inside `c`
            // (rows `ldc` apart, columns contiguous).
            let out = unsafe { std::slice::from_raw_parts_mut(out_base.get().offset(r as isize * ldc).add(c0), tn) };
            let (prow, trow) = (&s.p[(r - r0) * tn..(r - r0 + 1) * tn], &s.t[(r - r0) * tn..(r - r0 + 1) * tn]);
            // β is 0 exactly where no rest touches the entry (then t is 0 and p the exact result).
            let beta = |nb: f64, nbl: f64, fb: f64| ga_nal * nb + gb_nac * nbl + floor_r.max(fb);
            let mut any_fail = false;
            for ((((o, &p), &t), (&nb, &nbl)), &fb) in out.iter_mut().zip(prow).zip(trow).zip(nbt.iter().zip(nblt)).zip(&s.floor_b) {
                let (sum, ok) = certify(p, t, beta(nb, nbl, fb));
                *o = sum + 0.0;
                any_fail |= !ok;
            }
            if any_fail {
                for (j, (((&p, &t), (&nb, &nbl)), &fb)) in prow.iter().zip(trow).zip(nbt.iter().zip(nblt)).zip(&s.floor_b).enumerate() {
                    if !certify(p, t, beta(nb, nbl, fb)).1 {
                        s.fails.push((r, j));
                    }
                }
            }
        }
        lap(1, &mut tt);
        if !s.fails.is_empty() {
            fallbacks.fetch_add(s.fails.len(), std::sync::atomic::Ordering::Relaxed);
            let mut acc = ExactSum::new();
            for &(r, j) in &s.fails {
                let c = c0 + j;
                let (ar, br) = (&a_data[r * k..(r + 1) * k], &b_data[c * k..(c + 1) * k]);
                let p = s.p[(r - r0) * tn + j];
                let refined = refine(&xa, &xb, r, c, p, br, k, &mut s.rest_a, &mut s.rest_b);
                if refined.is_some() {
                    refined_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let v = refined.unwrap_or_else(|| {
                    acc.clear();
                    for (&x, &y) in ar.iter().zip(br) {
                        acc.add_product(x, y);
                    }
                    acc.round()
                });
                // SAFETY: as above, the entry belongs to this tile.
                unsafe { *out_base.get().offset(r as isize * ldc).add(c) = v };
            }
        }
        lap(2, &mut tt);
    });
    let stats = CertifiedStats { widths: Some((s_a, s_b)), fallbacks: fallbacks.into_inner(), refined: refined_count.into_inner() };
    if probe {
        eprintln!(
            "gemm {m}x{n}x{k} certified s_a {s_a} s_b {s_b}: rest a {} b {}; split {:?} total {:?} (CPU ms: gemms {:.1} certify {:.1} refine {:.1}); {} entries refined, {} exact",
            xa.kind(),
            xb.kind(),
            t_split,
            t0.elapsed(),
            clock[0].load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-6,
            clock[1].load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-6,
            clock[2].load(std::sync::atomic::Ordering::Relaxed) as f64 * 1e-6,
            stats.refined,
            stats.fallbacks - stats.refined
        );
    }
    xa.recycle();
    xb.recycle();
    stats
}

/// The second level for an entry whose first certificate failed: each rest is split once more onto the
/// next grid of its row (`c1`, `s` bits further down, and `r2`, what is left), so that
///
///   `rest_a·b + cap_a·rest_b = c1_a·cap_b + cap_a·c1_b + (c1_a·rest_b + r2_a·b + cap_a·r2_b)`.
///
/// The first two sums are exact in f64 in any order (the same bit budget as the first slice pair); the
/// third is 2^-s smaller than the first level's tail, and its bound is the f64 sum of its products'
/// magnitudes (rounded up) rather than a product of norms. The four parts are joined with TwoSums and
/// certified as at the first level. None when the certificate fails again (a true near-tie, or an exact
/// zero with a rest) or a grid would leave the normal range: the caller takes the superaccumulator.
#[allow(clippy::too_many_arguments)]
fn refine(xa: &Split, xb: &Split, r: usize, c: usize, p: f64, b: &[f64], k: usize, buf_a: &mut Vec<f64>, buf_b: &mut Vec<f64>) -> Option<f64> {
    // Grids of the second slices, and the units of the two exact sums; zero rows have no rest.
    let ua1 = xa.unit0[r].map(|u| u - xa.s as i32);
    let ub1 = xb.unit0[c].map(|u| u - xb.s as i32);
    let (ua0, ub0) = (xa.unit0[r].unwrap_or(0), xb.unit0[c].unwrap_or(0));
    for (g, other) in [(ua1, ub0), (ub1, ua0)] {
        if let Some(g) = g {
            if g + other < -1022 || g < -1022 {
                return None;
            }
        }
    }
    let sig_a = ua1.map_or(0.0, grid_sigma);
    let sig_b = ub1.map_or(0.0, grid_sigma);
    let ra = xa.rest_row(r, k, buf_a);
    let rb = xb.rest_row(c, k, buf_b);
    let (ca, cb) = (&xa.cap()[r * k..(r + 1) * k], &xb.cap()[c * k..(c + 1) * k]);
    const L: usize = 8;
    let (mut e1, mut e2, mut t2, mut bnd) = ([0.0f64; L], [0.0f64; L], [0.0f64; L], [0.0f64; L]);
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn step(x: f64, y: f64, ca: f64, cb: f64, bv: f64, sig_a: f64, sig_b: f64, e1: &mut f64, e2: &mut f64, t2: &mut f64, bnd: &mut f64) {
        // (x + σ) - σ rounds to the grid (|x| is below half the first grid's unit: far inside 2^(u+51));
        // with σ = 0 (no rest) x is 0 and so is everything below.
        let c1a = (x + sig_a) - sig_a;
        let c1b = (y + sig_b) - sig_b;
        let (r2a, r2b) = (x - c1a, y - c1b);
        *e1 += c1a * cb;
        *e2 += ca * c1b;
        let (q1, q2, q3) = (c1a * y, r2a * bv, ca * r2b);
        *t2 += q1 + q2 + q3;
        *bnd += q1.abs() + q2.abs() + q3.abs();
    }
    let (ra, rb, ca, cb, b) = (&ra[..k], &rb[..k], &ca[..k], &cb[..k], &b[..k]);
    let body = k / L * L;
    for i0 in (0..body).step_by(L) {
        let (x, y, p, q, v): (&[f64; L], &[f64; L], &[f64; L], &[f64; L], &[f64; L]) = (
            ra[i0..i0 + L].try_into().expect("L"),
            rb[i0..i0 + L].try_into().expect("L"),
            ca[i0..i0 + L].try_into().expect("L"),
            cb[i0..i0 + L].try_into().expect("L"),
            b[i0..i0 + L].try_into().expect("L"),
        );
        for l in 0..L {
            step(x[l], y[l], p[l], q[l], v[l], sig_a, sig_b, &mut e1[l], &mut e2[l], &mut t2[l], &mut bnd[l]);
        }
    }
    for i in body..k {
        let l = i - body;
        step(ra[i], rb[i], ca[i], cb[i], b[i], sig_a, sig_b, &mut e1[l], &mut e2[l], &mut t2[l], &mut bnd[l]);
    }
    let (e1, e2): (f64, f64) = (e1.iter().sum(), e2.iter().sum()); // exact: integers of the two grids
    let (t2, bnd): (f64, f64) = (t2.iter().sum(), bnd.iter().sum());
    // t2 sums 3K products through at most 3K + L + 2 roundings; bnd rounds down by at most as much, and
    // each product that falls below the normal range loses at most 2^-1075 in either.
    let n = 3 * k + L + 4;
    let g = gamma(n);
    let floor = (2 * n) as f64 * pow2(-1074);
    let beta2 = g * (bnd * (1.0 + 2.0 * g) + floor) + floor;
    // p + e1 + e2 + t2, with every rounding accounted for: three exact TwoSums and one rounded addition
    // of the small parts.
    let (h1, l1) = two_sum(p, e1);
    let (h2, l2) = two_sum(h1, e2);
    let small = (l1 + l2) + t2;
    let small_err = 2.0 * pow2(-53) * ((l1.abs() + l2.abs()) + t2.abs()) * (1.0 + pow2(-40));
    let (sum, e) = two_sum(h2, small);
    settled(sum, e.abs() + small_err + beta2).then_some(sum + 0.0)
}
