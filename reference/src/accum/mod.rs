//! Accumulation models: how a GEMM's dot products are summed by the hardware being emulated.
//!
//! - [`Model::Exact`]: the exact sum ([`crate::gemm::matmul_nt`]) then *one* rounding to f32 (an
//!   ideal f32-output kernel; the f64 result is corrected where it sits on an f32 rounding boundary, so
//!   the f32 is the correctly rounded exact value, with no double rounding).
//! - [`Model::F32Sequential`]: `acc = fl32(acc + fl32(a*b))` in increasing k (a CUDA-core loop without FMA).
//! - [`Model::F32Fma`]: `acc = fl32(acc + a*b)` (one rounding per step: an FMA chain).
//! - [`Model::TensorCore`]: the Hopper tensor-core model of `shared/docs/numerics.md` ("Accumulation
//!   inside the tensor cores", after MMA-Sim, Xie et al., arXiv:2511.10909): per instruction of
//!   `k_inst` products plus the running C, align every term to the largest alignment exponent `E`
//!   (a product's is `e(a) + e(b)`, its significand not renormalised), truncate each term toward zero to
//!   `n_bits` fraction bits relative to `2^E`, add exactly, truncate the sum toward zero to
//!   `out_frac_bits` fraction bits relative to its own leading bit (and to f32's range); the result is the
//!   next instruction's C. With `promote_every = Some(p)` the chain restarts from zero every `p` elements
//!   of K and each partial is added into a separate f32 accumulator with an IEEE round-to-nearest add.
//!
//! Contraction is along the last axis of both operands ("NT"). Blockwise-FP8 scales (`scales`) split K
//! into blocks of `kb`; each block's partial is computed from zero under the model and promoted as
//! DeepGEMM does, `final = fma(fl32(sa*sb), partial, final)` (its `final_accum += scale * accum` is
//! contracted to one FFMA by nvcc, whose `--fmad` default is on and which DeepGEMM's JIT flags do not turn
//! off); `Exact` instead rounds `Σ (a·sa)(b·sb)` once.
//!
//! [`tensor_core`] is the fast implementation (integer lanes, vectorised over outputs, rayon over rows);
//! [`slow`] the definition, term by term in big integers, against which it is tested.

mod exact_f32;
mod ieee;
pub mod slow;
pub mod tensor_core;

use ndarray::{Array2, ArrayView2, ArrayViewMut2};

use crate::formats::Format;

/// The Hopper tensor-core accumulation model's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorCore {
    /// Products per instruction (the K of one wgmma).
    pub k_inst: usize,
    /// Fraction bits kept of every aligned term, relative to the largest alignment exponent.
    pub n_bits: u32,
    /// Fraction bits of the instruction's result, relative to its own leading bit (23: an f32).
    pub out_frac_bits: u32,
    /// Restart the chain from zero every this many K elements and add the partials in IEEE f32.
    pub promote_every: Option<usize>,
    /// Formats of the A and B operands. They fix how a subnormal operand aligns (its exponent is the
    /// format's lowest normal exponent, as in the hardware's exponent field, with a significand below 1)
    /// and let the fast path hold significands in small integers. Operands that are not values of these
    /// formats are still summed correctly under the model, by the slow path.
    pub operands: (Format, Format),
}

impl TensorCore {
    /// Hopper `wgmma` with bf16 operands: 16 products, 25 bits, f32 result truncated (RZ).
    pub const HOPPER_BF16: Self =
        TensorCore { k_inst: 16, n_bits: 25, out_frac_bits: 23, promote_every: None, operands: (Format::Bf16, Format::Bf16) };
    /// Hopper `wgmma` with E4M3 operands, promoted to f32 every 128 (DeepSeek-V3, DeepGEMM, cuBLAS
    /// without fast accumulation).
    pub const HOPPER_FP8: Self =
        TensorCore { k_inst: 32, n_bits: 13, out_frac_bits: 13, promote_every: Some(128), operands: (Format::E4M3, Format::E4M3) };
    /// The same without promotion (cuBLAS `use_fast_accum`): the whole K chains in the tensor core.
    pub const HOPPER_FP8_FAST: Self =
        TensorCore { k_inst: 32, n_bits: 13, out_frac_bits: 13, promote_every: None, operands: (Format::E4M3, Format::E4M3) };
    /// Blackwell `tcgen05` with E4M3 operands (MXFP8 recipes): 32 products an instruction, 25 bits, f32
    /// out, no promotion (MMA-Sim's model; not checked on hardware here).
    pub const BLACKWELL_FP8: Self =
        TensorCore { k_inst: 32, n_bits: 25, out_frac_bits: 23, promote_every: None, operands: (Format::E4M3, Format::E4M3) };
}

