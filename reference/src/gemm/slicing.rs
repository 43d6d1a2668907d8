//! Row-wise error-free splitting of a matrix into integer slices (the Ozaki scheme's first step).
//!
//! For a row with largest exponent `emax` (so every |x| < 2^(emax+1)) and slice width `s`, slice `i`
//! holds, as an integer-valued f64 of magnitude <= 2^s, the part of each element on the grid
//! `2^(emax + 1 - (i+1)·s)`, taken from what the previous slices left (round to nearest, so the
//! remainder after slice `i` is at most half a unit). An element is captured exactly by `n` slices iff its
//! lowest set bit is at or above `2^(emax + 1 - n·s)`, i.e. its *need* `emax + 1 - lsb` is at most `n·s`.
//! What is left after `n` slices is the element's *tail*; tails are handled exactly on the side.
//!
//! This runs once per operand per GEMM, and for the small per-expert GEMMs of an MoE layer it costs as much
//! as the GEMM itself, so the loops are written to vectorise (bit tricks, no branches per element).

use ndarray::ArrayView2;

use crate::exact::pow2;

/// Needs are counted exactly up to this many bits; anything wider is lumped into the last bin.
pub(super) const NEED_CAP: usize = 320;
/// The planner's histograms look at no more than this many rows (evenly spread): plans only steer speed.
const SAMPLE_ROWS: usize = 64;

/// Biased exponent field of an f64.
#[inline(always)]
fn exp_field(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32
}

/// Exponent of the leading bit of a finite non-zero f64 (floor(log2|x|)), subnormals included.
#[inline]
pub(super) fn lead_exp(x: f64) -> i32 {
    let f = exp_field(x);
    if f != 0 {
        f - 1023
    } else {
        let m = x.to_bits() & ((1u64 << 52) - 1);
        -1074 + 63 - m.leading_zeros() as i32
    }
}

/// Exponent of the lowest set bit of a finite non-zero f64.
#[inline(always)]
fn low_exp(x: f64) -> i32 {
    let bits = x.to_bits();
    let f = ((bits >> 52) & 0x7ff) as i32;
    let m = (bits & ((1u64 << 52) - 1)) | (((f != 0) as u64) << 52);
    f.max(1) - 1075 + m.trailing_zeros() as i32
}

/// Largest exponent of each row (None for an all-zero row); a row holding an Inf or NaN gets 1024 (the
/// exponent field 0x7ff), which no finite element has, so one scan also tells whether the operand is finite.
/// The fields are compared as u32 in eight lanes, so the scan vectorises (it runs over every element of
/// both operands of every GEMM).
pub(super) fn row_emax(x: ArrayView2<f64>) -> Vec<Option<i32>> {
    x.rows()
        .into_iter()
        .map(|row| row_max_exp(row.as_slice().expect("standard layout")).unwrap_or(Some(NONFINITE_EMAX)))
        .collect()
}

/// The largest exponent of a row: Some(None) for an all-zero row, None when an element is Inf or NaN.
pub(super) fn row_max_exp(row: &[f64]) -> Option<Option<i32>> {
    match max_exp_field(row) {
        0x7ff => None,
        0 => Some(row.iter().filter(|v| **v != 0.0).map(|v| lead_exp(*v)).max()),
        f => Some(Some(f as i32 - 1023)),
    }
}

/// The largest biased exponent field among `row`'s elements.
#[inline]
fn max_exp_field(row: &[f64]) -> u32 {
    const L: usize = 8;
    let chunks = row.chunks_exact(L);
    let tail = chunks.remainder();
    let mut lanes = [0u32; L];
    for c in chunks {
        for l in 0..L {
            lanes[l] = lanes[l].max(((c[l].to_bits() >> 52) & 0x7ff) as u32);
        }
    }
    tail.iter().fold(lanes.into_iter().max().unwrap_or(0), |m, v| m.max(((v.to_bits() >> 52) & 0x7ff) as u32))
}

/// The exponent [`row_emax`] gives a row that holds an Inf or NaN.
pub(super) const NONFINITE_EMAX: i32 = 0x7ff - 1023;

