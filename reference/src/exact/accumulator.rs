//! A Kulisch-style fixed-point superaccumulator: the definition of "exact" in this crate.
//!
//! Every finite f64 is an integer times a power of two, `m * 2^e` with `m < 2^53` and `e >= -1074`;
//! every product of two finite f64 is `m1*m2 * 2^(e1+e2)` with `m1*m2 < 2^106` and `e1+e2 >= -2148`.
//! The accumulator holds the exact sum of such numbers as one wide two's-complement integer in units of
//! `2^-2148`, stored in 32-bit chunks inside `i64` limbs. Adding a term only adds small non-negative or
//! non-positive chunks into a few limbs, so carries can wait: each limb has 31 bits of headroom, enough for
//! `2^30` additions between carry propagations. The result is rounded once, to nearest with ties to even,
//! so it does not depend on the order in which terms were added (the property every test leans on).
//!
//! The slow path of every dot product and reduction, and the ground truth the fast GEMM is tested against.
//! Non-finite inputs are tracked separately and give IEEE results (NaN, or the infinity's sign).

/// Bits of value held per limb (the rest of the `i64` is carry headroom).
const CHUNK: u32 = 32;
const MASK: i64 = (1 << CHUNK) - 1;
/// Exponent of the accumulator's least significant bit: products of two subnormals reach `2^-2148`.
const MIN_EXP: i32 = -2148;
/// Largest product exponent is 2*1023 - 104 = 1942, its top bit 2^2047; leave room for 2^64 carries.
const MAX_BIT: i32 = 2048 + 70;
const LIMBS: usize = ((MAX_BIT - MIN_EXP) as usize).div_ceil(CHUNK as usize) + 1;
/// Additions allowed before carries must be propagated (each adds < 2^32 per limb; i64 holds 2^63).
const HEADROOM: u32 = 1 << 29;

/// Exact sum of f64 values and f64 products, rounded once.
#[derive(Clone)]
pub struct ExactSum {
    limbs: Box<[i64; LIMBS]>,
    /// Lowest and highest limb touched since the last clear (for a cheap `clear`).
    lo: usize,
    hi: usize,
    pending: u32,
    nan: bool,
    pos_inf: bool,
    neg_inf: bool,
}

impl Default for ExactSum {
    fn default() -> Self {
        Self::new()
    }
}

/// Split a finite f64 into (negative, integer significand, exponent of its unit bit).
#[inline]
pub(crate) fn decompose(x: f64) -> (bool, u64, i32) {
    let bits = x.to_bits();
    let neg = bits >> 63 != 0;
    let exp_field = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if exp_field == 0 {
        (neg, frac, -1074)
    } else {
        (neg, frac | (1u64 << 52), exp_field - 1075)
    }
}

impl ExactSum {
    pub fn new() -> Self {
        ExactSum {
            limbs: Box::new([0; LIMBS]),
            lo: LIMBS,
            hi: 0,
            pending: 0,
            nan: false,
            pos_inf: false,
            neg_inf: false,
        }
    }

    /// Reset to zero, touching only the limbs that were used.
    pub fn clear(&mut self) {
        if self.lo <= self.hi {
            self.limbs[self.lo..=self.hi].fill(0);
        }
        self.lo = LIMBS;
        self.hi = 0;
        self.pending = 0;
        self.nan = false;
        self.pos_inf = false;
        self.neg_inf = false;
    }

    #[inline]
    fn note_special(&mut self, x: f64) {
        if x.is_nan() {
            self.nan = true;
        } else if x > 0.0 {
            self.pos_inf = true;
        } else {
            self.neg_inf = true;
        }
    }

    /// Add `mag * 2^exp` (mag < 2^128) with the given sign.
    #[inline]
    fn add_scaled(&mut self, neg: bool, mag: u128, exp: i32) {
        if mag == 0 {
            return;
        }
        if self.pending >= HEADROOM {
            self.propagate();
        }
        self.pending += 1;
        let pos = (exp - MIN_EXP) as u32;
        let limb = (pos / CHUNK) as usize;
        let shift = pos % CHUNK;
        // Four 32-bit chunks of `mag`, each shifted by `shift` < 32, land in two adjacent limbs.
        let mut touched_hi = limb;
        for i in 0..4 {
            let c = ((mag >> (32 * i)) as u64) & 0xffff_ffff;
            if c == 0 {
                continue;
            }
            let s = c << shift; // < 2^63
            let low = (s & MASK as u64) as i64;
            let high = (s >> CHUNK) as i64;
            let l = limb + i;
            if neg {
                self.limbs[l] -= low;
                self.limbs[l + 1] -= high;
            } else {
                self.limbs[l] += low;
                self.limbs[l + 1] += high;
            }
            touched_hi = l + 1;
        }
        self.lo = self.lo.min(limb);
        self.hi = self.hi.max(touched_hi);
    }

