//! Scalar low-precision formats and bit-faithful casts to them: bf16, f16, E4M3, E5M2, UE8M0 and E2M1
//! (`shared/docs/numerics.md`, "Scalar formats").
//!
//! - [`cast`]: the outcome of a cast ([`Outcome`]: finite value, infinity or NaN), from which
//!   [`Outcome::bits`] and [`Outcome::value`] read the code and the f64 value.
//! - [`quantize`]: `x` rounded to the format, as an f64 (every value of these formats is an f64 and an
//!   f32, so nothing is lost); [`encode`]: the same as the format's bits; [`decode`]: bits to f64.
//!   `quantize(f, x, o) == decode(f, encode(f, x, o))` for every `x` (NaN for NaN, sign included).
//! - Casts round to nearest, ties to even ([`Rounding::NearestEven`]; the `_with` variants take any IEEE
//!   direction), keep subnormals, and decide overflow *after* rounding: E4M3 overflows for `|x| > 464`
//!   (464 is a tie that goes to 448), E5M2 for `|x| >= 61440`, bf16 for `|x| >= (2 - 2^-8)·2^127`, f16 for
//!   `|x| >= 65520`, UE8M0 for `x >= 1.5·2^127`, E2M1 for `|x| >= 7`. What overflow, NaN and infinity
//!   become depends on [`Overflow`] ([`policy`] has the table); the default, `NonSaturating`, matches
//!   ml_dtypes bit for bit (`reference/tests/formats.rs` checks it on thousands of values).
//! - The arithmetic is generic and table-free: [`spec::Spec`] describes a format by its fields and
//!   [`round::round_to_code`] rounds on its grid by integer arithmetic on the input's bits. Inputs are
//!   f64; an f32 converts to f64 exactly, so [`quantize_f32`] and [`encode_f32`] round an f32 once.
//!
//! ## UE8M0 (`Format::E8M0`)
//!
//! Value `2^(b - 127)` for `b` in `0..=254`, `0xFF` = NaN; no sign, no zero. Rounding works on the
//! significand: `x = s·2^e` with `s` in `[1, 2)` goes to `2^e` or `2^(e+1)`:
//! - [`Rounding::NearestEven`] (default, PyTorch and ml_dtypes): up iff `s >= 1.5` (the tie `1.5` goes up:
//!   the integral significands of the neighbours are 1 and 2, and 2 is even). Overflow: `x >= 1.5·2^127`.
//! - [`Rounding::TowardZero`] (PTX `cvt.rz.ue8m0x2`): floor, `2^e`; never overflows.
//! - [`Rounding::TowardPositive`] (PTX `cvt.rp.ue8m0x2`): ceiling; `2^e` only when `s == 1`; overflow:
//!   `x > 2^127`.
//! - Below `2^-127` every rounding gives `0x00` (`2^-127`): no zero exists. NaN gives `0xFF`; zero,
//!   negatives, `-inf`, `+inf` and overflow give `0xFF` when non-saturating (as ml_dtypes) and, when
//!   saturating, the nearest end of the range (`0x00` for zero and negatives, `0xFE` above).
//!
//! Where PyTorch's c10 cast (`fp8e8m0fnu_from_fp32_value`, which reads the f32's exponent field and its
//! top fraction bits) differs from this (and from ml_dtypes): it ignores the sign (`-x` casts as `x`),
//! maps ±0 to `0x00`, and for f32 subnormals in `(2^-127, 1.5·2^-127)` rounds up to `0x01` where the
//! nearest value (and ml_dtypes) is `0x00`.
//!
//! ## E2M1 (`Format::E2M1`)
//!
//! Values `{0, 0.5, 1, 1.5, 2, 3, 4, 6}` and their negatives (bias 1, one subnormal 0.5); codes in the low 4
//! bits. No infinity or NaN: overflow (`|x| >= 7`, the tie 7 goes to 8, beyond max) and ±inf give ±6 in
//! both modes, as ml_dtypes does. NaN has no encoding; both modes follow ml_dtypes 0.7.0, which turns a NaN
//! into a zero of the opposite sign (`+NaN -> 0x8` = -0, `-NaN -> 0x0` = +0).
//!
//! ## NaN bits
//!
//! NaN keeps its sign and is written as the format's quiet NaN ([`codec`]); payloads are not kept.
//! (The `half` crate keeps the top payload bits; PyTorch c10 writes bf16 `0x7FC0` whatever the sign.)

pub mod codec;
pub mod format;
pub mod policy;
pub mod round;
pub mod spec;

pub use format::{Format, UnknownFormat};
pub use policy::{cast, Outcome, Overflow};
pub use round::Rounding;

/// `x` rounded to nearest-even in `fmt`, as an f64, with `overflow` deciding what overflow, ±inf (and
/// for UE8M0 zero and negatives) become.
#[inline]
pub fn quantize(fmt: Format, x: f64, overflow: Overflow) -> f64 {
    quantize_with(fmt, x, Rounding::NearestEven, overflow)
}

/// [`quantize`] with any rounding direction.
#[inline]
pub fn quantize_with(fmt: Format, x: f64, rounding: Rounding, overflow: Overflow) -> f64 {
    cast(fmt, x, rounding, overflow).value(fmt)
}

/// The bits of `x` rounded to nearest-even in `fmt` (16 bits for bf16/f16, 8 for E4M3, E5M2 and UE8M0,
/// the low 4 for E2M1).
#[inline]
pub fn encode(fmt: Format, x: f64, overflow: Overflow) -> u16 {
    encode_with(fmt, x, Rounding::NearestEven, overflow)
}

/// [`encode`] with any rounding direction.
#[inline]
pub fn encode_with(fmt: Format, x: f64, rounding: Rounding, overflow: Overflow) -> u16 {
    cast(fmt, x, rounding, overflow).bits(fmt)
}

/// The value of a code of `fmt` (NaN codes give a quiet NaN with the code's sign). Panics when `bits`
/// does not fit the format's width.
#[inline]
pub fn decode(fmt: Format, bits: u16) -> f64 {
    codec::decode_bits(&fmt.spec(), bits)
}

/// [`quantize`] of an f32 (converted to f64 exactly, so rounded once); the result is an f32 exactly.
#[inline]
pub fn quantize_f32(fmt: Format, x: f32, overflow: Overflow) -> f32 {
    let v = quantize(fmt, f64::from(x), overflow);
    if v.is_nan() {
        // Keep the sign explicitly: a float cast need not carry a NaN's sign.
        f32::NAN.copysign(if v.is_sign_negative() { -1.0 } else { 1.0 })
    } else {
        v as f32
    }
}

/// [`encode`] of an f32.
#[inline]
pub fn encode_f32(fmt: Format, x: f32, overflow: Overflow) -> u16 {
    encode(fmt, f64::from(x), overflow)
}
