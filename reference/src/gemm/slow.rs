//! The reference engine: one exact accumulator per output entry.

use ndarray::{ArrayView2, ArrayViewMut2, Axis};
use rayon::prelude::*;

use super::Extra;
use crate::exact::ExactSum;

pub(super) fn matmul_nt(a: ArrayView2<f64>, b: ArrayView2<f64>, extra: Option<Extra>, mut c: ArrayViewMut2<f64>) {
    c.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each_init(|| (ExactSum::new(), Vec::new()), |(acc, buf), (i, mut row)| {
        let ai = a.row(i);
        for (j, out) in row.iter_mut().enumerate() {
            acc.clear();
            for (x, y) in ai.iter().zip(b.row(j).iter()) {
                acc.add_product(*x, *y);
            }
            if let Some(f) = extra {
                buf.clear();
                f(i, j, buf);
                for &(x, y) in buf.iter() {
                    acc.add_product(x, y);
                }
            }
            *out = acc.round();
        }
    });
}
