//! Accumulation models: hand-derived cases (each expected value worked out from the model's definition in
//! `shared/docs/numerics.md`, written in the comment next to it), and the fast GEMM against the
//! big-integer definition (`accum::slow`) on random data.

use moe_reference::accum::{dot, gemm_nt, gemm_nt_mag_into, slow, tensor_core, Model, TensorCore};
use moe_reference::formats::{quantize, Format, Overflow};
use ndarray::Array2;
use proptest::prelude::*;

const BF16: Model = Model::TensorCore(TensorCore::HOPPER_BF16);
const FP8: Model = Model::TensorCore(TensorCore::HOPPER_FP8);
const FP8_FAST: Model = Model::TensorCore(TensorCore::HOPPER_FP8_FAST);
const BLACKWELL: Model = Model::TensorCore(TensorCore::BLACKWELL_FP8);

fn p2(e: i32) -> f64 {
    2f64.powi(e)
}

/// The result through both the one-entry GEMM (fast path) and `dot` (the definition).
fn both(model: &Model, a: &[f64], b: &[f64]) -> f64 {
    let d = dot(model, a, b, None);
    let av = Array2::from_shape_vec((1, a.len()), a.to_vec()).unwrap();
    let bv = Array2::from_shape_vec((1, b.len()), b.to_vec()).unwrap();
    let g = gemm_nt(model, av.view(), bv.view(), None)[[0, 0]];
    assert_eq!(d.to_bits(), g.to_bits(), "dot {d:e} vs gemm {g:e}");
    d
}

#[test]
fn large_term_absorbs_small_ones() {
    // 1·1 (alignment exponent 0) and 15 products 2^-13·2^-13 = 2^-26: E = 0, n = 25, so each small term
    // is truncated to a multiple of 2^-25: zero. Result 1. The exact sum 1 + 15·2^-26 rounds to
    // 1 + 2^-22 in f32 (15·2^-26 = 1.875 ulp).
    let mut a = vec![p2(-13); 16];
    let mut b = vec![p2(-13); 16];
    a[0] = 1.0;
    b[0] = 1.0;
    assert_eq!(both(&BF16, &a, &b), 1.0);
    assert_eq!(dot(&Model::Exact, &a, &b, None), 1.0 + p2(-22));
}

#[test]
fn output_is_truncated_not_rounded() {
    // 1·1 + (1.5·2^-12)·2^-12 = 1 + 3·2^-25: the term is kept whole (3 units of 2^-25), the sum is then
    // truncated to 23 fraction bits: 1 (round to nearest would give 1 + 2^-23, the exact model does).
    let a = [1.0, 1.5 * p2(-12)];
    let b = [1.0, p2(-12)];
    assert_eq!(both(&BF16, &a, &b), 1.0);
    assert_eq!(dot(&Model::Exact, &a, &b, None), 1.0 + p2(-23));
    // Toward zero for negative sums too: -1 - 3·2^-25 gives -1.
    let a = [-1.0, -1.5 * p2(-12)];
    assert_eq!(both(&BF16, &a, &b), -1.0);
}

#[test]
fn products_are_not_renormalised() {
    // 1.5·1.5 = 2.25 aligns at e(1.5) + e(1.5) = 0, not 1. Eight products 2^-13·2^-12 = 2^-25 are then
    // one unit of 2^(0 - 25) each and survive: sum 2.25 + 2^-22, exactly an f32 (spacing 2^-22 in
    // [2, 4)). Were 2.25 aligned at 1, each 2^-25 would truncate to zero and the result be 2.25.
    let mut a = vec![0.0; 16];
    let mut b = vec![0.0; 16];
    a[0] = 1.5;
    b[0] = 1.5;
    for i in 1..9 {
        a[i] = p2(-13);
        b[i] = p2(-12);
    }
    assert_eq!(both(&BF16, &a, &b), 2.25 + p2(-22));
}

