//! Block-scaled quantisation as data: a [`QuantSpec`] (element format, [`Block`] shape, [`ScaleRule`],
//! overflow behaviour of the element cast) applied to a 2-D tensor gives a [`QuantTensor`]: the elements
//! on the format's grid, one dequantisation scale per block, and the UE8M0 codes of MX scales.
//!
//! Per block, operation by operation as the kernels do it (`shared/docs/numerics.md`, "Block-scaled
//! recipes"; the rule-specific steps are in [`rule`]):
//! 1. `amax` = the f32 maximum of `|x|` over the block (NaN if any element is NaN, as `torch.amax`);
//! 2. the rule turns `amax` into one f32 operation per element, `x * m` (most rules) or `x / sf`
//!    (`deepgemm-div`), and a dequant scale `scale`;
//! 3. each element: `y = fl32(x * m)` or `fl32(x / sf)`, then `q = cast(format, y)` rounded to nearest
//!    even with the spec's [`Overflow`] (kernels saturate: PTX `satfinite`);
//! 4. the tensor reconstructs as `q * scale` ([`QuantTensor::dequantize`], exact in f64).
//!
//! Inputs are f32-representable (bf16 or f32 data); other values are first rounded to f32, as a kernel
//! reading them would.

mod block;
mod bound;
mod rule;

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::formats::{self, Format, Overflow};

pub use block::Block;
pub use rule::{MxRounding, ScaleRule};
use rule::Factor;

/// A bad block shape or quantisation description.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    #[error("bad block shape {0:?} (expected RxC with positive integers, e.g. 1x128, 128x128, 32x1)")]
    BadBlock(String),
}

/// How one tensor is quantised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuantSpec {
    /// Element format (E4M3, E5M2, E2M1; bf16 and f16 work too).
    pub format: Format,
    /// Which elements share a scale.
    pub block: Block,
    /// How the scale follows from the block's amax.
    pub rule: ScaleRule,
    /// What the element cast does on overflow (kernels: [`Overflow::Saturate`]).
    pub overflow: Overflow,
}

/// A quantised tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantTensor {
    pub spec: QuantSpec,
    /// Element values on the format's grid (before scaling), same shape as the input.
    pub q: Array2<f64>,
    /// Per block: the factor that multiplies `q` to reconstruct `x` (the dequant scale), shape
    /// `spec.block.grid(rows, cols)`.
    pub scale: Array2<f64>,
    /// The UE8M0 code of each scale when the rule produces them (MX rules).
    pub scale_bits: Option<Array2<u8>>,
}

/// Round to f32 (nearest even), as an f64.
#[inline]
fn fl32(x: f64) -> f32 {
    x as f32
}

/// Quantise `x` under `spec`.
pub fn quantize(x: ArrayView2<f64>, spec: &QuantSpec) -> QuantTensor {
    let (rows, cols) = x.dim();
    let (gr, gc) = spec.block.grid(rows, cols);
    let (br, bc) = spec.block.dims();
    let mut q = crate::scratch::filled(rows * cols, 0.0f64); // per-expert weight codes: see `scratch`
    let mut scale = vec![0.0f64; gr * gc];
    let mut codes = vec![0u8; gr * gc];
    if rows > 0 && cols > 0 {
        // One strip of block rows per task, written in place.
        q.par_chunks_mut(br * cols)
            .zip(scale.par_chunks_mut(gc))
            .zip(codes.par_chunks_mut(gc))
            .enumerate()
            .for_each(|(bi, ((qs, sc), cd))| {
                let r0 = bi * br;
                let r1 = (r0 + br).min(rows);
                for bj in 0..gc {
                    let c0 = bj * bc;
                    let c1 = (c0 + bc).min(cols);
                    let bs = spec.rule.block_scale(amax_f32(x.slice(ndarray::s![r0..r1, c0..c1])), spec.format);
                    for r in r0..r1 {
                        let xr = x.row(r);
                        let qr = &mut qs[(r - r0) * cols..(r - r0 + 1) * cols];
                        match (xr.as_slice(), bs.factor) {
                            (Some(xs), Factor::Mul(m)) => cast_run(spec, &xs[c0..c1], |x| x * m, &mut qr[c0..c1]),
                            (Some(xs), Factor::Div(d)) => cast_run(spec, &xs[c0..c1], |x| x / d, &mut qr[c0..c1]),
                            (None, f) => {
                                for c in c0..c1 {
                                    // One f32 operation, then the element cast.
                                    qr[c] = cast_element(spec.format, f.apply(fl32(xr[c])), spec.overflow);
                                }
                            }
                        }
                    }
                    sc[bj] = f64::from(bs.scale);
                    cd[bj] = bs.bits.unwrap_or(0);
                }
            });
    }
    let scale_bits = matches!(spec.rule, ScaleRule::Mx(_))
        .then(|| Array2::from_shape_vec((gr, gc), codes).expect("grid shape"));
    QuantTensor {
        spec: *spec,
        q: Array2::from_shape_vec((rows, cols), q).expect("input shape"),
        scale: Array2::from_shape_vec((gr, gc), scale).expect("grid shape"),
        scale_bits,
    }
}

