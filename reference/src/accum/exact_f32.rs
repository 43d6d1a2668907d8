//! The exact sum rounded once to f32.
//!
//! `matmul_nt` gives the exact value rounded to f64; rounding that to f32 is a second rounding, wrong
//! only when the f64 lands exactly halfway between two f32 values while the exact value does not. Those
//! entries (rare) are recomputed: the sign of `exact - midpoint`, computed exactly, picks the f32.

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::exact::ExactSum;
use crate::gemm::matmul_nt;

use super::Scales;

/// Whether `r` (finite) lies exactly halfway between two adjacent f32 values.
fn is_f32_midpoint(r: f64) -> bool {
    if !r.is_finite() || r == 0.0 {
        return false;
    }
    let f = r as f32;
    if f64::from(f) == r {
        return false;
    }
    let (lo, hi) = if f64::from(f) < r { (f, next_up(f)) } else { (next_down(f), f) };
    (f64::from(lo) + f64::from(hi)) * 0.5 == r
}

fn next_up(f: f32) -> f32 {
    if f >= 0.0 { f32::from_bits(f.to_bits() + 1) } else if f == 0.0 { f32::from_bits(1) } else { f32::from_bits(f.to_bits() - 1) }
}

fn next_down(f: f32) -> f32 {
    -next_up(-f)
}

/// Round the exact value whose f64 rounding is `r` (a midpoint) to f32, given the exact terms.
fn round_midpoint(r: f64, terms: impl Iterator<Item = (f64, f64)>) -> f64 {
    let mut s = ExactSum::new();
    for (x, y) in terms {
        s.add_product(x, y);
    }
    s.add(-r);
    let d = s.round();
    // Exactly on the midpoint: ties to even, which `as f32` does; otherwise go the way of the residual.
    let (lo, hi) = {
        let f = r as f32;
        if f64::from(f) < r { (f, next_up(f)) } else { (next_down(f), f) }
    };
    f64::from(if d > 0.0 { hi } else if d < 0.0 { lo } else { r as f32 })
}

pub(super) fn dot(a: &[f64], b: &[f64], _scales: Option<Scales>) -> f64 {
    let r = crate::exact::dot(a.iter().copied().zip(b.iter().copied()));
    if is_f32_midpoint(r) {
        round_midpoint(r, a.iter().copied().zip(b.iter().copied()))
    } else {
        f64::from(r as f32)
    }
}

pub(super) fn gemm_nt(a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> Array2<f64> {
    // With scales, fold each block's scale into its operand: a·sa is exact in f64 (an FP8 or bf16 value
    // times an f32 scale needs at most 32 significant bits).
    let (a, b) = match scales {
        None => (a.to_owned(), b.to_owned()),
        Some((sa, sb, kb)) => (
            Array2::from_shape_fn(a.dim(), |(i, t)| a[[i, t]] * sa[[i, t / kb]]),
            Array2::from_shape_fn(b.dim(), |(j, t)| b[[j, t]] * sb[[j, t / kb]]),
        ),
    };
    let mut c = matmul_nt(a.view(), b.view());
    let n = c.ncols();
    c.as_slice_mut().expect("fresh array").par_chunks_mut(n.max(1)).enumerate().for_each(|(i, row)| {
        for (j, v) in row.iter_mut().enumerate() {
            *v = if is_f32_midpoint(*v) {
                round_midpoint(*v, a.row(i).iter().copied().zip(b.row(j).iter().copied()))
            } else {
                f64::from(*v as f32)
            };
        }
    });
    c
}