#[test]
fn order_of_instructions_matters() {
    // Instruction 1: sixteen 2^-26 (E = -26, exact) = 2^-22; instruction 2: C = 2^-22 and 1·1: E = 0,
    // C is 8 units of 2^-25: 1 + 2^-22.
    let small = vec![p2(-13); 16];
    let mut a = small.clone();
    let mut b = small.clone();
    let mut big = vec![0.0; 16];
    big[0] = 1.0;
    a.extend(&big);
    b.extend(&big);
    assert_eq!(both(&BF16, &a, &b), 1.0 + p2(-22));
    // Reversed: C = 1 after the first instruction; the second aligns to E = e(C) = 0 and every 2^-26
    // truncates to zero: 1.
    let mut a = big.clone();
    let mut b = big.clone();
    a.extend(&small);
    b.extend(&small);
    assert_eq!(both(&BF16, &a, &b), 1.0);
}

#[test]
fn fp8_promotion_every_128() {
    // K = 256 of E4M3: 1·1 at k = 0, then 128 products of the subnormal 2^-8 with itself (2^-16 each,
    // alignment exponent -6 + -6 = -12) at k = 128..256.
    let mut a = vec![0.0; 256];
    a[0] = 1.0;
    for v in &mut a[128..] {
        *v = p2(-8);
    }
    let b = a.clone();
    // Fast accumulation: C = 1 from the first instruction on; each later instruction aligns to E = 0 and
    // 2^-16 is below the 13 fraction bits kept: 1.
    assert_eq!(both(&FP8_FAST, &a, &b), 1.0);
    // Promoted: the second 128 start from zero. Instruction 1 of that block: E = -12, units 2^-25, each
    // 2^-16 = 2^9 units, sum 2^-11; instruction 2: E = e(C) = -11, still exact; after 4: 128·2^-16 =
    // 2^-9. Then fl32(1 + 2^-9) = 1 + 2^-9.
    assert_eq!(both(&FP8, &a, &b), 1.0 + p2(-9));
}

#[test]
fn fp8_promotion_with_scales_is_one_fma() {
    // DeepGEMM: final = fma(fl32(sa·sb), partial, final). Block 1: partial 1 (1·1), scale 1: final 1.
    // Block 2: partial 1 + 2^-12 (1·1 + 2^-6·2^-6, exact in 13 fraction bits), scale sa·sb = 1 + 2^-12
    // (sa = 1 + 2^-12, sb = 1): exact product 1 + 2^-11 + 2^-24; final = fl32(1 + 1 + 2^-11 + 2^-24) =
    // 2 + 2^-11 (2^-24 is far below half an ulp of 2). A multiply rounded first then an add gives the same
    // here; the difference shows with a cancelling final: make block 1's partial -(1 + 2^-11).
    let mut a = vec![0.0; 256];
    let mut b = vec![0.0; 256];
    a[0] = -1.0;
    b[0] = 1.0;
    a[128] = 1.0;
    b[128] = 1.0;
    a[129] = p2(-6);
    b[129] = p2(-6);
    let sa = [1.0 + p2(-11), 1.0 + p2(-12)];
    let sb = [1.0, 1.0];
    // Block 1: partial -1, fl32(sa·sb) = 1 + 2^-11, final = -(1 + 2^-11).
    // Block 2: partial 1 + 2^-12, s = 1 + 2^-12: s·partial = 1 + 2^-11 + 2^-24 exactly, plus final:
    // 2^-24 exactly (an FMA); a rounded product (1 + 2^-11, the tie 2^-24 goes to even) would give 0.
    let fma = dot(&FP8, &a, &b, Some((&sa, &sb, 128)));
    assert_eq!(fma, p2(-24));
    let av = Array2::from_shape_vec((1, 256), a.clone()).unwrap();
    let bv = Array2::from_shape_vec((1, 256), b.clone()).unwrap();
    let sav = Array2::from_shape_vec((1, 2), sa.to_vec()).unwrap();
    let sbv = Array2::from_shape_vec((1, 2), sb.to_vec()).unwrap();
    let g = gemm_nt(&FP8, av.view(), bv.view(), Some((sav.view(), sbv.view(), 128)));
    assert_eq!(g[[0, 0]], p2(-24));
    // The same promotion under the IEEE models (each block an f32 chain from zero).
    let g = gemm_nt(&Model::F32Fma, av.view(), bv.view(), Some((sav.view(), sbv.view(), 128)));
    assert_eq!(g[[0, 0]], p2(-24));
}