    /// Add one f64 exactly.
    #[inline]
    pub fn add(&mut self, x: f64) {
        if !x.is_finite() {
            self.note_special(x);
            return;
        }
        let (neg, m, e) = decompose(x);
        self.add_scaled(neg, m as u128, e);
    }

    /// Add the exact product `a * b` (no rounding of the product).
    #[inline]
    pub fn add_product(&mut self, a: f64, b: f64) {
        if !a.is_finite() || !b.is_finite() {
            self.note_special(a * b);
            return;
        }
        let (na, ma, ea) = decompose(a);
        let (nb, mb, eb) = decompose(b);
        self.add_scaled(na != nb, ma as u128 * mb as u128, ea + eb);
    }

    /// Add another accumulator's exact value.
    pub fn add_sum(&mut self, other: &ExactSum) {
        self.nan |= other.nan;
        self.pos_inf |= other.pos_inf;
        self.neg_inf |= other.neg_inf;
        if other.lo > other.hi {
            return;
        }
        if self.pending >= HEADROOM - other.pending.max(1) {
            self.propagate();
        }
        for i in other.lo..=other.hi {
            self.limbs[i] += other.limbs[i];
        }
        self.pending += other.pending.max(1);
        self.lo = self.lo.min(other.lo);
        self.hi = self.hi.max(other.hi);
    }

    /// Bring every limb but the top one into [0, 2^32), moving carries up.
    fn propagate(&mut self) {
        if self.lo > self.hi {
            self.pending = 0;
            return;
        }
        let mut carry = 0i64;
        let mut i = self.lo;
        while i < LIMBS - 1 && (i <= self.hi || carry != 0) {
            let v = self.limbs[i] + carry;
            self.limbs[i] = v & MASK;
            carry = v >> CHUNK; // arithmetic shift: floor division
            i += 1;
        }
        self.hi = self.hi.max(i.min(LIMBS - 1));
        self.limbs[i] += carry;
        self.pending = 0;
    }

    /// True when the exact sum is zero (and no special values were added).
    pub fn is_zero(&mut self) -> bool {
        self.propagate();
        !self.nan && !self.pos_inf && !self.neg_inf && self.limbs.iter().all(|&l| l == 0)
    }

    /// The exact sum, rounded to nearest f64 (ties to even). Overflow gives an infinity.
    /// An exact zero is +0.0.
    pub fn round(&mut self) -> f64 {
        if self.nan || (self.pos_inf && self.neg_inf) {
            return f64::NAN;
        }
        if self.pos_inf {
            return f64::INFINITY;
        }
        if self.neg_inf {
            return f64::NEG_INFINITY;
        }
        self.propagate();
        if self.lo > self.hi {
            return 0.0;
        }
        // Sign: the top limb holds it after propagation (all lower limbs are in [0, 2^32)).
        let top = (self.lo..LIMBS).rev().find(|&i| self.limbs[i] != 0);
        let Some(top) = top else { return 0.0 };
        let negative = self.limbs[top] < 0;
        // Magnitude limbs (two's complement negate when negative), from `lo` to `top`.
        let mag: Vec<u64> = if negative {
            negate_chunks(&self.limbs[self.lo..=top])
        } else {
            self.limbs[self.lo..=top].iter().map(|&l| l as u64).collect()
        };
        round_chunks(negative, &mag, MIN_EXP + (self.lo as i32) * CHUNK as i32)
    }
}

