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
use ndarray::{Array2, ArrayView2, Axis};
use rayon::prelude::*;

use super::slicing::{RowStats, Sliced, NEED_CAP};
use super::Extra;
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
const COST_COMBINE_TERM: f64 = 40.0;

/// The slice products of one entry, shifted onto the smallest unit, must fit an i128:
/// `53 + (n_a-1)·s_a + (n_b-1)·s_b + ceil(log2(n_a·n_b)) <= 126`.
fn fits_i128(s_a: u32, n_a: usize, s_b: u32, n_b: usize) -> bool {
    let terms = (n_a * n_b) as u32;
    let log = u32::BITS - (terms.max(1) - 1).leading_zeros();
    53 + (n_a as u32 - 1) * s_a + (n_b as u32 - 1) * s_b + log <= 126
}

/// Bits available to a slice pair: `s_a + s_b <= 53 - ceil(log2 K)`.
fn pair_budget(k: usize) -> u32 {
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
                if !fits_i128(s_a, n_a, s_b, n_b) {
                    continue;
                }
                let gemm = (n_a * n_b) as f64 * m as f64 * n as f64 * k as f64;
                let slow = (rows_a * n as f64 + rows_b * m as f64) * COST_SLOW_ENTRY;
                let tails = (tail_a * n as f64 + tail_b * m as f64) * COST_TAIL_PRODUCT;
                let combine = (m * n) as f64 * COST_COMBINE_TERM * (n_a * n_b) as f64;
                let cost = gemm + slow + tails + combine;
                let plan = OzakiPlan { s_a, n_a, s_b, n_b };
                if best.is_none_or(|(c, _)| cost < c) {
                    best = Some((cost, plan));
                }
            }
        }
    }
    let plan = best?.1;
    // Every slice unit and every product of units must stay in the normal range, where scaling by them is
    // exact, and far from overflow; otherwise the reference engine takes the whole GEMM.
    let (lo_a, hi_a) = a.emax_range().unwrap_or((0, 0));
    let (lo_b, hi_b) = b.emax_range().unwrap_or((0, 0));
    let min_unit_a = lo_a + 1 - (plan.n_a as i32) * plan.s_a as i32;
    let min_unit_b = lo_b + 1 - (plan.n_b as i32) * plan.s_b as i32;
    let ok = min_unit_a >= -1000
        && min_unit_b >= -1000
        && hi_a <= 900
        && hi_b <= 900
        && min_unit_a + min_unit_b >= -1022
        && hi_a + hi_b <= 900;
    ok.then_some(plan)
}

/// The plan the fast engine would use for `a · bᵀ` (None: it would defer to the reference engine).
pub fn plan_for(a: ArrayView2<f64>, b: ArrayView2<f64>) -> Option<OzakiPlan> {
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    choose(&RowStats::of(a.view()), &RowStats::of(b.view()), a.nrows(), b.nrows(), a.ncols())
}

