//! Checks shared by the fuzz targets `quant_scale` and `quant_accum` and by the replay test
//! `reference/tests/fuzz_corpus_quant.rs` (which includes this file with `#[path]`): arbitrary bytes ->
//! a small case -> the crate's result against an independent formulation. A mismatch panics.
//!
//! - [`check_scale`]: block quantisation. The independent side computes each rule's scale from its
//!   formula in f64 with explicit f32 roundings (`as f32`), finds each element's code by searching the
//!   format's grid (enumerated from its field widths), and checks the error bound.
//! - [`check_accum`]: the tensor-core GEMM (both kernel builds) against `accum::slow::dot`, the
//!   big-integer definition, entry by entry, with and without blockwise scales.
#![allow(dead_code)]

use moe_reference::accum::{gemm_nt, slow, tensor_core, Model, TensorCore};
use moe_reference::formats::{Format, Overflow};
use moe_reference::quant::{quantize, Block, MxRounding, QuantSpec, ScaleRule};
use ndarray::Array2;

/// Bytes consumed front to back; zeros once exhausted.
pub struct Bytes<'a>(pub &'a [u8]);
impl Bytes<'_> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }
}

/// A bf16 value from 16 bits, as f64; NaN, infinities and subnormals become zero (the scale rules read
/// f32 exponent fields, whose subnormal cases the independent formulas below do not model).
fn bf16_value(bits: u16) -> f64 {
    let v = f32::from_bits(u32::from(bits) << 16);
    if v.is_finite() && (v == 0.0 || v.abs() >= f32::MIN_POSITIVE) {
        f64::from(v)
    } else {
        0.0
    }
}

/// `(exponent bits, mantissa bits, bias, largest finite)` of the element formats.
fn fields(f: Format) -> (i32, i32, i32, f64) {
    match f {
        Format::E4M3 => (4, 3, 7, 448.0),
        Format::E5M2 => (5, 2, 15, 57344.0),
        Format::E2M1 => (2, 1, 1, 6.0),
        _ => unreachable!("element formats only"),
    }
}

/// Every finite non-negative value of an element format, ascending, from its field widths.
fn grid(f: Format) -> Vec<f64> {
    let (eb, mb, bias, max) = fields(f);
    let mut g = Vec::new();
    for e in 0..(1 << eb) {
        for m in 0..(1 << mb) {
            let frac = f64::from(m) / f64::from(1 << mb);
            let v = if e == 0 { frac * 2f64.powi(1 - bias) } else { (1.0 + frac) * 2f64.powi(e - bias) };
            if v <= max {
                g.push(v);
            }
        }
    }
    g.sort_by(|a, b| a.partial_cmp(b).unwrap());
    g.dedup();
    g
}

/// Nearest value of the grid, ties to the even code (even index in the ascending grid), saturating.
fn nearest(g: &[f64], y: f64) -> f64 {
    let a = y.abs();
    let max = *g.last().unwrap();
    let r = if a >= max {
        max
    } else {
        let i = g.partition_point(|&v| v <= a) - 1; // g[i] <= a < g[i + 1]
        let (lo, hi) = (g[i], g[i + 1]);
        if a - lo < hi - a {
            lo
        } else if a - lo > hi - a {
            hi
        } else if i % 2 == 0 {
            lo
        } else {
            hi
        }
    };
    if y.is_sign_negative() { -r } else { r }
}

/// `(m, e)` with `x = m·2^e`, `m` in `[1, 2)`, for `x > 0`.
fn frexp1(x: f64) -> (f64, i32) {
    let e = x.log2().floor() as i32;
    // log2 may be off by one next to a power of two: correct it exactly.
    let e = if 2f64.powi(e) > x { e - 1 } else if 2f64.powi(e + 1) <= x { e + 1 } else { e };
    (x / 2f64.powi(e), e)
}

fn fl32(x: f64) -> f64 {
    f64::from(x as f32)
}

/// The one f32 operation before the cast: `fl32(x * m)` or `fl32(x / d)`. (Computed in f64 and rounded
/// once to f32: for a product or quotient of two f32 values that equals the f32 operation, since f64
/// carries more than 2 * 24 + 2 bits.)
#[derive(Clone, Copy, Debug)]
enum Op {
    Mul(f64),
    Div(f64),
}

