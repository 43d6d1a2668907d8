//! The tensor-core model, fast: operands decomposed once into (alignment exponent, integer significand),
//! outputs computed in panels of [`NR`] columns so that every step of an instruction is the same integer
//! operation on `NR` lanes (the compiler vectorises it), rows in parallel with rayon.
//!
//! Per instruction and lane: `x_k = ea_k + eb_k` (alignment exponents), `E = max(x_k, e(C))`; the
//! product of the integer significands `p_k = ma_k·mb_k·2^L` (L = n - Ma - Mb, so `p_k` counts units of
//! `2^(x_k - n)`) truncated to units of `2^(E - n)` is `sign(p_k)·(|p_k| >> (E - x_k))`, exact integer
//! arithmetic that is the model's truncation toward zero. The instruction's sum (i32 lanes, checked not to
//! overflow) plus C's truncated term (i64) is then truncated to the output width by [`finish`].
//!
//! Operands that are not values with `M + 1` significant bits of their declared format (or not finite)
//! make the whole GEMM take the slow path ([`super::slow`]), entry by entry.

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use super::{promote_scaled, slow, Scales, TensorCore};
use crate::formats::Format;

/// Output columns per panel (lanes).
pub const NR: usize = 16;
/// Instructions longer than this take the slow path (Hopper's are 16 and 32).
const KMAX: usize = 64;
/// Alignment exponent of a zero operand: so low that a product with it truncates to nothing, yet twice
/// it still fits an i32.
const ZERO_EXP: i32 = -(1 << 20);

/// `(alignment exponent, signed integer significand)` with `v = m·2^(e - mbits)`; `None` when `v` is not
/// finite or needs more than `mbits + 1` significant bits at that exponent.
fn decompose(v: f64, mbits: u32, emin: i32) -> Option<(i32, i32)> {
    if v == 0.0 {
        return Some((ZERO_EXP, 0));
    }
    if !v.is_finite() {
        return None;
    }
    let field = ((v.to_bits() >> 52) & 0x7FF) as i32;
    if field == 0 {
        return None; // an f64 subnormal is no value of these formats
    }
    let e = (field - 1023).max(emin);
    let sh = mbits as i32 - e;
    if !(-1000..=1000).contains(&sh) {
        return None;
    }
    let m = v * 2f64.powi(sh); // exact: a power-of-two scaling inside f64's range
    (m == m.trunc() && m.abs() < f64::from(1u32 << (mbits + 1))).then_some((e, m as i32))
}

/// A decomposed operand, row-major.
struct Operand {
    e: Vec<i32>,
    m: Vec<i32>,
}

fn decompose_rows(x: ArrayView2<f64>, fmt: Format) -> Option<Operand> {
    let spec = fmt.spec();
    let (mb, emin) = (spec.mantissa_bits, spec.min_exponent());
    let mut e = Vec::with_capacity(x.len());
    let mut m = Vec::with_capacity(x.len());
    for &v in x.iter() {
        let (de, dm) = decompose(v, mb, emin)?;
        e.push(de);
        m.push(dm);
    }
    Some(Operand { e, m })
}

/// `B` ([N, K]) as panels of `NR` rows, k-major inside a panel: `e[p][k][lane]`; significands shifted
/// left by `shift`. Missing rows of the last panel are zeros.
struct Panels {
    e: Vec<[i32; NR]>,
    m: Vec<[i32; NR]>,
    k: usize,
}

fn panels(b: &Operand, n: usize, k: usize, shift: u32) -> Panels {
    let np = n.div_ceil(NR);
    let mut e = vec![[ZERO_EXP; NR]; np * k];
    let mut m = vec![[0i32; NR]; np * k];
    for j in 0..n {
        let (p, l) = (j / NR, j % NR);
        for t in 0..k {
            e[p * k + t][l] = b.e[j * k + t];
            m[p * k + t][l] = b.m[j * k + t] << shift;
        }
    }
    Panels { e, m, k }
}

