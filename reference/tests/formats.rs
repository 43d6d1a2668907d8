//! Scalar formats and casts (`moe_reference::formats`) against a second, independent implementation
//! written here from the definitions: every finite value of a format enumerated from its fields, sorted,
//! and a cast found by *search* (the two neighbours of the input, the nearer one, a tie to the even
//! mantissa code; for UE8M0, which has no mantissa bits, up), followed by the overflow rules of
//! `shared/docs/numerics.md` and the conventions of `formats::policy`.
//!
//! - `sweep_boundaries_all_roundings`: every f32 bit pattern within 16 ulps of each value, each midpoint,
//!   the overflow thresholds and the specials of each format, in all 4 roundings x 2 overflow modes.
//! - `sweep_strided`: every 7th f32 bit pattern in the default configuration (nearest, non-saturating),
//!   every 112th in the others (saturating; UE8M0's round-down and round-up).
//! - `sweep_exhaustive` (`#[ignore]`: minutes; `cargo test --release -p moe-reference --test formats --
//!   --ignored`): all 2^32 f32 bit patterns for every format, nearest non-saturating, and UE8M0's
//!   round-down and round-up.
//! - f64 inputs (rounded once, not through f32), round trips of every code, literal facts (maxima,
//!   thresholds, ties), `half` cross-checks, and spot checks against ml_dtypes through `python3` (skipped,
//!   with a `SKIP` line, without python3 or ml_dtypes).

mod skip;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use moe_reference::formats::{self, Format, Overflow, Rounding};
use rayon::prelude::*;

const NON_SAT: Overflow = Overflow::NonSaturating;
const SAT: Overflow = Overflow::Saturate;
const ROUNDINGS: [Rounding; 4] =
    [Rounding::NearestEven, Rounding::TowardZero, Rounding::TowardPositive, Rounding::TowardNegative];

// ---------------------------------------------------------------------------------------------------------
// The independent implementation
// ---------------------------------------------------------------------------------------------------------

/// What the top codes of a format mean (from numerics.md's table).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// IEEE: exponent all ones is inf / NaN.
    Ieee,
    /// Only the all-ones magnitude is NaN.
    FiniteNan,
    /// Every code finite.
    Finite,
}

/// A format enumerated: all finite non-negative values (positive only for UE8M0), ascending.
struct Table {
    fmt: Format,
    signed: bool,
    sign_bit: u16,
    /// Finite non-negative values, ascending, and their magnitude codes.
    vals: Vec<f64>,
    codes: Vec<u16>,
    /// The value after the largest on the same grid with the exponent range unbounded, and whether its
    /// (would-be) code is even.
    beyond: f64,
    beyond_even: bool,
    /// UE8M0: ties go up (no mantissa bits, PyTorch/ml_dtypes rule).
    ties_up: bool,
    kind: Kind,
    /// The quiet NaN magnitude code written for NaN, the infinity code.
    nan: u16,
    inf: u16,
}

impl Table {
    fn new(fmt: Format) -> Table {
        // (exponent bits, mantissa bits, bias, signed, kind), from numerics.md.
        let (e, m, bias, signed, kind) = match fmt {
            Format::Bf16 => (8, 7, 127, true, Kind::Ieee),
            Format::F16 => (5, 10, 15, true, Kind::Ieee),
            Format::E4M3 => (4, 3, 7, true, Kind::FiniteNan),
            Format::E5M2 => (5, 2, 15, true, Kind::Ieee),
            Format::E8M0 => (8, 0, 127, false, Kind::FiniteNan),
            Format::E2M1 => (2, 1, 1, true, Kind::Finite),
        };
        let subnormals = fmt != Format::E8M0;
        let n_mag = 1u32 << (e + m);
        let value = |c: u32| -> f64 {
            let ef = (c >> m) as i32;
            let f = (c & ((1 << m) - 1)) as f64;
            let frac = f / 2f64.powi(m);
            if subnormals && ef == 0 {
                frac * 2f64.powi(1 - bias)
            } else {
                (1.0 + frac) * 2f64.powi(ef - bias)
            }
        };
        let finite = |c: u32| match kind {
            Kind::Ieee => c >> m != (1 << e) - 1,
            Kind::FiniteNan => c != n_mag - 1,
            Kind::Finite => true,
        };
        let mut pairs: Vec<(f64, u16)> = (0..n_mag).filter(|&c| finite(c)).map(|c| (value(c), c as u16)).collect();
        pairs.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        for w in pairs.windows(2) {
            assert!(w[0].0 < w[1].0, "{fmt}: values not distinct");
        }
        let last = pairs.last().unwrap().1 as u32;
        let vals: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let codes: Vec<u16> = pairs.iter().map(|p| p.1).collect();
        // The code after the largest, read with the same formula (the exponent range unbounded).
        let beyond = value(last + 1);
        let (nan, inf) = match kind {
            Kind::Ieee => ((((1 << e) - 1) << m | 1 << (m - 1)) as u16, (((1 << e) - 1) << m) as u16),
            Kind::FiniteNan => ((n_mag - 1) as u16, 0),
            Kind::Finite => (0, 0),
        };
        Table {
            fmt,
            signed,
            sign_bit: if signed { n_mag as u16 } else { 0 },
            vals,
            codes,
            beyond,
            beyond_even: (last + 1) % 2 == 0,
            ties_up: m == 0,
            kind,
            nan,
            inf,
        }
    }

