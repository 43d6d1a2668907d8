//! The tensor-core model term by term in big integers: the definition the fast implementation
//! ([`super::tensor_core`]) is tested against. Slow (a few µs per instruction) and obviously right.
//!
//! Every value is an exact dyadic `m·2^e` with a big-integer `m`; nothing is rounded except where the
//! model rounds: the truncation of each aligned term, the truncation of the instruction's sum, the range
//! of the f32 it is written to, and the IEEE f32 operations of promotion.

use num_bigint::BigInt;
use num_traits::{Signed, ToPrimitive, Zero};

use super::{promote_scaled, TensorCore};

/// An exact dyadic rational `m·2^e`.
#[derive(Clone, Debug)]
struct Dyadic {
    m: BigInt,
    e: i64,
}

impl Dyadic {
    /// A finite f64, exactly.
    fn from_f64(v: f64) -> Dyadic {
        let bits = v.to_bits();
        let neg = bits >> 63 == 1;
        let field = ((bits >> 52) & 0x7FF) as i64;
        let frac = bits & ((1u64 << 52) - 1);
        let (m, e) = if field == 0 { (frac, -1074) } else { (frac | (1u64 << 52), field - 1075) };
        let m = BigInt::from(m);
        Dyadic { m: if neg { -m } else { m }, e }
    }

    fn mul(&self, o: &Dyadic) -> Dyadic {
        Dyadic { m: &self.m * &o.m, e: self.e + o.e }
    }

    /// `floor(log2 |v|)`, for a nonzero value.
    fn floor_log2(&self) -> i64 {
        self.m.bits() as i64 - 1 + self.e
    }

    /// `trunc(v · 2^s)`: toward zero (big-integer division truncates toward zero).
    fn trunc_scaled(&self, s: i64) -> BigInt {
        let sh = self.e + s;
        if sh >= 0 {
            &self.m << (sh as usize)
        } else {
            &self.m / (BigInt::from(1) << ((-sh) as usize))
        }
    }
}

/// The alignment exponent of a nonzero operand of a format whose lowest normal exponent is `emin`: its
/// binade, or `emin` for a subnormal (the hardware reads the exponent field, which is `emin` there).
fn align_exp(v: &Dyadic, emin: i32) -> i64 {
    v.floor_log2().max(i64::from(emin))
}

/// One instruction: `c` plus the products of `a`, `b` (at most `k_inst` of them), under the model.
fn instruction(t: &TensorCore, c: f32, a: &[f64], b: &[f64]) -> f32 {
    let (fa, fb) = t.operands;
    let (emin_a, emin_b) = (fa.spec().min_exponent(), fb.spec().min_exponent());
    // Special values, as IEEE addition would treat them: NaN in, or inf·0, or +inf with -inf: NaN.
    let mut pos_inf = c == f32::INFINITY;
    let mut neg_inf = c == f32::NEG_INFINITY;
    let mut nan = c.is_nan();
    for (&x, &y) in a.iter().zip(b) {
        if x.is_nan() || y.is_nan() || (x.is_infinite() && y == 0.0) || (y.is_infinite() && x == 0.0) {
            nan = true;
        } else if x.is_infinite() || y.is_infinite() {
            if (x < 0.0) != (y < 0.0) { neg_inf = true } else { pos_inf = true }
        }
    }
    if nan || (pos_inf && neg_inf) {
        return f32::NAN;
    }
    if pos_inf || neg_inf {
        return if pos_inf { f32::INFINITY } else { f32::NEG_INFINITY };
    }
    // Terms with their alignment exponents.
    let mut terms: Vec<(Dyadic, i64)> = Vec::new();
    if c != 0.0 {
        let d = Dyadic::from_f64(f64::from(c));
        let e = align_exp(&d, -126);
        terms.push((d, e));
    }
    for (&x, &y) in a.iter().zip(b) {
        if x != 0.0 && y != 0.0 {
            let (dx, dy) = (Dyadic::from_f64(x), Dyadic::from_f64(y));
            let e = align_exp(&dx, emin_a) + align_exp(&dy, emin_b);
            terms.push((dx.mul(&dy), e));
        }
    }
    let Some(emax) = terms.iter().map(|(_, e)| *e).max() else {
        return 0.0;
    };
    let n = i64::from(t.n_bits);
    // Each term truncated to n fraction bits relative to 2^E; the sum is exact; value = sum·2^(E-n).
    let sum: BigInt = terms.iter().map(|(v, _)| v.trunc_scaled(n - emax)).sum();
    if sum.is_zero() {
        return 0.0;
    }
    let s = Dyadic { m: sum, e: emax - n };
    // Truncate to out_frac_bits below the leading bit, and to f32's subnormal spacing 2^-149.
    let lead = s.floor_log2();
    if lead >= 128 {
        return if s.m.is_negative() { f32::NEG_INFINITY } else { f32::INFINITY };
    }
    let lsb = (lead - i64::from(t.out_frac_bits)).max(-149);
    let q = s.trunc_scaled(-lsb);
    let v = q.to_f64().expect("at most 24 bits") * 2f64.powi(lsb as i32);
    if q.is_zero() && s.m.is_negative() {
        return -0.0;
    }
    v as f32
}

/// The tensor-core chain over `a`, `b` from C = 0, instructions of `k_inst` (the last one shorter, i.e.
/// zero padded), with promotion every `promote_every` into an IEEE f32 sum; every instruction's |result|
/// is added to `mag` (in f64, in instruction order).
fn chain(t: &TensorCore, a: &[f64], b: &[f64], mag: &mut f64) -> f32 {
    let mut run = |a: &[f64], b: &[f64]| {
        let mut c = 0.0f32;
        for (ca, cb) in a.chunks(t.k_inst).zip(b.chunks(t.k_inst)) {
            c = instruction(t, c, ca, cb);
            *mag += f64::from(c.abs());
        }
        c
    };
    match t.promote_every {
        Some(p) if p < a.len() => {
            let mut fin = 0.0f32;
            for (pa, pb) in a.chunks(p).zip(b.chunks(p)) {
                fin += run(pa, pb);
            }
            fin
        }
        Some(_) => 0.0f32 + run(a, b),
        None => run(a, b),
    }
}

/// One dot product under the tensor-core model; with `scales = (sa, sb, kb)` each K block of `kb` is
/// chained from zero and promoted DeepGEMM's way, `final = fma(fl32(sa·sb), partial, final)`.
pub fn dot(t: &TensorCore, a: &[f64], b: &[f64], scales: Option<(&[f64], &[f64], usize)>) -> f64 {
    dot_magnitudes(t, a, b, scales).0
}

/// [`dot`] and the sum over its instructions of |their result| (with scales, each K block's sum times
/// `sa·sb`, in f64): what [`super::gemm_nt_mag_into`] computes.
pub fn dot_magnitudes(t: &TensorCore, a: &[f64], b: &[f64], scales: Option<(&[f64], &[f64], usize)>) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let mut mag = 0.0f64;
    let v = match scales {
        None => chain(t, a, b, &mut mag),
        Some((sa, sb, kb)) => {
            let mut fin = 0.0f32;
            for (i, (ba, bb)) in a.chunks(kb).zip(b.chunks(kb)).enumerate() {
                let mut block = 0.0f64;
                fin = promote_scaled(fin, sa[i], sb[i], chain(t, ba, bb, &mut block));
                mag += sa[i] * sb[i] * block;
            }
            fin
        }
    };
    (f64::from(v), mag)
}
