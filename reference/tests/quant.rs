//! Block quantisation: each scale rule on hand-derived examples (expected scales and codes worked out
//! from the rule's definition in `shared/docs/numerics.md`, the arithmetic in the comments; the two
//! non-power-of-two f32 results were computed with numpy float32 and a nearest-value search over the
//! enumerated E4M3 grid, not with this crate), all-zero blocks and channels, ragged blocks, saturation,
//! and a proptest that every dequantised element is within its error bound.

use moe_reference::formats::{Format, Overflow};
use moe_reference::quant::{quantize, Block, MxRounding, QuantSpec, ScaleRule};
use ndarray::{array, Array2};
use proptest::prelude::*;

fn p2(e: i32) -> f64 {
    2f64.powi(e)
}

fn spec(format: Format, block: Block, rule: ScaleRule, overflow: Overflow) -> QuantSpec {
    QuantSpec { format, block, rule, overflow }
}

/// One row: 3, 1, -0.7421875, 0.010009765625 (bf16 values; amax 3).
fn row() -> Array2<f64> {
    array![[3.0, 1.0, -0.7421875, 0.010009765625]]
}

#[test]
fn block_shapes_parse_print_and_grid() {
    assert_eq!(Block::parse("1x128").unwrap(), Block::Rows(128));
    assert_eq!(Block::parse("128x1").unwrap(), Block::Cols(128));
    assert_eq!(Block::parse("128x128").unwrap(), Block::Tile(128, 128));
    assert_eq!(Block::parse("32x1").unwrap().to_string(), "32x1");
    assert_eq!(Block::Rows(32).to_string(), "1x32");
    for bad in ["", "128", "0x128", "1x0", "axb", "1x-3", "1x128x2"] {
        assert!(Block::parse(bad).is_err(), "{bad:?}");
    }
    // Ragged last blocks count.
    assert_eq!(Block::Rows(128).grid(3, 200), (3, 2));
    assert_eq!(Block::Cols(128).grid(129, 5), (2, 5));
    assert_eq!(Block::Tile(128, 128).grid(256, 300), (2, 3));
}

#[test]
fn deepgemm_amax_over_448() {
    // sf = fl32(3/448) = 0x1.b6db6ep-8; m = fl32(1/sf) = 0x1.2aaaaap+7 = 149.33332824707031;
    // y = fl32(x·m) = 448.0, 149.33333, -110.83333, 1.4947916. E4M3: 448; 149.33 in [128, 256), spacing
    // 16: 144 | 160 -> 144; -110.83 in [64, 128), spacing 8: -104 | -112 -> -112; 1.4948 in [1, 2),
    // spacing 1/8: 1.5.
    let s = spec(Format::E4M3, Block::Rows(128), ScaleRule::DeepGemm { pow2: false }, Overflow::Saturate);
    let t = quantize(row().view(), &s);
    assert_eq!(t.q, array![[448.0, 144.0, -112.0, 1.5]]);
    assert_eq!(t.scale[[0, 0]], f64::from_bits(0x3F7B_6DB6_E000_0000)); // 0x1.b6db6ep-8
    assert!(t.scale_bits.is_none());
}

#[test]
fn deepgemm_pow2_scale_rounds_up() {
    // sf = 3/448 = 0.0067 -> 2^ceil(log2 sf) = 2^-7; m = 128; y = 384, 128, -95, 1.28125;
    // E4M3: 384 (exact), 128, -96 (spacing 8: 88 | 96, 95 nearer 96), 1.25 (spacing 1/8: 1.25 | 1.375).
    let s = spec(Format::E4M3, Block::Rows(128), ScaleRule::DeepGemm { pow2: true }, Overflow::Saturate);
    let t = quantize(row().view(), &s);
    assert_eq!(t.q, array![[384.0, 128.0, -96.0, 1.25]]);
    assert_eq!(t.scale[[0, 0]], p2(-7));
}

