//! Certificates of correct rounding: the cheap path in front of the exact accumulators.
//!
//! A sum is computed with error-free transformations (TwoSum, FMA product errors) into an exact head and
//! a tail of small terms; the tail is summed in plain f64 with Higham's a-priori bound, and the rounded
//! result is accepted only when every real within that bound of it rounds to the same f64. Otherwise the
//! caller takes its exact path ([`super::ExactSum`], [`super::small_dot`]), so the bits never depend on
//! which path ran. The certified GEMM ([`crate::gemm`]) and the few-term dots of dispatch and combine use
//! it.

use super::{pow2, product_is_safe};

/// Error-free sum: `s + e == a + b` exactly (Knuth's TwoSum).
#[inline(always)]
pub(crate) fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bp = s - a;
    let ap = s - bp;
    (s, (a - ap) + (b - bp))
}

/// The largest `h` such that every real within `h` of `s` (exclusive) rounds to `s`. Half an ulp, or a quarter where `s` is a
/// power of two (its lower neighbour is nearer); 0 where `s` is zero or so small that `h` would be subnormal
/// (those entries are certified only when exact).
#[inline(always)]
pub(crate) fn half_gap(s: f64) -> f64 {
    let bits = s.to_bits();
    let f = (bits >> 52) & 0x7ff;
    let power_of_two = (bits & ((1u64 << 52) - 1) == 0) as u64;
    // lead exponent f - 1023; half an ulp is 2^(lead - 53), the half gap below a power of two 2^(lead - 54)
    if f > 55 {
        f64::from_bits((f - 53 - power_of_two) << 52)
    } else {
        0.0
    }
}

/// γ_n = n·u / (1 - n·u) (u = 2^-53), with a margin for the rounding of the bounds built from it.
pub(crate) fn gamma(n: usize) -> f64 {
    let nu = n as f64 * pow2(-53);
    nu / (1.0 - nu) * (1.0 + pow2(-30))
}

/// Whether `sum` is the correctly rounded value of every real within `slack` of it.
#[inline(always)]
pub(crate) fn settled(sum: f64, slack: f64) -> bool {
    slack == 0.0 || slack * (1.0 + pow2(-50)) < half_gap(sum)
}

/// `p + t` rounded, and whether that is provably the correctly rounded value of `p + t + δ` for every
/// `|δ| <= beta` (`p` exact, `t` the computed tail, `beta` its error bound). Branch-free, so that the
/// certificate loop vectorises.
#[inline(always)]
pub(crate) fn certify(p: f64, t: f64, beta: f64) -> (f64, bool) {
    let (sum, err) = two_sum(p, t); // sum + err == p + t exactly
    (sum, settled(sum, err.abs() + beta))
}

/// One lane of a certified dot product: `Σ a·b = s + (Σ leaves)` exactly, where the leaves are each
/// product's FMA error and each TwoSum error; `t` is their f64 sum and `mag` the sum of their magnitudes.
#[derive(Clone, Copy, Default)]
struct Lane {
    s: f64,
    t: f64,
    mag: f64,
    unsafe_product: bool,
}

impl Lane {
    #[inline(always)]
    fn add(&mut self, a: f64, b: f64) {
        let p = a * b;
        let e = a.mul_add(b, -p); // exact when the product is safe (no underflow, no overflow)
        self.unsafe_product |= !product_is_safe(a, b);
        let (s, err) = two_sum(self.s, p);
        self.s = s;
        self.t += err + e;
        self.mag += err.abs() + e.abs();
    }
}

/// Join the lanes (more TwoSums, more leaves) and certify: the correctly rounded dot product, or None
/// where the certificate fails, a product is unsafe, or the result is zero (left to the exact path, which
/// owns the sign of zero).
fn finish(lanes: &[Lane], terms: usize) -> Option<f64> {
    let mut acc = Lane::default();
    for l in lanes {
        let (s, err) = two_sum(acc.s, l.s);
        acc.s = s;
        acc.t += err + l.t;
        acc.mag += err.abs() + l.mag;
        acc.unsafe_product |= l.unsafe_product;
    }
    let leaves = 2 * terms + lanes.len();
    if acc.unsafe_product || leaves > 1 << 20 {
        return None;
    }
    // `acc.t` sums the leaves over some tree: off by at most γ_leaves·Σ|leaf| (Higham, Lemma 4.3 (any
    // order); additions with subnormal results are exact). `gamma`'s margin covers the roundings of `mag`
    // and of this product.
    let beta = gamma(leaves) * acc.mag;
    let (sum, ok) = certify(acc.s, acc.t, beta);
    (ok && sum != 0.0).then_some(sum)
}