/// The independent `(operation, dequant scale, UE8M0 code)` of a block with amax `amax` (finite, >= 0,
/// zero or an f32 normal).
fn expected_scale(rule: ScaleRule, f: Format, amax: f64) -> (Op, f64, Option<u8>) {
    let (_, mb, _, max) = fields(f);
    let emax_elem = frexp1(max).1;
    match rule {
        ScaleRule::DeepGemm { pow2 } => {
            let mut sf = fl32(amax.max(fl32(1e-4)) / max);
            if pow2 {
                let (m, e) = frexp1(sf);
                let e = if m == 1.0 { e } else { e + 1 };
                sf = 2f64.powi(e.clamp(-126, 127));
            }
            (Op::Mul(fl32(1.0 / sf)), sf, None)
        }
        ScaleRule::DeepGemmDiv => {
            let sf = fl32(amax.max(fl32(1e-4)) / max);
            (Op::Div(sf), sf, None)
        }
        ScaleRule::DeepGemmMaxOverAmax => {
            let a = amax.max(fl32(1e-4));
            (Op::Mul(fl32(max / a)), fl32(a / max), None)
        }
        ScaleRule::TransformerEngine { pow2 } => {
            let mut s = if amax == 0.0 { 1.0 } else { fl32(max / amax) };
            if s.is_infinite() || s > f64::from(f32::MAX) {
                s = f64::from(f32::MAX);
            }
            if pow2 {
                s = 2f64.powi(frexp1(s).1);
            }
            (Op::Mul(s), fl32(1.0 / s), None)
        }
        ScaleRule::Mx(r) => {
            let e = if amax == 0.0 { -127 } else { frexp1(amax).1 };
            let code: i32 = match r {
                MxRounding::Floor => (e - emax_elem).clamp(-127, 128) + 127,
                MxRounding::Ceil => {
                    let e = if amax != 0.0 && amax != 2f64.powi(e) { e + 1 } else { e };
                    (e - emax_elem).clamp(-127, 128) + 127
                }
                MxRounding::Even => {
                    // amax's significand rounded half up to the element's mantissa width.
                    let e = if amax == 0.0 {
                        e
                    } else {
                        let (m, e) = frexp1(amax);
                        let steps = f64::from(1 << mb);
                        if (m * steps + 0.5).floor() / steps >= 2.0 { e + 1 } else { e }
                    };
                    // torchao tests the *rounded* amax for finiteness: rounding up past f32's largest
                    // binade makes it infinite, and the scale NaN.
                    if e >= 128 { 255 } else { (e - emax_elem).clamp(-127, 128) + 127 }
                }
                MxRounding::Rceil => {
                    let d = fl32(amax * fl32(1.0 / max));
                    // The smallest power of two >= d (at least 2^-127).
                    let mut k = -127;
                    while 2f64.powi(k) < d {
                        k += 1;
                    }
                    (k + 127).min(255)
                }
            };
            if code == 255 {
                (Op::Mul(f64::NAN), f64::NAN, Some(0xFF))
            } else {
                (Op::Mul(2f64.powi(127 - code)), 2f64.powi(code - 127), Some(code as u8))
            }
        }
    }
}

/// Bytes -> (spec, x) -> `quant::quantize` against the independent formulation.
pub fn check_scale(data: &[u8]) {
    let mut b = Bytes(data);
    let format = [Format::E4M3, Format::E5M2, Format::E2M1][usize::from(b.u8() % 3)];
    let rule = [
        ScaleRule::DeepGemm { pow2: false },
        ScaleRule::DeepGemm { pow2: true },
        ScaleRule::TransformerEngine { pow2: false },
        ScaleRule::TransformerEngine { pow2: true },
        ScaleRule::Mx(MxRounding::Floor),
        ScaleRule::Mx(MxRounding::Rceil),
        ScaleRule::Mx(MxRounding::Ceil),
        ScaleRule::Mx(MxRounding::Even),
        ScaleRule::DeepGemmDiv,
        ScaleRule::DeepGemmMaxOverAmax,
    ][usize::from(b.u8() % 10)];
    let (d1, d2) = (usize::from(b.u8() % 8) + 1, usize::from(b.u8() % 8) + 1);
    let block = match b.u8() % 3 {
        0 => Block::Rows(d1),
        1 => Block::Cols(d1),
        _ => Block::Tile(d1, d2),
    };
    let rows = usize::from(b.u8() % 12) + 1;
    let cols = usize::from(b.u8() % 12) + 1;
    // Values: bf16 bits, optionally squeezed into a narrow exponent band so that blocks mix magnitudes
    // the way real data does.
    let squeeze = b.u8() % 2 == 0;
    let x = Array2::from_shape_fn((rows, cols), |_| {
        let bits = b.u16();
        let bits = if squeeze { (bits & 0x807F) | (((bits >> 7) & 0x1F) + 110) << 7 } else { bits };
        bf16_value(bits)
    });
    let spec = QuantSpec { format, block, rule, overflow: Overflow::Saturate };
    let t = quantize(x.view(), &spec);
    let g = grid(format);
    let (gr, gc) = block.grid(rows, cols);
    assert_eq!(t.scale.dim(), (gr, gc));
    let (br, bc) = match block {
        Block::Rows(n) => (1, n),
        Block::Cols(n) => (n, 1),
        Block::Tile(r, c) => (r, c),
    };
    for bi in 0..gr {
        for bj in 0..gc {
            let (r0, c0) = (bi * br, bj * bc);
            let (r1, c1) = ((r0 + br).min(rows), (c0 + bc).min(cols));
            let mut amax = 0.0f64;
            for r in r0..r1 {
                for c in c0..c1 {
                    amax = amax.max(x[[r, c]].abs());
                }
            }
            let (op, scale, code) = expected_scale(rule, format, amax);
            let got = t.scale[[bi, bj]];
            assert!(got.to_bits() == scale.to_bits() || (got.is_nan() && scale.is_nan()), "{spec:?} block ({bi},{bj}) amax {amax:e}: scale {got:e}, expected {scale:e}");
            if let Some(code) = code {
                assert_eq!(t.scale_bits.as_ref().expect("MX codes")[[bi, bj]], code, "{spec:?} amax {amax:e}");
            }
            if scale.is_nan() {
                continue;
            }
            for r in r0..r1 {
                for c in c0..c1 {
                    let v = x[[r, c]];
                    let y = match op {
                        Op::Mul(m) => fl32(v * m),
                        Op::Div(d) => fl32(v / d),
                    };
                    let q = nearest(&g, y);
                    assert_eq!(t.q[[r, c]].to_bits(), q.to_bits(), "{spec:?} x {v:e} {op:?}");
                    let err = (q * scale - v).abs();
                    let bound = spec.element_error_bound(v, scale);
                    assert!(err <= bound, "{spec:?} x {v:e}: error {err:e} > bound {bound:e}");
                }
            }
        }
    }
}

