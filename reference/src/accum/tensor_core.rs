//! The tensor-core model, fast: operands decomposed once into (alignment exponent, integer significand),
//! outputs computed in panels of [`NR`] columns so that every step of an instruction is the same integer
//! operation on `NR` lanes (the compiler vectorises it), panels in parallel with rayon.
//!
//! Per instruction and lane: `x_k = ea_k + eb_k` (alignment exponents), `E = max(x_k, e(C))`; the
//! product of the integer significands `p_k = ma_k·mb_k·2^L` (L = n - Ma - Mb, so `p_k` counts units of
//! `2^(x_k - n)`) truncated to units of `2^(E - n)` is `sign(p_k)·(|p_k| >> (E - x_k))`, exact integer
//! arithmetic that is the model's truncation toward zero. The instruction's sum (i32 lanes, checked not to
//! overflow) plus C's truncated term (i64) is then truncated to the output width, at the end of
//! [`instruction`], straight into the integer form the next instruction aligns ([`Acc`]): C becomes an
//! f32 only when a chain ends.
//!
//! The same code is compiled twice: for the crate's baseline (x86-64-v3: two 8-lane registers per
//! quantity) and for AVX-512 (one 16-lane register), chosen at run time; tests run both.
//!
//! Operands that are not values with `M + 1` significant bits of their declared format (or not finite)
//! make the whole GEMM take the slow path ([`super::slow`]), entry by entry.

use ndarray::{Array2, ArrayView2, ArrayViewMut2, Axis};
use rayon::prelude::*;

use super::{promote_scaled, slow, BoundElem, Scales, TensorCore};
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
    let m = v * f64::from_bits(((sh + 1023) as u64) << 52); // exact: a power-of-two scaling in range
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
    let (mut e, mut m) = (crate::scratch::filled(x.len(), 0i32), crate::scratch::filled(x.len(), 0i32));
    for ((de, dm), &v) in e.iter_mut().zip(m.iter_mut()).zip(x.iter()) {
        (*de, *dm) = decompose(v, mb, emin)?;
    }
    Some(Operand { e, m })
}

/// `B` ([N, K]) as panels of `NR` rows, k-major inside a panel: `e[p][k][lane]`; significands shifted
/// left by `shift`. Missing rows of the last panel are zeros.
struct Panels {
    e: Vec<[i32; NR]>,
    m: Vec<[i32; NR]>,
    k: usize,
    /// Products per i32 partial sum of an instruction ([`fast_path_fits`]).
    chunk: usize,
}

fn panels(b: ArrayView2<f64>, fmt: Format, shift: u32, chunk: usize) -> Option<Panels> {
    let spec = fmt.spec();
    let (mbits, emin) = (spec.mantissa_bits, spec.min_exponent());
    let (n, k) = b.dim();
    let np = n.div_ceil(NR);
    // Weight-sized for the emulator's per-expert stages: reused per thread ([`crate::scratch`]).
    let mut e = crate::scratch::filled(np * k, [ZERO_EXP; NR]);
    let mut m = crate::scratch::filled(np * k, [0i32; NR]);
    // Straight from B into the panel layout (no row-major decomposition in between): one pass, and a
    // panel's 16 rows touch the same k·128 bytes, which stay in cache.
    for (j, row) in b.rows().into_iter().enumerate() {
        let (p, l) = (j / NR, j % NR);
        let (pe, pm) = (&mut e[p * k..(p + 1) * k], &mut m[p * k..(p + 1) * k]);
        for ((de, dm), &v) in pe.iter_mut().zip(pm.iter_mut()).zip(row.iter()) {
            let (x, y) = decompose(v, mbits, emin)?;
            de[l] = x;
            dm[l] = y << shift;
        }
    }
    Some(Panels { e, m, k, chunk })
}

