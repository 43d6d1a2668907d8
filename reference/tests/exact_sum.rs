//! The superaccumulator, the small-sum path and the dot products against an independent exact model:
//! arbitrary-precision rationals (num-rational), with "correctly rounded" checked from its definition
//! (no f64 is closer to the exact value; on a tie the even one is chosen).

use moe_reference::exact::{self, ExactSum, SmallSum};
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{Signed, Zero};
use proptest::prelude::*;

fn rat(x: f64) -> BigRational {
    BigRational::from_float(x).expect("finite")
}

fn next_up(x: f64) -> f64 {
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let b = x.to_bits();
    f64::from_bits(if x > 0.0 { b + 1 } else { b - 1 })
}
fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

/// Is `r` the correctly rounded (nearest, ties-to-even) f64 of `exact`?
fn is_correctly_rounded(exact: &BigRational, r: f64) -> bool {
    if !r.is_finite() {
        // overflow: the exact value must be at least the rounding threshold of f64::MAX
        let max = rat(f64::MAX);
        let half_ulp = rat(2f64.powi(970));
        return exact.abs() >= max + half_ulp && (exact.is_positive() == (r > 0.0));
    }
    let d = (exact - rat(r)).abs();
    for nb in [next_up(r), next_down(r)] {
        if !nb.is_finite() {
            continue;
        }
        let dn = (exact - rat(nb)).abs();
        if dn < d {
            return false;
        }
        if dn == d && (r.to_bits() & 1) == 1 && r != 0.0 {
            return false; // a tie must go to the even neighbour
        }
    }
    true
}

/// f64 values of every kind: any finite bit pattern, bf16-like values, small integers, subnormals.
fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits).prop_filter("finite", |x| x.is_finite()),
        (any::<u16>(), -40i32..40).prop_map(|(m, e)| (m as i16 as f64) * 2f64.powi(e)),
        (-1000i64..1000).prop_map(|v| v as f64),
        any::<u64>().prop_map(|b| f64::from_bits(b & 0x800f_ffff_ffff_ffff)),
        Just(0.0),
        Just(-0.0),
        (-1.0e3f64..1.0e3),
    ]
}