#[test]
fn deepgemm_variants_break_exact_ties_their_own_way() {
    // Three ways DeepGEMM-family code scales the same block: x·fl32(1/sf) (the kernel's own), x / sf, and
    // x·fl32(448/amax). With bf16 data, x/sf is often an exact E4M3 midpoint, and the three f32 results
    // sit on either side of it. Worked with numpy float32 and a nearest-even search over the E4M3 grid:
    // amax 2.15625 (bf16): sf = fl32(2.15625/448) = 0.004813057836..., fl32(1/sf) = 207.76812744,
    // fl32(448/2.15625) = 207.76811218. x = 0.80859375: x·207.76812744 -> 168.00001526 (above the
    // midpoint of 160 | 176: 176); x / sf -> 168.0 (the midpoint: even, 160); x·207.76811218 -> 168.0
    // (160). x = -0.404296875: -84.0000076 (-88), -84.0 (-80), -84.0 (-80).
    let x = array![[2.15625, 0.80859375, -0.404296875]];
    let sf = f64::from(2.15625f32 / 448.0f32);
    let rules = [
        (ScaleRule::DeepGemm { pow2: false }, [448.0, 176.0, -88.0]),
        (ScaleRule::DeepGemmDiv, [448.0, 160.0, -80.0]),
        (ScaleRule::DeepGemmMaxOverAmax, [448.0, 160.0, -80.0]),
    ];
    for (rule, want) in rules {
        let t = quantize(x.view(), &spec(Format::E4M3, Block::Rows(128), rule, Overflow::Saturate));
        assert_eq!(t.q.row(0).to_vec(), want.to_vec(), "{rule:?}");
        assert_eq!(t.scale[[0, 0]], sf, "{rule:?}: the dequant scale is sf in all three");
    }
    // And a block where x·fl32(448/amax) differs from the division: amax 1.9375, x = -1.453125:
    // x·fl32(1/sf) -> -336.0 exactly (a midpoint of 320 | 352 in spacing 32: even, -320); x / sf ->
    // -336.00003 (-352); x·fl32(448/1.9375) -> -336.0 (-320).
    let x = array![[1.9375, -1.453125]];
    for (rule, want) in [
        (ScaleRule::DeepGemm { pow2: false }, -320.0),
        (ScaleRule::DeepGemmDiv, -352.0),
        (ScaleRule::DeepGemmMaxOverAmax, -320.0),
    ] {
        let t = quantize(x.view(), &spec(Format::E4M3, Block::Rows(128), rule, Overflow::Saturate));
        assert_eq!(t.q[[0, 1]], want, "{rule:?}");
    }
}

/// An f64 input that is not an f32 value: the kernel quantises fl32(x), and the element bound must also
/// cover |fl32(x) - x| (session 38's review: x / sf rounds to the exact midpoint 168.0 of 160 | 176 and
/// goes to 160, an error of 2.38097236e-2 against a bound of 2.38097031e-2 without that term).
#[test]
fn element_bound_covers_inputs_off_the_f32_grid() {
    let x = array![[1.3333417177200317, 0.5000031888478994]];
    for rule in rules() {
        let s = spec(Format::E4M3, Block::Rows(128), rule, Overflow::Saturate);
        let t = quantize(x.view(), &s);
        for c in 0..2 {
            let err = (t.q[[0, c]] * t.scale[[0, 0]] - x[[0, c]]).abs();
            let bound = s.element_error_bound(x[[0, c]], t.scale[[0, 0]]);
            assert!(err <= bound, "{rule:?} x {:e}: error {err:e} > bound {bound:e}", x[[0, c]]);
        }
    }
}

#[test]
fn deepgemm_all_zero_block_uses_the_floor() {
    // amax 0 -> clamp(1e-4): sf = fl32(fl32(1e-4) / 448) = 0x1.df595ap-23; elements 0; no NaN.
    let x = Array2::zeros((2, 128));
    let s = spec(Format::E4M3, Block::Rows(128), ScaleRule::DeepGemm { pow2: false }, Overflow::Saturate);
    let t = quantize(x.view(), &s);
    assert!(t.q.iter().all(|&v| v == 0.0));
    assert_eq!(t.scale[[1, 0]], f64::from_bits(0x3E8D_F595_A000_0000));
    assert!(t.dequantize().iter().all(|&v| v == 0.0));
}