/// What the planner needs: each row's largest exponent and (on a sample of rows) histograms of how many
/// bits the elements, and whole rows, need below it.
pub(super) struct RowStats {
    pub emax: Vec<Option<i32>>,
    /// Elements (resp. rows) of the sample needing exactly `b` bits, scaled up to the whole matrix.
    elem_need: Vec<f64>,
    row_need: Vec<f64>,
}

impl RowStats {
    /// Every row's largest exponent, and the histograms from a sample of rows (rows contiguous).
    pub fn of(x: ArrayView2<f64>) -> RowStats {
        let emax = row_emax(x);
        if emax.contains(&Some(NONFINITE_EMAX)) {
            // no plan is made for non-finite operands (see `finite`)
            return RowStats { emax, ..RowStats::empty() };
        }
        let mut st = RowStats::empty();
        let step = x.nrows().div_ceil(SAMPLE_ROWS).max(1);
        for r in (0..x.nrows()).step_by(step) {
            st.count(x.row(r).as_slice().expect("standard layout"), emax[r], step as f64);
        }
        st.emax = emax;
        st
    }

    /// The histograms and the largest exponents of the sampled rows only, for an operand in any layout
    /// (the certified engine finds every row's exponent in its split, while the row is in cache): `emax`
    /// and [`RowStats::emax_range`] then describe the sample, and [`RowStats::finite`] only the sample.
    pub fn sampled(x: ArrayView2<f64>) -> RowStats {
        let mut st = RowStats::empty();
        let step = x.nrows().div_ceil(SAMPLE_ROWS).max(1);
        let mut buf = Vec::new();
        for r in (0..x.nrows()).step_by(step) {
            let row = x.row(r);
            let row = match row.as_slice() {
                Some(v) => v,
                None => {
                    buf.clear();
                    buf.extend(row.iter());
                    &buf[..]
                }
            };
            let Some(e) = row_max_exp(row) else {
                st.emax.push(Some(NONFINITE_EMAX));
                return st;
            };
            st.emax.push(e);
            st.count(row, e, step as f64);
        }
        st
    }

    /// No rows yet: empty histograms.
    fn empty() -> RowStats {
        RowStats { emax: Vec::new(), elem_need: vec![0.0; NEED_CAP + 1], row_need: vec![0.0; NEED_CAP + 1] }
    }

    /// Add a sampled row (largest exponent `e`) to the histograms, standing for `scale` rows.
    fn count(&mut self, row: &[f64], e: Option<i32>, scale: f64) {
        let Some(e) = e else { return };
        let mut widest = 0usize;
        for &v in row {
            if v != 0.0 {
                let need = ((e + 1 - low_exp(v)) as usize).min(NEED_CAP);
                self.elem_need[need] += scale;
                widest = widest.max(need);
            }
        }
        self.row_need[widest] += scale;
    }

    /// Number of elements (resp. rows) that `bits` bits below the row maximum do not capture.
    pub fn elems_beyond(&self, bits: usize) -> f64 {
        self.elem_need.iter().skip(bits + 1).sum()
    }
    pub fn rows_beyond(&self, bits: usize) -> f64 {
        self.row_need.iter().skip(bits + 1).sum()
    }
    /// Whether every element is finite (the engines hand non-finite operands to the superaccumulator,
    /// which propagates Inf and NaN as IEEE arithmetic does).
    pub fn finite(&self) -> bool {
        !self.emax.contains(&Some(NONFINITE_EMAX))
    }
    pub fn emax_range(&self) -> Option<(i32, i32)> {
        let mut it = self.emax.iter().flatten();
        let first = *it.next()?;
        Some(it.fold((first, first), |(lo, hi), &e| (lo.min(e), hi.max(e))))
    }
}

/// An upper bound on the bits any element of the row needs below `emax`, from one vectorisable pass:
/// the smallest exponent and the OR of all significands bound every element's lowest set bit from below.
#[inline]
pub(super) fn row_need_bound(row: &[f64], emax: i32) -> i32 {
    let (mut min_field, mut or_m) = (0x7ffu64, 0u64);
    for &v in row {
        let bits = v.to_bits() & !(1u64 << 63);
        let field = bits >> 52;
        let m = (bits & ((1u64 << 52) - 1)) | (((field != 0) as u64) << 52);
        // zeros take no part: they have field 0 and m 0
        let f = if bits == 0 { 0x7ff } else { field.max(1) };
        min_field = min_field.min(f);
        or_m |= m;
    }
    if or_m == 0 {
        return 0;
    }
    emax + 1 - (min_field as i32 - 1075 + or_m.trailing_zeros() as i32)
}