    fn max(&self) -> f64 {
        *self.vals.last().unwrap()
    }

    /// Index of the largest value `<= a` (`None` below the smallest), continuing from `hint`, which must
    /// not be past the answer (inputs of one chunk come in ascending magnitude).
    fn floor_index(&self, a: f64, hint: &mut Option<usize>) -> Option<usize> {
        let mut i = match *hint {
            Some(i) => i,
            None => {
                let p = self.vals.partition_point(|&v| v <= a);
                if p == 0 {
                    return None;
                }
                *hint = Some(p - 1);
                return Some(p - 1);
            }
        };
        while i + 1 < self.vals.len() && self.vals[i + 1] <= a {
            i += 1;
        }
        *hint = Some(i);
        Some(i)
    }

    /// What overflow (or an infinity) of sign `neg` gives: (code, value).
    fn overflowed(&self, neg: bool, ov: Overflow) -> (u16, f64) {
        let s = if neg { self.sign_bit } else { 0 };
        let sg = |v: f64| if neg { -v } else { v };
        match (ov, self.kind) {
            (Overflow::Saturate, _) | (_, Kind::Finite) => (*self.codes.last().unwrap() | s, sg(self.max())),
            (Overflow::NonSaturating, Kind::Ieee) => (self.inf | s, sg(f64::INFINITY)),
            (Overflow::NonSaturating, Kind::FiniteNan) => (self.nan | s, sg(f64::NAN)),
        }
    }

    /// The cast of `x` by search: (code, value).
    fn cast(&self, x: f64, rounding: Rounding, ov: Overflow, hint: &mut Option<usize>) -> (u16, f64) {
        let neg = x.is_sign_negative();
        let s = if neg { self.sign_bit } else { 0 };
        let sg = |v: f64| if neg { -v } else { v };
        if x.is_nan() {
            return match self.kind {
                // ml_dtypes: a NaN becomes a zero of the opposite sign.
                Kind::Finite => (if neg { 0 } else { self.sign_bit }, if neg { 0.0 } else { -0.0 }),
                _ if !self.signed => (self.nan, f64::NAN),
                _ => (self.nan | s, sg(f64::NAN)),
            };
        }
        if !self.signed && (neg || x == 0.0) {
            return match ov {
                Overflow::Saturate => (self.codes[0], self.vals[0]),
                Overflow::NonSaturating => (self.nan, f64::NAN),
            };
        }
        if x.is_infinite() {
            return self.overflowed(neg, ov);
        }
        let a = x.abs();
        // Direction of the magnitude: 0 nearest, -1 down, +1 up.
        let dir = match rounding {
            Rounding::NearestEven => 0,
            Rounding::TowardZero => -1,
            Rounding::TowardPositive => {
                if neg {
                    -1
                } else {
                    1
                }
            }
            Rounding::TowardNegative => {
                if neg {
                    1
                } else {
                    -1
                }
            }
        };
        let pick = |i: usize| (self.codes[i] | s, sg(self.vals[i]));
        let Some(i) = self.floor_index(a, hint) else {
            // Below the smallest value (UE8M0 only: the others contain 0): the smallest value, any rounding.
            return pick(0);
        };
        let lo = self.vals[i];
        if a == lo {
            return pick(i);
        }
        let top = i + 1 == self.vals.len();
        let (hi, hi_even) =
            if top { (self.beyond, self.beyond_even) } else { (self.vals[i + 1], self.codes[i + 1] % 2 == 0) };
        let go_up = match dir {
            -1 => false,
            1 => true,
            _ => {
                if a >= hi {
                    true // beyond the grid's next value (only past the top)
                } else {
                    // lo <= a < hi <= 2·lo (or lo = 0): both differences are exact (Sterbenz).
                    let (dl, dh) = (a - lo, hi - a);
                    if dl != dh {
                        dh < dl
                    } else if self.ties_up {
                        true
                    } else {
                        hi_even
                    }
                }
            }
        };
        if !go_up {
            return pick(i);
        }
        if top {
            return self.overflowed(neg, ov);
        }
        pick(i + 1)
    }
}

// ---------------------------------------------------------------------------------------------------------
// Sweeps
// ---------------------------------------------------------------------------------------------------------