#[test]
fn transformer_engine_rules() {
    // s = fl32(448/3) = 0x1.2aaaaap+7 (the same f32 as DeepGEMM's m here), scale = fl32(1/s) =
    // 0x1.b6db6ep-8, codes as for DeepGEMM.
    let s = spec(Format::E4M3, Block::Rows(128), ScaleRule::TransformerEngine { pow2: false }, Overflow::Saturate);
    let t = quantize(row().view(), &s);
    assert_eq!(t.q, array![[448.0, 144.0, -112.0, 1.5]]);
    assert_eq!(t.scale[[0, 0]], f64::from_bits(0x3F7B_6DB6_E000_0000));
    // pow2: s = 149.33 rounded down to 128: the same codes as DeepGEMM's pow2 (2^-7), scale 1/128.
    let s = spec(Format::E4M3, Block::Rows(128), ScaleRule::TransformerEngine { pow2: true }, Overflow::Saturate);
    let t = quantize(row().view(), &s);
    assert_eq!(t.q, array![[384.0, 128.0, -96.0, 1.25]]);
    assert_eq!(t.scale[[0, 0]], p2(-7));
    // amax 0 -> s = 1; amax inf -> s = 1 (inf saturates to 448).
    let z = quantize(Array2::zeros((1, 4)).view(), &s);
    assert_eq!(z.scale[[0, 0]], 1.0);
    let inf = quantize(array![[f64::INFINITY, 2.0]].view(), &s);
    assert_eq!(inf.scale[[0, 0]], 1.0);
    assert_eq!(inf.q, array![[448.0, 2.0]]);
    // E5M2 multiplier: 57344 / 3 = 19114.67 -> pow2 16384 = 2^14: 3 -> 49152, 1 -> 16384.
    let s = spec(Format::E5M2, Block::Rows(2), ScaleRule::TransformerEngine { pow2: true }, Overflow::Saturate);
    let t = quantize(array![[3.0, 1.0]].view(), &s);
    assert_eq!(t.q, array![[49152.0, 16384.0]]);
    assert_eq!(t.scale[[0, 0]], p2(-14));
}