/// `sum·2^(e - n)` truncated toward zero to `f` fraction bits below its leading bit and to f32's
/// subnormal spacing; `±inf` from `2^128` up.
#[inline]
fn finish(sum: i64, e: i32, n: u32, f: u32) -> f32 {
    if sum == 0 {
        return 0.0;
    }
    let neg = sum < 0;
    let a = sum.unsigned_abs();
    let unit = e - n as i32; // exponent of one unit of `sum`
    let lead = unit + 63 - a.leading_zeros() as i32;
    let mag = if lead >= 128 {
        f32::INFINITY
    } else {
        let lsb = (lead - f as i32).max(-149);
        let drop = lsb - unit;
        let q = if drop <= 0 {
            a << (-drop)
        } else if drop >= 64 {
            0
        } else {
            a >> drop
        };
        // q < 2^24 and 2^lsb is a normal f64: the product is exact and an f32.
        (q as f64 * f64::from_bits(((lsb + 1023) as u64) << 52)) as f32
    };
    if neg {
        -mag
    } else {
        mag
    }
}

/// One instruction on `NR` lanes: `c` (updated in place) plus the products of A's `k` slice (`ea`, `ma`)
/// and the panel's rows `eb`, `mb`.
#[inline(always)]
fn instruction(t: &TensorCore, c: &mut [f32; NR], ea: &[i32], ma: &[i32], eb: &[[i32; NR]], mb: &[[i32; NR]]) {
    let kk = ea.len();
    let n = t.n_bits as i32;
    // C as (alignment exponent, 24-bit signed significand with 23 fraction bits).
    let mut ec = [ZERO_EXP; NR];
    let mut mc = [0i64; NR];
    let mut special = false;
    for l in 0..NR {
        let v = c[l];
        if !v.is_finite() {
            special = true;
        } else if v != 0.0 {
            let bits = v.to_bits();
            let field = ((bits >> 23) & 0xFF) as i32;
            let mant = i64::from(bits & 0x7F_FFFF) | if field != 0 { 1 << 23 } else { 0 };
            ec[l] = field.max(1) - 127;
            mc[l] = if v < 0.0 { -mant } else { mant };
        }
    }
    let mut x = [[0i32; NR]; KMAX];
    let mut emax = ec;
    for k in 0..kk {
        let a = ea[k];
        let eb = &eb[k];
        for l in 0..NR {
            let v = a + eb[l];
            x[k][l] = v;
            emax[l] = emax[l].max(v);
        }
    }
    let mut sum = [0i32; NR];
    for k in 0..kk {
        let a = ma[k];
        let mb = &mb[k];
        let x = &x[k];
        for l in 0..NR {
            let s = (emax[l] - x[l]).min(31) as u32;
            let p = a * mb[l];
            let sign = p >> 31; // 0 or -1
            let tr = (p.unsigned_abs() >> s) as i32;
            sum[l] += (tr ^ sign) - sign;
        }
    }
    for l in 0..NR {
        if special && !c[l].is_finite() {
            continue; // inf or NaN C plus finite products stays as it is
        }
        let e = emax[l];
        let mut s = i64::from(sum[l]);
        if mc[l] != 0 {
            let sh = ec[l] - 23 + n - e;
            s += if sh >= 0 {
                mc[l] << sh
            } else {
                let mag = mc[l].unsigned_abs() >> (-sh).min(63);
                if mc[l] < 0 { -(mag as i64) } else { mag as i64 }
            };
        }
        c[l] = finish(s, e, t.n_bits, t.out_frac_bits);
    }
}

