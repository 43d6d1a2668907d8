//! The rounding core: a positive f64 rounded onto a format's grid, by integer arithmetic on its bits.
//!
//! The grid of a format with `m` mantissa bits and lowest normal exponent `emin` is, around a value `a`
//! with `e = floor(log2 a)`, the multiples of `2^(max(e, emin) - m)`: `m + 1` significant bits in the
//! normal range, and a fixed spacing below `2^emin` (subnormals; for a format without subnormals such as
//! UE8M0 the same multiples, of which only the positive ones exist). The exponent range is unbounded
//! above: deciding overflow is the caller's job, *after* rounding, by comparing the resulting code with
//! the largest finite one (so E4M3's 464 is a tie that rounds down to 448 and does not overflow, and
//! E5M2's 61440 is a tie that rounds up to 65536, which does).

use super::spec::Spec;

/// Rounding direction, as in IEEE 754.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// To the nearest grid value; a tie goes to the neighbour whose integral significand (the significand
    /// as an integer multiple of the spacing) is even. For formats with mantissa bits this is the neighbour
    /// with the even mantissa code. For UE8M0 (no mantissa bits) the neighbours of `a` in `[2^e, 2^(e+1))`
    /// are `1·2^e` and `2·2^e`, so a tie (`1.5·2^e`) always goes up: PyTorch's and ml_dtypes' rule.
    #[default]
    NearestEven,
    /// Toward zero (truncation; PTX `.rz`). For UE8M0, floor.
    TowardZero,
    /// Toward +infinity (PTX `.rp`). For UE8M0, ceiling.
    TowardPositive,
    /// Toward -infinity (PTX `.rm`).
    TowardNegative,
}

/// How the magnitude is rounded once the sign is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MagnitudeRounding {
    /// Nearest, ties to the even integral significand.
    Nearest,
    /// Toward zero: the largest grid value `<= a`.
    Down,
    /// Away from zero: the smallest grid value `>= a`.
    Up,
}

impl Rounding {
    /// The magnitude rounding of this direction for a value of the given sign.
    pub const fn for_sign(self, negative: bool) -> MagnitudeRounding {
        match (self, negative) {
            (Rounding::NearestEven, _) => MagnitudeRounding::Nearest,
            (Rounding::TowardZero, _) => MagnitudeRounding::Down,
            (Rounding::TowardPositive, false) | (Rounding::TowardNegative, true) => MagnitudeRounding::Up,
            (Rounding::TowardPositive, true) | (Rounding::TowardNegative, false) => MagnitudeRounding::Down,
        }
    }
}

/// The magnitude code of `a` (finite, `> 0`) rounded onto the grid of `spec` with the exponent range
/// unbounded above: a code above [`Spec::max_code`] means overflow (codes are monotonic in value, and the
/// codes past the largest finite one continue its grid: E4M3's 0x7F would be 480, UE8M0's 0xFF 2^128).
///
/// With `e = floor(log2 a)` and the spacing `2^q`, `q = max(e, emin) - m`, the integral significand
/// `n = round(a / 2^q)` is found from the bits of `a`; then the code is `n` below `2^emin` (a subnormal,
/// or with `n = 2^m` the smallest normal) and `((e + bias) << m) + n - 2^m` above (`n = 2^(m+1)` carries
/// into the exponent field). A format without subnormals has no zero: below `2^emin` every mode gives
/// code 0, its smallest value (the nearest, and the ceiling; for rounding down the convention, as PTX
/// `cvt.rz` reads the exponent field).
#[inline(always)]
pub fn round_to_code(spec: &Spec, a: f64, mode: MagnitudeRounding) -> u32 {
    debug_assert!(a > 0.0 && a.is_finite(), "round_to_code needs a positive finite value, got {a}");
    let bits = a.to_bits();
    let field = (bits >> 52) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    // a = sig · 2^e2 with an integer sig < 2^53.
    let (sig, e2) = if field == 0 { (frac, -1074) } else { (frac | (1u64 << 52), field - 1075) };
    // e = floor(log2 a).
    let e = (63 - sig.leading_zeros() as i32) + e2;
    let m = spec.mantissa_bits as i32;
    let emin = spec.min_exponent();
    // The grid spacing at a is 2^q, and a / 2^q = sig / 2^s with s >= 1: for e >= emin, s = 52 - m (a normal
    // f64 has e = e2 + 52); below 2^emin the spacing is coarser still than for e = emin.
    let q = e.max(emin) - m;
    let s = (q - e2) as u32;
    debug_assert!(s >= 1);
    let (floor, rem_vs_half, inexact) = if s >= 60 {
        // sig < 2^53 <= 2^(s-1) / 2^6: the integer part is 0 and the fraction is below one half.
        (0u64, std::cmp::Ordering::Less, true)
    } else {
        let rem = sig & ((1u64 << s) - 1);
        (sig >> s, rem.cmp(&(1u64 << (s - 1))), rem != 0)
    };
    let up = match mode {
        MagnitudeRounding::Nearest => match rem_vs_half {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => floor & 1 == 1,
            std::cmp::Ordering::Less => false,
        },
        MagnitudeRounding::Down => false,
        MagnitudeRounding::Up => inexact,
    };
    let n = (floor + up as u64) as u32;
    if e < emin {
        if spec.subnormals {
            n
        } else {
            0
        }
    } else {
        // e <= 1023 and bias, m small: no overflow of u32.
        (((e + spec.bias) as u32) << m) + n - (1u32 << m)
    }
}