/// Per row: whether every element lies on the grid `bits` bits below the row's largest exponent (by
/// [`row_need_bound`]; an all-zero row fits).
pub(super) fn rows_fit(data: &[f64], k: usize, emax: &[Option<i32>], bits: u32) -> Vec<bool> {
    emax.iter()
        .enumerate()
        .map(|(r, e)| e.is_none_or(|e| row_need_bound(&data[r * k..(r + 1) * k], e) <= bits as i32))
        .collect()
}

/// `σ` for rounding to the nearest multiple of 2^u as `(x + σ) - σ`: adding 1.5·2^(52+u) puts the binary
/// point of the sum exactly at 2^u, so for |x| < 2^(u+51) the rounding is to that grid and the
/// subtraction (and `x` minus the result) is exact.
#[inline(always)]
pub(super) fn grid_sigma(u: i32) -> f64 {
    1.5 * pow2(52 + u)
}

/// A matrix split into `n` slices of `s` bits, plus its tails.
///
/// Slices are kept *unscaled*: slice `i` of row `r` holds values on the grid `2^(unit0[r] - i·s)`, at most
/// `2^s` units in magnitude, so the f64 GEMM of two slices is exact and each of its entries is an integer
/// number of `2^(unit_a + unit_b)`. A single slice without tails is the matrix itself, which is then used
/// in place without a copy (the common case for bf16-valued weights).
pub(super) struct Sliced<'a> {
    /// Rows of slice `i` are rows `i*R .. (i+1)*R` of this [n·R, K] row-major buffer.
    pub vals: std::borrow::Cow<'a, [f64]>,
    /// Exponent of the unit of slice 0 for each row (`emax + 1 - s`); slice `i` has unit exponent
    /// `unit0 - i·s`. Zero rows get 0 (their slices are all zero).
    pub unit0: Vec<i32>,
    /// Per row: (column, tail value) for the elements the slices do not capture exactly.
    pub tails: Vec<Vec<(usize, f64)>>,
}

impl<'a> Sliced<'a> {
    pub fn split(x: ArrayView2<'a, f64>, emax: &[Option<i32>], s: u32, n: usize) -> Sliced<'a> {
        let (rows, k) = (x.nrows(), x.ncols());
        let data = x.to_slice().expect("standard layout");
        let unit0: Vec<i32> = emax.iter().map(|e| e.map_or(0, |e| e + 1 - s as i32)).collect();
        let fits = rows_fit(data, k, emax, (n as u32) * s);
        let tails = vec![Vec::new(); rows];
        if n == 1 && fits.iter().all(|&f| f) {
            return Sliced { vals: std::borrow::Cow::Borrowed(data), unit0, tails };
        }
        let mut tails = tails;
        let mut vals = super::scratch::take_zeroed(n * rows * k);
        let mut rem = vec![0.0f64; k];
        for r in 0..rows {
            if emax[r].is_none() {
                continue;
            }
            let row = &data[r * k..(r + 1) * k];
            if n == 1 && fits[r] {
                vals[r * k..(r + 1) * k].copy_from_slice(row);
                continue;
            }
            rem.copy_from_slice(row);
            for i in 0..n {
                let u = unit0[r] - (i as i32) * s as i32;
                // |rem| < 2^(u+s) <= 2^(u+51): see `grid_sigma`.
                let sigma = grid_sigma(u);
                let out = &mut vals[(i * rows + r) * k..(i * rows + r + 1) * k];
                for (o, v) in out.iter_mut().zip(rem.iter_mut()) {
                    let q = (*v + sigma) - sigma;
                    *v -= q;
                    *o = q;
                }
            }
            if !fits[r] {
                for (c, &v) in rem.iter().enumerate() {
                    if v != 0.0 {
                        tails[r].push((c, v));
                    }
                }
            }
        }
        Sliced { vals: std::borrow::Cow::Owned(vals), unit0, tails }
    }

    /// Give an owned slice buffer back to the scratch pool.
    pub fn recycle(self) {
        if let std::borrow::Cow::Owned(v) = self.vals {
            super::scratch::give(v);
        }
    }
}
