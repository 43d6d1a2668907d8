//! The fast exact engine: integer slices multiplied by ordinary f64 GEMMs, then combined exactly.
//!
//! With `A` split into `n_a` slices of `s_a` bits and `B` into `n_b` slices of `s_b` bits
//! ([`super::slicing`]), every product of slice entries is an integer below `2^(s_a+s_b)`, and a sum of
//! `K` of them stays below `2^53` when `s_a + s_b + ceil(log2 K) <= 53`: then any f64 GEMM (any blocking,
//! any FMA use, any thread count) computes each slice-pair product exactly. The entry `C[m, n]` is the exact
//! sum of the `n_a·n_b` scaled slice products plus the tails' products; it is rounded once, with
//! [`SmallSum`] where no tail touches the entry and [`ExactSum`] where one does.
//!
//! The planner picks `(s_a, n_a, s_b, n_b)` per GEMM from histograms of how many bits the elements need,
//! trading slice GEMMs against tail work; bf16-valued operands usually need a single slice.

use gemm::Parallelism;
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder};
use rayon::prelude::*;

use super::slicing::{RowStats, Sliced, NEED_CAP};
use super::Extra;
use crate::exact::certify::{two_sum, Certifier};
use crate::exact::{pow2, product_is_safe, Accumulate, ExactSum, SmallSum};

/// The slicing chosen for one GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OzakiPlan {
    pub s_a: u32,
    pub n_a: usize,
    pub s_b: u32,
    pub n_b: usize,
}

const MAX_SLICES: usize = 8;
/// Relative costs, in f64 multiply-adds of a GEMM: an entry combined through `ExactSum` and one exact tail
/// product. Measured roughly on the development machine; they only steer the plan, never the result.
const COST_SLOW_ENTRY: f64 = 600.0;
const COST_TAIL_PRODUCT: f64 = 60.0;
const COST_COMBINE_TERM: f64 = 12.0;
/// An entry of one to three terms is combined with a few flops (`sum3_rounded`).
const COST_COMBINE_FAST: f64 = 4.0;


/// Bits available to a slice pair: `s_a + s_b <= 53 - ceil(log2 K)`.
pub(super) fn pair_budget(k: usize) -> u32 {
    let log = usize::BITS - (k.max(1) - 1).leading_zeros(); // ceil(log2 k)
    53u32.saturating_sub(log)
}

fn choose(a: &RowStats, b: &RowStats, m: usize, n: usize, k: usize) -> Option<OzakiPlan> {
    let w = pair_budget(k);
    if w < 4 {
        return None;
    }
    let mut best: Option<(f64, OzakiPlan)> = None;
    for s_a in 1..w {
        let s_b = w - s_a;
        if s_a > 51 || s_b > 51 {
            continue; // the slicing's rounding trick needs |remainder| < 2^(unit + 51)
        }
        for n_a in 1..=MAX_SLICES {
            let bits_a = (n_a * s_a as usize).min(NEED_CAP);
            let (rows_a, tail_a) = (a.rows_beyond(bits_a), a.elems_beyond(bits_a));
            if n_a > 1 && rows_a == 0.0 && a.rows_beyond((n_a - 1) * s_a as usize) == 0.0 {
                continue; // a slice that captures nothing new
            }
            for n_b in 1..=MAX_SLICES {
                let bits_b = (n_b * s_b as usize).min(NEED_CAP);
                let (rows_b, tail_b) = (b.rows_beyond(bits_b), b.elems_beyond(bits_b));
                if n_b > 1 && rows_b == 0.0 && b.rows_beyond((n_b - 1) * s_b as usize) == 0.0 {
                    continue;
                }
                let gemm = (n_a * n_b) as f64 * m as f64 * n as f64 * k as f64;
                let slow = (rows_a * n as f64 + rows_b * m as f64) * COST_SLOW_ENTRY;
                let tails = (tail_a * n as f64 + tail_b * m as f64) * COST_TAIL_PRODUCT;
                let wide_bits = 53 + (n_a - 1) * s_a as usize + (n_b - 1) * s_b as usize + 4;
                let max_shift = (n_a - 1) * s_a as usize + (n_b - 1) * s_b as usize;
                if n_a * n_b > 3 && (wide_bits > 188 || max_shift >= 128) {
                    continue; // the 192-bit combine could overflow
                }
                let combine = (m * n) as f64 * if n_a * n_b <= 3 { COST_COMBINE_FAST } else { COST_COMBINE_TERM * (n_a * n_b) as f64 };
                let cost = gemm + slow + tails + combine;
                let plan = OzakiPlan { s_a, n_a, s_b, n_b };
                if best.is_none_or(|(c, _)| cost < c) {
                    best = Some((cost, plan));
                }
            }
        }
    }
    let plan = best?.1;
    range_ok(a, b, &plan).then_some(plan)
}