/// The configurations swept: nearest in both overflow modes, and UE8M0's PTX roundings (the default,
/// nearest and non-saturating, first).
fn configs(fmt: Format) -> Vec<(Rounding, Overflow)> {
    let mut c = vec![(Rounding::NearestEven, NON_SAT), (Rounding::NearestEven, SAT)];
    if fmt == Format::E8M0 {
        c.extend([
            (Rounding::TowardZero, NON_SAT),
            (Rounding::TowardPositive, NON_SAT),
            (Rounding::TowardPositive, SAT),
        ]);
    }
    c
}

/// The configurations of the exhaustive sweep: the default, and UE8M0's round-down and round-up (PTX rz,
/// rp). Saturation changes only what overflow and infinities become: every threshold is in the boundary
/// patterns, in all configurations.
fn exhaustive_configs(fmt: Format) -> Vec<(Rounding, Overflow)> {
    let mut c = vec![(Rounding::NearestEven, NON_SAT)];
    if fmt == Format::E8M0 {
        c.extend([(Rounding::TowardZero, NON_SAT), (Rounding::TowardPositive, NON_SAT)]);
    }
    c
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan() && a.is_sign_negative() == b.is_sign_negative())
}

struct Failures {
    count: AtomicU64,
    first: Mutex<Vec<String>>,
}

impl Failures {
    fn new() -> Failures {
        Failures { count: AtomicU64::new(0), first: Mutex::new(Vec::new()) }
    }

    fn add(&self, msg: impl FnOnce() -> String) {
        if self.count.fetch_add(1, Ordering::Relaxed) < 20 {
            self.first.lock().unwrap().push(msg());
        }
    }

    fn assert_none(&self, what: &str) {
        let n = self.count.load(Ordering::Relaxed);
        assert_eq!(n, 0, "{what}: {n} mismatches, first: {:#?}", self.first.lock().unwrap());
    }
}

/// Check one f32 bit pattern in every configuration; `hint` carries the search position. `cast`'s outcome
/// is checked always (as bits and as a value); the entry points built on it on every 64th pattern.
#[inline]
fn check(t: &Table, cfgs: &[(Rounding, Overflow)], p: u32, hint: &mut Option<usize>, fails: &Failures) {
    let x = f32::from_bits(p);
    let xd = f64::from(x);
    let entry_points = p % 64 == 0;
    for &(r, ov) in cfgs {
        let (code, val) = t.cast(xd, r, ov, hint);
        let o = formats::cast(t.fmt, xd, r, ov);
        let (got, q) = (o.bits(t.fmt), o.value(t.fmt));
        if got != code || !same(q, val) {
            fails.add(|| {
                format!(
                    "{} {r:?} {ov:?}: x = {x:e} ({p:#010x}): bits {got:#x}, value {q:e}; reference {code:#x}, {val:e}",
                    t.fmt
                )
            });
        }
        if entry_points
            && (formats::encode_with(t.fmt, xd, r, ov) != code || !same(formats::quantize_with(t.fmt, xd, r, ov), val))
        {
            fails.add(|| format!("{} {r:?} {ov:?}: encode_with/quantize_with of {x:e} ({p:#010x})", t.fmt));
        }
    }
    if entry_points {
        let (code, val) = t.cast(xd, Rounding::NearestEven, NON_SAT, hint);
        let (e, q) = (formats::encode(t.fmt, xd, NON_SAT), formats::quantize(t.fmt, xd, NON_SAT));
        let (e32, q32) = (formats::encode_f32(t.fmt, x, NON_SAT), formats::quantize_f32(t.fmt, x, NON_SAT));
        if e != code || e32 != code || !same(q, val) || !same(f64::from(q32), val) {
            fails.add(|| format!("{} encode/quantize(_f32) of {x:e} ({p:#010x})", t.fmt));
        }
        if !same(formats::decode(t.fmt, e), q) {
            fails.add(|| format!("{} decode(encode) != quantize for {x:e} ({p:#010x})", t.fmt));
        }
    }
}

/// Every `stride`-th f32 bit pattern (those that are multiples of `stride`), in parallel over blocks of
/// 2^16 consecutive patterns (ascending magnitude within a block, so the search walks forward).
fn sweep_stride(fmt: Format, stride: u32, cfgs: &[(Rounding, Overflow)]) -> u64 {
    let t = Table::new(fmt);
    let fails = Failures::new();
    let checked = AtomicU64::new(0);
    (0u32..1 << 16).into_par_iter().for_each(|block| {
        let lo = (block as u64) << 16;
        let first = lo.next_multiple_of(stride as u64);
        let mut hint = None;
        let mut n = 0u64;
        let mut p = first;
        while p < lo + (1 << 16) {
            check(&t, cfgs, p as u32, &mut hint, &fails);
            n += 1;
            p += stride as u64;
        }
        checked.fetch_add(n, Ordering::Relaxed);
    });
    fails.assert_none(&format!("{fmt} sweep, stride {stride}"));
    checked.into_inner()
}