#[test]
fn mx_rules_on_hand_examples() {
    let mx = |r, fmt, o| spec(fmt, Block::Rows(32), ScaleRule::Mx(r), o);
    let sat = Overflow::Saturate;
    // FLOOR, E4M3: floor(log2 3) = 1, minus emax 8: 2^-7, code 127 - 7 = 120; codes as with 2^-7 above.
    let t = quantize(row().view(), &mx(MxRounding::Floor, Format::E4M3, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 120);
    assert_eq!(t.scale[[0, 0]], p2(-7));
    assert_eq!(t.q, array![[384.0, 128.0, -96.0, 1.25]]);
    // CEIL: 3 is not a power of two: floor + 1 = 2, 2 - 8 = -6, code 121. 2 is one: 1 - 8 = -7, code 120.
    let t = quantize(row().view(), &mx(MxRounding::Ceil, Format::E4M3, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 121);
    let t = quantize(array![[2.0, -1.0]].view(), &mx(MxRounding::Ceil, Format::E4M3, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 120);
    // RCEIL: 3 · fl32(1/448) = 0.0066964 rounds up to 2^-7: code 120.
    let t = quantize(row().view(), &mx(MxRounding::Rceil, Format::E4M3, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 120);
    // amax 3.875 = 1.9375·2: FLOOR 2^-7: 3.875·128 = 496 > 448: saturates to 448 (NaN when not
    // saturating, 496 > 464). EVEN: 1.1111b rounded half-up to 3 bits carries to 2.0: 2^-6, code 121,
    // 248 = midpoint of 240 and 256, ties to even (256). RCEIL: 3.875/448 = 0.00865 -> up to 2^-6, the same 248 -> 256.
    let x = array![[3.875, 1.0]];
    let t = quantize(x.view(), &mx(MxRounding::Floor, Format::E4M3, sat));
    assert_eq!((t.scale_bits.as_ref().unwrap()[[0, 0]], t.q[[0, 0]]), (120, 448.0));
    let t = quantize(x.view(), &mx(MxRounding::Floor, Format::E4M3, Overflow::NonSaturating));
    assert!(t.q[[0, 0]].is_nan());
    let t = quantize(x.view(), &mx(MxRounding::Even, Format::E4M3, sat));
    assert_eq!((t.scale_bits.as_ref().unwrap()[[0, 0]], t.q[[0, 0]], t.q[[0, 1]]), (121, 256.0, 64.0));
    let t = quantize(x.view(), &mx(MxRounding::Rceil, Format::E4M3, sat));
    assert_eq!((t.scale_bits.as_ref().unwrap()[[0, 0]], t.q[[0, 0]]), (121, 256.0));
    // EVEN without a carry: 3 = 1.1b stays, floor: code 120.
    let t = quantize(row().view(), &mx(MxRounding::Even, Format::E4M3, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 120);
    // E5M2 FLOOR: 1 - 15 = -14: code 113. E2M1 FLOOR: 1 - 2 = -1: code 126, scale 1/2, y = 6, 2,
    // -1.484375, 0.02: E2M1 6, 2, -1.5, 0.
    let t = quantize(row().view(), &mx(MxRounding::Floor, Format::E5M2, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 113);
    let t = quantize(row().view(), &mx(MxRounding::Floor, Format::E2M1, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 126);
    assert_eq!(t.q, array![[6.0, 2.0, -1.5, 0.0]]);
    // A NaN element: amax NaN, scale code 0xFF (NaN).
    let t = quantize(array![[f64::NAN, 1.0]].view(), &mx(MxRounding::Floor, Format::E4M3, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 0xFF);
    assert!(t.scale[[0, 0]].is_nan());
    // ... wherever the NaN sits in the block, after larger values, and in a later row of a 2-D block.
    let t = quantize(array![[3.0, 1.0, f64::NAN, -7.0]].view(), &mx(MxRounding::Floor, Format::E4M3, sat));
    assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 0xFF);
    let mut x = Array2::from_elem((128, 128), 0.5);
    x[[77, 100]] = f64::NAN;
    let t = quantize(x.view(), &spec(Format::E4M3, Block::Tile(128, 128), ScaleRule::DeepGemm { pow2: false }, sat));
    assert!(t.scale[[0, 0]].is_nan(), "a NaN in row 77 of a 128x128 block");
    x[[77, 100]] = -9.0;
    let t = quantize(x.view(), &spec(Format::E4M3, Block::Tile(128, 128), ScaleRule::DeepGemm { pow2: false }, sat));
    assert_eq!(t.scale[[0, 0]], f64::from(9.0f32 / 448.0), "amax over every row of the block");
    // A block row whose length is no multiple of the amax's eight lanes: the largest in the tail, then in the
    // body.
    let mut x = Array2::from_elem((1, 13), 0.25);
    for (at, v) in [(12, -5.0), (3, 6.0)] {
        x[[0, at]] = v;
        let t = quantize(x.view(), &spec(Format::E4M3, Block::Rows(128), ScaleRule::DeepGemm { pow2: false }, sat));
        assert_eq!(t.scale[[0, 0]], f64::from((v as f32).abs() / 448.0), "largest at column {at}");
    }
}

#[test]
fn mx_all_zero_block_gets_code_zero() {
    for r in [MxRounding::Floor, MxRounding::Rceil, MxRounding::Ceil, MxRounding::Even] {
        let t = quantize(Array2::zeros((1, 32)).view(), &spec(Format::E4M3, Block::Rows(32), ScaleRule::Mx(r), Overflow::Saturate));
        assert_eq!(t.scale_bits.as_ref().unwrap()[[0, 0]], 0x00, "{r:?}");
        assert_eq!(t.scale[[0, 0]], p2(-127));
        assert!(t.dequantize().iter().all(|&v| v == 0.0));
    }
}

/// Exactly 128 tokens with an all-zero channel, quantised along tokens (128x1, the wgrad layout), and
/// 129 tokens (a ragged second block of one token): every rule gives finite scales and exact zeros.
#[test]
fn all_zero_channel_along_tokens() {
    for tokens in [128usize, 129] {
        let x = Array2::from_shape_fn((tokens, 4), |(t, c)| if c == 2 { 0.0 } else { ((t * 7 + c) % 13) as f64 - 6.0 });
        for rule in [
            ScaleRule::DeepGemm { pow2: false },
            ScaleRule::DeepGemm { pow2: true },
            ScaleRule::TransformerEngine { pow2: true },
            ScaleRule::TransformerEngine { pow2: false },
            ScaleRule::Mx(MxRounding::Floor),
            ScaleRule::Mx(MxRounding::Rceil),
            ScaleRule::DeepGemmDiv,
            ScaleRule::DeepGemmMaxOverAmax,
        ] {
            let s = spec(Format::E4M3, Block::Cols(128), rule, Overflow::Saturate);
            let t = quantize(x.view(), &s);
            assert_eq!(t.scale.dim(), (tokens.div_ceil(128), 4));
            assert!(t.scale.iter().all(|v| v.is_finite() && *v > 0.0), "{rule:?}");
            let d = t.dequantize();
            assert!(d.column(2).iter().all(|&v| v == 0.0 && v.is_sign_positive()), "{rule:?}");
            assert!(d.iter().all(|v| v.is_finite()));
            // Integers up to 6 are E4M3 values times any power-of-two scale: exact under pow2 rules.
            if matches!(rule, ScaleRule::Mx(_) | ScaleRule::DeepGemm { pow2: true } | ScaleRule::TransformerEngine { pow2: true }) {
                assert_eq!(d, x, "{rule:?}");
            }
        }
    }
}

#[test]
fn ragged_blocks_have_their_own_amax() {
    // 200 columns in 1x128: block 2 holds columns 128..200 only; its amax 0.5 gives (pow2 DeepGEMM)
    // sf = 2^ceil(log2(0.5/448)) = 2^-9, block 1's amax 100 gives 2^ceil(log2(100/448)) = 2^-2.
    let mut x = Array2::zeros((1, 200));
    x[[0, 5]] = 100.0;
    x[[0, 150]] = 0.5;
    x[[0, 199]] = -0.25;
    let s = spec(Format::E4M3, Block::Rows(128), ScaleRule::DeepGemm { pow2: true }, Overflow::Saturate);
    let t = quantize(x.view(), &s);
    assert_eq!(t.scale, array![[p2(-2), p2(-9)]]);
    // 100·4 = 400 is the midpoint of 384 and 416 (spacing 32 in [256, 512)): ties to even, 384.
    assert_eq!((t.q[[0, 5]], t.q[[0, 150]], t.q[[0, 199]]), (384.0, 256.0, -128.0));
    assert_eq!(t.scale_of(0, 199), p2(-9));
    // 128x128 tiles with a ragged corner.
    let x = Array2::from_shape_fn((130, 130), |(r, c)| if r >= 128 && c >= 128 { 8.0 } else { 1.0 });
    let s = spec(Format::E4M3, Block::Tile(128, 128), ScaleRule::Mx(MxRounding::Floor), Overflow::Saturate);
    let t = quantize(x.view(), &s);
    // amax 1: 2^(0 - 8); amax 8: 2^(3 - 8).
    assert_eq!(t.scale, array![[p2(-8), p2(-8)], [p2(-8), p2(-5)]]);
    assert_eq!(t.dequantize(), x);
}

#[test]
fn saturation_and_overflow() {
    // DeepGEMM never needs to saturate: amax·fl32(1/sf) is at most 448 plus a few f32 ulps, which rounds
    // to 448. TE likewise. MX FLOOR does (above), and an E2M1 block saturates to 6 in both modes:
    // amax 7.5 = 1.875·4 -> 2^(2 - 2) = 1: 7.5 -> 6.
    let t = quantize(array![[7.5, 1.0]].view(), &spec(Format::E2M1, Block::Rows(32), ScaleRule::Mx(MxRounding::Floor), Overflow::NonSaturating));
    assert_eq!(t.q, array![[6.0, 1.0]]);
    for pow2 in [false, true] {
        let x = Array2::from_shape_fn((4, 128), |(r, c)| ((r * 128 + c) as f64 * 0.37).sin() * 1e3);
        let s = spec(Format::E4M3, Block::Rows(128), ScaleRule::DeepGemm { pow2 }, Overflow::NonSaturating);
        assert!(quantize(x.view(), &s).q.iter().all(|v| v.is_finite()));
    }
}

// ------------------------------------------------------------------------------------------------
// Every element within its bound.
// ------------------------------------------------------------------------------------------------

fn rules() -> Vec<ScaleRule> {
    let mut v = vec![
        ScaleRule::DeepGemm { pow2: false },
        ScaleRule::DeepGemm { pow2: true },
        ScaleRule::TransformerEngine { pow2: false },
        ScaleRule::TransformerEngine { pow2: true },
    ];
    v.extend([MxRounding::Floor, MxRounding::Rceil, MxRounding::Ceil, MxRounding::Even].map(ScaleRule::Mx));
    v.extend([ScaleRule::DeepGemmDiv, ScaleRule::DeepGemmMaxOverAmax]);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn dequantize_within_element_bound(seed in any::<u64>(), rows in 1usize..40, cols in 1usize..300,
                                        rule in 0usize..10, fmt in 0usize..3, blk in 0usize..4,
                                        lo in -60i32..10, span in 0i32..50, zeros in 0u64..50, off_grid in any::<bool>()) {
        let format = [Format::E4M3, Format::E5M2, Format::E2M1][fmt];
        let block = [Block::Rows(128), Block::Cols(32), Block::Tile(128, 128), Block::Rows(32)][blk];
        let s = spec(format, block, rules()[rule], Overflow::Saturate);
        let mut g = seed | 1;
        let x = Array2::from_shape_fn((rows, cols), |_| {
            g ^= g >> 12; g ^= g << 25; g ^= g >> 27;
            let r = g.wrapping_mul(0x2545F4914F6CDD1D);
            if r % 100 < zeros { return 0.0; }
            let e = lo + ((r >> 8) % (span as u64 + 1)) as i32;
            let m = 1.0 + ((r >> 20) % 128) as f64 / 128.0;
            let v = if (r >> 40) & 1 == 1 { -m } else { m } * p2(e);
            let v = (v as f32) as f64;
            // Off the f32 grid (an f64 input): up to about one f32 ulp away, either side.
            if off_grid { v * (1.0 + (((r >> 48) % 64) as f64 - 32.0) * p2(-29)) } else { v }
        });
        let t = quantize(x.view(), &s);
        let d = t.dequantize();
        for ((r, c), &v) in x.indexed_iter() {
            let bound = s.element_error_bound(v, t.scale_of(r, c));
            let err = (d[[r, c]] - v).abs();
            prop_assert!(err <= bound, "{s:?} x={v:e} q={} scale={:e} err={err:e} bound={bound:e}", t.q[[r, c]], t.scale_of(r, c));
            // Elements are on the format's grid.
            prop_assert_eq!(moe_reference::formats::quantize(format, t.q[[r, c]], Overflow::Saturate), t.q[[r, c]]);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The element cast's fast path against `formats::quantize`.
// ------------------------------------------------------------------------------------------------

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan() && a.is_sign_negative() == b.is_sign_negative())
}

fn check_cast(y: f32) {
    for fmt in [Format::E4M3, Format::E5M2, Format::E2M1] {
        for o in [Overflow::Saturate, Overflow::NonSaturating] {
            let fast = moe_reference::quant::cast_element(fmt, y, o);
            let slow = moe_reference::formats::quantize(fmt, f64::from(y), o);
            assert!(same(fast, slow), "{fmt:?} {o:?} y = {y:e} ({:#010x}): fast {fast:e}, formats {slow:e}", y.to_bits());
        }
    }
}

#[test]
fn element_cast_fast_path_is_bit_exact() {
    // Every bf16 value, times factors that move it across every binade of the element formats.
    for bits in 0..=u16::MAX {
        let v = f32::from_bits(u32::from(bits) << 16);
        for k in [-140i32, -100, -60, -20, -9, -3, 0, 3, 9, 20, 60, 100, 140] {
            check_cast(v * (k as f32).exp2());
        }
    }
    // Next to every grid value and every midpoint, f32 ulp by ulp.
    for fmt in [Format::E4M3, Format::E5M2, Format::E2M1] {
        let codes: Vec<f64> = (0..fmt.codes() as u16)
            .map(|c| moe_reference::formats::decode(fmt, c))
            .filter(|v| v.is_finite() && *v >= 0.0)
            .collect();
        let mut pts = codes.clone();
        for w in codes.windows(2) {
            pts.push((w[0] + w[1]) / 2.0);
        }
        pts.push(fmt.max_finite() * 1.0625);
        for p in pts {
            let c = p as f32;
            let mut lo = c;
            let mut hi = c;
            for _ in 0..4 {
                check_cast(lo);
                check_cast(-hi);
                lo = f32::from_bits(lo.to_bits().saturating_sub(1));
                hi = f32::from_bits(hi.to_bits() + 1);
                check_cast(hi);
            }
        }
    }
    // Random f32 bit patterns (NaN and infinities included).
    let mut s = 0x1234_5678_9ABC_DEF1u64;
    for _ in 0..2_000_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        check_cast(f32::from_bits(s as u32));
    }
}

#[test]
fn empty_tensors() {
    let s = spec(Format::E4M3, Block::Rows(128), ScaleRule::Mx(MxRounding::Floor), Overflow::Saturate);
    let t = quantize(Array2::zeros((0, 5)).view(), &s);
    assert_eq!((t.q.dim(), t.scale.dim()), ((0, 5), (0, 1)));
    let t = quantize(Array2::zeros((3, 0)).view(), &s);
    assert_eq!((t.q.dim(), t.scale.dim()), ((3, 0), (3, 0)));
}
