//! Exact GEMM: `C[m, n] = round(Σ_k A[m, k] * B[n, k])`, every entry correctly rounded.
//!
//! Both operands are given with the contraction axis last ("NT" layout), which is how every GEMM of the
//! MoE layer reads once the weights are viewed the right way round (see [`crate::layer`]).
//!
//! Three engines give bit-identical results:
//! - [`Engine::Reference`]: one superaccumulator per entry ([`crate::exact::ExactSum`]). Slow, obviously right.
//! - [`Engine::Ozaki`]: splits each operand row into integer slices small enough that ordinary f64 GEMMs of
//!   slice pairs are exact ([`slicing`], [`ozaki`]); the few elements whose bits do not fit the chosen
//!   slices are handled exactly on the side. Also takes the GEMMs with extra terms (`grad.x`).
//! - [`Engine::Certified`] (default): one exact slice pair, what the slices leave in plain f64 with an
//!   a-priori error bound, and a rounding that is proved correct entry by entry or else redone exactly
//!   ([`certified`]). Fewer f64 GEMM passes than `Ozaki` for every operand that is not bf16-valued.

mod certified;
mod ozaki;
mod scratch;
mod slicing;
mod slow;

use ndarray::{Array2, ArrayView2, ArrayViewMut2};

pub use certified::CertifiedStats;
pub use ozaki::{plan_for, OzakiPlan};

/// Which algorithm computes the exact GEMM (the result is the same bits either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Engine {
    /// Per-entry superaccumulator.
    Reference,
    /// Error-free slicing onto f64 GEMMs, with exact side corrections.
    Ozaki,
    /// One exact slice pair plus a certified f64 tail, falling back to the superaccumulator per entry
    /// (and to `Ozaki` for extra terms).
    #[default]
    Certified,
}

/// `C = A · Bᵀ` with every entry correctly rounded; `a` is [M, K], `b` is [N, K].
pub fn matmul_nt(a: ArrayView2<f64>, b: ArrayView2<f64>) -> Array2<f64> {
    matmul_nt_with(Engine::default(), a, b)
}

/// [`matmul_nt`] with an explicit engine.
pub fn matmul_nt_with(engine: Engine, a: ArrayView2<f64>, b: ArrayView2<f64>) -> Array2<f64> {
    matmul_nt_plus(engine, a, b, None)
}

/// Extra exact terms for entry `(m, n)`: push `(x, y)` pairs whose products join the entry's sum.
pub type Extra<'a> = &'a (dyn Fn(usize, usize, &mut Vec<(f64, f64)>) + Sync);

/// `C[m, n] = round(Σ_k A[m, k]·B[n, k] + Σ extra(m, n))`: a GEMM and further exact terms in one rounding
/// (how `grad.x` adds the un-dispatch sum to the router's contribution).
pub fn matmul_nt_plus(engine: Engine, a: ArrayView2<f64>, b: ArrayView2<f64>, extra: Option<Extra>) -> Array2<f64> {
    let mut c = Array2::zeros((a.nrows(), b.nrows()));
    matmul_nt_into(engine, a, b, extra, c.view_mut());
    c
}

/// [`matmul_nt_plus`] writing into `out` ([M, N], rows contiguous), so callers can place per-expert
/// results straight into the layer's arrays. Operands in any layout; non-contiguous ones are copied into
/// reused scratch memory.
pub fn matmul_nt_into(engine: Engine, a: ArrayView2<f64>, b: ArrayView2<f64>, extra: Option<Extra>, out: ArrayViewMut2<f64>) {
    assert_eq!(a.ncols(), b.ncols(), "contraction lengths differ");
    assert_eq!(out.dim(), (a.nrows(), b.nrows()), "output shape");
    let (m, n, k) = (a.nrows(), b.nrows(), a.ncols());
    if m == 0 || n == 0 {
        return;
    }
    if engine == Engine::Certified && extra.is_none() && k > 0 && certified_layout(&a) && certified_layout(&b) {
        // the certified engine reads transposed operands in place (its split brings them into row order)
        certified::matmul_nt(a, b, out);
        return;
    }
    with_contiguous(a, |a| {
        with_contiguous(b, |b| {
            if k == 0 {
                return slow::matmul_nt(a, b, extra, out);
            }
            match engine {
                Engine::Reference => slow::matmul_nt(a, b, extra, out),
                Engine::Ozaki => ozaki::matmul_nt(a, b, extra, out),
                Engine::Certified if extra.is_some() => ozaki::matmul_nt(a, b, extra, out),
                Engine::Certified => {
                    certified::matmul_nt(a, b, out);
                }
            }
        })
    })
}