/// The running C of `NR` lanes, kept in the form the next instruction aligns: `mc·2^(ec - 23)` with a
/// signed significand of at most 24 bits, `ec` = its alignment exponent (`floor(log2|C|)`, at least
/// f32's -126, as the hardware reads an f32's exponent field), [`ZERO_EXP`] for zero.
struct Acc {
    ec: [i32; NR],
    mc: [i64; NR],
    /// A zero that came from truncating a negative sum (written as -0.0).
    neg_zero: [bool; NR],
    /// +1 / -1 once the lane overflowed f32 (it stays ±inf: C = inf plus finite products is inf).
    inf: [i8; NR],
}

impl Acc {
    fn zero() -> Acc {
        Acc { ec: [ZERO_EXP; NR], mc: [0; NR], neg_zero: [false; NR], inf: [0; NR] }
    }

    /// The lanes as f32 values.
    #[inline(always)]
    fn to_f32(&self) -> [f32; NR] {
        let mut out = [0.0f32; NR];
        for (l, o) in out.iter_mut().enumerate() {
            let m = self.mc[l];
            let am = m.unsigned_abs() as u32;
            let field = if am >= 1 << 23 { (self.ec[l] + 127) as u32 } else { 0 };
            let sign = u32::from(m < 0 || self.neg_zero[l]) << 31;
            let v = f32::from_bits(sign | field << 23 | (am & 0x7F_FFFF));
            *o = match self.inf[l] {
                0 => v,
                s if s > 0 => f32::INFINITY,
                _ => f32::NEG_INFINITY,
            };
        }
        out
    }
}

/// `mag += |C|`, lane by lane: C's exact value (a significand below 2^24 times a power of two) added in
/// f64. A lane that overflowed holds no value here: the chain's end makes its sum infinite
/// ([`panel_rows`]).
#[inline(always)]
fn add_magnitudes(acc: &Acc, mag: &mut [f64; NR]) {
    for (l, g) in mag.iter_mut().enumerate() {
        let m = acc.mc[l] as i32;
        // A zero C has ec = ZERO_EXP: any scale of a zero significand is zero.
        let e = (acc.ec[l] - 23).max(-1022);
        *g += f64::from(m).abs() * f64::from_bits(((e + 1023) as u64) << 52);
    }
}

