//! Scale rules: from a block's amax to the factor the elements are multiplied by before the cast, and the
//! dequantisation scale stored with the block. Every step is the f32 operation the real kernels perform
//! (`shared/docs/numerics.md`, "Block-scaled recipes"); the sources are named at each rule.

use crate::formats::Format;

/// How an MX scale (UE8M0) is derived from a block's amax (torchao's `ScaleCalculationMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MxRounding {
    /// OCP MX v1.0 and torchao's default: `2^(floor(log2 amax) - emax_elem)`; elements may saturate.
    Floor,
    /// TransformerEngine, cuBLAS, torchao RCEIL: amax times `fl32(1/max_elem)`, rounded *up* to a power of
    /// two (PTX `cvt.rp.satfinite.ue8m0x2.f32`), so nothing saturates.
    Rceil,
    /// torchao CEIL: `floor(log2 amax)`, plus one when amax is not a power of two, minus `emax_elem`.
    Ceil,
    /// torchao EVEN: amax first rounded (half up) to the element's mantissa width, then as FLOOR. As in
    /// torchao, an amax that this rounding carries past f32's largest binade becomes infinite and the
    /// scale NaN (`0xFF`).
    Even,
}

/// How a block's scale is derived from its amax.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleRule {
    /// DeepGEMM (`per_token_cast_to_fp8` / `per_block_cast_to_fp8`): `sf = max(amax, 1e-4) / max_elem`
    /// (f32), elements `x * fl32(1/sf)`; with `pow2`, `sf = 2^ceil(log2 sf)`, biased exponent clamped to
    /// [1, 254] (the UE8M0 scales of its Blackwell kernels). Dequant scale: `sf`.
    DeepGemm { pow2: bool },
    /// DeepGEMM's `sf` with the elements divided by it, `x / sf`, one correctly rounded f32 division (CUDA
    /// C++ with IEEE division, `-prec-div=true`, the default without `--use_fast_math`; Triton's `tl.div_rn`).
    /// An approximate division (Triton's `/` on f32, `--use_fast_math`) may land one ulp off at exactly the
    /// E4M3 midpoints where the rules differ: not modelled. Dequant scale: `sf`.
    DeepGemmDiv,
    /// DeepGEMM's older test helpers (`x * (448.0 / x_amax)`, copied into other projects' tests): the
    /// elements times `fl32(max_elem / max(amax, 1e-4))`, the dequant scale `fl32(max(amax, 1e-4) / max_elem)`
    /// computed apart (so the two are not each other's f32 reciprocal).
    DeepGemmMaxOverAmax,
    /// TransformerEngine `Float8BlockScaling` (`compute_scale_from_amax`): multiplier
    /// `s = fl32(max_elem / amax)` (amax 0, inf or NaN: `s = 1`; `s` infinite: f32 max), with `pow2` the
    /// exponent bits of `s` only (rounded down to a power of two). Dequant scale: `fl32(1/s)`.
    TransformerEngine { pow2: bool },
    /// OCP MX (UE8M0 scale) with the given exponent rounding.
    Mx(MxRounding),
}

/// The one f32 operation that brings a block's element to the element format's range before the cast.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Factor {
    /// `fl32(x * m)`.
    Mul(f32),
    /// `fl32(x / d)`.
    Div(f32),
}

impl Factor {
    #[inline(always)]
    pub(crate) fn apply(self, x: f32) -> f32 {
        match self {
            Factor::Mul(m) => x * m,
            Factor::Div(d) => x / d,
        }
    }
}

/// What a scale rule gives for one block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BlockScale {
    /// The f32 operation applied to every element before the cast.
    pub factor: Factor,
    /// The dequantisation scale: `x ≈ q * scale`.
    pub scale: f32,
    /// The UE8M0 code of `scale` (MX rules only).
    pub bits: Option<u8>,
}

const F32_MANT_MASK: u32 = 0x007F_FFFF;

/// `2^k` as an f32 for `k` in `-149..=127` (subnormal below -126).
fn pow2_f32(k: i32) -> f32 {
    debug_assert!((-149..=127).contains(&k));
    if k >= -126 {
        f32::from_bits(((k + 127) as u32) << 23)
    } else {
        f32::from_bits(1u32 << (k + 149))
    }
}

/// The biased exponent field of a finite non-negative f32 (0 for zero and subnormals).
fn exponent_field(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xFF) as i32
}

