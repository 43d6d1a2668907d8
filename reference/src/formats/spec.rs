//! A format described by its fields: exponent and mantissa widths, bias, sign, and what its special
//! encodings mean. Everything else (largest finite value, smallest positive value, the value of a code)
//! follows from these by arithmetic; there are no tables.

/// What the top of a format's code space means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Specials {
    /// IEEE 754: an all-ones exponent field is ±infinity (mantissa 0) or NaN (any other mantissa).
    /// bf16, f16, E5M2.
    Ieee,
    /// "fn" formats (finite values and NaN only): the single all-ones magnitude code is NaN, every other
    /// code of the top binade is finite. E4M3 (`S.1111.111`), UE8M0 (`0xFF`).
    AllOnesNan,
    /// Every code is finite: no infinity, no NaN. E2M1.
    None,
}

/// The fields of a binary floating-point format.
///
/// A magnitude code `c` (the code without its sign bit) splits into an exponent field `ef = c >> m` and a
/// mantissa field `f = c & (2^m - 1)`. Its value is `(2^m + f) · 2^(ef - bias - m)`, except that with
/// [`subnormals`](Spec::subnormals) the field `ef = 0` holds `f · 2^(1 - bias - m)` (zero and the
/// subnormals). Without subnormals (UE8M0) `ef = 0` is an ordinary binade and the format has no zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    /// Width of the exponent field.
    pub exponent_bits: u32,
    /// Width of the stored mantissa (fraction) field.
    pub mantissa_bits: u32,
    /// Exponent bias.
    pub bias: i32,
    /// Whether a sign bit sits above the magnitude bits.
    pub signed: bool,
    /// Whether exponent field 0 holds zero and the subnormals (IEEE style).
    pub subnormals: bool,
    /// What the top codes mean.
    pub specials: Specials,
}

/// `2^k` as an f64, exact for every `k` in `-1074..=1023`.
#[inline(always)]
pub(crate) const fn pow2(k: i32) -> f64 {
    assert!(k >= -1074 && k <= 1023, "2^k is not an f64");
    if k >= -1022 {
        f64::from_bits(((k + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (k + 1074))
    }
}

impl Spec {
    /// Width of the magnitude (exponent and mantissa fields).
    pub const fn magnitude_bits(&self) -> u32 {
        self.exponent_bits + self.mantissa_bits
    }

    /// Width of a whole code (magnitude plus the sign bit, if any).
    pub const fn bits(&self) -> u32 {
        self.magnitude_bits() + self.signed as u32
    }

    /// Mask of the magnitude bits.
    pub const fn magnitude_mask(&self) -> u16 {
        ((1u32 << self.magnitude_bits()) - 1) as u16
    }

    /// The sign bit (0 for unsigned formats).
    pub const fn sign_mask(&self) -> u16 {
        if self.signed {
            1 << self.magnitude_bits()
        } else {
            0
        }
    }

    /// Mask of the mantissa field.
    pub const fn mantissa_mask(&self) -> u16 {
        ((1u32 << self.mantissa_bits) - 1) as u16
    }

    /// The all-ones exponent field.
    pub const fn max_exponent_field(&self) -> u16 {
        ((1u32 << self.exponent_bits) - 1) as u16
    }

    /// Exponent of the lowest binade that is not subnormal: `1 - bias` with subnormals, `-bias` without.
    /// Below `2^min_exponent` the spacing of the format stays `2^(min_exponent - mantissa_bits)`.
    pub const fn min_exponent(&self) -> i32 {
        if self.subnormals {
            1 - self.bias
        } else {
            -self.bias
        }
    }

    /// Whether the format has a zero (it has one exactly when it has subnormals).
    pub const fn has_zero(&self) -> bool {
        self.subnormals
    }

    /// Whether the format encodes infinities.
    pub const fn has_inf(&self) -> bool {
        matches!(self.specials, Specials::Ieee)
    }

    /// Whether the format encodes NaN.
    pub const fn has_nan(&self) -> bool {
        !matches!(self.specials, Specials::None)
    }

    /// The magnitude code of the largest finite value.
    pub const fn max_code(&self) -> u16 {
        match self.specials {
            Specials::Ieee => (self.max_exponent_field() << self.mantissa_bits) - 1,
            Specials::AllOnesNan => self.magnitude_mask() - 1,
            Specials::None => self.magnitude_mask(),
        }
    }

    /// The largest finite value.
    pub const fn max_finite(&self) -> f64 {
        self.value_of(self.max_code())
    }

    /// The smallest positive value (the smallest subnormal, or `2^-bias` without subnormals).
    pub const fn min_positive(&self) -> f64 {
        if self.subnormals {
            self.value_of(1)
        } else {
            self.value_of(0)
        }
    }

    /// Whether a magnitude code is NaN.
    pub const fn is_nan_code(&self, c: u16) -> bool {
        match self.specials {
            Specials::Ieee => c >> self.mantissa_bits == self.max_exponent_field() && c & self.mantissa_mask() != 0,
            Specials::AllOnesNan => c == self.magnitude_mask(),
            Specials::None => false,
        }
    }

    /// Whether a magnitude code is infinity.
    pub const fn is_inf_code(&self, c: u16) -> bool {
        matches!(self.specials, Specials::Ieee) && c == self.max_exponent_field() << self.mantissa_bits
    }

    /// The value of a finite magnitude code.
    #[inline(always)]
    pub const fn value_of(&self, c: u16) -> f64 {
        debug_assert!(c <= self.max_code(), "not a finite code");
        let m = self.mantissa_bits as i32;
        let ef = (c >> self.mantissa_bits) as i32;
        let f = (c & self.mantissa_mask()) as f64;
        if self.subnormals && ef == 0 {
            f * pow2(self.min_exponent() - m)
        } else {
            (pow2(m) + f) * pow2(ef - self.bias - m)
        }
    }
}