/// Every slice unit and every product of units must stay in the normal range, where scaling by them is
/// exact, and far from overflow; otherwise the reference engine takes the whole GEMM.
pub(super) fn range_ok(a: &RowStats, b: &RowStats, plan: &OzakiPlan) -> bool {
    ranges_ok(a.emax_range(), b.emax_range(), plan)
}

/// [`range_ok`] from the operands' smallest and largest row exponents (None: every row is zero).
pub(super) fn ranges_ok(a: Option<(i32, i32)>, b: Option<(i32, i32)>, plan: &OzakiPlan) -> bool {
    let (lo_a, hi_a) = a.unwrap_or((0, 0));
    let (lo_b, hi_b) = b.unwrap_or((0, 0));
    let min_unit_a = lo_a + 1 - (plan.n_a as i32) * plan.s_a as i32;
    let min_unit_b = lo_b + 1 - (plan.n_b as i32) * plan.s_b as i32;
    min_unit_a >= -1000
        && min_unit_b >= -1000
        && hi_a <= 900
        && hi_b <= 900
        && min_unit_a + min_unit_b >= -1022
        && hi_a + hi_b <= 900
}

/// The plan the fast engine would use for `a · bᵀ` (None: it would defer to the reference engine).
pub fn plan_for(a: ArrayView2<f64>, b: ArrayView2<f64>) -> Option<OzakiPlan> {
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    choose(&RowStats::of(a.view()), &RowStats::of(b.view()), a.nrows(), b.nrows(), a.ncols())
}

/// Output tile geometry: rows of A by rows of B per tile. All `n_a·n_b` slice-pair products of a tile are
/// computed into one buffer of about `TILE_ENTRIES` f64 and combined while it is still in cache (the
/// products of a whole per-expert GEMM are tens of megabytes: writing them out and reading them back cost
/// more than the GEMM itself).
const TILE_ROWS: usize = 64;
const TILE_ENTRIES: usize = 1 << 16;

pub(super) fn tile_shape(m: usize, n: usize, pairs: usize) -> (usize, usize) {
    let mb = TILE_ROWS.min(m).max(1);
    let nb = (TILE_ENTRIES / (pairs * mb)).max(16) / 8 * 8;
    (mb, nb.min(n).max(1))
}

/// `dst[tm, tn] = A_rows · B_rowsᵀ` in plain f64 (exact here by construction of the slices); `a` and `b`
/// start at the first row of the block, rows `k` apart; `dst` rows are `tn` apart.
pub(super) fn f64_gemm_block(dst: &mut [f64], a: &[f64], tm: usize, b: &[f64], tn: usize, k: usize) {
    f64_gemm_strided(dst, a, k, tm, b, k, tn, k)
}

