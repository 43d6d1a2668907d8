//! What a cast does with what the format cannot hold: NaN, infinities, values that overflow after
//! rounding, and (UE8M0) zero and negative values; E2M1 has neither NaN nor infinity.
//!
//! | input | `Saturate` (PTX `satfinite`) | `NonSaturating` (ml_dtypes, the default) |
//! |---|---|---|
//! | NaN | NaN (sign kept) | NaN (sign kept) |
//! | ±inf, or overflow after rounding: bf16, f16, E5M2 | ±max | ±inf |
//! | ±inf, or overflow: E4M3 | ±448 | NaN (sign kept) |
//! | ±inf, or overflow: E2M1 | ±6 | ±6 (ml_dtypes saturates: no NaN or inf to go to) |
//! | NaN: E2M1 | ∓0 | ∓0 (ml_dtypes 0.7: a NaN becomes a zero of the *opposite* sign, bit for bit) |
//! | +inf, or overflow: UE8M0 | 2^127 (`0xFE`) | NaN (`0xFF`) |
//! | NaN: UE8M0 | `0xFF` | `0xFF` |
//! | ±0, negative, -inf: UE8M0 | 2^-127 (`0x00`; clamped to the smallest value) | NaN (`0xFF`, as ml_dtypes) |
//! | positive below 2^-127: UE8M0 | 2^-127 (`0x00`, any rounding: no zero exists) | 2^-127 |
//!
//! Overflow is decided after rounding: the value rounded on the format's grid with an unbounded exponent
//! range overflows when it exceeds the largest finite value. Under a directed rounding toward zero (or
//! toward the infinity of the other sign) an overflow gives ±max whatever the mode, as IEEE 754 §7.4
//! prescribes: there is no larger value to round to; only the default, nearest, rounding can pass max.
//! Infinite inputs are not rounded: they follow the table under every rounding.

use super::format::{specialise, Format};
use super::round::{round_to_code, MagnitudeRounding, Rounding};
use super::spec::{Spec, Specials};

/// What a cast does with infinities and with values that overflow after rounding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// Overflow and ±inf become ±max (UE8M0: zero and negatives become its smallest value); NaN stays
    /// NaN. PTX `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`, what kernels use.
    Saturate,
    /// Overflow becomes ±inf (bf16, f16, E5M2) or NaN (E4M3, UE8M0), ±6 for E2M1; ±inf becomes ±inf
    /// or NaN likewise. ml_dtypes, and PyTorch's eager casts before its saturation fix. The default.
    #[default]
    NonSaturating,
}

/// The result of a cast, before it is turned into bits or an f64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outcome {
    /// A finite value of the format: `neg` (always false for unsigned formats) and the magnitude code (at
    /// most [`Spec::max_code`]).
    Finite { neg: bool, code: u16 },
    /// An infinity (formats with [`Specials::Ieee`] only).
    Inf { neg: bool },
    /// NaN (formats that have one), with its sign bit (always clear for UE8M0).
    Nan { neg: bool },
}

impl Outcome {
    /// The code of the outcome in `fmt` (the format it was cast to).
    #[inline]
    pub fn bits(self, fmt: Format) -> u16 {
        specialise!(fmt, f => super::codec::bits_of(&f.spec(), self))
    }

    /// The value of the outcome in `fmt` (the format it was cast to) as an f64 (NaN with the outcome's
    /// sign).
    #[inline]
    pub fn value(self, fmt: Format) -> f64 {
        specialise!(fmt, f => super::codec::value_of(&f.spec(), self))
    }
}

/// The outcome for an overflow (or an infinite input) of sign `neg`.
#[inline(always)]
fn overflowed(spec: &Spec, neg: bool, overflow: Overflow) -> Outcome {
    let max = Outcome::Finite { neg, code: spec.max_code() };
    match overflow {
        Overflow::Saturate => max,
        Overflow::NonSaturating => match spec.specials {
            Specials::Ieee => Outcome::Inf { neg },
            Specials::AllOnesNan => Outcome::Nan { neg: neg && spec.signed },
            Specials::None => max,
        },
    }
}

/// Cast `x` to `fmt` with the given rounding and overflow mode (see the module's table).
#[inline]
pub fn cast(fmt: Format, x: f64, rounding: Rounding, overflow: Overflow) -> Outcome {
    specialise!(fmt, f => cast_in(f, x, rounding, overflow))
}

/// [`cast`], inlined into each arm of [`specialise!`] so that the format's fields are constants.
#[inline(always)]
fn cast_in(fmt: Format, x: f64, rounding: Rounding, overflow: Overflow) -> Outcome {
    let spec = fmt.spec();
    let neg = x.is_sign_negative();
    if x.is_nan() {
        return match spec.specials {
            Specials::None => Outcome::Finite { neg: !neg, code: 0 },
            _ => Outcome::Nan { neg: neg && spec.signed },
        };
    }
    if !spec.signed && (neg || x == 0.0) {
        // Zero, negative values and -inf have no unsigned representation.
        return match overflow {
            Overflow::Saturate => Outcome::Finite { neg: false, code: 0 },
            Overflow::NonSaturating => Outcome::Nan { neg: false },
        };
    }
    if x.is_infinite() {
        return overflowed(&spec, neg, overflow);
    }
    if x == 0.0 {
        return Outcome::Finite { neg, code: 0 };
    }
    let mode = rounding.for_sign(neg);
    let code = round_to_code(&spec, x.abs(), mode);
    let max = spec.max_code();
    if code > u32::from(max) {
        return match mode {
            MagnitudeRounding::Down => Outcome::Finite { neg, code: max },
            _ => overflowed(&spec, neg, overflow),
        };
    }
    Outcome::Finite { neg, code: code as u16 }
}
