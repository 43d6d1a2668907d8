//! A sound a-priori bound on the error of one quantised element, `|q * scale - x|`.
//!
//! With `m` the f32 multiplier, `y = fl32(x * m)` and `q = cast(y)`:
//! `q*scale - x = scale*(q - y) + scale*(y - x*m) + x*(m*scale - 1)`, so
//! `|q*scale - x| <= scale*|q - y| + scale*u32*|x*m| + scale*2^-150 + |x|*|m*scale - 1|` where
//! - `|q - y|` is at most half the format's spacing at `|y|` (subnormal spacing below its lowest normal
//!   binade), or `|y| - max` when `|y|` passes the largest finite value and the cast saturates;
//! - `u32 = 2^-24` and `2^-150` (half the f32 subnormal spacing) bound the f32 multiply;
//! - `|m*scale - 1| <= 2^-24` when one of the two is the f32-rounded reciprocal of the other (DeepGEMM:
//!   `m = fl32(1/sf)`; TransformerEngine: `scale = fl32(1/s)`), plus the subnormal term when that
//!   reciprocal is an f32 subnormal; 0 for power-of-two rules (MX, and the reciprocal of a power of two)
//!   and for a division by the scale (`m = 1/scale` exactly, `y = fl32(x/scale)`); `2^-23 + 2^-48` when
//!   both are rounded from the amax apart (`m = fl32(max/amax)`, `scale = fl32(amax/max)`).
//!
//! The bound needs only `x`, `scale` and the spec: `|x*m|` is bounded by `|x|/scale * (1 + rel)`, `rel` the
//! bound on `|m*scale - 1|` above. For an input that is not an f32 value, `x` above is `fl32(x)` and
//! `|fl32(x) - x|` is added.

use super::{QuantSpec, ScaleRule};
use crate::formats::Overflow;

const U32: f64 = 1.0 / (1u64 << 24) as f64; // 2^-24
const F32_HALF_SUBNORMAL: f64 = 7.006_492_321_624_085e-46; // 2^-150

impl QuantSpec {
    /// A sound bound on `|q*scale - x|` for one element `x` of a block whose dequant scale is `scale`
    /// (`+inf` when the cast may overflow to NaN or infinity, or the scale is not a finite positive number).
    pub fn element_error_bound(&self, x: f64, scale: f64) -> f64 {
        // The kernel quantises fl32(x): bound |q*scale - fl32(x)| and add |fl32(x) - x| (0 for the bf16 and
        // f32 data kernels read; an f64 input's own rounding otherwise, which no term below covers when the
        // element operation has no slack, as `deepgemm-div`'s exact 1/scale).
        let xr = f64::from(x as f32);
        if !scale.is_finite() || scale <= 0.0 || !xr.is_finite() {
            return f64::INFINITY;
        }
        let ax = xr.abs();
        // |m*scale - 1| and the absolute error of the reciprocal that defines m or scale.
        let rel = match self.rule {
            ScaleRule::Mx(_) => 0.0,
            ScaleRule::DeepGemm { pow2: true } | ScaleRule::TransformerEngine { pow2: true } => 0.0,
            ScaleRule::DeepGemm { pow2: false } | ScaleRule::TransformerEngine { pow2: false } => {
                // Relative error 2^-24 of a normal f32 reciprocal, or an absolute 2^-150 on a subnormal
                // one (TransformerEngine's `1/s` with `s` = f32 max): relative to the other factor.
                U32 + F32_HALF_SUBNORMAL * (1.0 / scale).max(scale)
            }
            // `y = fl32(x / scale)`: the division's rounding is the `U32 * y_hi` term below; m = 1/scale.
            ScaleRule::DeepGemmDiv => 0.0,
            // m = fl32(max/a) and scale = fl32(a/max), two roundings of reciprocal quantities (a >= 1e-4,
            // so neither is subnormal): |m*scale - 1| <= 2*2^-24 + 2^-48.
            ScaleRule::DeepGemmMaxOverAmax => 2.0 * U32 + U32 * U32,
        };
        // Upper bound on |y| = |fl32(x*m)|, with m <= (1 + rel)/scale.
        let y_hi = (ax / scale) * (1.0 + rel) * (1.0 + U32) + F32_HALF_SUBNORMAL;
        let spec = self.format.spec();
        let max = self.format.max_finite();
        let q_err = if y_hi > max {
            // Overflow possible: the cast saturates (or E2M1, which always does) or gives NaN/inf.
            if self.overflow == Overflow::Saturate || !self.format.has_nan() && !self.format.has_inf() {
                (y_hi - max).max(half_spacing(y_hi.min(max), spec.mantissa_bits, spec.min_exponent()))
            } else {
                return f64::INFINITY;
            }
        } else {
            half_spacing(y_hi, spec.mantissa_bits, spec.min_exponent())
        };
        let b = scale * q_err + scale * (U32 * y_hi + F32_HALF_SUBNORMAL) + ax * rel + (x - xr).abs();
        // Cover the roundings of this f64 computation itself (a handful of operations, each 2^-53).
        b * (1.0 + 1e-12)
    }
}

/// Half the grid spacing of a format with `m` mantissa bits and lowest normal exponent `emin` at
/// magnitudes up to `a` (the spacing grows with the magnitude, so the value at `a` bounds every `|y| <= a`).
fn half_spacing(a: f64, m: u32, emin: i32) -> f64 {
    // The binade of `a`, read from its bits (exact; `a` is a positive normal f64 or zero).
    let e = if a > 0.0 { ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023 } else { emin };
    2f64.powi(e.max(emin) - m as i32 - 1)
}
