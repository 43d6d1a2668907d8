//! IEEE f32 accumulation in increasing k: sequential adds of rounded products, or an FMA chain.
//!
//! The GEMM runs 16 independent chains side by side (one per output column of a panel), which the
//! compiler vectorises; each chain is still the plain sequential loop of [`dot`].

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use super::{fl32, promote_scaled, Scales};

/// Output columns per panel.
const NR: usize = 16;

/// One f32 dot over `a`, `b` (operands rounded to f32 first, as a kernel loading them would).
#[inline]
fn chain(fma: bool, a: impl Iterator<Item = f64>, b: impl Iterator<Item = f64>) -> f32 {
    let mut acc = 0.0f32;
    for (x, y) in a.zip(b) {
        let (x, y) = (fl32(x), fl32(y));
        acc = if fma { x.mul_add(y, acc) } else { acc + x * y };
    }
    acc
}

/// The dot product of two slices under the model.
pub(super) fn dot(fma: bool, a: &[f64], b: &[f64]) -> f64 {
    f64::from(chain(fma, a.iter().copied(), b.iter().copied()))
}

/// `NR` chains over `k0..k1`: `a` one row (f32), `bp` a panel, k-major.
#[inline(always)]
fn lanes(fma: bool, a: &[f32], bp: &[[f32; NR]], k0: usize, k1: usize) -> [f32; NR] {
    let mut acc = [0.0f32; NR];
    for k in k0..k1 {
        let x = a[k];
        let b = &bp[k];
        for l in 0..NR {
            acc[l] = if fma { x.mul_add(b[l], acc[l]) } else { acc[l] + x * b[l] };
        }
    }
    acc
}

pub(super) fn gemm_nt(fma: bool, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> Array2<f64> {
    let (m, n, k) = (a.nrows(), b.nrows(), a.ncols());
    let mut c = Array2::zeros((m, n));
    if m == 0 || n == 0 {
        return c;
    }
    let np = n.div_ceil(NR);
    // B as f32 panels of NR rows, k-major; missing rows of the last panel are zeros (their lanes are
    // computed and dropped).
    let mut bp = vec![[0.0f32; NR]; np * k];
    for j in 0..n {
        for t in 0..k {
            bp[(j / NR) * k + t][j % NR] = fl32(b[[j, t]]);
        }
    }
    c.as_slice_mut().expect("fresh array").par_chunks_mut(n).enumerate().for_each(|(i, out)| {
        let ar: Vec<f32> = a.row(i).iter().map(|&v| fl32(v)).collect();
        for p in 0..np {
            let panel = &bp[p * k..(p + 1) * k];
            let v = match scales {
                None => lanes(fma, &ar, panel, 0, k),
                Some((sa, sb, kb)) => {
                    let mut fin = [0.0f32; NR];
                    for (blk, k0) in (0..k).step_by(kb).enumerate() {
                        let part = lanes(fma, &ar, panel, k0, (k0 + kb).min(k));
                        for l in 0..NR.min(n - p * NR) {
                            fin[l] = promote_scaled(fin[l], sa[[i, blk]], sb[[p * NR + l, blk]], part[l]);
                        }
                    }
                    fin
                }
            };
            for l in 0..NR.min(n - p * NR) {
                out[p * NR + l] = f64::from(v[l]);
            }
        }
    });
    c
}
