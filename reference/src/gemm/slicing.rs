//! Row-wise error-free splitting of a matrix into integer slices (the Ozaki scheme's first step).
//!
//! For a row with largest exponent `emax` (so every |x| < 2^(emax+1)) and slice width `s`, slice `i`
//! holds, as an integer-valued f64 of magnitude <= 2^s, the part of each element on the grid
//! `2^(emax + 1 - (i+1)·s)`, taken from what the previous slices left (round to nearest, so the
//! remainder after slice `i` is at most half a unit). An element is captured exactly by `n` slices iff its
//! lowest set bit is at or above `2^(emax + 1 - n·s)`, i.e. its *need* `emax + 1 - lsb` is at most `n·s`.
//! What is left after `n` slices is the element's *tail*; tails are handled exactly on the side.

use ndarray::ArrayView2;

use crate::exact::{decompose, pow2};

/// Needs are counted exactly up to this many bits; anything wider is lumped into the last bin.
pub(super) const NEED_CAP: usize = 320;

/// Exponent of the leading bit of a finite non-zero f64 (floor(log2|x|)).
#[inline]
pub(super) fn lead_exp(x: f64) -> i32 {
    let (_, m, e) = decompose(x);
    e + 63 - m.leading_zeros() as i32
}

/// Exponent of the lowest set bit of a finite non-zero f64.
#[inline]
fn low_exp(x: f64) -> i32 {
    let (_, m, e) = decompose(x);
    e + m.trailing_zeros() as i32
}

/// Per-row facts the planner needs: each row's largest exponent and histograms of how many bits the
/// elements (and whole rows) need below it.
pub(super) struct RowStats {
    /// `None` for an all-zero row.
    pub emax: Vec<Option<i32>>,
    /// `elem_need[b]` = number of elements needing exactly `b` bits (b capped at NEED_CAP).
    pub elem_need: Vec<u64>,
    /// `row_need[b]` = number of rows whose widest element needs `b` bits.
    pub row_need: Vec<u64>,
}

impl RowStats {
    pub fn of(x: ArrayView2<f64>) -> RowStats {
        let mut emax = Vec::with_capacity(x.nrows());
        let mut elem_need = vec![0u64; NEED_CAP + 1];
        let mut row_need = vec![0u64; NEED_CAP + 1];
        for row in x.rows() {
            let e = row.iter().filter(|v| **v != 0.0).map(|v| lead_exp(*v)).max();
            emax.push(e);
            let Some(e) = e else { continue };
            let mut widest = 0usize;
            for &v in row.iter() {
                if v != 0.0 {
                    let need = ((e + 1 - low_exp(v)) as usize).min(NEED_CAP);
                    elem_need[need] += 1;
                    widest = widest.max(need);
                }
            }
            row_need[widest] += 1;
        }
        RowStats { emax, elem_need, row_need }
    }

    /// Number of elements (resp. rows) that `bits` bits below the row maximum do not capture.
    pub fn elems_beyond(&self, bits: usize) -> u64 {
        self.elem_need.iter().skip(bits + 1).sum()
    }
    pub fn rows_beyond(&self, bits: usize) -> u64 {
        self.row_need.iter().skip(bits + 1).sum()
    }
    pub fn emax_range(&self) -> Option<(i32, i32)> {
        let mut it = self.emax.iter().flatten();
        let first = *it.next()?;
        Some(it.fold((first, first), |(lo, hi), &e| (lo.min(e), hi.max(e))))
    }
}

/// A matrix split into `n` integer slices of `s` bits, plus its tails.
pub(super) struct Sliced {
    /// Rows of slice `i` are rows `i*R .. (i+1)*R` of this [n·R, K] row-major buffer.
    pub ints: Vec<f64>,
    /// Exponent of the unit of slice 0 for each row (`emax + 1 - s`); slice `i` has unit exponent
    /// `unit0 - i·s`. Zero rows get 0 (their slices are all zero).
    pub unit0: Vec<i32>,
    /// Per row: (column, tail value) for the elements the slices do not capture exactly.
    pub tails: Vec<Vec<(usize, f64)>>,
}

impl Sliced {
    pub fn split(x: ArrayView2<f64>, stats: &RowStats, s: u32, n: usize) -> Sliced {
        let (rows, k) = (x.nrows(), x.ncols());
        let mut ints = vec![0.0f64; n * rows * k];
        let mut unit0 = vec![0i32; rows];
        let mut tails = vec![Vec::new(); rows];
        for (r, row) in x.rows().into_iter().enumerate() {
            let Some(e) = stats.emax[r] else { continue };
            let u0 = e + 1 - s as i32;
            unit0[r] = u0;
            for (c, &v) in row.iter().enumerate() {
                let mut rem = v;
                for i in 0..n {
                    if rem == 0.0 {
                        break;
                    }
                    let u = u0 - (i as i32) * s as i32;
                    // Round `rem` to the nearest multiple of 2^u: adding 1.5·2^(52+u) puts the
                    // binary point of the sum exactly at 2^u (|rem| < 2^(u+s) <= 2^(u+51)).
                    let sigma = 1.5 * pow2(52 + u);
                    let q = (rem + sigma) - sigma;
                    rem -= q; // exact: q is rem rounded to a coarser grid
                    ints[(i * rows + r) * k + c] = q * pow2(-u);
                }
                if rem != 0.0 {
                    tails[r].push((c, rem));
                }
            }
        }
        Sliced { ints, unit0, tails }
    }
}