/// Values whose products and sums stay far from overflow (the range the layer works in).
fn moderate_f64() -> impl Strategy<Value = f64> {
    any_f64().prop_filter("moderate", |x| x.abs() < 1e150)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn exact_sum_is_correctly_rounded(xs in prop::collection::vec(moderate_f64(), 0..40)) {
        let mut acc = ExactSum::new();
        let mut truth = BigRational::zero();
        for &x in &xs { acc.add(x); truth += rat(x); }
        let r = acc.round();
        prop_assert!(is_correctly_rounded(&truth, r), "sum of {:?} gave {:e}", xs, r);
    }

    #[test]
    fn exact_dot_is_correctly_rounded(ps in prop::collection::vec((moderate_f64(), moderate_f64()), 0..30)) {
        let mut acc = ExactSum::new();
        let mut truth = BigRational::zero();
        for &(a, b) in &ps { acc.add_product(a, b); truth += rat(a) * rat(b); }
        let r = acc.round();
        prop_assert!(is_correctly_rounded(&truth, r), "dot of {:?} gave {:e}", ps, r);
    }

    #[test]
    fn order_does_not_matter(mut xs in prop::collection::vec(moderate_f64(), 1..40), seed in any::<u64>()) {
        let a = exact::sum(xs.iter().copied());
        // a deterministic shuffle from the seed
        let mut s = seed | 1;
        for i in (1..xs.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            xs.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let b = exact::sum(xs.iter().copied());
        prop_assert_eq!(a.to_bits(), b.to_bits());
    }

    #[test]
    fn small_sum_matches_exact_sum(xs in prop::collection::vec(moderate_f64(), 0..30)) {
        let mut small = SmallSum::new();
        for &x in &xs { small.add(x); }
        prop_assert_eq!(small.round().to_bits(), exact::sum(xs.iter().copied()).to_bits(), "{:?}", xs);
    }

    #[test]
    fn dot_certified_is_correctly_rounded(ps in prop::collection::vec((moderate_f64(), moderate_f64()), 0..60)) {
        let mut truth = BigRational::zero();
        for &(a, b) in &ps { truth += rat(a) * rat(b); }
        let r = exact::dot_certified(&ps);
        prop_assert!(is_correctly_rounded(&truth, r), "dot of {:?} gave {:e}", ps, r);
        prop_assert_eq!(r.to_bits(), exact::dot(ps.iter().copied()).to_bits());
    }

    #[test]
    fn small_dot_matches_dot(ps in prop::collection::vec((moderate_f64(), moderate_f64()), 0..20)) {
        let a = exact::small_dot(ps.iter().copied());
        let b = exact::dot(ps.iter().copied());
        prop_assert_eq!(a.to_bits(), b.to_bits(), "{:?}", ps);
    }
}

#[test]
fn hard_cases() {
    // Catastrophic cancellation, ties, subnormal results, carries across many limbs, overflow.
    let cases: Vec<Vec<f64>> = vec![
        vec![1e300, 1.0, -1e300],
        vec![1.0, 2f64.powi(-53)],                   // exact tie: rounds to even (1.0)
        vec![1.0, 2f64.powi(-53), 2f64.powi(-1074)], // just above the tie: rounds up
        vec![-1.0, -2f64.powi(-53)],
        vec![1.0 + 2f64.powi(-52), 2f64.powi(-53)], // tie, odd: rounds up
        vec![f64::from_bits(1), f64::from_bits(1), -f64::from_bits(3)],
        vec![f64::MAX, f64::MAX, -f64::MAX],
        vec![f64::MAX, f64::MAX],
        vec![2f64.powi(-1022), -f64::from_bits(1)],
        vec![0.1, 0.2, 0.3, -0.6],
        vec![-0.0, -0.0],
    ];
    for xs in cases {
        let mut acc = ExactSum::new();
        let mut truth = BigRational::zero();
        for &x in &xs {
            acc.add(x);
            truth += rat(x);
        }
        let r = acc.round();
        assert!(is_correctly_rounded(&truth, r), "{xs:?} -> {r:e}");
    }
    // Many carries: 2^31 + 5 additions of the same value exercise the headroom bookkeeping.
    let mut acc = ExactSum::new();
    let n: u64 = (1 << 20) + 5;
    for _ in 0..n {
        acc.add(4294967295.0 * 2f64.powi(-30));
    }
    let want = rat(4294967295.0 * 2f64.powi(-30)) * BigRational::from_integer(BigInt::from(n));
    assert!(is_correctly_rounded(&want, acc.round()));
}

#[test]
fn specials_follow_ieee() {
    let mut acc = ExactSum::new();
    acc.add(1.0);
    acc.add(f64::INFINITY);
    assert_eq!(acc.round(), f64::INFINITY);
    acc.add(f64::NEG_INFINITY);
    assert!(acc.round().is_nan());
    acc.clear();
    acc.add_product(0.0, f64::INFINITY);
    assert!(acc.round().is_nan());
    acc.clear();
    assert_eq!(acc.round().to_bits(), 0.0f64.to_bits());
}

/// Values near the top of the f64 range: a two-sum of two of them overflows, which used to leave NaN
/// partials piling up until the inline space overflowed (a panic, found by the emulator's proptest). They
/// now go to the exact accumulator and the sum stays correctly rounded.
#[test]
fn huge_terms_spill_and_stay_exact() {
    let big = 1.7e308;
    let mut xs = Vec::new();
    for i in 0..200 {
        xs.push(if i % 3 == 2 { -big } else { big });
        xs.push(-big);
        xs.push(1.0 + i as f64);
    }
    let mut small = SmallSum::new();
    let mut truth = BigRational::zero();
    for &x in &xs {
        small.add(x);
        truth += rat(x);
    }
    assert!(is_correctly_rounded(&truth, small.round()), "{:e}", small.round());
    assert_eq!(small.round().to_bits(), exact::sum(xs.iter().copied()).to_bits());
}

/// How much the certified path saves on the GPU checks' dots (bf16 values, 128-4096 terms): prints the time
/// per term of `exact::dot` and `exact::dot_certified` and asserts the same bits. Run with
/// `cargo test --release -p moe-reference --test exact_sum -- --ignored --nocapture certified_speed`.
#[test]
#[ignore]
fn certified_speed() {
    let mut s = 0x2545F4914F6CDD1Du64;
    let mut bf16 = |scale: f64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let v = ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale;
        f64::from_bits(v.to_bits() & !((1u64 << 45) - 1)) // 8 significant bits, truncated: a bf16 value
    };
    for k in [128usize, 768, 2048, 4096] {
        let sets: Vec<Vec<(f64, f64)>> = (0..200).map(|_| (0..k).map(|_| (bf16(1.0), bf16(0.02))).collect()).collect();
        let t = std::time::Instant::now();
        let slow: Vec<f64> = sets.iter().map(|p| exact::dot(p.iter().copied())).collect();
        let t_slow = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let fast: Vec<f64> = sets.iter().map(|p| exact::dot_certified(p)).collect();
        let t_fast = t.elapsed().as_secs_f64();
        assert!(slow.iter().zip(&fast).all(|(a, b)| a.to_bits() == b.to_bits()));
        let per = |t: f64| t * 1e9 / (200 * k) as f64;
        println!("K {k}: exact::dot {:.1} ns a term, dot_certified {:.1} ({:.1}x)", per(t_slow), per(t_fast), t_slow / t_fast);
    }
}

