//! Exact accumulation: the arithmetic every reduction of the oracle rests on.
//!
//! - [`ExactSum`]: a fixed-point superaccumulator over the whole f64 range (and all products of two f64),
//!   rounded once to nearest-even. The definition of truth; the slow path.
//! - [`SmallSum`]: Shewchuk partials for a few terms (the k slots of a token, the slice products of the
//!   fast GEMM). Same result as `ExactSum` for finite, non-overflowing terms.
//! - [`dot`]: a correctly rounded dot product built on them; [`dot_certified`] the same bits by the cheap
//!   path where it certifies.
//! - `certify`: certificates of correct rounding, the cheap path in front of these (crate-internal).

mod accumulator;
pub(crate) mod certify;
mod fsum;

pub use accumulator::ExactSum;
pub(crate) use accumulator::pow2;
pub use fsum::SmallSum;

use std::cell::RefCell;

/// What both exact accumulators offer, so code that feeds terms can serve either.
pub trait Accumulate {
    fn add(&mut self, x: f64);
    fn add_product(&mut self, a: f64, b: f64);
}
impl Accumulate for ExactSum {
    fn add(&mut self, x: f64) {
        ExactSum::add(self, x)
    }
    fn add_product(&mut self, a: f64, b: f64) {
        ExactSum::add_product(self, a, b)
    }
}
impl Accumulate for SmallSum {
    fn add(&mut self, x: f64) {
        SmallSum::add(self, x)
    }
    fn add_product(&mut self, a: f64, b: f64) {
        SmallSum::add_product(self, a, b)
    }
}

thread_local! {
    static ACC: RefCell<ExactSum> = RefCell::new(ExactSum::new());
}

/// Correctly rounded `Σ a_i * b_i` (products and sum exact, one rounding).
pub fn dot<I: IntoIterator<Item = (f64, f64)>>(pairs: I) -> f64 {
    ACC.with(|acc| {
        let mut acc = acc.borrow_mut();
        acc.clear();
        for (a, b) in pairs {
            acc.add_product(a, b);
        }
        acc.round()
    })
}

/// [`dot`] of a slice of pairs with the certified cheap path in front (`certify`: error-free head, tail
/// with an a-priori bound, accepted only where every value within the bound rounds the same): the same bits
/// as [`dot`], several times faster on long dots of well-scaled terms (the GPU checks' dots).
pub fn dot_certified(pairs: &[(f64, f64)]) -> f64 {
    certify::dot_pairs(pairs).unwrap_or_else(|| dot(pairs.iter().copied()))
}

/// Correctly rounded `Σ x_i`.
pub fn sum<I: IntoIterator<Item = f64>>(xs: I) -> f64 {
    ACC.with(|acc| {
        let mut acc = acc.borrow_mut();
        acc.clear();
        for x in xs {
            acc.add(x);
        }
        acc.round()
    })
}

/// Correctly rounded `Σ a_i * b_i + Σ c_j` in one rounding.
pub fn dot_plus<I: IntoIterator<Item = (f64, f64)>, J: IntoIterator<Item = f64>>(pairs: I, extra: J) -> f64 {
    ACC.with(|acc| {
        let mut acc = acc.borrow_mut();
        acc.clear();
        for (a, b) in pairs {
            acc.add_product(a, b);
        }
        for c in extra {
            acc.add(c);
        }
        acc.round()
    })
}

/// True when `a*b` can go through [`SmallSum::add_product`] exactly: the FMA error term of the product
/// is representable (no underflow) and partial sums cannot overflow.
#[inline]
pub fn product_is_safe(a: f64, b: f64) -> bool {
    let p = a * b;
    if p == 0.0 {
        return a == 0.0 || b == 0.0;
    }
    let m = p.abs();
    m.is_finite() && m >= f64::from_bits(((-960 + 1023) as u64) << 52) && m <= f64::from_bits(((1000 + 1023) as u64) << 52)
}

thread_local! {
    static PAIRS: RefCell<Vec<(f64, f64)>> = const { RefCell::new(Vec::new()) };
    static SMALL: RefCell<SmallSum> = RefCell::new(SmallSum::new());
}

/// Correctly rounded dot product of a few terms: Shewchuk partials with FMA-exact products, falling back
/// to [`ExactSum`] when a product could underflow or overflow. Same bits as [`dot`].
pub fn small_dot<I: IntoIterator<Item = (f64, f64)>>(pairs: I) -> f64 {
    PAIRS.with(|buf| {
        let mut buf = buf.borrow_mut();
        buf.clear();
        buf.extend(pairs);
        if buf.iter().all(|&(a, b)| product_is_safe(a, b)) {
            SMALL.with(|s| {
                let mut s = s.borrow_mut();
                s.clear();
                for &(a, b) in buf.iter() {
                    s.add_product(a, b);
                }
                s.round()
            })
        } else {
            dot(buf.iter().copied())
        }
    })
}