/// [`Engine::Certified`]'s GEMM, returning how the call went (slice widths, entries recomputed exactly):
/// for tests and probes that must see the fallback path taken.
pub fn matmul_nt_certified_stats(a: ArrayView2<f64>, b: ArrayView2<f64>) -> (Array2<f64>, CertifiedStats) {
    assert_eq!(a.ncols(), b.ncols(), "contraction lengths differ");
    let mut c = Array2::zeros((a.nrows(), b.nrows()));
    if a.nrows() == 0 || b.nrows() == 0 || a.ncols() == 0 {
        matmul_nt_into(Engine::Reference, a, b, None, c.view_mut());
        return (c, CertifiedStats::default());
    }
    let stats = if certified_layout(&a) && certified_layout(&b) {
        certified::matmul_nt(a, b, c.view_mut())
    } else {
        with_contiguous(a, |a| with_contiguous(b, |b| certified::matmul_nt(a, b, c.view_mut())))
    };
    (c, stats)
}

/// Run `f` on a row-major view of `x` (copied into scratch memory when `x` is not already one).
fn with_contiguous<R>(x: ArrayView2<f64>, f: impl FnOnce(ArrayView2<f64>) -> R) -> R {
    if x.is_standard_layout() {
        return f(x);
    }
    let mut buf = scratch::take(x.len());
    if x.t().is_standard_layout() {
        transpose_rows_into(x, 0, x.nrows(), &mut buf);
    } else {
        for (dst, src) in buf.iter_mut().zip(x.iter()) {
            *dst = *src;
        }
    }
    let r = f(ArrayView2::from_shape(x.dim(), &buf).expect("shape matches length"));
    scratch::give(buf);
    r
}

/// Rows `r0..r1` of `x`, a transposed row-major array (weights used as Wᵀ), into the same rows of `dst`
/// ([rows, cols] row-major).
///
/// Copied through 8 x 8 tiles held in registers: eight source lines are read, then eight destination lines
/// written whole. Why not a larger tile: the rows of `dst` are `cols · 8` bytes apart (12-16 KiB for the
/// layer's weights), a multiple of 4 KiB, so they all fall into one L1 set; a 32-row tile kept 32 partly
/// written lines there and thrashed (8% of the exact layer's CPU time).
pub(super) fn transpose_rows_into(x: ArrayView2<f64>, r0: usize, r1: usize, dst: &mut [f64]) {
    const T: usize = 8;
    let (rows, cols) = x.dim();
    let src = x.t();
    let src = src.as_slice().expect("a transposed row-major array");
    assert!(r1 <= rows && dst.len() >= r1 * cols);
    for rt in (r0..r1).step_by(T) {
        let nr = T.min(r1 - rt);
        for ct in (0..cols).step_by(T) {
            let nc = T.min(cols - ct);
            let mut tile = [[0.0f64; T]; T]; // tile[c][r]
            if nr == T && nc == T {
                for (c, t) in tile.iter_mut().enumerate() {
                    t.copy_from_slice(&src[(ct + c) * rows + rt..][..T]);
                }
                for r in 0..T {
                    let d: &mut [f64; T] = (&mut dst[(rt + r) * cols + ct..][..T]).try_into().expect("8 wide");
                    for c in 0..T {
                        d[c] = tile[c][r];
                    }
                }
            } else {
                for c in 0..nc {
                    tile[c][..nr].copy_from_slice(&src[(ct + c) * rows + rt..][..nr]);
                }
                for r in 0..nr {
                    let d = &mut dst[(rt + r) * cols + ct..][..nc];
                    for (c, d) in d.iter_mut().enumerate() {
                        *d = tile[c][r];
                    }
                }
            }
        }
    }
}

/// Whether [`certified`] takes `x` as it is: rows contiguous, or the transpose of such an array.
fn certified_layout(x: &ArrayView2<f64>) -> bool {
    x.is_standard_layout() || x.t().is_standard_layout()
}