/// Terms fed one by one (the [`super::Accumulate`] interface of the exact accumulators, so that one
/// feeding routine serves the certificate and, where it fails, the exact path).
#[derive(Clone, Copy, Default)]
pub(crate) struct Certifier {
    lane: Lane,
    terms: usize,
}

impl Certifier {
    /// The correctly rounded sum of the terms fed, where the certificate holds.
    pub(crate) fn finish(&self) -> Option<f64> {
        finish(&[self.lane], self.terms)
    }
}

impl super::Accumulate for Certifier {
    fn add(&mut self, x: f64) {
        // one leaf (the TwoSum error); a term beyond ±2^1000 could overflow the partial sums
        self.lane.unsafe_product |= x.is_nan() || x.abs() > pow2(1000);
        let (s, err) = two_sum(self.lane.s, x);
        self.lane.s = s;
        self.lane.t += err;
        self.lane.mag += err.abs();
        self.terms += 1;
    }
    fn add_product(&mut self, a: f64, b: f64) {
        self.lane.add(a, b);
        self.terms += 1;
    }
}

/// The correctly rounded `Σ a_i·b_i` where the certificate holds (almost always for a few terms without
/// heavy cancellation), else None: the caller then takes [`super::small_dot`] or [`super::dot`].
#[inline]
pub(crate) fn dot_few(pairs: impl IntoIterator<Item = (f64, f64)>) -> Option<f64> {
    let mut lane = Lane::default();
    let mut n = 0;
    for (a, b) in pairs {
        lane.add(a, b);
        n += 1;
    }
    finish(&[lane], n)
}

/// [`dot_few`] for two equally long slices, in four independent lanes so that the additions pipeline.
pub(crate) fn dot_slices(a: &[f64], b: &[f64]) -> Option<f64> {
    assert_eq!(a.len(), b.len(), "dot of slices of different lengths");
    dot_lanes(a.len(), |i| (a[i], b[i]))
}

/// [`dot_slices`] for a slice of pairs.
pub(crate) fn dot_pairs(pairs: &[(f64, f64)]) -> Option<f64> {
    dot_lanes(pairs.len(), |i| pairs[i])
}