/// `x = a + b` and `emax = max(emax, x)`, lane by lane. Written with AVX2 intrinsics where the build has
/// them (the crate's baseline does): as plain loops, the compiler vectorised the caller's loop over the
/// instruction's k instead of over the lanes, with a gather and a scatter per k, which took most of the
/// model's time.
#[inline(always)]
fn exponents_row(a: i32, b: &[i32; NR], x: &mut [i32; NR], emax: &mut [i32; NR]) {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    {
        use std::arch::x86_64::{__m256i, _mm256_add_epi32, _mm256_loadu_si256, _mm256_max_epi32, _mm256_set1_epi32, _mm256_storeu_si256};
        // SAFETY: AVX2 is enabled for this build (cfg above); every load and store is of 8 i32 within
        // one of the 16-lane arrays.
        unsafe {
            let va = _mm256_set1_epi32(a);
            for h in 0..NR / 8 {
                let o = h * 8;
                let v = _mm256_add_epi32(va, _mm256_loadu_si256(b.as_ptr().add(o) as *const __m256i));
                _mm256_storeu_si256(x.as_mut_ptr().add(o) as *mut __m256i, v);
                let m = _mm256_loadu_si256(emax.as_ptr().add(o) as *const __m256i);
                _mm256_storeu_si256(emax.as_mut_ptr().add(o) as *mut __m256i, _mm256_max_epi32(m, v));
            }
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx2")))]
    for l in 0..NR {
        let v = a.wrapping_add(b[l]);
        x[l] = v;
        emax[l] = emax[l].max(v);
    }
}

/// One instruction on `NR` lanes: C (`acc`, updated in place) plus the products of A's `k` slice (`ea`,
/// `ma`) and the panel's rows `eb`, `mb`. `x` is scratch for the products' alignment exponents.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn instruction(t: &TensorCore, chunk: usize, acc: &mut Acc, x: &mut [[i32; NR]; KMAX], ea: &[i32], ma: &[i32], eb: &[[i32; NR]], mb: &[[i32; NR]]) {
    let kk = ea.len();
    let (n, f) = (t.n_bits as i32, t.out_frac_bits as i32);
    // E: the largest alignment exponent of the products, then of C. C's exponents are read last: the
    // previous instruction has just written them with stores the compiler makes narrower than this
    // load, which the CPU cannot forward, so the load waits until they reach the cache (a quarter of the
    // model's time when it came first); after the products' exponents, that wait overlaps them.
    let mut emax = [ZERO_EXP; NR];
    for k in 0..kk {
        exponents_row(ea[k], &eb[k], &mut x[k], &mut emax);
    }
    for (m, &c) in emax.iter_mut().zip(&acc.ec) {
        *m = (*m).max(c);
    }
    // Every product truncated toward zero to units of 2^(E - n), summed exactly: in i32 lanes, `chunk`
    // products at a time (all of them for the Hopper models; two halves of 16 for tcgen05's 32 products
    // of 25 bits, whose full sum can pass 2^31), each partial sum then added in i64.
    let mut total = [0i64; NR];
    let mut k0 = 0;
    while k0 < kk {
        let k1 = (k0 + chunk).min(kk);
        let mut sum = [0i32; NR];
        for k in k0..k1 {
            let a = ma[k];
            let mb = &mb[k];
            let x = &x[k];
            for l in 0..NR {
                // A shift of 32 or more leaves nothing (`checked_shr` says so, and x86's variable shifts
                // do it in one instruction).
                let s = (emax[l] - x[l]) as u32;
                let p = a * mb[l];
                let tr = p.unsigned_abs().checked_shr(s).unwrap_or(0) as i32;
                sum[l] += if p < 0 { -tr } else { tr };
            }
        }
        for l in 0..NR {
            total[l] += i64::from(sum[l]);
        }
        k0 = k1;
    }
    for l in 0..NR {
        let e = emax[l];
        // C's term: mc·2^(ec - 23) in units of 2^(E - n), truncated toward zero (a zero C has
        // ec = ZERO_EXP, so its shift is far right: nothing).
        let sh = acc.ec[l] - 23 + n - e;
        let m = acc.mc[l];
        let tc = (m.unsigned_abs() << sh.clamp(0, 63)) >> (-sh).clamp(0, 63);
        let tc = if m < 0 { -(tc as i64) } else { tc as i64 };
        let s = total[l] + tc;
        // The sum s·2^(E - n) truncated toward zero to f fraction bits below its leading bit and to
        // f32's subnormal spacing 2^-149.
        let neg = s < 0;
        let a = s.unsigned_abs();
        let unit = e - n;
        let lead = unit + 63 - a.leading_zeros() as i32;
        let lsb = (lead - f).max(-149);
        let drop = lsb - unit;
        let q = (a << (-drop).clamp(0, 63)) >> drop.clamp(0, 63);
        let zero = q == 0;
        let ec = lead.max(-126);
        let mq = (q << (lsb - ec + 23).clamp(0, 63)) as i64;
        acc.ec[l] = if zero { ZERO_EXP } else { ec };
        acc.mc[l] = if neg { -mq } else { mq };
        acc.neg_zero[l] = zero && neg;
        let over = !zero && lead >= 128;
        acc.inf[l] = if acc.inf[l] != 0 {
            acc.inf[l]
        } else if over {
            if neg { -1 } else { 1 }
        } else {
            0
        };
    }
}

/// Scratch for the alignment exponents of one instruction: made once per panel and never re-zeroed (each
/// instruction writes the rows it reads); zeroing it for every chain cost as much as a promoted FP8
/// block's instructions.
type Scratch = [[i32; NR]; KMAX];

/// Instructions over `s0..s1`, chained from C = 0; with `MAG`, every instruction's |result| is added to
/// `mag`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn run<const MAG: bool>(t: &TensorCore, a: &Operand, row: usize, bp: &Panels, panel: usize, s0: usize, s1: usize, x: &mut Scratch, mag: &mut [f64; NR]) -> [f32; NR] {
    let k = bp.k;
    let (ar, br) = (row * k, panel * k);
    let mut acc = Acc::zero();
    let mut i0 = s0;
    while i0 < s1 {
        let i1 = (i0 + t.k_inst).min(s1);
        instruction(t, bp.chunk, &mut acc, x, &a.e[ar + i0..ar + i1], &a.m[ar + i0..ar + i1], &bp.e[br + i0..br + i1], &bp.m[br + i0..br + i1]);
        if MAG {
            add_magnitudes(&acc, mag);
        }
        i0 = i1;
    }
    acc.to_f32()
}