/// f32 bit patterns near every value, midpoint, threshold and special of a format.
fn boundary_patterns(t: &Table) -> Vec<u32> {
    let mut anchors: Vec<f64> = Vec::new();
    for (i, &v) in t.vals.iter().enumerate() {
        anchors.push(v);
        let next = t.vals.get(i + 1).copied().unwrap_or(t.beyond);
        anchors.push((v + next) / 2.0); // exact: at most one bit more than the format's
    }
    anchors.push(t.beyond);
    anchors.extend([f64::from(f32::MAX), f64::from(f32::MIN_POSITIVE), 2f64.powi(-127), 1.5 * 2f64.powi(-127)]);
    let mut pats: Vec<u32> = Vec::new();
    for a in anchors {
        let f = a as f32;
        if !f.is_finite() {
            continue;
        }
        let b = f.to_bits();
        for k in 0..=32u32 {
            let q = (b + k).saturating_sub(16);
            pats.push(q);
            pats.push(q | 0x8000_0000);
        }
    }
    // Zeros and f32 subnormals, the top of f32, infinities and NaNs.
    for k in 0..64u32 {
        pats.extend([k, k | 0x8000_0000, 0x7f80_0000 - k, 0xff80_0000 - k]);
        pats.extend([0x7f80_0000 + k, 0xff80_0000 + k, 0x7fff_ffff - k, 0xffff_ffff - k, 0x7fc0_0000 + k]);
    }
    pats.sort_unstable();
    pats.dedup();
    pats
}

fn sweep_boundaries(fmt: Format) -> usize {
    let t = Table::new(fmt);
    let pats = boundary_patterns(&t);
    let mut cfgs = Vec::new();
    for r in ROUNDINGS {
        cfgs.push((r, NON_SAT));
        cfgs.push((r, SAT));
    }
    let fails = Failures::new();
    pats.par_chunks(4096).for_each(|chunk| {
        for &p in chunk {
            let mut hint = None; // patterns are not in magnitude order here: search each afresh
            check(&t, &cfgs, p, &mut hint, &fails);
        }
    });
    fails.assert_none(&format!("{fmt} boundary patterns"));
    pats.len()
}

#[test]
fn sweep_boundaries_all_roundings() {
    for fmt in Format::ALL {
        let t0 = std::time::Instant::now();
        let n = sweep_boundaries(fmt);
        eprintln!("{fmt}: {n} boundary patterns x 8 configurations: ok in {:.1} s", t0.elapsed().as_secs_f64());
    }
}

/// Every 7th f32 pattern in the default configuration (nearest, non-saturating), every 112th in the others.
#[test]
fn sweep_strided() {
    let only: Option<Format> = std::env::var("FORMATS_ONLY").ok().map(|s| s.parse().unwrap());
    for fmt in Format::ALL.into_iter().filter(|f| only.is_none_or(|o| o == *f)) {
        let t0 = std::time::Instant::now();
        let cfgs = configs(fmt);
        let n = sweep_stride(fmt, 7, &cfgs[..1]);
        let m = sweep_stride(fmt, 7 * 16, &cfgs[1..]);
        eprintln!(
            "{fmt}: every 7th f32 pattern ({n}) nearest non-saturating, every 112th ({m}) in {} more configurations: ok in {:.1} s",
            cfgs.len() - 1,
            t0.elapsed().as_secs_f64()
        );
    }
}