/// `formats::quantize(format, y, overflow)` for an f32 `y`, with a fast path for the element formats
/// (E4M3, E5M2, E2M1) on finite values: round to nearest even on the f32's bits (normal range) or by
/// adding and subtracting `2^23` times the subnormal spacing (an f32 addition rounds to nearest even at
/// exactly that spacing), then saturate. Anything else (NaN, infinities, a non-saturating overflow, other
/// formats) goes through `formats::quantize`. `reference/tests/quant.rs` checks the two agree bit for bit
/// on every bf16 value times a range of factors, on every value next to each grid point and midpoint, and
/// on random f32 bit patterns.
#[inline]
pub fn cast_element(format: Format, y: f32, overflow: Overflow) -> f64 {
    // (mantissa bits, lowest normal exponent, largest finite, E2M1 saturates even when non-saturating)
    let (m, emin, max, always_sat) = match format {
        Format::E4M3 => (3u32, -6i32, 448.0f32, false),
        Format::E5M2 => (2, -14, 57344.0, false),
        Format::E2M1 => (1, 0, 6.0, true),
        _ => return formats::quantize(format, f64::from(y), overflow),
    };
    if !y.is_finite() {
        return formats::quantize(format, f64::from(y), overflow);
    }
    let a = y.abs();
    let r = if a < f32::from_bits(((emin + 127) as u32) << 23) {
        // Below 2^emin the spacing is 2^(emin - m): C has exactly that ulp, and a + C stays in C's binade.
        let c = f32::from_bits(((emin - m as i32 + 23 + 127) as u32) << 23);
        (a + c) - c
    } else {
        let shift = 23 - m;
        let b = a.to_bits();
        let bias = ((b >> shift) & 1) + (1 << (shift - 1)) - 1;
        f32::from_bits((b + bias) & !((1u32 << shift) - 1))
    };
    let r = if r > max {
        if overflow == Overflow::Saturate || always_sat {
            max
        } else {
            return formats::quantize(format, f64::from(y), overflow);
        }
    } else {
        r
    };
    f64::from(if y.is_sign_negative() { -r } else { r })
}

/// `out[i] = cast_element(format, op(fl32(xs[i])), overflow)` for a run of one block's row, `op` the
/// block's one f32 operation (a closure, so that each kind gets its own loop). For the saturating element
/// formats the cast is written without branches ([`cast_saturating`], which the compiler vectorises) and
/// only a run holding a non-finite product goes element by element.
#[inline(always)]
fn cast_run(spec: &QuantSpec, xs: &[f64], op: impl Fn(f32) -> f32, out: &mut [f64]) {
    let params = match spec.format {
        Format::E4M3 if spec.overflow == Overflow::Saturate => Some((3u32, -6i32, 448.0f32)),
        Format::E5M2 if spec.overflow == Overflow::Saturate => Some((2, -14, 57344.0)),
        Format::E2M1 => Some((1, 0, 6.0)), // saturates in both modes
        _ => None,
    };
    if let Some((m, emin, max)) = params {
        let mut finite = true;
        for (o, &x) in out.iter_mut().zip(xs) {
            let y = op(fl32(x));
            finite &= y.is_finite();
            *o = cast_saturating(y, m, emin, max);
        }
        if finite {
            return;
        }
    }
    for (o, &x) in out.iter_mut().zip(xs) {
        *o = cast_element(spec.format, op(fl32(x)), spec.overflow);
    }
}

/// [`cast_element`] of a finite `y` for a saturating format with `m` mantissa bits, lowest normal
/// exponent `emin` and largest value `max`: both roundings computed and one selected, so that a loop of
/// it has no branches. The same arithmetic as [`cast_element`]'s (tests compare the two on every path).
#[inline(always)]
fn cast_saturating(y: f32, m: u32, emin: i32, max: f32) -> f64 {
    let a = y.abs();
    let c = f32::from_bits(((emin - m as i32 + 23 + 127) as u32) << 23);
    let sub = (a + c) - c;
    let shift = 23 - m;
    let b = a.to_bits();
    let bias = ((b >> shift) & 1) + (1 << (shift - 1)) - 1;
    let normal = f32::from_bits(b.wrapping_add(bias) & !((1u32 << shift) - 1));
    let r = if a < f32::from_bits(((emin + 127) as u32) << 23) { sub } else { normal };
    let r = if r > max { max } else { r };
    f64::from(if y.is_sign_negative() { -r } else { r })
}