/// The chain over K range `k0..k1` from C = 0 (promotion every `promote_every` into IEEE f32 adds); with
/// `MAG`, the instructions' |results| added to `mag`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn chain<const MAG: bool>(t: &TensorCore, a: &Operand, row: usize, bp: &Panels, panel: usize, k0: usize, k1: usize, x: &mut Scratch, mag: &mut [f64; NR]) -> [f32; NR] {
    match t.promote_every {
        None => run::<MAG>(t, a, row, bp, panel, k0, k1, x, mag),
        Some(p) => {
            let mut fin = [0.0f32; NR];
            let mut s0 = k0;
            while s0 < k1 {
                let s1 = (s0 + p).min(k1);
                let part = run::<MAG>(t, a, row, bp, panel, s0, s1, x, mag);
                for l in 0..NR {
                    fin[l] += part[l];
                }
                s0 = s1;
            }
            fin
        }
    }
}

/// Whether the fast path's integer lanes hold every case: `n >= Ma + Mb`, one product within i32,
/// instructions of at most [`KMAX`]. Returns the products' shift and how many of them an i32 partial sum
/// holds (the instruction's sum is exact in i64 either way).
fn fast_path_fits(t: &TensorCore) -> Option<(u32, usize)> {
    let (ma, mb) = (t.operands.0.spec().mantissa_bits, t.operands.1.spec().mantissa_bits);
    let shift = t.n_bits.checked_sub(ma + mb)?;
    let max_p = (((1u64 << (ma + 1)) - 1) * ((1u64 << (mb + 1)) - 1)) << shift;
    (t.k_inst >= 1 && t.k_inst <= KMAX && max_p <= i32::MAX as u64 && t.n_bits <= 40).then_some((shift, (i32::MAX as u64 / max_p) as usize))
}

/// Whether `t` runs on the integer-lane kernel (else on the big-integer definition, far slower), for tests.
#[doc(hidden)]
pub fn fast_path_available(t: &TensorCore) -> bool {
    fast_path_fits(t).is_some()
}

pub(super) fn gemm_nt_into(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>, c: ArrayViewMut2<f64>) {
    gemm_nt_lanes::<false, f64>(t, a, b, scales, wide_lanes_available(), c, None)
}

/// [`gemm_nt_into`], and `mag[m, n]` = Σ over the instructions of entry (m, n)'s chain of |their result|,
/// each times its K block's `sa·sb` with scales ([`super::gemm_nt_mag_into`]).
pub(super) fn gemm_nt_mag_into<B: BoundElem>(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>, c: ArrayViewMut2<f64>, mag: ArrayViewMut2<B>) {
    gemm_nt_lanes::<true, B>(t, a, b, scales, wide_lanes_available(), c, Some(mag))
}