/// `C = A_stack · B_stackᵀ` in plain f64 (exact here by construction of the slices).
fn f64_gemm_nt(a: &[f64], ra: usize, b: &[f64], rb: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; ra * rb];
    let par = if (ra * rb * k) > (1 << 22) { Parallelism::Rayon(0) } else { Parallelism::None };
    // SAFETY: the pointers cover ra·k, rb·k and ra·rb elements with the strides given.
    unsafe {
        gemm::gemm(
            ra,
            rb,
            k,
            c.as_mut_ptr(),
            1,
            rb as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
    c
}

pub(super) fn matmul_nt(a: ArrayView2<f64>, b: ArrayView2<f64>, extra: Option<Extra>) -> Array2<f64> {
    let (m, n, k) = (a.nrows(), b.nrows(), a.ncols());
    if a.iter().chain(b.iter()).any(|v| !v.is_finite()) {
        return super::slow::matmul_nt(a, b, extra);
    }
    let probe = std::env::var_os("MOE_ORACLE_GEMM_PROBE").is_some();
    let t0 = std::time::Instant::now();
    let (sa, sb) = (RowStats::of(a), RowStats::of(b));
    let t_stats = t0.elapsed();
    let Some(plan) = choose(&sa, &sb, m, n, k) else {
        return super::slow::matmul_nt(a, b, extra);
    };
    let xa = Sliced::split(a, &sa.emax, plan.s_a, plan.n_a);
    let xb = Sliced::split(b, &sb.emax, plan.s_b, plan.n_b);
    let t_split = t0.elapsed();
    let stack = f64_gemm_nt(&xa.ints, plan.n_a * m, &xb.ints, plan.n_b * n, k);
    let t_gemm = t0.elapsed();
    let ldc = plan.n_b * n;

    // Captured part of A (A minus its tails), needed only for B's tail products.
    let b_has_tails = xb.tails.iter().any(|t| !t.is_empty());
    let a_captured: Option<Array2<f64>> = b_has_tails.then(|| {
        let mut cap = a.to_owned();
        for (r, tails) in xa.tails.iter().enumerate() {
            for &(col, t) in tails {
                cap[[r, col]] -= t; // exact: removes the low bits the tail holds
            }
        }
        cap
    });

    // Shift of slice pair (i, j) above the entry's smallest unit.
    let shifts: Vec<u32> = (0..plan.n_a)
        .flat_map(|i| {
            (0..plan.n_b).map(move |j| (plan.n_a - 1 - i) as u32 * plan.s_a + (plan.n_b - 1 - j) as u32 * plan.s_b)
        })
        .collect();
    let low_a = (plan.n_a as i32 - 1) * plan.s_a as i32;
    let low_b = (plan.n_b as i32 - 1) * plan.s_b as i32;

    let mut c = Array2::<f64>::zeros((m, n));
    c.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each_init(
        || (SmallSum::new(), ExactSum::new(), Vec::new()),
        |(small, exact, pairs), (r, mut out)| {
            let a_tails = &xa.tails[r];
            let ua = xa.unit0[r] - low_a;
            for (col, dst) in out.iter_mut().enumerate() {
                // The slice products as one exact integer in units of 2^(ua + ub).
                let mut t: i128 = 0;
                for i in 0..plan.n_a {
                    let base = (i * m + r) * ldc + col;
                    for j in 0..plan.n_b {
                        let sv = stack[base + j * n] as i64; // exact: an integer of magnitude <= 2^53
                        t += (sv as i128) << shifts[i * plan.n_b + j];
                    }
                }
                let ub = xb.unit0[col] - low_b;
                let b_tails = &xb.tails[col];
                pairs.clear();
                if let Some(f) = extra {
                    f(r, col, pairs);
                }
                if a_tails.is_empty() && b_tails.is_empty() && pairs.is_empty() {
                    // One rounding: i128 -> f64 rounds to nearest-even; the power-of-two scale is exact
                    // because `choose` keeps every nonzero result in the normal range.
                    *dst = (t as f64) * pow2(ua + ub);
                    continue;
                }
                // Entries touched by tails or extra terms: add the integer in exact 42-bit pieces.
                let pieces = [(t & ((1 << 42) - 1)) as f64, ((t >> 42) & ((1 << 42) - 1)) as f64, (t >> 84) as f64];
                let safe = pairs.iter().all(|&(x, y)| product_is_safe(x, y))
                    && a_tails.iter().all(|&(kk, tv)| product_is_safe(tv, b[[col, kk]]))
                    && (b_tails.is_empty()
                        || b_tails.iter().all(|&(kk, tv)| {
                            a_captured.as_ref().is_some_and(|cap| product_is_safe(cap[[r, kk]], tv))
                        }));
                let feed = |acc: &mut dyn Accumulate| {
                    for (p, &v) in pieces.iter().enumerate() {
                        acc.add(v * pow2(ua + ub + 42 * p as i32));
                    }
                    for &(x, y) in pairs.iter() {
                        acc.add_product(x, y);
                    }
                    for &(kk, tv) in a_tails {
                        acc.add_product(tv, b[[col, kk]]);
                    }
                    if let Some(cap) = &a_captured {
                        for &(kk, tv) in b_tails {
                            acc.add_product(cap[[r, kk]], tv);
                        }
                    }
                };
                if safe {
                    small.clear();
                    feed(small);
                    *dst = small.round();
                } else {
                    exact.clear();
                    feed(exact);
                    *dst = exact.round();
                }
            }
        },
    );
    if probe {
        eprintln!(
            "gemm {m}x{n}x{k} {plan:?}: stats {:?} split {:?} gemm {:?} combine {:?}",
            t_stats,
            t_split - t_stats,
            t_gemm - t_split,
            t0.elapsed() - t_gemm
        );
    }
    c
}