/// The f32 maximum of `|x|` over a block: NaN if any element is NaN (`torch.amax` propagates NaN), 0 for
/// an empty or all-zero block.
fn amax_f32(block: ArrayView2<f64>) -> f32 {
    // Row by row through slices, into eight running maxima combined at the end, without an early exit:
    // so the loop vectorises (through the view's iterator with a return on NaN, one serial chain of scalar
    // maxima, it did not: the largest part of quantising a weight). The maximum does not depend on the
    // order; NaN anywhere gives NaN, as before; otherwise the largest magnitude (a NaN never passes
    // `a > m`, and |x| has no negative zero).
    const L: usize = 8;
    #[inline(always)]
    fn step(v: f64, m: &mut f32, nan: &mut bool) {
        let a = fl32(v).abs();
        *nan |= a.is_nan();
        *m = if a > *m { a } else { *m };
    }
    let (mut m, mut nan) = ([0.0f32; L], [false; L]);
    for row in block.rows() {
        match row.as_slice() {
            Some(xs) => {
                let chunks = xs.chunks_exact(L);
                for (l, &v) in chunks.remainder().iter().enumerate() {
                    step(v, &mut m[l], &mut nan[l]);
                }
                for c in chunks {
                    for l in 0..L {
                        step(c[l], &mut m[l], &mut nan[l]);
                    }
                }
            }
            None => row.iter().for_each(|&v| step(v, &mut m[0], &mut nan[0])),
        }
    }
    let (m, nan) = (m.iter().fold(0.0f32, |x, &y| if y > x { y } else { x }), nan.iter().any(|&n| n));
    if nan {
        f32::NAN
    } else {
        m
    }
}

impl QuantTensor {
    /// `q * scale` element by element (exact in f64: an element of at most 11 significant bits times an
    /// f32 scale).
    pub fn dequantize(&self) -> Array2<f64> {
        self.scaled(|x| x)
    }

    /// `|q * scale|` element by element (the fed magnitudes).
    pub fn dequantize_abs(&self) -> Array2<f64> {
        self.scaled(f64::abs)
    }

    /// `f(q * scale)` element by element, block by block along each row (no per-element block lookup).
    fn scaled(&self, f: impl Fn(f64) -> f64) -> Array2<f64> {
        let (rows, cols) = self.q.dim();
        let (br, bc) = self.spec.block.dims();
        let mut out = crate::scratch::zeros2(rows, cols); // weight-sized per expert: see `scratch`
        for (r, (qr, mut or)) in self.q.rows().into_iter().zip(out.rows_mut()).enumerate() {
            for (j, s) in self.scale.row(r / br).iter().enumerate() {
                for c in j * bc..((j + 1) * bc).min(cols) {
                    or[c] = f(qr[c] * s);
                }
            }
        }
        out
    }

    /// The dequant scale of the block holding element `(r, c)`.
    pub fn scale_of(&self, r: usize, c: usize) -> f64 {
        self.scale[self.spec.block.block_of(r, c)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free cast is `cast_element` on every finite f32, near the grids' points and ties, in
    /// the subnormal range, around the largest value and beyond.
    #[test]
    fn branch_free_cast_is_the_element_cast() {
        let mut g = crate::test_rng::XorShift(0x853c49e6748fea9b);
        let mut next = || g.next_u64();
        for (fmt, m, emin, max) in [(Format::E4M3, 3u32, -6i32, 448.0f32), (Format::E5M2, 2, -14, 57344.0), (Format::E2M1, 1, 0, 6.0)] {
            let check = |y: f32| {
                if !y.is_finite() {
                    return;
                }
                let (fast, general) = (cast_saturating(y, m, emin, max), cast_element(fmt, y, Overflow::Saturate));
                assert_eq!(fast.to_bits(), general.to_bits(), "{fmt:?} {y:e} ({:#x})", y.to_bits());
            };
            for _ in 0..300_000 {
                let r = next();
                check(f32::from_bits(r as u32)); // any bit pattern
                // Magnitudes around the format's range: a random significand at an exponent from emin - 12 to emax + 3.
                let e = (r >> 32) as i32 % (max.log2() as i32 - emin + 16) + emin - 12;
                let sig = 1.0 + ((r >> 40) as u32 & 0xFFFFFF) as f32 / (1u32 << 24) as f32;
                let y = sig * 2f32.powi(e);
                check(y);
                check(-y);
            }
            // Grid points, midpoints and their neighbours.
            for e in emin - 3..=max.log2() as i32 + 2 {
                for k in 0..(2u32 << m) {
                    let v = (1.0 + k as f32 / (2u32 << m) as f32) * 2f32.powi(e);
                    for y in [v, f32::from_bits(v.to_bits() + 1), f32::from_bits(v.to_bits() - 1)] {
                        check(y);
                        check(-y);
                    }
                }
            }
            for y in [0.0f32, -0.0, max, max * 1.0625, max * 1.0624, f32::MAX, f32::MIN_POSITIVE, 1e-45] {
                check(y);
                check(-y);
            }
        }
    }
}