/// An accumulation model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Model {
    /// Exact sum, then one rounding to f32.
    Exact,
    /// IEEE f32: `acc = fl32(acc + fl32(a*b))`, k increasing.
    F32Sequential,
    /// IEEE f32 FMA chain: `acc = fl32(acc + a*b)`, k increasing.
    F32Fma,
    /// The tensor-core model.
    TensorCore(TensorCore),
}

/// A model name that [`Model::parse`] does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown accumulation model {0:?} (expected one of exact, f32, f32-fma, hopper, hopper-fp8, hopper-fp8-fast)")]
pub struct UnknownModel(pub String);

const NAMES: [(&str, Model); 6] = [
    ("exact", Model::Exact),
    ("f32", Model::F32Sequential),
    ("f32-fma", Model::F32Fma),
    ("hopper", Model::TensorCore(TensorCore::HOPPER_BF16)),
    ("hopper-fp8", Model::TensorCore(TensorCore::HOPPER_FP8)),
    ("hopper-fp8-fast", Model::TensorCore(TensorCore::HOPPER_FP8_FAST)),
];

impl Model {
    /// `"exact"`, `"f32"`, `"f32-fma"`, `"hopper"` (bf16 wgmma), `"hopper-fp8"`, `"hopper-fp8-fast"`.
    pub fn parse(s: &str) -> Result<Model, UnknownModel> {
        NAMES.iter().find(|(n, _)| *n == s).map(|(_, m)| *m).ok_or_else(|| UnknownModel(s.to_string()))
    }

    /// The name [`Model::parse`] reads; a tensor-core model with other parameters is spelled out.
    pub fn name(&self) -> String {
        if let Some((n, _)) = NAMES.iter().find(|(_, m)| m == self) {
            return n.to_string();
        }
        match self {
            Model::TensorCore(t) => format!(
                "tensor-core(k_inst={}, n={}, out={}, promote={}, {}x{})",
                t.k_inst,
                t.n_bits,
                t.out_frac_bits,
                t.promote_every.map_or("none".to_string(), |p| p.to_string()),
                t.operands.0,
                t.operands.1
            ),
            _ => unreachable!("every other model is in NAMES"),
        }
    }
}

/// Per-K-block dequant scales of blockwise FP8: `sa` [M, ceil(K/kb)], `sb` [N, ceil(K/kb)], and `kb`.
pub type Scales<'a> = (ArrayView2<'a, f64>, ArrayView2<'a, f64>, usize);

/// `C[m, n] = Σ_k a[m, k]·b[n, k]` under `model`, as the f32 accumulator holds it (an f64 holding an f32).
/// Operands are f32-representable (bf16 or FP8 values for the tensor-core models).
pub fn gemm_nt(model: &Model, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) -> Array2<f64> {
    check_shapes(a, b, scales);
    match model {
        Model::Exact => exact_f32::gemm_nt(a, b, scales),
        Model::F32Sequential | Model::F32Fma => ieee::gemm_nt(*model == Model::F32Fma, a, b, scales),
        Model::TensorCore(t) => {
            let mut c = Array2::zeros((a.nrows(), b.nrows()));
            tensor_core::gemm_nt_into(t, a, b, scales, c.view_mut());
            c
        }
    }
}