/// [`super::gemm_nt`] for a tensor-core model without the AVX-512 build of the kernel (the path other
/// CPUs take), so that tests on an AVX-512 machine cover both builds.
#[doc(hidden)]
pub fn gemm_nt_portable(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> Array2<f64> {
    let mut c = Array2::<f64>::zeros((a.nrows(), b.nrows()));
    gemm_nt_lanes::<false, f64>(t, a, b, scales, false, c.view_mut(), None);
    c
}

/// [`gemm_nt_portable`] with the magnitudes of [`gemm_nt_mag_into`]: `(values, magnitudes)`.
#[doc(hidden)]
pub fn gemm_nt_mag_portable(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> (Array2<f64>, Array2<f64>) {
    let mut c = Array2::<f64>::zeros((a.nrows(), b.nrows()));
    let mut mag = Array2::<f64>::zeros((a.nrows(), b.nrows()));
    gemm_nt_lanes::<true, f64>(t, a, b, scales, false, c.view_mut(), Some(mag.view_mut()));
    (c, mag)
}

/// Writes every entry of `c` ([M, N]) and, with `MAG`, of `mag`; the caller's arrays are the results, so
/// no M×N temporary is made (the emulator's weight gradients are 3M entries per expert).
#[allow(clippy::too_many_arguments)]
fn gemm_nt_lanes<const MAG: bool, B: BoundElem>(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>, wide: bool, mut c: ArrayViewMut2<f64>, mut mag: Option<ArrayViewMut2<B>>) {
    let (m, n) = (a.nrows(), b.nrows());
    assert_eq!(c.dim(), (m, n), "output shape");
    assert_eq!(MAG, mag.is_some(), "magnitudes asked for and given alike");
    if let Some(g) = &mag {
        assert_eq!(g.dim(), (m, n), "magnitudes' shape");
    }
    if m == 0 || n == 0 {
        return;
    }
    let fast = fast_path_fits(t).and_then(|(shift, chunk)| {
        let da = decompose_rows(a, t.operands.0)?;
        let bp = panels(b, t.operands.1, shift, chunk)?;
        Some((da, bp))
    });
    let Some((da, bp)) = fast else {
        let (v, g) = slow_gemm(t, a, b, scales);
        if let Some(mag) = &mut mag {
            mag.zip_mut_with(&g, |o, &x| *o = B::from_bound(x));
        }
        return c.assign(&v);
    };
    // Panel by panel, every row of A against one panel of B (k x 16 lanes, 256 KiB at K = 2048) while it
    // is in cache: row by row over all of B streamed the whole of B from memory once per row of A. Each
    // panel writes its own NR columns of `c` (and of `mag`).
    let mag_cols: Vec<Option<ArrayViewMut2<B>>> = match mag.as_mut() {
        Some(g) => g.axis_chunks_iter_mut(Axis(1), NR).map(Some).collect(),
        None => (0..n.div_ceil(NR)).map(|_| None).collect(),
    };
    c.axis_chunks_iter_mut(Axis(1), NR).into_par_iter().zip(mag_cols).enumerate().for_each(|(p, (mut cols, mut g))| {
        if wide {
            // SAFETY: the CPU has the features `panel_wide` is compiled for (checked at run time).
            #[cfg(target_arch = "x86_64")]
            unsafe {
                panel_wide::<MAG, B>(t, &da, m, &bp, p, n, scales, &mut cols, g.as_mut())
            }
        } else {
            panel_rows::<MAG, B>(t, &da, m, &bp, p, n, scales, &mut cols, g.as_mut())
        }
    });
    [da.e, da.m].into_iter().for_each(crate::scratch::give);
    [bp.e, bp.m].into_iter().for_each(crate::scratch::give);
}

/// Whether the AVX-512 build of the row kernel can run here.
fn wide_lanes_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512cd")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`panel_rows`] compiled for AVX-512 (one 16-lane register per quantity instead of two 8-lane ones):
/// the same code, so the same results.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx512cd")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel_wide<const MAG: bool, B: BoundElem>(t: &TensorCore, a: &Operand, m: usize, bp: &Panels, p: usize, n: usize, scales: Option<Scales>, out: &mut ArrayViewMut2<f64>, mag: Option<&mut ArrayViewMut2<B>>) {
    panel_rows::<MAG, B>(t, a, m, bp, p, n, scales, out, mag)
}

/// Panel `p` (output columns `p·NR ..`) for every row of A: `out[[i, l]]`, and with `MAG` `mag[[i, l]]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn panel_rows<const MAG: bool, B: BoundElem>(t: &TensorCore, a: &Operand, m: usize, bp: &Panels, p: usize, n: usize, scales: Option<Scales>, out: &mut ArrayViewMut2<f64>, mut mag: Option<&mut ArrayViewMut2<B>>) {
    let k = bp.k;
    let mut x: Scratch = [[0i32; NR]; KMAX];
    // B's scales of this panel, per K block and lane (a lane past N gets 0: its results are not written),
    // so that the promotion below is one branch-free loop over the lanes, which vectorises. (Lane by
    // lane through the index, the promotion's scalar stores made the next chain's full-width loads wait.)
    let sb_lanes: Vec<[f64; NR]> = match scales {
        Some((_, sb, kb)) => (0..k.div_ceil(kb.max(1)))
            .map(|blk| std::array::from_fn(|l| if p * NR + l < n { sb[[p * NR + l, blk]] } else { 0.0 }))
            .collect(),
        None => Vec::new(),
    };
    for i in 0..m {
        let mut total = [0.0f64; NR];
        let lanes = match scales {
            None => {
                let v = chain::<MAG>(t, a, i, bp, p, 0, k, &mut x, &mut total);
                if MAG {
                    overflowed_to_infinity(&v, &mut total);
                }
                v
            }
            Some((sa, _, kb)) => {
                let mut fin = [0.0f32; NR];
                for (blk, k0) in (0..k).step_by(kb).enumerate() {
                    let mut block = [0.0f64; NR];
                    let part = chain::<MAG>(t, a, i, bp, p, k0, (k0 + kb).min(k), &mut x, &mut block);
                    if MAG {
                        overflowed_to_infinity(&part, &mut block);
                    }
                    let (sa, sb) = (sa[[i, blk]], &sb_lanes[blk]);
                    for l in 0..NR {
                        fin[l] = promote_scaled(fin[l], sa, sb[l], part[l]);
                        if MAG {
                            total[l] += sa * sb[l] * block[l];
                        }
                    }
                }
                fin
            }
        };
        write_row(out.row_mut(i), &lanes, f64::from);
        if let Some(g) = mag.as_deref_mut() {
            write_row(g.row_mut(i), &total, B::from_bound);
        }
    }
}