impl ScaleRule {
    /// The multiplier and dequant scale of a block whose amax (an f32 max of `|x|`, NaN when any element
    /// is NaN) is `amax`, for elements of format `elem`.
    pub(crate) fn block_scale(&self, amax: f32, elem: Format) -> BlockScale {
        let max_elem = elem.max_finite() as f32;
        match *self {
            ScaleRule::DeepGemm { .. } | ScaleRule::DeepGemmDiv | ScaleRule::DeepGemmMaxOverAmax => {
                // DeepGEMM: `x_amax = x.abs().float().amax(...).clamp(1e-4)`; torch's clamp keeps NaN.
                let amax = if amax.is_nan() { amax } else { amax.max(1e-4_f32) };
                let mut sf = amax / max_elem;
                if let ScaleRule::DeepGemm { pow2: true } = *self {
                    sf = ceil_pow2_clamped(sf);
                }
                let factor = match *self {
                    ScaleRule::DeepGemmDiv => Factor::Div(sf),
                    ScaleRule::DeepGemmMaxOverAmax => Factor::Mul(max_elem / amax),
                    // `x * (1.0 / sf)`: the reciprocal is rounded to f32 first, then one f32 multiply.
                    _ => Factor::Mul(1.0 / sf),
                };
                BlockScale { factor, scale: sf, bits: None }
            }
            ScaleRule::TransformerEngine { pow2 } => {
                // TransformerEngine `compute_scale_from_amax` with epsilon 0 and `value_for_inf` = f32 max.
                let mut s = if amax.is_infinite() || amax == 0.0 {
                    1.0
                } else {
                    let s = max_elem / amax; // `__fdiv_rn`: an IEEE f32 division
                    if s.is_infinite() {
                        f32::MAX
                    } else if s.is_nan() {
                        1.0
                    } else {
                        s
                    }
                };
                if pow2 {
                    // Keep sign and exponent bits: rounds the multiplier down to a power of two.
                    s = f32::from_bits(s.to_bits() & 0xFF80_0000);
                }
                BlockScale { factor: Factor::Mul(s), scale: 1.0 / s, bits: None }
            }
            ScaleRule::Mx(r) => {
                let b = mx_scale_bits(amax, elem, r);
                let (mul, scale) = if b == 0xFF {
                    (f32::NAN, f32::NAN)
                } else {
                    // torchao `_e8m0_scale_to_reciprocal_fp32`: `2^(127 - b)` (b = 254 gives the subnormal 2^-127).
                    (pow2_f32(127 - b as i32), pow2_f32(b as i32 - 127))
                };
                BlockScale { factor: Factor::Mul(mul), scale, bits: Some(b) }
            }
        }
    }
}

/// DeepGEMM's power-of-two scale: `2^ceil(log2 sf)` with the biased exponent clamped to [1, 254]
/// (NaN stays NaN, +inf becomes 2^127).
fn ceil_pow2_clamped(sf: f32) -> f32 {
    if sf.is_nan() {
        return sf;
    }
    if sf.is_infinite() {
        return pow2_f32(127);
    }
    let bits = sf.to_bits();
    let field = exponent_field(sf);
    let e = if field == 0 {
        // Subnormal or zero (unreachable after the 1e-4 floor): the smallest biased exponent, 1.
        1
    } else if bits & F32_MANT_MASK != 0 {
        field + 1
    } else {
        field
    };
    pow2_f32(e.clamp(1, 254) - 127)
}

/// `floor(log2 max_finite)` of an element format: 8 for E4M3, 15 for E5M2, 2 for E2M1.
pub(crate) fn emax_elem(elem: Format) -> i32 {
    (elem.max_finite()).log2().floor() as i32
}

/// The UE8M0 code of an MX block's scale (torchao `to_mx`; RCEIL as `_to_mx_rceil`).
pub(crate) fn mx_scale_bits(amax: f32, elem: Format, r: MxRounding) -> u8 {
    match r {
        MxRounding::Rceil => {
            // `descale = max_abs * (1.0 / max_pos)`: the Python double `1/max_pos` becomes an f32 scalar,
            // then one f32 multiply; then `cvt.rp.ue8m0` (round up; NaN/inf -> 0xFF).
            let inv = (1.0f64 / elem.max_finite()) as f32;
            let d = amax * inv;
            if !d.is_finite() {
                return 0xFF;
            }
            let field = exponent_field(d);
            let mant = d.to_bits() & F32_MANT_MASK;
            // E8M0 code 0 is 2^-127, the f32 subnormal 0x00400000: a subnormal above it rounds up to 1.
            let up = if field == 0 { mant > 0x0040_0000 } else { mant != 0 };
            (field + up as i32).min(255) as u8
        }
        MxRounding::Floor | MxRounding::Ceil | MxRounding::Even => {
            let mut a = amax;
            if r == MxRounding::Even && !a.is_nan() {
                // Add half an ulp at the element's mantissa width, then keep sign and exponent bits.
                let m = elem.spec().mantissa_bits;
                let add = 1u32 << (23 - m - 1);
                a = f32::from_bits(a.to_bits().wrapping_add(add) & 0xFF80_0000);
            }
            if !a.is_finite() {
                return 0xFF;
            }
            let mut e = exponent_field(a) - 127;
            if r == MxRounding::Ceil && a.to_bits() & F32_MANT_MASK != 0 {
                e += 1;
            }
            // Clamp to [-127, 128]; biased 255 (from 128) is the NaN code, as torchao leaves it.
            let unbiased = (e - emax_elem(elem)).clamp(-127, 128);
            (unbiased + 127) as u8
        }
    }
}
