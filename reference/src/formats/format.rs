//! The scalar formats the oracle emulates, and their field descriptions.

use std::fmt;
use std::str::FromStr;

use super::spec::{Spec, Specials};

/// `specialise!(fmt, f => expr)`: `expr` with `f` bound to `fmt` as a constant, in each arm of a match on
/// `fmt`, so that the code it inlines is compiled once per format with the format's fields folded in.
macro_rules! specialise {
    ($fmt:expr, $f:ident => $body:expr) => {
        match $fmt {
            Format::Bf16 => {
                let $f = Format::Bf16;
                $body
            }
            Format::F16 => {
                let $f = Format::F16;
                $body
            }
            Format::E4M3 => {
                let $f = Format::E4M3;
                $body
            }
            Format::E5M2 => {
                let $f = Format::E5M2;
                $body
            }
            Format::E8M0 => {
                let $f = Format::E8M0;
                $body
            }
            Format::E2M1 => {
                let $f = Format::E2M1;
                $body
            }
        }
    };
}
pub(crate) use specialise;

/// A scalar storage format.
///
/// | format | bits | exponent, mantissa | bias | max finite | specials |
/// |---|---|---|---|---|---|
/// | `Bf16` | 16 | 8, 7 | 127 | 3.3895e38 (`0x7F7F`) | IEEE ±inf, NaN |
/// | `F16` | 16 | 5, 10 | 15 | 65504 (`0x7BFF`) | IEEE ±inf, NaN |
/// | `E4M3` (OCP "e4m3fn") | 8 | 4, 3 | 7 | 448 (`0x7E`) | NaN = `S.1111.111`; no inf |
/// | `E5M2` | 8 | 5, 2 | 15 | 57344 (`0x7B`) | IEEE ±inf (`0x7C`), NaN (`0x7D..0x7F`) |
/// | `E8M0` (UE8M0, "e8m0fnu") | 8 | 8, 0, no sign | 127 | 2^127 (`0xFE`) | NaN = `0xFF`; no zero, no inf; `0x00` = 2^-127 |
/// | `E2M1` (fp4, "e2m1fn") | 4 | 2, 1 | 1 | 6 (`0x7`) | none (every code finite) |
///
/// E2M1 codes use the low 4 bits (sign at bit 3), as ml_dtypes stores `float4_e2m1fn` in a byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Bf16,
    F16,
    E4M3,
    E5M2,
    E8M0,
    E2M1,
}

impl Format {
    /// Every format, in declaration order.
    pub const ALL: [Format; 6] = [Format::Bf16, Format::F16, Format::E4M3, Format::E5M2, Format::E8M0, Format::E2M1];

    /// The field description.
    pub const fn spec(self) -> Spec {
        const fn s(e: u32, m: u32, bias: i32, signed: bool, subnormals: bool, specials: Specials) -> Spec {
            Spec { exponent_bits: e, mantissa_bits: m, bias, signed, subnormals, specials }
        }
        match self {
            Format::Bf16 => s(8, 7, 127, true, true, Specials::Ieee),
            Format::F16 => s(5, 10, 15, true, true, Specials::Ieee),
            Format::E4M3 => s(4, 3, 7, true, true, Specials::AllOnesNan),
            Format::E5M2 => s(5, 2, 15, true, true, Specials::Ieee),
            Format::E8M0 => s(8, 0, 127, false, false, Specials::AllOnesNan),
            Format::E2M1 => s(2, 1, 1, true, true, Specials::None),
        }
    }

    /// The name used on the command line and in messages: `bf16`, `f16`, `e4m3`, `e5m2`, `e8m0`, `e2m1`.
    pub const fn name(self) -> &'static str {
        match self {
            Format::Bf16 => "bf16",
            Format::F16 => "f16",
            Format::E4M3 => "e4m3",
            Format::E5M2 => "e5m2",
            Format::E8M0 => "e8m0",
            Format::E2M1 => "e2m1",
        }
    }

    /// The ml_dtypes (or numpy) type name of the same format.
    pub const fn ml_dtypes_name(self) -> &'static str {
        match self {
            Format::Bf16 => "bfloat16",
            Format::F16 => "float16",
            Format::E4M3 => "float8_e4m3fn",
            Format::E5M2 => "float8_e5m2",
            Format::E8M0 => "float8_e8m0fnu",
            Format::E2M1 => "float4_e2m1fn",
        }
    }

    /// Width of a code in bits (16, 8 or 4).
    pub const fn bits(self) -> u32 {
        self.spec().bits()
    }

    /// Number of codes, `2^bits`.
    pub const fn codes(self) -> u32 {
        1 << self.bits()
    }

    /// The largest finite value.
    pub const fn max_finite(self) -> f64 {
        const MAX: [f64; 6] = derived(true);
        MAX[self as usize]
    }

    /// The smallest positive value.
    pub const fn min_positive(self) -> f64 {
        const MIN: [f64; 6] = derived(false);
        MIN[self as usize]
    }

    /// Whether the format encodes infinities (bf16, f16, E5M2).
    pub const fn has_inf(self) -> bool {
        self.spec().has_inf()
    }

    /// Whether the format encodes NaN (all but E2M1).
    pub const fn has_nan(self) -> bool {
        self.spec().has_nan()
    }
}

/// The largest finite (`max`) or smallest positive value of every format, in the order of the enum,
/// computed at compile time.
const fn derived(max: bool) -> [f64; 6] {
    let mut out = [0.0; 6];
    let mut i = 0;
    while i < 6 {
        let s = Format::ALL[i].spec();
        out[i] = if max { s.max_finite() } else { s.min_positive() };
        i += 1;
    }
    out
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`Format::name`]'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownFormat(pub String);

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown format {:?} (expected one of bf16, f16, e4m3, e5m2, e8m0, e2m1)", self.0)
    }
}

impl std::error::Error for UnknownFormat {}

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Format, UnknownFormat> {
        Format::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| UnknownFormat(s.to_string()))
    }
}