#[test]
fn short_last_instruction_is_zero_padded() {
    // K = 20 = one full instruction and 4 products: the same as K = 32 with 12 zeros appended.
    let mut g = 1u64;
    let mut next = || {
        g = g.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        quantize(Format::Bf16, ((g >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0, Overflow::Saturate)
    };
    let a: Vec<f64> = (0..20).map(|_| next()).collect();
    let b: Vec<f64> = (0..20).map(|_| next()).collect();
    let (mut a2, mut b2) = (a.clone(), b.clone());
    a2.resize(32, 0.0);
    b2.resize(32, 0.0);
    assert_eq!(both(&BF16, &a, &b).to_bits(), both(&BF16, &a2, &b2).to_bits());
}

#[test]
fn products_below_f32_range_are_kept() {
    // Sixteen (2^-70)·(2^-70) = 2^-140: no f32 holds a product, but the model aligns exact products: E =
    // -140, the sum 2^-136 is an f32 subnormal, and the result is exactly that.
    let a = vec![p2(-70); 16];
    assert_eq!(both(&BF16, &a, &a), p2(-136));
    // Sixteen 2^-100·2^-100: 2^-196 is below f32's smallest subnormal: truncated to zero.
    let a = vec![p2(-100); 16];
    assert_eq!(both(&BF16, &a, &a), 0.0);
    // And a product above f32's range: 2^100·2^100 overflows to +inf.
    assert_eq!(both(&BF16, &[p2(100)], &[p2(100)]), f64::INFINITY);
}

#[test]
fn zeros_and_specials() {
    assert_eq!(both(&BF16, &[], &[]), 0.0);
    assert_eq!(both(&BF16, &[0.0; 5], &[1.0; 5]), 0.0);
    assert!(both(&BF16, &[f64::INFINITY, 1.0], &[0.0, 1.0]).is_nan());
    assert_eq!(both(&BF16, &[f64::INFINITY, 1.0], &[1.0, 1.0]), f64::INFINITY);
    assert!(both(&BF16, &[f64::INFINITY, f64::NEG_INFINITY], &[1.0, 1.0]).is_nan());
}

#[test]
fn exact_model_rounds_once() {
    // 1 + 2^-24 + 2^-60: its f64 rounding is 1 + 2^-24, an f32 midpoint (which would round to even, 1);
    // the exact value is above the midpoint: 1 + 2^-23.
    let a = [1.0, p2(-24), p2(-60)];
    let b = [1.0, 1.0, 1.0];
    assert_eq!(dot(&Model::Exact, &a, &b, None), 1.0 + p2(-23));
    let av = Array2::from_shape_vec((1, 3), a.to_vec()).unwrap();
    let bv = Array2::from_shape_vec((1, 3), b.to_vec()).unwrap();
    assert_eq!(gemm_nt(&Model::Exact, av.view(), bv.view(), None)[[0, 0]], 1.0 + p2(-23));
    // Exactly on the midpoint: ties to even.
    assert_eq!(dot(&Model::Exact, &a[..2], &b[..2], None), 1.0);
}

#[test]
fn f32_sequential_and_fma_differ_as_defined() {
    // -(1 + 2^-11)·1, then (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24.
    // Sequential: fl32 of the product is 1 + 2^-11 (2^-24 is a tie, to even), the sum 0.
    // FMA: -(1 + 2^-11) + (1 + 2^-11 + 2^-24) = 2^-24 exactly.
    let a = [-(1.0 + p2(-11)), 1.0 + p2(-12)];
    let b = [1.0, 1.0 + p2(-12)];
    assert_eq!(dot(&Model::F32Sequential, &a, &b, None), 0.0);
    assert_eq!(dot(&Model::F32Fma, &a, &b, None), p2(-24));
    let av = Array2::from_shape_vec((1, 2), a.to_vec()).unwrap();
    let bv = Array2::from_shape_vec((1, 2), b.to_vec()).unwrap();
    assert_eq!(gemm_nt(&Model::F32Sequential, av.view(), bv.view(), None)[[0, 0]], 0.0);
    assert_eq!(gemm_nt(&Model::F32Fma, av.view(), bv.view(), None)[[0, 0]], p2(-24));
}

#[test]
fn names_round_trip() {
    for n in ["exact", "f32", "f32-fma", "hopper", "hopper-fp8", "hopper-fp8-fast"] {
        assert_eq!(Model::parse(n).unwrap().name(), n);
    }
    assert!(Model::parse("hopper-fp4").is_err());
    let custom = Model::TensorCore(TensorCore { k_inst: 8, ..TensorCore::HOPPER_BF16 });
    assert!(custom.name().contains("k_inst=8"));
}

// ------------------------------------------------------------------------------------------------
// Random data: fast GEMM against the definition, entry by entry.
// ------------------------------------------------------------------------------------------------

/// A matrix of values of `fmt`: random significands, exponents in `lo..=hi`, a share of zeros.
fn matrix(seed: u64, rows: usize, k: usize, fmt: Format, lo: i32, hi: i32, zeros: u32) -> Array2<f64> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        s.wrapping_mul(0x2545F4914F6CDD1D)
    };
    Array2::from_shape_fn((rows, k), |_| {
        let r = next();
        if (r % 100) < zeros as u64 {
            return 0.0;
        }
        let e = lo + ((r >> 8) % ((hi - lo + 1) as u64)) as i32;
        let m = 1.0 + ((r >> 20) % 1024) as f64 / 1024.0;
        let sign = if (r >> 40) & 1 == 1 { -1.0 } else { 1.0 };
        quantize(fmt, sign * m * p2(e), Overflow::Saturate)
    })
}