#[test]
#[ignore = "all 2^32 f32 patterns for every format: minutes on 2 cores; run with --ignored"]
fn sweep_exhaustive() {
    let t_all = std::time::Instant::now();
    for fmt in Format::ALL {
        let t0 = std::time::Instant::now();
        let cfgs = exhaustive_configs(fmt);
        let n = sweep_stride(fmt, 1, &cfgs);
        assert_eq!(n, 1u64 << 32);
        eprintln!("{fmt}: all {n} f32 patterns x {cfgs:?}: ok in {:.1} s", t0.elapsed().as_secs_f64());
    }
    eprintln!("exhaustive sweep: {:.1} s", t_all.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------------------------
// f64 inputs (rounded once, not through f32)
// ---------------------------------------------------------------------------------------------------------

/// xorshift64*: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// An f64 with random sign and significand and an exponent in `lo..=hi`.
    fn f64_in(&mut self, lo: i32, hi: i32) -> f64 {
        let r = self.next();
        let e = lo + (r % (hi - lo + 1) as u64) as i32;
        let m = 1.0 + (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        let v = m * 2f64.powi(e);
        if r >> 63 == 1 {
            -v
        } else {
            v
        }
    }
}

#[test]
fn f64_inputs_round_once() {
    // Double rounding through f32 would give 1 here (1 + 2^-8 + 2^-40 -> f32 1 + 2^-8, a tie, -> 1).
    let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
    assert_eq!(formats::quantize(Format::Bf16, x, NON_SAT), 1.0 + 2f64.powi(-7));
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    assert_eq!(formats::quantize(Format::F16, x, NON_SAT), 1.0 + 2f64.powi(-10));
    // Random f64 values over each format's range and beyond, every configuration, against the search.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for fmt in Format::ALL {
        let t = Table::new(fmt);
        let (lo, hi) = (t.vals[1].log2().floor() as i32 - 4, t.max().log2().ceil() as i32 + 3);
        for _ in 0..200_000 {
            let x = rng.f64_in(lo, hi);
            for r in ROUNDINGS {
                for ov in [NON_SAT, SAT] {
                    let want = t.cast(x, r, ov, &mut None);
                    let o = formats::cast(fmt, x, r, ov);
                    assert!(
                        o.bits(fmt) == want.0 && same(o.value(fmt), want.1),
                        "{fmt} {r:?} {ov:?} x = {x:e}: got {:#x}, want {:#x}",
                        o.bits(fmt),
                        want.0
                    );
                }
            }
        }
    }
    // Huge and tiny f64 (beyond f32's range).
    for fmt in Format::ALL {
        let t = Table::new(fmt);
        for x in [1e300, -1e300, f64::MAX, -f64::MAX, 1e-300, -1e-300, f64::MIN_POSITIVE, 5e-324, -5e-324] {
            for r in ROUNDINGS {
                for ov in [NON_SAT, SAT] {
                    let want = t.cast(x, r, ov, &mut None);
                    assert_eq!(formats::encode_with(fmt, x, r, ov), want.0, "{fmt} {r:?} {ov:?} x = {x:e}");
                    assert!(same(formats::quantize_with(fmt, x, r, ov), want.1), "{fmt} {r:?} {ov:?} x = {x:e}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Codes
// ---------------------------------------------------------------------------------------------------------

#[test]
fn every_code_decodes_and_round_trips() {
    for fmt in Format::ALL {
        let t = Table::new(fmt);
        let max_code = *t.codes.last().unwrap();
        let mut finite = 0;
        for code in 0..fmt.codes() {
            let code = code as u16;
            let neg = code & t.sign_bit != 0;
            let mag = code & !t.sign_bit;
            let sg = |v: f64| if neg { -v } else { v };
            let d = formats::decode(fmt, code);
            let kind = match t.codes.iter().position(|&c| c == mag) {
                Some(i) => {
                    assert!(same(d, sg(t.vals[i])), "{fmt} decode({code:#x}) = {d:e}, want {:e}", sg(t.vals[i]));
                    finite += 1;
                    0
                }
                None if t.kind == Kind::Ieee && mag == t.inf => {
                    assert!(same(d, sg(f64::INFINITY)), "{fmt} decode({code:#x}) = {d:e}");
                    1
                }
                None => {
                    assert!(d.is_nan() && d.is_sign_negative() == neg, "{fmt} decode({code:#x}) = {d:e}, want NaN");
                    2
                }
            };
            for r in ROUNDINGS {
                for ov in [NON_SAT, SAT] {
                    let e = formats::encode_with(fmt, d, r, ov);
                    let q = formats::quantize_with(fmt, d, r, ov);
                    let want = match (kind, ov) {
                        (0, _) => code,
                        (1, Overflow::NonSaturating) => code,
                        (1, Overflow::Saturate) => max_code | (code & t.sign_bit),
                        _ => t.nan | (code & t.sign_bit),
                    };
                    assert_eq!(e, want, "{fmt} {r:?} {ov:?}: encode(decode({code:#x}))");
                    assert!(same(q, formats::decode(fmt, want)), "{fmt} {r:?} {ov:?}: quantize(decode({code:#x}))");
                }
            }
        }
        let expected_finite = match fmt {
            Format::Bf16 => 65536 - 2 * 128,
            Format::F16 => 65536 - 2 * 1024,
            Format::E4M3 => 254,
            Format::E5M2 => 256 - 2 * 4,
            Format::E8M0 => 255,
            Format::E2M1 => 16,
        };
        assert_eq!(finite, expected_finite, "{fmt}: finite codes");
    }
}

#[test]
#[should_panic(expected = "above the format's")]
fn decode_rejects_wide_codes_e4m3() {
    formats::decode(Format::E4M3, 0x100);
}

#[test]
#[should_panic(expected = "above the format's")]
fn decode_rejects_wide_codes_e2m1() {
    formats::decode(Format::E2M1, 0x10);
}

#[test]
fn half_crate_agrees_on_bf16_and_f16() {
    // Decoding every code.
    for code in 0..=u16::MAX {
        let (a, b) = (formats::decode(Format::Bf16, code), half::bf16::from_bits(code).to_f64());
        assert!(same(a, b) || (a.is_nan() && b.is_nan()), "bf16 {code:#x}: {a:e} vs half {b:e}");
        let (a, b) = (formats::decode(Format::F16, code), half::f16::from_bits(code).to_f64());
        assert!(same(a, b) || (a.is_nan() && b.is_nan()), "f16 {code:#x}: {a:e} vs half {b:e}");
    }
    // Casting every 113th f32 pattern, and every pattern near the boundaries.
    let mut pats: Vec<u32> = (0..=u32::MAX / 113).map(|k| k * 113).collect();
    pats.extend(boundary_patterns(&Table::new(Format::Bf16)));
    pats.extend(boundary_patterns(&Table::new(Format::F16)));
    let fails = Failures::new();
    pats.par_chunks(1 << 16).for_each(|chunk| {
        for &p in chunk {
            let x = f32::from_bits(p);
            let ours = formats::encode_f32(Format::Bf16, x, NON_SAT);
            let theirs = half::bf16::from_f32(x).to_bits();
            let nan = |c: u16| c & 0x7f80 == 0x7f80 && c & 0x7f != 0;
            if ours != theirs && !(nan(ours) && nan(theirs)) {
                fails.add(|| format!("bf16 {x:e} ({p:#010x}): {ours:#x} vs half {theirs:#x}"));
            }
            let ours = formats::encode_f32(Format::F16, x, NON_SAT);
            let theirs = half::f16::from_f32(x).to_bits();
            let nan = |c: u16| c & 0x7c00 == 0x7c00 && c & 0x3ff != 0;
            if ours != theirs && !(nan(ours) && nan(theirs)) {
                fails.add(|| format!("f16 {x:e} ({p:#010x}): {ours:#x} vs half {theirs:#x}"));
            }
        }
    });
    fails.assert_none("half cross-check");
}

// ---------------------------------------------------------------------------------------------------------
// Facts from numerics.md, stated literally
// ---------------------------------------------------------------------------------------------------------

fn p2(k: i32) -> f64 {
    2f64.powi(k)
}

#[test]
fn literal_facts() {
    use Format::*;
    let q = |f, x| formats::quantize(f, x, NON_SAT);
    let qs = |f, x| formats::quantize(f, x, SAT);
    let e = |f, x| formats::encode(f, x, NON_SAT);
    let es = |f, x| formats::encode(f, x, SAT);
    let ew = |f, x, r| formats::encode_with(f, x, r, NON_SAT);
    let ews = |f, x, r| formats::encode_with(f, x, r, SAT);

    // Ranges.
    let max =
        [(Bf16, 3.3895313892515355e38), (F16, 65504.0), (E4M3, 448.0), (E5M2, 57344.0), (E8M0, p2(127)), (E2M1, 6.0)];
    let min = [(Bf16, p2(-133)), (F16, p2(-24)), (E4M3, p2(-9)), (E5M2, p2(-16)), (E8M0, p2(-127)), (E2M1, 0.5)];
    for ((f, mx), (_, mn)) in max.into_iter().zip(min) {
        assert_eq!(f.max_finite(), mx, "{f} max");
        assert_eq!(f.min_positive(), mn, "{f} min");
        assert_eq!(f.spec().max_finite(), mx);
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
    }
    assert!("e4m3fn".parse::<Format>().is_err());
    assert_eq!((Bf16.has_inf(), E4M3.has_inf(), E5M2.has_nan(), E2M1.has_nan()), (true, false, true, false));
    let e2m1: Vec<f64> = (0..8u16).map(|c| formats::decode(E2M1, c)).collect();
    assert_eq!(e2m1, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);

    // E4M3: 464 is a tie that rounds to 448; above it overflows.
    assert_eq!((q(E4M3, 464.0), e(E4M3, 464.0), e(E4M3, -464.0)), (448.0, 0x7e, 0xfe));
    let above = f64::from(f32::from_bits(464f32.to_bits() + 1));
    assert!(q(E4M3, above).is_nan());
    assert_eq!((e(E4M3, above), e(E4M3, -above), es(E4M3, above), es(E4M3, -above)), (0x7f, 0xff, 0x7e, 0xfe));
    assert_eq!((e(E4M3, f64::INFINITY), es(E4M3, f64::INFINITY), es(E4M3, f64::NEG_INFINITY)), (0x7f, 0x7e, 0xfe));
    assert_eq!((e(E4M3, f64::NAN), es(E4M3, f64::NAN), e(E4M3, -f64::NAN)), (0x7f, 0x7f, 0xff));
    assert_eq!((e(E4M3, p2(-9)), e(E4M3, p2(-10)), e(E4M3, 1.5 * p2(-10)), e(E4M3, -0.0)), (0x01, 0x00, 0x01, 0x80));
    assert_eq!(q(E4M3, 0.2), 0.203125);
    // E5M2: |x| >= 61440 overflows.
    assert_eq!((e(E5M2, 61440.0), e(E5M2, -61440.0), es(E5M2, 61440.0)), (0x7c, 0xfc, 0x7b));
    assert_eq!(
        (e(E5M2, 61439.99), q(E5M2, 61439.99), e(E5M2, f64::NAN), e(E5M2, f64::NEG_INFINITY)),
        (0x7b, 57344.0, 0x7e, 0xfc)
    );
    // bf16 / f16: overflow after rounding; ties to even; subnormals kept.
    assert_eq!((e(Bf16, f64::from(f32::MAX)), es(Bf16, f64::from(f32::MAX))), (0x7f80, 0x7f7f));
    assert_eq!((e(Bf16, (2.0 - p2(-8)) * p2(127)), e(Bf16, (2.0 - p2(-8) - p2(-30)) * p2(127))), (0x7f80, 0x7f7f));
    assert_eq!((q(Bf16, 1.0 + p2(-8)), q(Bf16, 1.0 + 3.0 * p2(-8))), (1.0, 1.0 + p2(-6)));
    assert_eq!((e(Bf16, p2(-133)), e(Bf16, p2(-134)), e(Bf16, 1.5 * p2(-134))), (0x0001, 0x0000, 0x0001));
    assert_eq!((e(Bf16, f64::NAN), e(Bf16, -f64::NAN)), (0x7fc0, 0xffc0));
    assert_eq!((e(F16, 65520.0), e(F16, 65519.99), e(F16, p2(-25)), e(F16, 1.5 * p2(-25))), (0x7c00, 0x7bff, 0, 1));
    assert_eq!(e(F16, f64::NAN), 0x7e00);

    // UE8M0: >= 1.5·2^e rounds up; RZ floor, RP ceiling; no zero, no sign.
    use Rounding::*;
    assert_eq!(
        (e(E8M0, 1.0), e(E8M0, 1.5), e(E8M0, 1.4999999), e(E8M0, 3.0), e(E8M0, 0.75)),
        (0x7f, 0x80, 0x7f, 0x81, 0x7f)
    );
    assert_eq!(
        (ew(E8M0, 1.99, TowardZero), ew(E8M0, 1.01, TowardPositive), ew(E8M0, 1.0, TowardPositive)),
        (0x7f, 0x80, 0x7f)
    );
    assert_eq!(
        (ew(E8M0, 0.5, TowardZero), ew(E8M0, 0.5, TowardPositive), ew(E8M0, 0.75, TowardNegative)),
        (0x7e, 0x7e, 0x7e)
    );
    assert_eq!((e(E8M0, 1.5 * p2(127)), es(E8M0, 1.5 * p2(127)), e(E8M0, 1.4999 * p2(127))), (0xff, 0xfe, 0xfe));
    assert_eq!((ew(E8M0, 1.01 * p2(127), TowardPositive), ews(E8M0, 1.01 * p2(127), TowardPositive)), (0xff, 0xfe));
    assert_eq!((ew(E8M0, p2(200), TowardZero), ew(E8M0, f64::from(f32::MAX), TowardZero)), (0xfe, 0xfe));
    for r in ROUNDINGS {
        // Below 2^-127 (f32 subnormals, tiny f64): the smallest value, whatever the rounding.
        assert_eq!((ew(E8M0, p2(-149), r), ew(E8M0, 1e-300, r), ew(E8M0, 0.75 * p2(-127), r)), (0, 0, 0), "{r:?}");
        // NaN; zero, negatives, -inf; +inf.
        for x in [f64::NAN, -f64::NAN] {
            assert_eq!((ew(E8M0, x, r), ews(E8M0, x, r)), (0xff, 0xff));
        }
        for x in [0.0, -0.0, -1.0, -1e-40, f64::NEG_INFINITY] {
            assert_eq!((ew(E8M0, x, r), ews(E8M0, x, r)), (0xff, 0x00), "{r:?} {x}");
        }
        assert_eq!((ew(E8M0, f64::INFINITY, r), ews(E8M0, f64::INFINITY, r)), (0xff, 0xfe));
    }
    // f32 subnormals: nearest on the significand (ml_dtypes; PyTorch rounds (2^-127, 1.5·2^-127) up).
    assert_eq!((e(E8M0, 1.25 * p2(-127)), e(E8M0, 1.5 * p2(-127)), e(E8M0, 1.49 * p2(-127))), (0x00, 0x01, 0x00));
    assert!(q(E8M0, 0.0).is_nan() && q(E8M0, 0.0).is_sign_positive());
    assert_eq!((qs(E8M0, 0.0), q(E8M0, 1.5), formats::decode(E8M0, 0)), (p2(-127), 2.0, p2(-127)));

    // E2M1: ties to even, overflow and inf saturate in both modes, NaN -> zero of the opposite sign.
    let xs = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.9, 7.0, 100.0];
    let want = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 6.0];
    for (x, w) in xs.into_iter().zip(want) {
        assert_eq!((q(E2M1, x), qs(E2M1, x), q(E2M1, -x)), (w, w, -w), "e2m1 {x}");
    }
    assert_eq!((e(E2M1, f64::INFINITY), e(E2M1, f64::NEG_INFINITY), es(E2M1, f64::INFINITY)), (0x7, 0xf, 0x7));
    assert_eq!((e(E2M1, f64::NAN), e(E2M1, -f64::NAN), es(E2M1, f64::NAN)), (0x8, 0x0, 0x8));
    assert_eq!((q(E2M1, f64::NAN).to_bits(), q(E2M1, -f64::NAN).to_bits()), ((-0.0f64).to_bits(), 0));
}

// ---------------------------------------------------------------------------------------------------------
// Spot checks against ml_dtypes
// ---------------------------------------------------------------------------------------------------------

/// Values for the ml_dtypes comparison: random bit patterns, random values in each format's range, and
/// every value, midpoint and threshold of the 8- and 4-bit formats (with neighbours and negatives).
fn spot_values() -> Vec<f32> {
    let mut v: Vec<f32> = Vec::new();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..1500 {
        v.push(f32::from_bits(rng.next() as u32));
    }
    for fmt in Format::ALL {
        let t = Table::new(fmt);
        let (lo, hi) = (t.vals[1].log2().floor() as i32 - 3, t.max().log2().ceil() as i32 + 2);
        for _ in 0..300 {
            v.push(rng.f64_in(lo.max(-149), hi.min(127)) as f32);
        }
        if fmt.bits() <= 8 {
            for (i, &x) in t.vals.iter().enumerate() {
                let next = t.vals.get(i + 1).copied().unwrap_or(t.beyond);
                for a in [x, (x + next) / 2.0] {
                    let a = a as f32;
                    if a.is_finite() {
                        v.extend([a, -a, f32::from_bits(a.to_bits() + 1), f32::from_bits(a.to_bits().max(1) - 1)]);
                    }
                }
            }
        }
    }
    let specials = [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX, f32::MIN_POSITIVE, 1e-45];
    v.extend(specials);
    v.extend([f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001), f32::from_bits(0xffa1_2345)]);
    v.extend([464.0, 465.0, 61440.0, 61439.996, 65520.0, 65519.996, 1.5 * 2f32.powi(-127), 1.25 * 2f32.powi(-127)]);
    v
}

const ML_DTYPES_SCRIPT: &str = r#"
import sys, warnings
import numpy as np, ml_dtypes
warnings.filterwarnings("ignore")
x = np.fromfile(sys.argv[1], dtype="<f4")
out = []
for name in sys.argv[3:]:
    t = np.float16 if name == "float16" else getattr(ml_dtypes, name)
    y = x.astype(t)
    out.append((y.view(np.uint16) if np.dtype(t).itemsize == 2 else y.view(np.uint8)).astype("<u2"))
np.concatenate(out).tofile(sys.argv[2])
"#;

#[test]
fn ml_dtypes_spot_checks() {
    use std::process::Command;
    match Command::new("python3").args(["-c", "import numpy, ml_dtypes"]).output() {
        Err(e) => {
            skip::notice(&format!("ml_dtypes spot checks: python3 not runnable ({e})"));
            return;
        }
        Ok(o) if !o.status.success() => {
            skip::notice("ml_dtypes spot checks: python3 cannot import numpy and ml_dtypes (pip install ml_dtypes)");
            return;
        }
        Ok(_) => {}
    }
    let xs = spot_values();
    let dir = std::env::temp_dir().join(format!("moe-formats-ml-dtypes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (inp, out) = (dir.join("in.f32"), dir.join("out.u16"));
    std::fs::write(&inp, xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let names: Vec<&str> = Format::ALL.iter().map(|f| f.ml_dtypes_name()).collect();
    let o = Command::new("python3")
        .args(["-c", ML_DTYPES_SCRIPT, inp.to_str().unwrap(), out.to_str().unwrap()])
        .args(&names)
        .output()
        .expect("run python3");
    assert!(o.status.success(), "ml_dtypes script failed: {}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&out).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let theirs: Vec<u16> = bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    assert_eq!(theirs.len(), xs.len() * Format::ALL.len());
    let mut bad = Vec::new();
    for (k, fmt) in Format::ALL.into_iter().enumerate() {
        for (i, &x) in xs.iter().enumerate() {
            let ours = formats::encode_f32(fmt, x, NON_SAT);
            let t = theirs[k * xs.len() + i];
            let both_nan = formats::decode(fmt, ours).is_nan() && formats::decode(fmt, t).is_nan();
            if ours != t && !both_nan {
                bad.push(format!("{fmt} x = {x:e} ({:#010x}): ours {ours:#x}, ml_dtypes {t:#x}", x.to_bits()));
            }
        }
    }
    eprintln!(
        "ml_dtypes spot checks: {} values x {} formats, {} disagreements",
        xs.len(),
        Format::ALL.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "{} disagreements with ml_dtypes, first: {:#?}", bad.len(), &bad[..bad.len().min(20)]);
}