/// `row[l] = f(lanes[l])` for the row's (at most `NR`) entries: through a slice when the row is contiguous
/// (it always is in the emulator), which the compiler turns into vector stores.
#[inline(always)]
fn write_row<T: Copy, O>(mut row: ndarray::ArrayViewMut1<O>, lanes: &[T; NR], f: impl Fn(T) -> O) {
    match row.as_slice_mut() {
        Some(s) => s.iter_mut().zip(lanes).for_each(|(o, &v)| *o = f(v)),
        None => row.iter_mut().zip(lanes).for_each(|(o, &v)| *o = f(v)),
    }
}

/// An infinite magnitude sum for every lane whose chain overflowed (its result is infinite).
#[inline(always)]
fn overflowed_to_infinity(v: &[f32; NR], mag: &mut [f64; NR]) {
    for (g, x) in mag.iter_mut().zip(v) {
        if x.is_infinite() {
            *g = f64::INFINITY;
        }
    }
}

/// Entry by entry through the definition: for operands off the declared formats' grids. Values and the
/// magnitudes of [`gemm_nt_mag_into`].
fn slow_gemm(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> (Array2<f64>, Array2<f64>) {
    let (m, n) = (a.nrows(), b.nrows());
    let mut c = Array2::<f64>::zeros((m, n));
    let mut g = Array2::<f64>::zeros((m, n));
    c.as_slice_mut().expect("fresh array").par_chunks_mut(n).zip(g.as_slice_mut().expect("fresh array").par_chunks_mut(n)).enumerate().for_each(|(i, (out, mag))| {
        let ar = a.row(i).to_vec();
        for (j, (o, g)) in out.iter_mut().zip(mag.iter_mut()).enumerate() {
            let br = b.row(j).to_vec();
            (*o, *g) = match scales {
                None => slow::dot_magnitudes(t, &ar, &br, None),
                Some((sa, sb, kb)) => {
                    let (sa, sb) = (sa.row(i).to_vec(), sb.row(j).to_vec());
                    slow::dot_magnitudes(t, &ar, &br, Some((&sa, &sb, kb)))
                }
            };
        }
    });
    (c, g)
}