/// The `n` terms `term(i)` in four lanes (term i in lane i mod 4), joined and certified.
#[inline(always)]
fn dot_lanes(n: usize, term: impl Fn(usize) -> (f64, f64)) -> Option<f64> {
    const L: usize = 4;
    let mut lanes = [Lane::default(); L];
    let full = n / L * L;
    for base in (0..full).step_by(L) {
        for (l, lane) in lanes.iter_mut().enumerate() {
            let (x, y) = term(base + l);
            lane.add(x, y);
        }
    }
    for (lane, i) in lanes.iter_mut().zip(full..n) {
        let (x, y) = term(i);
        lane.add(x, y);
    }
    finish(&lanes, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact::dot;
    use proptest::prelude::*;

    /// A finite f64 with a random significand and an exponent in `lo..hi`, either sign.
    fn val(bits: u64, lo: i32, hi: i32) -> f64 {
        let e = lo + (bits >> 53) as i32 % (hi - lo);
        let m = 1.0 + (bits & ((1 << 52) - 1)) as f64 * pow2(-52);
        if bits & (1 << 52) != 0 {
            -m * pow2(e)
        } else {
            m * pow2(e)
        }
    }

    /// Pairs whose exact sum sits on, or `nudge · 2^-nudge_exp` relative off, a rounding midpoint of a
    /// random f64, with cancelling pairs mixed in (whose TwoSum errors the tail sums with roundings of
    /// its own): where a certificate without a sound bound would go wrong.
    fn near_tie(seed: &[u64], nudge: i32, nudge_exp: i32) -> Vec<(f64, f64)> {
        let s = val(seed[0], -30, 30);
        let half_ulp = f64::from_bits(s.abs().to_bits() + 1) - s.abs();
        let mut v = vec![(s, 1.0), (half_ulp * 0.5, 1.0 * s.signum()), (half_ulp * 0.5, 1.0 * s.signum())];
        if nudge != 0 {
            v.push((s.abs() * pow2(-nudge_exp), nudge as f64));
        }
        for &b in &seed[1..] {
            let x = val(b, -40, 40);
            v.push((x, 3.0));
            v.push((s, 0.75));
            v.push((-x, 3.0));
            v.push((-s, 0.75));
        }
        v
    }

    proptest! {
        /// Wherever the certificate holds, it gives the exact accumulator's bits: random terms, near-ties,
        /// cancellation, wide exponent ranges and tiny or huge products.
        #[test]
        fn certified_dots_are_correctly_rounded(
            bits in prop::collection::vec(any::<u64>(), 2..80),
            lo in -1000i32..0, span in 1i32..120, nudge in -1i32..=1, nudge_exp in 54i32..130,
        ) {
            let hi = (lo + span).min(1000);
            let pairs: Vec<(f64, f64)> = bits.chunks_exact(2).map(|c| (val(c[0], lo, hi), val(c[1], -20, 20))).collect();
            let exact = dot(pairs.iter().copied());
            if let Some(v) = dot_few(pairs.iter().copied()) {
                prop_assert_eq!(v.to_bits(), exact.to_bits());
            }
            let (a, b): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
            if let Some(v) = dot_slices(&a, &b) {
                prop_assert_eq!(v.to_bits(), exact.to_bits());
            }
            if let Some(v) = dot_pairs(&pairs) {
                prop_assert_eq!(v.to_bits(), exact.to_bits());
            }
            prop_assert_eq!(crate::exact::dot_certified(&pairs).to_bits(), exact.to_bits());
            // terms and products mixed, through the Accumulate interface
            let (adds, prods) = pairs.split_at(pairs.len() / 2);
            let mut cert = Certifier::default();
            for &(x, y) in adds {
                crate::exact::Accumulate::add(&mut cert, x * y);
            }
            for &(x, y) in prods {
                crate::exact::Accumulate::add_product(&mut cert, x, y);
            }
            if let Some(v) = cert.finish() {
                let exact = crate::exact::dot_plus(prods.iter().copied(), adds.iter().map(|&(x, y)| x * y));
                prop_assert_eq!(v.to_bits(), exact.to_bits());
            }
            let tie = near_tie(&bits, nudge, nudge_exp);
            let exact = dot(tie.iter().copied());
            if let Some(v) = dot_few(tie.iter().copied()) {
                prop_assert_eq!(v.to_bits(), exact.to_bits(), "near tie {:?}", tie);
            }
            let (a, b): (Vec<f64>, Vec<f64>) = tie.iter().copied().unzip();
            if let Some(v) = dot_slices(&a, &b) {
                prop_assert_eq!(v.to_bits(), exact.to_bits(), "near tie {:?}", tie);
            }
            if let Some(v) = dot_pairs(&tie) {
                prop_assert_eq!(v.to_bits(), exact.to_bits(), "near tie {:?}", tie);
            }
            prop_assert_eq!(crate::exact::dot_certified(&tie).to_bits(), exact.to_bits(), "near tie {:?}", tie);
        }
    }

    /// The certificate is worth having: on terms like the combine's (k = 8 weights times activations) and
    /// the slot gradients' (2048 terms) it settles nearly every entry.
    #[test]
    fn certificate_settles_ordinary_sums() {
        let mut s = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let (mut few, mut long) = (0, 0);
        for _ in 0..1000 {
            let pairs: Vec<(f64, f64)> = (0..8).map(|_| (val(next(), -4, 0).abs(), val(next(), -8, 2))).collect();
            few += dot_few(pairs.iter().copied()).is_some() as usize;
        }
        for _ in 0..50 {
            let a: Vec<f64> = (0..2048).map(|_| val(next(), -8, 2)).collect();
            let b: Vec<f64> = (0..2048).map(|_| val(next(), -8, 2)).collect();
            long += dot_slices(&a, &b).is_some() as usize;
        }
        assert!(few >= 990 && long >= 49, "certified {few}/1000 few-term and {long}/50 long dots");
    }

    /// Unsafe products (NaN, Inf, underflowing) and zero results go to the exact path.
    #[test]
    fn unsafe_and_zero_are_left_to_the_exact_path() {
        assert_eq!(dot_few([(f64::NAN, 1.0)]), None);
        assert_eq!(dot_few([(f64::INFINITY, 1.0), (1.0, 1.0)]), None);
        assert_eq!(dot_few([(0.0, f64::INFINITY)]), None);
        assert_eq!(dot_few([(pow2(-600), pow2(-600)), (1.0, 1.0)]), None);
        assert_eq!(dot_few([(1.0, 1.0), (-1.0, 1.0)]), None);
        assert_eq!(dot_few([(-0.0, 1.0)]), None);
        assert_eq!(dot_few([(1.5, 2.0), (0.25, 1.0)]), Some(3.25));
    }
}