/// The chain over K range `k0..k1` from C = 0 (promotion every `promote_every` into IEEE f32 adds).
#[inline(always)]
fn chain(t: &TensorCore, a: &Operand, row: usize, bp: &Panels, panel: usize, k0: usize, k1: usize) -> [f32; NR] {
    let k = bp.k;
    let run = |s0: usize, s1: usize| {
        let mut c = [0.0f32; NR];
        let mut i0 = s0;
        while i0 < s1 {
            let i1 = (i0 + t.k_inst).min(s1);
            let ar = row * k;
            let br = panel * k;
            instruction(t, &mut c, &a.e[ar + i0..ar + i1], &a.m[ar + i0..ar + i1], &bp.e[br + i0..br + i1], &bp.m[br + i0..br + i1]);
            i0 = i1;
        }
        c
    };
    match t.promote_every {
        None => run(k0, k1),
        Some(p) => {
            let mut fin = [0.0f32; NR];
            let mut s0 = k0;
            while s0 < k1 {
                let s1 = (s0 + p).min(k1);
                let part = run(s0, s1);
                for l in 0..NR {
                    fin[l] += part[l];
                }
                s0 = s1;
            }
            if k0 == k1 {
                // No promotion step ran: the f32 register still holds its initial zero.
                fin = [0.0; NR];
            }
            fin
        }
    }
}

/// Whether the fast path's integer lanes hold every case: `n >= Ma + Mb`, an instruction's products sum
/// within i32, instructions of at most [`KMAX`].
fn fast_path_fits(t: &TensorCore) -> Option<u32> {
    let (ma, mb) = (t.operands.0.spec().mantissa_bits, t.operands.1.spec().mantissa_bits);
    let shift = t.n_bits.checked_sub(ma + mb)?;
    let max_p = ((1u64 << (ma + 1)) - 1) * ((1u64 << (mb + 1)) - 1) << shift;
    (t.k_inst >= 1 && t.k_inst <= KMAX && max_p * t.k_inst as u64 <= i32::MAX as u64 && t.n_bits <= 40).then_some(shift)
}

pub(super) fn gemm_nt(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> Array2<f64> {
    let (m, n, k) = (a.nrows(), b.nrows(), a.ncols());
    let fast = fast_path_fits(t).and_then(|shift| {
        let da = decompose_rows(a, t.operands.0)?;
        let db = decompose_rows(b, t.operands.1)?;
        Some((shift, da, db))
    });
    let mut c = Array2::<f64>::zeros((m, n));
    if m == 0 || n == 0 {
        return c;
    }
    let Some((shift, da, db)) = fast else {
        return slow_gemm(t, a, b, scales);
    };
    let bp = panels(&db, n, k, shift);
    let np = n.div_ceil(NR);
    c.as_slice_mut().expect("fresh array").par_chunks_mut(n).enumerate().for_each(|(i, out)| {
        for p in 0..np {
            let lanes = match scales {
                None => chain(t, &da, i, &bp, p, 0, k),
                Some((sa, sb, kb)) => {
                    let mut fin = [0.0f32; NR];
                    for (blk, k0) in (0..k).step_by(kb).enumerate() {
                        let part = chain(t, &da, i, &bp, p, k0, (k0 + kb).min(k));
                        for l in 0..NR {
                            let j = p * NR + l;
                            if j < n {
                                fin[l] = promote_scaled(fin[l], sa[[i, blk]], sb[[j, blk]], part[l]);
                            }
                        }
                    }
                    fin
                }
            };
            for l in 0..NR.min(n - p * NR) {
                out[p * NR + l] = f64::from(lanes[l]);
            }
        }
    });
    c
}

/// Entry by entry through the definition: for operands off the declared formats' grids.
fn slow_gemm(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> Array2<f64> {
    let (m, n) = (a.nrows(), b.nrows());
    let mut c = Array2::<f64>::zeros((m, n));
    c.as_slice_mut().expect("fresh array").par_chunks_mut(n).enumerate().for_each(|(i, out)| {
        let ar = a.row(i).to_vec();
        for (j, o) in out.iter_mut().enumerate() {
            let br = b.row(j).to_vec();
            *o = match scales {
                None => slow::dot(t, &ar, &br, None),
                Some((sa, sb, kb)) => {
                    let (sa, sb) = (sa.row(i).to_vec(), sb.row(j).to_vec());
                    slow::dot(t, &ar, &br, Some((&sa, &sb, kb)))
                }
            };
        }
    });
    c
}
