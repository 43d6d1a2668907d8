//! Correctly rounded sum of a handful of f64 values (Shewchuk's non-overlapping partials, with the
//! half-way correction of Python's `math.fsum`). Cheaper than [`ExactSum`](super::ExactSum) when only a
//! few terms are summed per output element (the k slots of a token, the slice products of the fast GEMM).
//!
//! Exact as long as no intermediate overflows (|partials| < 2^1023); callers keep magnitudes far below that
//! and tests compare it with `ExactSum`.

use super::ExactSum;

/// Partials live inline (no heap) up to this many (a guard: sums that stay below 2^1023 need at most 41). Non-overlapping partials of dense f64 values number at
/// most about 2098/53 + 1 = 41, but values with sparse significands (powers of two, scaled FP8 codes) can
/// leave one partial per few bits of the exponent range: when the inline space is full, the partials move
/// into an [`ExactSum`] (exact, slower) and accumulation goes on.
const MAX_PARTIALS: usize = 48;

/// Magnitudes from which a sum of two may overflow.
const BIG: f64 = 8.98846567431158e307; // 2^1023

/// Accumulates exactly; `round` gives the correctly rounded (nearest, ties to even) sum.
#[derive(Clone)]
pub struct SmallSum {
    /// `partials[..len]`: non-overlapping, increasing in magnitude.
    partials: [f64; MAX_PARTIALS],
    len: usize,
    special: f64,
    /// Where the partials went when they outgrew the inline space.
    spill: Option<Box<ExactSum>>,
}

impl std::fmt::Debug for SmallSum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmallSum").field("partials", &&self.partials[..self.len]).field("spilled", &self.spill.is_some()).finish()
    }
}

impl Default for SmallSum {
    fn default() -> Self {
        Self::new()
    }
}

impl SmallSum {
    pub fn new() -> Self {
        SmallSum { partials: [0.0; MAX_PARTIALS], len: 0, special: 0.0, spill: None }
    }

    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
        self.special = 0.0;
        self.spill = None;
    }

    /// Move the partials into the exact accumulator.
    #[cold]
    fn spill_partials(&mut self) {
        let spill = self.spill.get_or_insert_with(|| Box::new(ExactSum::new()));
        for &p in &self.partials[..self.len] {
            spill.add(p);
        }
        self.len = 0;
    }

    #[inline]
    pub fn add(&mut self, x: f64) {
        if !x.is_finite() {
            self.special += x; // inf + -inf = NaN, as IEEE would give
            return;
        }
        if x == 0.0 {
            return;
        }
        // Near the top of the range a two-sum can overflow (inf - inf = NaN partials): such values, and
        // everything after them, go to the exact accumulator, which covers the whole range.
        if self.spill.is_some() || x.abs() >= BIG {
            self.spill_partials();
            self.spill.as_mut().expect("just made").add(x);
            return;
        }
        if self.len == MAX_PARTIALS {
            self.spill_partials();
        }
        let mut x = x;
        let mut i = 0;
        for j in 0..self.len {
            let y = self.partials[j];
            // Two-sum (branch-free form, valid for any order of magnitudes).
            let s = x + y;
            let bp = s - x;
            let ap = s - bp;
            let err = (x - ap) + (y - bp);
            if err != 0.0 {
                self.partials[i] = err;
                i += 1;
            }
            x = s;
        }
        self.partials[i] = x;
        self.len = i + 1;
    }

    /// Add the exact product `a*b` (as the f64 product plus its FMA-exact error term).
    /// Exact unless the product underflows into the subnormal range; callers that can meet
    /// such products use [`ExactSum`](super::ExactSum) instead.
    #[inline]
    pub fn add_product(&mut self, a: f64, b: f64) {
        let p = a * b;
        if !p.is_finite() {
            self.add(p);
            return;
        }
        let e = a.mul_add(b, -p);
        self.add(p);
        if e != 0.0 {
            self.add(e);
        }
    }

    pub fn round(&self) -> f64 {
        if self.special != 0.0 || self.special.is_nan() {
            return self.special;
        }
        if let Some(spill) = &self.spill {
            let mut s = (**spill).clone();
            for &p in &self.partials[..self.len] {
                s.add(p);
            }
            return s.round();
        }
        let p = &self.partials[..self.len];
        let mut n = p.len();
        if n == 0 {
            return 0.0;
        }
        n -= 1;
        let mut hi = p[n];
        let mut lo = 0.0;
        while n > 0 {
            let x = hi;
            n -= 1;
            let y = p[n];
            hi = x + y;
            let yr = hi - x;
            lo = y - yr;
            if lo != 0.0 {
                break;
            }
        }
        // Half-way case: if the rest has the same sign as `lo`, round away from the tie.
        if n > 0 && ((lo < 0.0 && p[n - 1] < 0.0) || (lo > 0.0 && p[n - 1] > 0.0)) {
            let y = lo * 2.0;
            let x = hi + y;
            let yr = x - hi;
            if y == yr {
                hi = x;
            }
        }
        hi
    }
}
