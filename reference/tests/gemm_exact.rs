//! The fast exact GEMM (Ozaki slicing) must give the same bits as the per-entry superaccumulator for
//! every kind of data: bf16-valued, full f64, wide exponent ranges, zeros, tiny and huge magnitudes, and
//! the extra-terms form used for `grad.x`.

use moe_reference::gemm::{matmul_nt_plus, matmul_nt_with, plan_for, Engine};
use ndarray::Array2;
use proptest::prelude::*;

/// A small deterministic generator (xorshift*), so failures reproduce from the proptest seed.
struct Gen(u64);
impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(1e-300), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

fn bf16_round(x: f64) -> f64 {
    let b = (x as f32).to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(r) as f64
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Bf16,
    F64,
    WideRange,
    SparseZeros,
    Tiny,
    Huge,
    Integers,
}

fn fill(kind: Kind, rows: usize, cols: usize, g: &mut Gen) -> Array2<f64> {
    Array2::from_shape_fn((rows, cols), |_| match kind {
        Kind::Bf16 => bf16_round(g.normal() * 0.02),
        Kind::F64 => g.normal(),
        Kind::WideRange => g.normal() * 2f64.powi((g.next() % 120) as i32 - 60),
        Kind::SparseZeros => {
            if g.next() % 3 == 0 {
                g.normal()
            } else {
                0.0
            }
        }
        Kind::Tiny => bf16_round(g.normal()) * 2f64.powi(-700),
        Kind::Huge => g.normal() * 2f64.powi(600),
        Kind::Integers => ((g.next() % 7) as f64) - 3.0,
    })
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Bf16),
        Just(Kind::F64),
        Just(Kind::WideRange),
        Just(Kind::SparseZeros),
        Just(Kind::Tiny),
        Just(Kind::Huge),
        Just(Kind::Integers),
    ]
}