/// An E4M3 value from a byte (NaN codes become zero).
fn e4m3_value(byte: u8) -> f64 {
    let (s, e, m) = (byte >> 7, i32::from((byte >> 3) & 0xF), f64::from(byte & 7));
    if e == 15 && m == 7.0 {
        return 0.0;
    }
    let v = if e == 0 { m / 8.0 * 2f64.powi(-6) } else { (1.0 + m / 8.0) * 2f64.powi(e - 7) };
    if s == 1 { -v } else { v }
}

/// Bytes -> a small tensor-core GEMM -> fast kernels (both builds) against the big-integer definition.
pub fn check_accum(data: &[u8]) {
    let mut b = Bytes(data);
    let kind = b.u8() % 4;
    let t = match kind {
        0 => TensorCore::HOPPER_BF16,
        1 => TensorCore::HOPPER_FP8,
        2 => TensorCore::HOPPER_FP8_FAST,
        // A variant: short instructions and promotion, bf16 operands.
        _ => TensorCore { k_inst: 8, promote_every: Some(24), ..TensorCore::HOPPER_BF16 },
    };
    let (m, n) = (usize::from(b.u8() % 3) + 1, usize::from(b.u8() % 20) + 1);
    let k = usize::from(b.u16() % 300);
    let fp8 = t.operands.0 == Format::E4M3;
    // bf16 exponents folded into a band of 2^6 binades (chosen by a byte) so that truncation matters.
    let base = i32::from(b.u8() % 200) - 100;
    let val = |b: &mut Bytes| {
        if fp8 {
            e4m3_value(b.u8())
        } else {
            let bits = b.u16();
            let e = base + i32::from((bits >> 7) & 0x3F) - 32;
            let m = 1.0 + f64::from(bits & 0x7F) / 128.0;
            let v = m * 2f64.powi(e);
            if bits & 0x8000 != 0 { -v } else if bits & 0x4000 != 0 && bits & 0x2000 != 0 { 0.0 } else { v }
        }
    };
    let a = Array2::from_shape_fn((m, k), |_| val(&mut b));
    let bm = Array2::from_shape_fn((n, k), |_| val(&mut b));
    let scaled = fp8 && b.u8() % 2 == 0;
    let nb = k.div_ceil(128);
    let sa = Array2::from_shape_fn((m, nb), |_| f64::from(f32::from_bits(0x3800_0000 | (u32::from(b.u16()) << 7))));
    let sb = Array2::from_shape_fn((n, nb), |_| f64::from(f32::from_bits(0x3800_0000 | (u32::from(b.u16()) << 7))));
    let scales = scaled.then(|| (sa.view(), sb.view(), 128));
    let fast = gemm_nt(&Model::TensorCore(t), a.view(), bm.view(), scales);
    let portable = tensor_core::gemm_nt_portable(&t, a.view(), bm.view(), scales);
    for i in 0..m {
        for j in 0..n {
            let (ar, br) = (a.row(i).to_vec(), bm.row(j).to_vec());
            let want = if scaled {
                slow::dot(&t, &ar, &br, Some((&sa.row(i).to_vec(), &sb.row(j).to_vec(), 128)))
            } else {
                slow::dot(&t, &ar, &br, None)
            };
            for got in [fast[[i, j]], portable[[i, j]]] {
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{t:?} ({i},{j}) K={k}: fast {got:e}, definition {want:e}");
            }
        }
    }
}
