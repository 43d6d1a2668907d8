//! Codes: a cast's outcome as bits or as an f64, and bits back to an f64.
//!
//! NaN is written as the sign-preserving quiet NaN of the format: bf16 `0x7FC0`, f16 `0x7E00`, E5M2
//! `0x7E` (each `| sign`), E4M3 `0x7F | sign`, UE8M0 `0xFF` (the same bits ml_dtypes writes for a quiet f32 NaN;
//! payloads are not carried). Decoding any NaN code gives an f64 quiet NaN with the code's sign.

use super::policy::Outcome;
use super::spec::{Spec, Specials};

/// The bits of an outcome.
#[inline(always)]
pub fn bits_of(spec: &Spec, o: Outcome) -> u16 {
    let sign = |neg: bool| if neg { spec.sign_mask() } else { 0 };
    match o {
        Outcome::Finite { neg, code } => code | sign(neg),
        Outcome::Inf { neg } => {
            debug_assert!(spec.has_inf());
            (spec.max_exponent_field() << spec.mantissa_bits) | sign(neg)
        }
        Outcome::Nan { neg } => {
            let mag = match spec.specials {
                // Quiet NaN: all-ones exponent, top mantissa bit.
                Specials::Ieee => (spec.max_exponent_field() << spec.mantissa_bits) | (1 << (spec.mantissa_bits - 1)),
                Specials::AllOnesNan => spec.magnitude_mask(),
                Specials::None => unreachable!("a format without NaN produced NaN"),
            };
            mag | sign(neg)
        }
    }
}

/// The f64 value of an outcome.
#[inline(always)]
pub fn value_of(spec: &Spec, o: Outcome) -> f64 {
    let signed = |neg: bool, v: f64| if neg { -v } else { v };
    match o {
        Outcome::Finite { neg, code } => signed(neg, spec.value_of(code)),
        Outcome::Inf { neg } => signed(neg, f64::INFINITY),
        Outcome::Nan { neg } => signed(neg, f64::NAN),
    }
}

/// The f64 value of a code. Panics when `bits` has bits set above the format's width.
pub fn decode_bits(spec: &Spec, bits: u16) -> f64 {
    assert!(u32::from(bits) >> spec.bits() == 0, "code {bits:#x} has bits above the format's {} bits", spec.bits());
    let neg = bits & spec.sign_mask() != 0;
    let c = bits & spec.magnitude_mask();
    let magnitude = if spec.is_nan_code(c) {
        f64::NAN
    } else if spec.is_inf_code(c) {
        f64::INFINITY
    } else {
        spec.value_of(c)
    };
    if neg {
        -magnitude
    } else {
        magnitude
    }
}