/// Positive bf16-valued scales of A's m rows and B's n rows, one per `block` of k (seeds for A and B).
fn block_scales((seed_a, seed_b): (u64, u64), m: usize, n: usize, k: usize, block: usize) -> (Array2<f64>, Array2<f64>) {
    let nb = k.div_ceil(block);
    (matrix(seed_a, m, nb, Format::Bf16, -12, -6, 0).mapv(f64::abs), matrix(seed_b, n, nb, Format::Bf16, -12, -6, 0).mapv(f64::abs))
}

/// The fast GEMM (both builds, with and without the instruction magnitudes of `gemm_nt_mag_into`)
/// against the definition, entry by entry and bit for bit.
fn check_against_definition(model: &Model, a: &Array2<f64>, b: &Array2<f64>, scales: Option<(&Array2<f64>, &Array2<f64>, usize)>) {
    let Model::TensorCore(t) = model else { unreachable!() };
    let sv = scales.map(|(x, y, kb)| (x.view(), y.view(), kb));
    let fast = gemm_nt(model, a.view(), b.view(), sv);
    // The kernel's build for CPUs without AVX-512, which this machine would otherwise not run.
    let portable = tensor_core::gemm_nt_portable(t, a.view(), b.view(), sv);
    let (mut fast_m, mut fast_mag) = (Array2::zeros(fast.dim()), Array2::<f64>::zeros(fast.dim()));
    gemm_nt_mag_into(t, a.view(), b.view(), sv, fast_m.view_mut(), fast_mag.view_mut());
    let (portable_m, portable_mag) = tensor_core::gemm_nt_mag_portable(t, a.view(), b.view(), sv);
    let same = |x: f64, y: f64| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
    for i in 0..a.nrows() {
        for j in 0..b.nrows() {
            let ar = a.row(i).to_vec();
            let br = b.row(j).to_vec();
            let (want, want_mag) = match scales {
                None => slow::dot_magnitudes(t, &ar, &br, None),
                Some((sa, sb, kb)) => slow::dot_magnitudes(t, &ar, &br, Some((&sa.row(i).to_vec(), &sb.row(j).to_vec(), kb))),
            };
            for (what, got, mag) in [("fast", fast[[i, j]], None), ("portable", portable[[i, j]], None), ("fast+mag", fast_m[[i, j]], Some(fast_mag[[i, j]])), ("portable+mag", portable_m[[i, j]], Some(portable_mag[[i, j]]))] {
                assert!(same(want, got), "({i},{j}): {what} {got:e} slow {want:e}");
                if let Some(mag) = mag {
                    assert!(same(want_mag, mag), "({i},{j}): {what} magnitudes {mag:e} slow {want_mag:e}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn bf16_fast_matches_definition(seed in any::<u64>(), m in 1usize..5, n in 1usize..21, k in 0usize..90,
                                    lo in -140i32..0, span in 0i32..40, zeros in 0u32..60) {
        let hi = (lo + span).min(127);
        let a = matrix(seed, m, k, Format::Bf16, lo, hi, zeros);
        let b = matrix(seed ^ 0xABCD, n, k, Format::Bf16, lo / 2, hi / 2 + 1, zeros);
        check_against_definition(&BF16, &a, &b, None);
        let f32_like = Model::TensorCore(TensorCore { promote_every: Some(48), ..TensorCore::HOPPER_BF16 });
        check_against_definition(&f32_like, &a, &b, None);
    }

    #[test]
    fn fp8_fast_matches_definition(seed in any::<u64>(), m in 1usize..4, n in 1usize..19, k in 0usize..300,
                                   lo in -9i32..4, span in 0i32..9, zeros in 0u32..50, scaled in any::<bool>()) {
        let hi = (lo + span).min(8);
        let a = matrix(seed, m, k, Format::E4M3, lo, hi, zeros);
        let b = matrix(seed ^ 0x1234, n, k, Format::E4M3, lo, hi, zeros);
        check_against_definition(&FP8_FAST, &a, &b, None);
        let (sa, sb) = block_scales((seed ^ 7, seed ^ 9), m, n, k, 128);
        check_against_definition(&FP8, &a, &b, scaled.then_some((&sa, &sb, 128)));
    }

    #[test]
    fn blackwell_fast_matches_definition(seed in any::<u64>(), m in 1usize..4, n in 1usize..19, k in 0usize..200,
                                         lo in -9i32..4, span in 0i32..9, zeros in 0u32..50, scaled in any::<bool>()) {
        let hi = (lo + span).min(8);
        let a = matrix(seed, m, k, Format::E4M3, lo, hi, zeros);
        let b = matrix(seed ^ 0x5678, n, k, Format::E4M3, lo, hi, zeros);
        // MX: one scale per 32 k
        let (sa, sb) = block_scales((seed ^ 5, seed ^ 11), m, n, k, 32);
        check_against_definition(&BLACKWELL, &a, &b, scaled.then_some((&sa, &sb, 32)));
    }

    #[test]
    fn ieee_gemm_matches_dot(seed in any::<u64>(), m in 1usize..4, n in 1usize..6, k in 0usize..200) {
        let a = matrix(seed, m, k, Format::Bf16, -20, 5, 10);
        let b = matrix(seed ^ 3, n, k, Format::Bf16, -20, 5, 10);
        for model in [Model::F32Sequential, Model::F32Fma, Model::Exact] {
            let g = gemm_nt(&model, a.view(), b.view(), None);
            for i in 0..m {
                for j in 0..n {
                    let d = dot(&model, &a.row(i).to_vec(), &b.row(j).to_vec(), None);
                    prop_assert_eq!(g[[i, j]].to_bits(), d.to_bits());
                }
            }
        }
    }
}

#[test]
fn off_grid_operands_take_the_slow_path_and_agree() {
    // f32 values (24-bit significands) under the bf16 model: not bf16 values, summed by the definition.
    let a = Array2::from_shape_fn((2, 40), |(i, k)| (1.0 + (i * 40 + k) as f64 * 1e-3) as f32 as f64);
    let b = Array2::from_shape_fn((3, 40), |(j, k)| (0.5 - (j + k) as f64 * 7e-3) as f32 as f64);
    check_against_definition(&BF16, &a, &b, None);
}

/// tcgen05's instruction (32 E4M3 products of 25 bits) runs on the integer lanes: before its products were
/// summed in i32 partial sums it fell back to the big-integer definition (an MXFP8 emulation took hours). 32
/// products of 240·240 (significands 15·15, equal exponents) sum to 32·225·2^19 ≈ 3.8e9 units, past i32: the
/// fast result must still be the definition's.
#[test]
fn blackwell_runs_on_the_fast_path_and_sums_past_i32() {
    assert!(tensor_core::fast_path_available(&TensorCore::BLACKWELL_FP8));
    let a = Array2::from_elem((1, 32), 240.0);
    let b = Array2::from_elem((3, 32), 240.0);
    check_against_definition(&BLACKWELL, &a, &b, None);
    let got = gemm_nt(&BLACKWELL, a.view(), b.view(), None)[[0, 0]];
    assert_eq!(got, 32.0 * 240.0 * 240.0, "1,843,200 is exact in 25 bits");
}