fn assert_same(a: &Array2<f64>, b: &Array2<f64>) {
    assert_eq!(a.dim(), b.dim());
    for ((i, x), y) in a.indexed_iter().zip(b.iter()) {
        assert_eq!(x.to_bits(), y.to_bits(), "entry {i:?}: {x:e} vs {y:e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(120))]


    #[test]
    fn extra_terms_join_the_one_rounding((m, n, k) in (1usize..10, 1usize..10, 1usize..50), seed in any::<u64>()) {
        let mut g = Gen(seed | 1);
        let a = fill(Kind::F64, m, k, &mut g);
        let b = fill(Kind::Bf16, n, k, &mut g);
        let extra_vals = fill(Kind::WideRange, m * n, 3, &mut g);
        let extra = |r: usize, c: usize, out: &mut Vec<(f64, f64)>| {
            for j in 0..3 { out.push((extra_vals[[r * n + c, j]], 1.0)); }
        };
        let fast = matmul_nt_plus(Engine::Ozaki, a.view(), b.view(), Some(&extra));
        let slow = matmul_nt_plus(Engine::Reference, a.view(), b.view(), Some(&extra));
        assert_same(&fast, &slow);
        // and it is the exact sum, not a sum of rounded parts: compare with one superaccumulator per entry
        for r in 0..m { for c in 0..n {
            let mut acc = moe_reference::exact::ExactSum::new();
            for kk in 0..k { acc.add_product(a[[r, kk]], b[[c, kk]]); }
            for j in 0..3 { acc.add(extra_vals[[r * n + c, j]]); }
            prop_assert_eq!(acc.round().to_bits(), fast[[r, c]].to_bits());
        }}
    }
}

#[test]
fn cancellation_to_exact_zero_and_to_tiny() {
    // rows that cancel exactly, and rows that cancel down to one tiny term
    let k = 64;
    let mut a = Array2::<f64>::zeros((2, k));
    let b = Array2::<f64>::ones((1, k));
    for j in 0..k / 2 {
        a[[0, 2 * j]] = 1.0 + j as f64;
        a[[0, 2 * j + 1]] = -(1.0 + j as f64);
        a[[1, 2 * j]] = 1e10;
        a[[1, 2 * j + 1]] = -1e10;
    }
    a[[1, 7]] += 2f64.powi(-30); // below 1e10's ulp? no: exactly representable? force a tail element
    a[[1, 9]] = 3e-200;
    let fast = matmul_nt_with(Engine::Ozaki, a.view(), b.view());
    let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
    assert_same(&fast, &slow);
    assert_eq!(fast[[0, 0]].to_bits(), 0.0f64.to_bits());
}

#[test]
fn bf16_operands_need_one_slice_each() {
    // The common case the speed target rests on: two bf16-valued operands at K = 2048 fit one f64 GEMM.
    let mut g = Gen(7);
    let a = fill(Kind::Bf16, 64, 2048, &mut g);
    let b = fill(Kind::Bf16, 96, 2048, &mut g);
    let plan = plan_for(a.view(), b.view()).expect("fast path");
    assert_eq!((plan.n_a, plan.n_b), (1, 1), "{plan:?}");
    // Full f64 against bf16 needs several slices of the f64 side.
    let f = fill(Kind::F64, 64, 768, &mut g);
    let w = fill(Kind::Bf16, 96, 768, &mut g);
    let plan = plan_for(f.view(), w.view()).expect("fast path");
    assert!(plan.n_a >= 2 && plan.n_b == 1, "{plan:?}");
}

#[test]
fn every_combine_path_matches_the_reference() {
    // one, two, three and four-or-more slice-pair terms per entry are combined by different code
    let mut seen = std::collections::BTreeSet::new();
    for seed in 1..40u64 {
        let mut g = Gen(seed);
        for (ka, kb, k) in [(Kind::Bf16, Kind::Bf16, 256), (Kind::F64, Kind::Bf16, 256), (Kind::F64, Kind::F64, 64), (Kind::WideRange, Kind::F64, 33)] {
            let a = fill(ka, 9, k, &mut g);
            let b = fill(kb, 11, k, &mut g);
            if let Some(p) = plan_for(a.view(), b.view()) {
                seen.insert((p.n_a * p.n_b).min(4));
            }
            let fast = matmul_nt_with(Engine::Ozaki, a.view(), b.view());
            let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
            assert_same(&fast, &slow);
        }
    }
    assert!(seen.contains(&1) && seen.contains(&3) && seen.contains(&4), "paths exercised: {seen:?}");
}

#[test]
fn tiles_cover_every_entry_once() {
    // The fast engine computes and combines the output tile by tile (64 rows by up to 1024 columns,
    // fewer columns the more slice pairs there are); shapes here cross those edges in both directions,
    // with tails in some tiles and not others, and write into a wider array (rows not adjacent) whose
    // surrounding entries must stay untouched.
    use moe_reference::gemm::matmul_nt_into;
    use ndarray::s;
    let cases = [
        (Kind::Bf16, Kind::Bf16, 130, 1100, 24, Some(1)), // one slice pair: 1024-column tiles
        (Kind::F64, Kind::Bf16, 129, 700, 40, Some(3)),   // three pairs
        (Kind::F64, Kind::F64, 65, 250, 32, Some(4)),     // four or more pairs
        (Kind::WideRange, Kind::Bf16, 70, 400, 17, None),
    ];
    for (i, (ka, kb, m, n, k, pairs)) in cases.into_iter().enumerate() {
        let mut g = Gen(1000 + i as u64);
        let a = fill(ka, m, k, &mut g);
        let b = fill(kb, n, k, &mut g);
        let plan = plan_for(a.view(), b.view());
        if let Some(p) = pairs {
            assert_eq!(plan.map(|p| (p.n_a * p.n_b).min(4)), Some(p), "case {i}: {plan:?}");
        }
        let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
        let mut wide = Array2::from_elem((m, n + 5), f64::NAN);
        matmul_nt_into(Engine::Ozaki, a.view(), b.view(), None, wide.slice_mut(s![.., 3..3 + n]));
        assert_same(&wide.slice(s![.., 3..3 + n]).to_owned(), &slow);
        assert!(wide.slice(s![.., ..3]).iter().chain(wide.slice(s![.., 3 + n..]).iter()).all(|v| v.is_nan()), "case {i} {plan:?}: wrote outside its block");
    }
}

// ---- the certified engine (the default): one exact slice pair, a plain-f64 tail with a proved error
// bound, and an exact recomputation of every entry whose rounding the bound cannot settle.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Both fast engines (the slicing one and the default certified one) against the superaccumulator.
    #[test]
    fn fast_engines_equal_reference((m, n, k) in (0usize..20, 0usize..20, 0usize..300), ka in kind(), kb in kind(), seed in any::<u64>()) {
        let mut g = Gen(seed | 1);
        let a = fill(ka, m, k, &mut g);
        let b = fill(kb, n, k, &mut g);
        let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
        for engine in [Engine::Ozaki, Engine::Certified] {
            assert_same(&matmul_nt_with(engine, a.view(), b.view()), &slow);
        }
    }

    /// Operands given transposed (a weight read as Wᵀ, as dx_rows and da do), which the certified engine
    /// splits in place, block by block: the reference's bits, with rows that fit their grid before and after
    /// the first one that does not (the grid part's copy starts there).
    #[test]
    fn certified_reads_transposed_operands((m, n, k) in (1usize..40, 1usize..80, 1usize..300), ka in kind(), kb in kind(),
                                           fit_rows in 0usize..80, seed in any::<u64>()) {
        let mut g = Gen(seed | 1);
        let at = fill(ka, k, m, &mut g); // stored [K, M]: a = atᵀ
        let mut bt = fill(kb, k, n, &mut g);
        for j in 0..fit_rows.min(n) {
            for kk in 0..k {
                bt[[kk, j]] = ((g.next() % 7) as f64) - 3.0; // small integers: the row fits any grid
            }
        }
        let slow = matmul_nt_with(Engine::Reference, at.t(), bt.t());
        assert_same(&matmul_nt_with(Engine::Certified, at.t(), bt.t()), &slow);
        assert_same(&matmul_nt_with(Engine::Certified, at.t().as_standard_layout().view(), bt.t()), &slow);
        assert_same(&matmul_nt_with(Engine::Certified, at.t(), bt.t().as_standard_layout().view()), &slow);
    }

    /// Entries engineered onto rounding ties: the leading part sums to `1 + 2^-53·(2j+1)`-like midpoints and
    /// a remainder far below decides the direction, so the f64 tail alone rounds the wrong way.
    #[test]
    fn certified_settles_near_ties((m, n, k) in (1usize..8, 1usize..8, 3usize..200), seed in any::<u64>(), sign in prop_oneof![Just(1.0f64), Just(-1.0)]) {
        let mut g = Gen(seed | 1);
        let mut a = fill(Kind::Bf16, m, k, &mut g);
        let b = Array2::from_shape_fn((n, k), |(j, kk)| if kk < 3 { 1.0 } else { bf16_round(g.normal()) * 2f64.powi(-300 - j as i32) });
        for r in 0..m {
            a[[r, 0]] = 1.0 + (g.next() % 16) as f64 * 2f64.powi(-52);
            a[[r, 1]] = 2f64.powi(-53); // half an ulp of a[r, 0]: a tie
            a[[r, 2]] = sign * 2f64.powi(-120 - (g.next() % 60) as i32); // breaks it
        }
        let (fast, stats) = moe_reference::gemm::matmul_nt_certified_stats(a.view(), b.view());
        let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
        assert_same(&fast, &slow);
        prop_assert!(stats.widths.is_some(), "{stats:?}");
        prop_assert!(stats.fallbacks > 0, "every entry is a near-tie, yet none was recomputed: {stats:?}");
        // the tie-breaking remainder sits 2^-67 or further below the tie: the second level must not settle
        // an entry it cannot (a wrong one would differ from the reference above), nor all of them
        prop_assert!(stats.refined < stats.fallbacks || stats.fallbacks == 0, "{stats:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// The same near-ties with a dense f64 rest and K long enough that the dense tail is summed in several
    /// blocks, the tie and its breaker placed in any block: the blocked tail's bound must still send every
    /// entry it cannot prove to the next level.
    #[test]
    fn certified_settles_near_ties_through_blocked_tails((m, n, k) in (1usize..6, 1usize..6, 600usize..1400), at in any::<usize>(),
                                                         seed in any::<u64>(), sign in prop_oneof![Just(1.0f64), Just(-1.0)]) {
        let mut g = Gen(seed | 1);
        let o = at % (k - 2); // columns o, o + 1, o + 2 hold the tie
        let mut a = fill(Kind::F64, m, k, &mut g);
        let b = Array2::from_shape_fn((n, k), |(j, kk)| if (o..o + 3).contains(&kk) { 1.0 } else { bf16_round(g.normal()) * 2f64.powi(-300 - j as i32) });
        for r in 0..m {
            a[[r, o]] = 1.0 + (g.next() % 16) as f64 * 2f64.powi(-52);
            a[[r, o + 1]] = 2f64.powi(-53);
            a[[r, o + 2]] = sign * 2f64.powi(-120 - (g.next() % 60) as i32);
        }
        let (fast, stats) = moe_reference::gemm::matmul_nt_certified_stats(a.view(), b.view());
        let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
        assert_same(&fast, &slow);
        prop_assert!(stats.widths.is_some(), "{stats:?}");
        prop_assert!(stats.fallbacks > 0, "every entry is a near-tie, yet none was recomputed: {stats:?}");
    }
}

#[test]
fn certified_recomputes_a_tie_the_tail_rounds_wrongly() {
    // exact value 1 + 2^-53 + 2^-200: the plain sum of the parts is the tie 1 + 2^-53, which rounds to 1;
    // the correct result is 1 + 2^-52.
    let a = ndarray::arr2(&[[1.0, 2f64.powi(-53), 2f64.powi(-200)]]);
    let b = ndarray::arr2(&[[1.0, 1.0, 1.0]]);
    let (c, stats) = moe_reference::gemm::matmul_nt_certified_stats(a.view(), b.view());
    assert_eq!(c[[0, 0]], 1.0 + 2f64.powi(-52));
    assert_eq!(stats.fallbacks, 1, "{stats:?}");
}

#[test]
fn certified_second_level_settles_what_the_first_cannot() {
    // f64 against bf16 with the first slice narrow enough that many certificates fail: the second level
    // must settle nearly all of them, with the reference's bits.
    let mut g = Gen(5);
    let a = fill(Kind::F64, 40, 2048, &mut g);
    let b = fill(Kind::Bf16, 300, 2048, &mut g);
    let (fast, stats) = moe_reference::gemm::matmul_nt_certified_stats(a.view(), b.view());
    let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
    assert_same(&fast, &slow);
    assert!(stats.fallbacks > 0, "{stats:?}");
    assert!(stats.refined * 100 >= stats.fallbacks * 99, "{stats:?}");
}

#[test]
fn certified_needs_few_fallbacks_on_layer_shaped_data() {
    // The certificate must hold for nearly every entry of the layer's GEMMs, or the engine is only as fast
    // as the superaccumulator: f64 against bf16 at K = 768 and 2048, and f64 against f64 at K = 64.
    let mut g = Gen(99);
    for (ka, kb, m, n, k) in [(Kind::F64, Kind::Bf16, 64, 256, 768), (Kind::F64, Kind::Bf16, 48, 200, 2048), (Kind::F64, Kind::F64, 256, 256, 64), (Kind::Bf16, Kind::Bf16, 64, 256, 2048)] {
        let a = fill(ka, m, k, &mut g);
        let b = fill(kb, n, k, &mut g);
        let (fast, stats) = moe_reference::gemm::matmul_nt_certified_stats(a.view(), b.view());
        let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
        assert_same(&fast, &slow);
        assert!(stats.widths.is_some(), "{ka:?} x {kb:?} K {k}: deferred");
        assert!(stats.fallbacks * 20 <= m * n, "{ka:?} x {kb:?} K {k}: {} of {} entries refined ({stats:?})", stats.fallbacks, m * n);
        assert!((stats.fallbacks - stats.refined) * 10_000 <= m * n, "{ka:?} x {kb:?} K {k}: {} of {} entries exact ({stats:?})", stats.fallbacks - stats.refined, m * n);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]

    /// An Inf or NaN anywhere in either operand (in the vectorised body of a row or in its last few
    /// elements) sends the fast engines to the superaccumulator, which propagates it as IEEE arithmetic
    /// does: the same bits from every engine, and each entry NaN or infinite exactly where the reference
    /// says so.
    #[test]
    fn non_finite_elements_give_the_reference_result((m, n, k) in (1usize..12, 1usize..12, 1usize..40), which in 0usize..3,
                                                     at in any::<(usize, usize)>(), in_b in any::<bool>(), seed in any::<u64>()) {
        let mut g = Gen(seed | 1);
        let mut a = fill(Kind::Bf16, m, k, &mut g);
        let mut b = fill(Kind::F64, n, k, &mut g);
        let v = [f64::INFINITY, f64::NEG_INFINITY, f64::NAN][which];
        if in_b { b[[at.0 % n, at.1 % k]] = v } else { a[[at.0 % m, at.1 % k]] = v }
        let slow = matmul_nt_with(Engine::Reference, a.view(), b.view());
        prop_assert!(slow.iter().any(|x| !x.is_finite()));
        for engine in [Engine::Ozaki, Engine::Certified] {
            let fast = matmul_nt_with(engine, a.view(), b.view());
            assert_same(&fast, &slow);
        }
    }
}
