//! The branch-free division of `fast_ws.cu` (`div_rn_in_range`, GEMM1's SwiGLU epilogue
//! by default since session 8; `WS_SWIGLU_DIV_STANDARD` switches back to `/`) claims that
//! for d in [1, 2^60] and |x| in [2^-60, 2^60] the sequence
//!     r = rcp.approx(d); r = fma(r, fma(-d, r, 1), r); q = x * r; q = fma(r, fma(-d, q, x), q)
//! gives x / d rounded to nearest, bit for bit, so that the kernels' A stays what `/` (div.rn.f32) gives.
//! The hardware reciprocal is approximate, so it is modelled here as the correctly rounded 1/d moved by up to
//! two units in the last place either way; every result must equal the IEEE quotient (Rust's f32 `/` and
//! `mul_add` are the correctly rounded operations).

fn sequence(x: f32, d: f32, approx_recip: f32) -> f32 {
    let r = approx_recip.mul_add((-d).mul_add(approx_recip, 1.0), approx_recip);
    let q = x * r;
    r.mul_add((-d).mul_add(q, x), q)
}

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn in_range(x: f32, d: f32) -> bool {
    (1.0..=2f32.powi(60)).contains(&d) && (2f32.powi(-60)..=2f32.powi(60)).contains(&x.abs())
}

#[test]
fn the_reciprocal_and_correction_sequence_is_the_rounded_quotient_in_range() {
    let mut g = XorShift(0x2545_F491_4F6C_DD1D);
    let mut checked = 0usize;
    for it in 0..4_000_000u64 {
        let r = g.next();
        let mant = |bits: u64| 1.0 + (bits & 0x7f_ffff) as f32 / 8_388_608.0;
        // d: random mantissas over the whole range, or 1 + exp(-g) as the SwiGLU forms it
        let d = if it % 4 == 0 { 1.0 + (-(((r >> 40) % 4000) as f32 - 2000.0) / 64.0).exp() } else { mant(r) * 2f32.powi(((r >> 23) % 61) as i32) };
        let x = mant(r >> 29) * 2f32.powi(((r >> 52) % 121) as i32 - 60) * if r >> 63 == 1 { -1.0 } else { 1.0 };
        if !in_range(x, d) {
            continue;
        }
        let want = x / d;
        for ulps in -2i32..=2 {
            let approx = f32::from_bits((1.0 / d).to_bits().wrapping_add_signed(ulps));
            let got = sequence(x, d, approx);
            assert_eq!(got.to_bits(), want.to_bits(), "x {x:e} / d {d:e} with the reciprocal {ulps} ulp off: {got:e}, want {want:e}");
        }
        checked += 1;
    }
    assert!(checked > 3_000_000, "the generator must mostly produce in-range operands ({checked})");
}

#[test]
fn the_range_check_sends_what_the_sequence_gets_wrong_to_the_slow_path() {
    // outside the range the sequence can be wrong: a zero numerator loses its sign, a subnormal quotient its
    // rounding; the range check must exclude both
    assert_eq!(sequence(-0.0, 3.0, 1.0 / 3.0).to_bits(), 0.0f32.to_bits(), "the sequence turns -0 / 3 into +0");
    assert!(!in_range(-0.0, 3.0) && !in_range(0.0, 3.0));
    assert!(!in_range(2f32.powi(-61), 1.0) && !in_range(1.0, 2f32.powi(61)) && !in_range(1.0, 0.5));
}
