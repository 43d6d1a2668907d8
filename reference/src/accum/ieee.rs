//! IEEE f32 accumulation in increasing k: sequential adds of rounded products, or an FMA chain.

use ndarray::{Array2, ArrayView2, Axis};
use rayon::prelude::*;

use super::{fl32, promote_scaled, Scales};

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

pub(super) fn gemm_nt(fma: bool, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> Array2<f64> {
    let (m, n, k) = (a.nrows(), b.nrows(), a.ncols());
    let mut c = Array2::zeros((m, n));
    c.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each(|(i, mut row)| {
        let ar = a.row(i);
        for j in 0..n {
            let br = b.row(j);
            let v = match scales {
                None => chain(fma, ar.iter().copied(), br.iter().copied()),
                Some((sa, sb, kb)) => {
                    let mut fin = 0.0f32;
                    for (blk, k0) in (0..k).step_by(kb).enumerate() {
                        let k1 = (k0 + kb).min(k);
                        let p = chain(fma, (k0..k1).map(|t| ar[t]), (k0..k1).map(|t| br[t]));
                        fin = promote_scaled(fin, sa[[i, blk]], sb[[j, blk]], p);
                    }
                    fin
                }
            };
            row[j] = f64::from(v);
        }
    });
    c
}