/// [`gemm_nt`] written into `c` ([M, N]): the tensor-core model fills it directly (no M×N temporary);
/// the other models, off the emulator's hot paths, compute and copy.
pub fn gemm_nt_into(model: &Model, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>, mut c: ArrayViewMut2<f64>) {
    match model {
        Model::TensorCore(t) => {
            check_shapes(a, b, scales);
            tensor_core::gemm_nt_into(t, a, b, scales, c)
        }
        _ => c.assign(&gemm_nt(model, a, b, scales)),
    }
}

/// [`gemm_nt_into`] for a tensor-core model, and `mag[m, n]` = Σ over the instructions of entry (m, n)'s
/// chain of |their result| (C after each instruction), each K block's sum times its `sa·sb` when `scales`
/// are given: what the truncation bound of [`crate::emulate::stage`] is made of. Every |result| is exact
/// in f64; the sums and products are f64 operations in instruction order (within a relative
/// `(instructions + 2·blocks)·2^-53` of the real value), written as `B` rounded up. The values are
/// [`gemm_nt_into`]'s bit for bit.
pub fn gemm_nt_mag_into<B: BoundElem>(t: &TensorCore, a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>, c: ArrayViewMut2<f64>, mag: ArrayViewMut2<B>) {
    check_shapes(a, b, scales);
    tensor_core::gemm_nt_mag_into(t, a, b, scales, c, mag)
}

/// How a caller keeps an upper bound: f64, or f32 rounded up (sound, and half the memory).
pub trait BoundElem: Copy + Send + Sync {
    /// `x` (≥ 0 or NaN), rounded up to this type.
    fn from_bound(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl BoundElem for f64 {
    #[inline(always)]
    fn from_bound(x: f64) -> f64 {
        x
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}

impl BoundElem for f32 {
    #[inline(always)]
    fn from_bound(x: f64) -> f32 {
        crate::emulate::up32(x)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

fn check_shapes(a: ArrayView2<f64>, b: ArrayView2<f64>, scales: Option<Scales>) {
    assert_eq!(a.ncols(), b.ncols(), "contraction lengths differ");
    if let Some((sa, sb, kb)) = scales {
        assert!(kb > 0, "scale block length must be positive");
        let nb = a.ncols().div_ceil(kb);
        assert_eq!(sa.dim(), (a.nrows(), nb), "sa shape");
        assert_eq!(sb.dim(), (b.nrows(), nb), "sb shape");
    }
}

/// One dot product under `model`: the definition [`gemm_nt`] is tested against. `scales`: `(sa, sb, kb)`
/// with one scale per K block of each operand.
pub fn dot(model: &Model, a: &[f64], b: &[f64], scales: Option<(&[f64], &[f64], usize)>) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let k = a.len();
    let av = ArrayView2::from_shape((1, k), a).expect("row");
    let bv = ArrayView2::from_shape((1, k), b).expect("row");
    match scales {
        None => match model {
            Model::Exact => exact_f32::dot(a, b, None),
            Model::F32Sequential | Model::F32Fma => ieee::dot(*model == Model::F32Fma, a, b),
            Model::TensorCore(t) => slow::dot(t, a, b, None),
        },
        Some((sa, sb, kb)) => {
            let sa = ArrayView2::from_shape((1, sa.len()), sa).expect("row");
            let sb = ArrayView2::from_shape((1, sb.len()), sb).expect("row");
            match model {
                Model::TensorCore(t) => slow::dot(t, a, b, Some((sa.row(0).to_slice().unwrap(), sb.row(0).to_slice().unwrap(), kb))),
                _ => gemm_nt(model, av, bv, Some((sa, sb, kb)))[[0, 0]],
            }
        }
    }
}

/// Round to f32 (nearest even).
#[inline]
pub(crate) fn fl32(x: f64) -> f32 {
    x as f32
}

/// DeepGEMM's promotion of one K block's partial: `final = fma(fl32(sa*sb), partial, final)` in f32.
#[inline]
pub(crate) fn promote_scaled(fin: f32, sa: f64, sb: f64, partial: f32) -> f32 {
    let s = fl32(sa) * fl32(sb);
    s.mul_add(partial, fin)
}