/// Magnitude of a negative number given as normalised chunks (all but the last in [0, 2^32), the last
/// negative): returns the chunks of its absolute value, each in [0, 2^32) except possibly a larger top.
fn negate_chunks(limbs: &[i64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(limbs.len() + 1);
    let mut borrow = 0i64;
    for (i, &l) in limbs.iter().enumerate() {
        if i + 1 == limbs.len() {
            // top limb: value = l (negative, possibly beyond 32 bits); -(l) - borrow
            let v = -(l) - borrow;
            out.push(v as u64);
        } else {
            let v = -l - borrow; // in (-2^32, 0]
            if v < 0 {
                out.push((v + (1 << CHUNK)) as u64);
                borrow = 1;
            } else {
                out.push(0);
                borrow = 0;
            }
        }
    }
    out
}

/// Round `sign * Σ chunks[i] * 2^(32 i) * 2^unit_exp` to the nearest f64, ties to even.
/// Chunks are < 2^32 except possibly the last, which may hold up to 63 bits.
fn round_chunks(negative: bool, chunks: &[u64], unit_exp: i32) -> f64 {
    // Find the highest set bit overall.
    let mut top = chunks.len();
    while top > 0 && chunks[top - 1] == 0 {
        top -= 1;
    }
    if top == 0 {
        return 0.0;
    }
    let t = top - 1;
    let lead_in_chunk = 63 - chunks[t].leading_zeros() as i32; // bit index within chunk t
    let lead = t as i32 * CHUNK as i32 + lead_in_chunk; // bit index within the integer
    let lead_exp = unit_exp + lead;
    if lead_exp > 1023 {
        return if negative { f64::NEG_INFINITY } else { f64::INFINITY };
    }
    // Keep bits down to `lsb` (index within the integer): 53 bits, or fewer for subnormals.
    let lsb_exp = (lead_exp - 52).max(-1074);
    let lsb = lsb_exp - unit_exp; // may be negative: then the value is exact with room to spare
    let bit = |i: i32| -> u64 {
        if i < 0 {
            return 0;
        }
        let c = (i / CHUNK as i32) as usize;
        let o = i % CHUNK as i32;
        if c >= chunks.len() {
            // the top chunk may extend beyond 32 bits
            let c2 = chunks.len() - 1;
            let o2 = i - c2 as i32 * CHUNK as i32;
            return if o2 < 64 { (chunks[c2] >> o2) & 1 } else { 0 };
        }
        if c == chunks.len() - 1 {
            let o2 = i - c as i32 * CHUNK as i32;
            return (chunks[c] >> o2) & 1;
        }
        (chunks[c] >> o) & 1
    };
    let mut q: u64 = 0;
    for i in (lsb.max(0)..=lead).rev() {
        q = (q << 1) | bit(i);
    }
    if lsb < 0 {
        // Value is an integer multiple of 2^unit_exp with fewer bits than the target: shift up.
        // (unit_exp + lsb = lsb_exp, q currently counts units of 2^unit_exp.)
        let f = q as f64; // exact: at most 53 bits
        return sign(negative, ldexp_exact(f, unit_exp));
    }
    let round_bit = if lsb >= 1 { bit(lsb - 1) } else { 0 };
    let sticky = if lsb >= 2 { any_below(chunks, lsb - 1) } else { false };
    if round_bit == 1 && (sticky || q & 1 == 1) {
        q += 1;
    }
    let f = q as f64; // q <= 2^53: exact
    let r = ldexp_exact(f, lsb_exp);
    sign(negative, r)
}

fn any_below(chunks: &[u64], n: i32) -> bool {
    // any bit with index < n set?
    let full = (n / CHUNK as i32) as usize;
    for c in chunks.iter().take(full.min(chunks.len())) {
        if *c != 0 {
            return true;
        }
    }
    let rem = n % CHUNK as i32;
    if full < chunks.len() && rem > 0 {
        return chunks[full] & ((1u64 << rem) - 1) != 0;
    }
    false
}

#[inline]
fn sign(negative: bool, x: f64) -> f64 {
    if negative {
        -x
    } else {
        x
    }
}

/// `f * 2^e` for an integer-valued `f < 2^54` whose exact result is representable (or overflows).
pub(crate) fn ldexp_exact(f: f64, e: i32) -> f64 {
    let mut x = f;
    let mut e = e;
    while e > 1000 {
        x *= f64::from_bits(((1000 + 1023) as u64) << 52);
        e -= 1000;
    }
    while e < -1000 {
        // stay normal in between: x >= 1 so x * 2^-1000 >= 2^-1000
        x *= f64::from_bits(((-1000 + 1023) as u64) << 52);
        e += 1000;
    }
    x * pow2(e)
}

/// 2^e for e in [-1074, 1023], exactly.
#[inline]
pub(crate) fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (e + 1074))
    }
}