/// [`f64_gemm_block`] over the first `k` elements of rows `lda` (of `a`) and `ldb` (of `b`) apart: a
/// block of the contraction.
#[allow(clippy::too_many_arguments)]
pub(super) fn f64_gemm_strided(dst: &mut [f64], a: &[f64], lda: usize, tm: usize, b: &[f64], ldb: usize, tn: usize, k: usize) {
    assert!(k <= lda && k <= ldb && dst.len() >= tm * tn);
    assert!(tm == 0 || a.len() >= (tm - 1) * lda + k);
    assert!(tn == 0 || b.len() >= (tn - 1) * ldb + k);
    // A few rows against many with a long contraction (the per-expert GEMMs: 64 token rows against a
    // weight's 512-column block, K = 768-2048): the `gemm` crate turns a row-major output around and then
    // packs the many rows of B, one pass over the weight's block per call. Asked for a column-major
    // output instead, it packs only A's few rows and reads B's rows in place; the tile is turned back
    // here (tm·tn moves against tm·tn·k multiply-adds). Any summation order is as good as another for
    // the callers: the exact pairs are exact in every order, and the tails carry a bound for any order.
    if tm <= 2 * TILE_ROWS && k >= 256 && tn > tm {
        let mut ct = super::scratch::take(tm * tn);
        // SAFETY: as below, with the output `ct` column-major (tm rows, columns tm apart).
        unsafe {
            gemm::gemm(
                tm, tn, k, ct.as_mut_ptr(), tm as isize, 1, false, a.as_ptr(), 1, lda as isize, b.as_ptr(), ldb as isize, 1,
                0.0, 1.0, false, false, false, Parallelism::None,
            );
        }
        // `ct` is the tm x tn tile in column order: the transpose of a row-major [tn][tm] array
        let tile = ArrayView2::from_shape((tm, tn).f(), &ct).expect("tm * tn elements");
        super::transpose_rows_into(tile, 0, tm, &mut dst[..tm * tn]);
        super::scratch::give(ct);
        return;
    }
    // SAFETY: the pointers cover the tm x k and tn x k blocks and tm·tn outputs with the strides given
    // (asserted above).
    unsafe {
        gemm::gemm(
            tm,
            tn,
            k,
            dst.as_mut_ptr(),
            1,
            tn as isize,
            false,
            a.as_ptr(),
            1,
            lda as isize,
            b.as_ptr(),
            ldb as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// The output's base pointer, shared by the tiles (each writes only its own entries).
#[derive(Clone, Copy)]
pub(super) struct OutPtr(pub(super) *mut f64);
// SAFETY: tiles are disjoint, so no entry is written by two threads.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Through a method, so closures capture the whole (Sync) wrapper rather than the raw field.
    pub(super) fn get(self) -> *mut f64 {
        self.0
    }
}

/// Per-thread scratch of the tile loop.
struct TileScratch {
    products: Vec<f64>,
    small: SmallSum,
    exact: ExactSum,
    pairs: Vec<(f64, f64)>,
    wide: Vec<Wide>,
}

pub(super) fn matmul_nt(a: ArrayView2<f64>, b: ArrayView2<f64>, extra: Option<Extra>, mut c: ArrayViewMut2<f64>) {
    let (m, n, k) = (a.nrows(), b.nrows(), a.ncols());
    static PROBE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let probe = *PROBE.get_or_init(|| std::env::var_os("MOE_ORACLE_GEMM_PROBE").is_some());
    let t0 = std::time::Instant::now();
    let (sa, sb) = (RowStats::of(a), RowStats::of(b));
    if !sa.finite() || !sb.finite() {
        return super::slow::matmul_nt(a, b, extra, c);
    }
    let t_stats = t0.elapsed();
    let Some(plan) = choose(&sa, &sb, m, n, k) else {
        return super::slow::matmul_nt(a, b, extra, c);
    };
    let xa = Sliced::split(a, &sa.emax, plan.s_a, plan.n_a);
    let xb = Sliced::split(b, &sb.emax, plan.s_b, plan.n_b);
    let t_split = t0.elapsed();

    // Captured part of A (A minus its tails), needed only for B's tail products.
    let b_has_tails = xb.tails.iter().any(|t| !t.is_empty());
    let a_captured: Option<Vec<f64>> = b_has_tails.then(|| {
        let mut cap = super::scratch::take(m * k);
        cap.copy_from_slice(a.as_slice().expect("standard layout"));
        for (r, tails) in xa.tails.iter().enumerate() {
            for &(col, t) in tails {
                cap[r * k + col] -= t; // exact: removes the low bits the tail holds
            }
        }
        cap
    });

    let b_tail_cols: Vec<usize> = (0..n).filter(|&c| !xb.tails[c].is_empty()).collect();
    // For entries of four or more terms: slice pair p = (i, j) sits `shifts[p]` bits above the entry's
    // smallest unit, `ua_low(r) + ub_low(c)`.
    let shifts: Vec<u32> = (0..plan.n_a)
        .flat_map(|i| {
            (0..plan.n_b).map(move |j| (plan.n_a - 1 - i) as u32 * plan.s_a + (plan.n_b - 1 - j) as u32 * plan.s_b)
        })
        .collect();
    let ub_low: Vec<i32> = xb.unit0.iter().map(|&u| u - (plan.n_b as i32 - 1) * plan.s_b as i32).collect();
    let inv_ub: Vec<f64> = ub_low.iter().map(|&u| pow2(-u)).collect();

    let pairs = plan.n_a * plan.n_b;
    let (mb, nb) = tile_shape(m, n, pairs);
    let (row_blocks, col_blocks) = (m.div_ceil(mb), n.div_ceil(nb));
    assert!(c.ncols() <= 1 || c.strides()[1] == 1, "output rows must be contiguous");
    let ldc = c.strides()[0];
    let out_base = OutPtr(c.as_mut_ptr());

    let gemm_ns = std::sync::atomic::AtomicU64::new(0); // with the probe: CPU time in the slice GEMMs
    (0..row_blocks * col_blocks).into_par_iter().for_each_init(
        || TileScratch { products: Vec::new(), small: SmallSum::new(), exact: ExactSum::new(), pairs: Vec::new(), wide: Vec::new() },
        |s, tile| {
            let (r0, c0) = ((tile / col_blocks) * mb, (tile % col_blocks) * nb);
            let (r1, c1) = ((r0 + mb).min(m), (c0 + nb).min(n));
            let (tm, tn) = (r1 - r0, c1 - c0);
            s.products.resize(pairs * tm * tn, 0.0);
            let tg = probe.then(std::time::Instant::now);
            for i in 0..plan.n_a {
                for j in 0..plan.n_b {
                    let p = i * plan.n_b + j;
                    f64_gemm_block(
                        &mut s.products[p * tm * tn..(p + 1) * tm * tn],
                        &xa.vals[(i * m + r0) * k..],
                        tm,
                        &xb.vals[(j * n + c0) * k..],
                        tn,
                        k,
                    );
                }
            }
            if let Some(tg) = tg {
                gemm_ns.fetch_add(tg.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            let (inv_ub, ub_low) = (&inv_ub[c0..c1], &ub_low[c0..c1]);
            let tail_cols = {
                let lo = b_tail_cols.partition_point(|&col| col < c0);
                let hi = b_tail_cols.partition_point(|&col| col < c1);
                &b_tail_cols[lo..hi]
            };
            for r in r0..r1 {
                // SAFETY: row r, columns c0..c1 of the output belong to this tile only, and lie inside `c`
                // (rows `ldc` apart, columns contiguous).
                let out = unsafe { std::slice::from_raw_parts_mut(out_base.get().offset(r as isize * ldc).add(c0), tn) };
                let rows: Vec<&[f64]> =
                    (0..pairs).map(|p| &s.products[(p * tm + (r - r0)) * tn..(p * tm + (r - r0) + 1) * tn]).collect();
                combine_row(&rows, out, &xa, &plan, r, &shifts, inv_ub, ub_low, &mut s.wide);
                // Entries touched by tails or extra terms are redone: certified in f64 where that holds,
                // else with an exact accumulator.
                let a_tails = &xa.tails[r];
                let slow_cols: Box<dyn Iterator<Item = usize>> = if !a_tails.is_empty() || extra.is_some() {
                    Box::new(c0..c1)
                } else {
                    Box::new(tail_cols.iter().copied())
                };
                for col in slow_cols {
                    let b_tails = &xb.tails[col];
                    s.pairs.clear();
                    if let Some(f) = extra {
                        f(r, col, &mut s.pairs);
                    }
                    // (checked only where the certificate fails: it checks its own products)
                    let safe = || s.pairs.iter().all(|&(x, y)| product_is_safe(x, y))
                        && a_tails.iter().all(|&(kk, tv)| product_is_safe(tv, b[[col, kk]]))
                        && (b_tails.is_empty()
                            || b_tails.iter().all(|&(kk, tv)| {
                                a_captured.as_ref().is_some_and(|cap| product_is_safe(cap[r * k + kk], tv))
                            }));
                    let terms = &s.pairs;
                    let feed = |acc: &mut dyn Accumulate| {
                        for row in &rows {
                            acc.add(row[col - c0]);
                        }
                        for &(x, y) in terms.iter() {
                            acc.add_product(x, y);
                        }
                        for &(kk, tv) in a_tails {
                            acc.add_product(tv, b[[col, kk]]);
                        }
                        if let Some(cap) = &a_captured {
                            for &(kk, tv) in b_tails {
                                acc.add_product(cap[r * k + kk], tv);
                            }
                        }
                    };
                    let mut cert = Certifier::default();
                    feed(&mut cert);
                    out[col - c0] = if let Some(v) = cert.finish() {
                        v
                    } else if safe() {
                        s.small.clear();
                        feed(&mut s.small);
                        s.small.round()
                    } else {
                        s.exact.clear();
                        feed(&mut s.exact);
                        s.exact.round()
                    };
                }
            }
        },
    );
    if let Some(cap) = a_captured {
        super::scratch::give(cap);
    }
    if probe {
        eprintln!(
            "gemm {m}x{n}x{k} {plan:?}: tail rows a {} b {}; stats {:?} split {:?} tiles {mb}x{nb} gemm+combine {:?} (slice GEMMs {:?} CPU)",
            xa.tails.iter().filter(|t| !t.is_empty()).count(),
            xb.tails.iter().filter(|t| !t.is_empty()).count(),
            t_stats,
            t_split - t_stats,
            t0.elapsed() - t_split,
            std::time::Duration::from_nanos(gemm_ns.into_inner())
        );
    }
    xa.recycle();
    xb.recycle();
}

/// One output row segment from its slice-pair products (`rows[p][j]` is pair p's product for column j of
/// the segment): each product is an exact f64 (an integer number of its unit), the entry their exact sum
/// rounded once.
#[allow(clippy::too_many_arguments)]
fn combine_row(
    rows: &[&[f64]],
    out: &mut [f64],
    xa: &Sliced,
    plan: &OzakiPlan,
    r: usize,
    shifts: &[u32],
    inv_ub: &[f64],
    ub_low: &[i32],
    wide: &mut Vec<Wide>,
) {
    match rows {
        [r0] => out.iter_mut().zip(r0.iter()).for_each(|(o, &v)| *o = v + 0.0),
        [r0, r1] => out.iter_mut().zip(r0.iter().zip(r1.iter())).for_each(|(o, (&a, &b))| *o = (a + b) + 0.0),
        [r0, r1, r2] => {
            for (o, ((&a, &b), &c)) in out.iter_mut().zip(r0.iter().zip(r1.iter()).zip(r2.iter())) {
                *o = sum3_rounded(a, b, c) + 0.0;
            }
        }
        _ => {
            // Four or more terms: integers on the entry's smallest unit, summed in 192 bits.
            let ua_low = xa.unit0[r] - (plan.n_a as i32 - 1) * plan.s_a as i32;
            wide.clear();
            wide.resize(out.len(), Wide::default());
            // Term by term over the whole segment (the inner loop has one shift and one scale).
            for (p, row) in rows.iter().enumerate() {
                let (scale, shift) = (pow2(-(ua_low + shifts[p] as i32)), shifts[p]);
                for ((acc, &v), &inv) in wide.iter_mut().zip(row.iter()).zip(inv_ub.iter()) {
                    // The column scale first keeps the intermediate normal; the result is an integer of at
                    // most 53 bits.
                    let v = (v * inv) * scale;
                    debug_assert!(v.abs() <= 9007199254740992.0 && v.fract() == 0.0);
                    // SAFETY: `v` is finite and integral with |v| <= 2^53 (see above).
                    let int: i64 = unsafe { v.to_int_unchecked() };
                    acc.add_shifted(int, shift);
                }
            }
            for ((o, acc), &ub) in out.iter_mut().zip(wide.iter()).zip(ub_low.iter()) {
                *o = acc.round_scaled(ua_low + ub);
            }
        }
    }
}

/// A 192-bit two's-complement integer: the exact sum of an entry's slice products when there are more
/// than three of them (up to 53 + 127 + 4 bits: see `choose`).
#[derive(Default, Clone, Copy)]
struct Wide {
    lo: u128,
    hi: u64,
}

impl Wide {
    /// Add `v · 2^shift` (|v| < 2^63, shift < 128).
    #[inline(always)]
    fn add_shifted(&mut self, v: i64, shift: u32) {
        let (limb, bits) = (shift / 64, shift % 64);
        let q = (v as i128) << bits; // |q| < 2^127
        let ext = if q < 0 { u64::MAX } else { 0 };
        if limb == 0 {
            let (lo, carry) = self.lo.overflowing_add(q as u128);
            self.lo = lo;
            self.hi = self.hi.wrapping_add(ext).wrapping_add(carry as u64);
        } else {
            // limbs 1..2 get q; the sign extension beyond limb 2 falls off the top
            let upper = ((self.hi as u128) << 64) | (self.lo >> 64);
            let sum = upper.wrapping_add(q as u128);
            self.lo = (self.lo & (u64::MAX as u128)) | (sum << 64);
            self.hi = (sum >> 64) as u64;
        }
    }

    /// The value times `2^e`, rounded to nearest-even (result in the normal range, see `choose`): the top 64
    /// bits of the magnitude, with everything below folded into a sticky bit, convert with one rounding.
    #[inline(always)]
    fn round_scaled(self, e: i32) -> f64 {
        let negative = (self.hi as i64) < 0;
        let (mut lo, mut hi) = (self.lo, self.hi);
        if negative {
            // two's-complement negate over 192 bits
            lo = !lo;
            hi = !hi;
            let (l, c) = lo.overflowing_add(1);
            lo = l;
            hi = hi.wrapping_add(c as u64);
        }
        let r = if hi == 0 && (lo >> 64) == 0 {
            (lo as u64) as f64 * pow2(e)
        } else {
            // shift right until the magnitude fits 64 bits
            let lead = if hi != 0 { 128 + 63 - hi.leading_zeros() } else { 127 - lo.leading_zeros() };
            let sh = lead - 63;
            let (top, sticky) = if sh >= 128 {
                ((hi >> (sh - 128)) as u64, lo != 0 || (hi & ((1u64 << (sh - 128)) - 1)) != 0)
            } else {
                let t = (lo >> sh) | ((hi as u128) << (128 - sh));
                (t as u64, (lo & ((1u128 << sh) - 1)) != 0)
            };
            (top | sticky as u64) as f64 * pow2(e + sh as i32)
        };
        if negative {
            -r
        } else {
            r
        }
    }
}

/// `x + y` rounded to odd: the nearest-even result, moved one ulp towards the exact sum when inexact and
/// even. Written without branches, so that the combine's loop over a row vectorises.
#[inline(always)]
fn add_round_odd(x: f64, y: f64) -> f64 {
    let (s, e) = two_sum(x, y);
    let bits = s.to_bits();
    let bump = e != 0.0 && bits & 1 == 0;
    let outward = (e > 0.0) == (s > 0.0); // same sign: the exact sum is larger in magnitude
    let delta: u64 = if bump { if outward { 1 } else { u64::MAX } } else { 0 };
    f64::from_bits(bits.wrapping_add(delta))
}

/// `a + b + c` correctly rounded to nearest-even (Boldo and Melquiond, "Emulation of FMA and
/// correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 2008): exact as long as no
/// intermediate overflows or falls below the normal range, which `choose` guarantees.
#[inline(always)]
pub(super) fn sum3_rounded(a: f64, b: f64, c: f64) -> f64 {
    let (uh, ul) = two_sum(b, c);
    let (th, tl) = two_sum(a, uh);
    th + add_round_odd(tl, ul)
}

#[cfg(test)]
mod tests {
    use super::sum3_rounded;
    use crate::exact::ExactSum;
    use proptest::prelude::*;

    /// Integers times powers of two in the range the combine sees, often engineered into near-ties.
    fn term() -> impl Strategy<Value = f64> {
        (any::<i64>(), 0u32..53, -60i32..60).prop_map(|(m, bits, e)| {
            let m = (m >> (63 - bits)) as f64; // an integer of up to `bits` bits, exact
            m * 2f64.powi(e)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20000))]
        #[test]
        fn sum3_is_correctly_rounded(a in term(), b in term(), c in term()) {
            let mut acc = ExactSum::new();
            acc.add(a);
            acc.add(b);
            acc.add(c);
            prop_assert_eq!((sum3_rounded(a, b, c) + 0.0).to_bits(), acc.round().to_bits(), "{:e} {:e} {:e}", a, b, c);
        }
    }

    #[test]
    fn sum3_ties() {
        // exact ties between two f64 neighbours, broken or not by a third term far below
        let cases = [
            (1.0, 2f64.powi(-53), 0.0),
            (1.0, 2f64.powi(-53), 2f64.powi(-200)),
            (1.0, 2f64.powi(-53), -2f64.powi(-200)),
            (1.0 + 2f64.powi(-52), 2f64.powi(-53), -2f64.powi(-150)),
            (2f64.powi(60), -1.0, 2f64.powi(-60)),
            (-1.0, -2f64.powi(-53), 2f64.powi(-106)),
        ];
        for (a, b, c) in cases {
            let mut acc = ExactSum::new();
            acc.add(a);
            acc.add(b);
            acc.add(c);
            let want = acc.round();
            for (x, y, z) in [(a, b, c), (b, c, a), (c, a, b), (a, c, b)] {
                assert_eq!(sum3_rounded(x, y, z).to_bits(), want.to_bits(), "{x:e} {y:e} {z:e}");
            }
        }
    }
}
