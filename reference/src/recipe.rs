//! Low-precision recipes as data: for each of the layer's six GEMMs, how each operand is quantised (format,
//! block shape, scale rule) and how the products are accumulated; and in which precision every stored
//! intermediate and output is kept. The named recipes (`fp32`, `bf16`, `fp8-block`, `fp8-block-te`, `mxfp8`,
//! `fp8-bwd`) are values of this type, and a recipe can also be read from a JSON file of the same shape
//! (`moe-oracle recipes --show NAME` prints one to start from).
//!
//! ## Operand layout
//! Every GEMM is written "NT": `C[m, n] = Σ_k A[m, k]·B[n, k]`, both operands with the contraction along
//! their last dimension. Block shapes are given in that layout, so an activation's `"1x128"` always means
//! 128 consecutive elements along the contraction. For the weight gradients the contraction runs over the
//! expert's tokens: `grad.w2[e] = doᵀ·a` has `A = doᵀ` (`[H, M_e]`) and `B = aᵀ` (`[I, M_e]`), so their
//! `"1x128"` is the "128x1 along tokens" of DeepSeek-V3's and TransformerEngine's wgrad, re-quantised from
//! the high-precision copy. Weight operands of the dgrad GEMMs are the transposed weights (`w2[e]ᵀ`,
//! `w13[e]ᵀ`); a `"128x128"` tile grid is symmetric under transposition, so this is the same quantisation
//! as the forward's, as DeepGEMM reuses it.
//!
//! | GEMM | `A` | `B` | K |
//! |---|---|---|---|
//! | `gemm1` | `x_rows` [M_e, H] | `w13[e]` [2I, H] | H |
//! | `gemm2` | `a` [M_e, I] | `w2[e]` [H, I] | I |
//! | `dgrad2` | `do` [M_e, H] | `w2[e]ᵀ` [I, H] | H |
//! | `wgrad2` | `doᵀ` [H, M_e] | `aᵀ` [I, M_e] | M_e |
//! | `dgrad1` | `dh` [M_e, 2I] | `w13[e]ᵀ` [H, 2I] | 2I |
//! | `wgrad1` | `dhᵀ` [2I, M_e] | `x_rowsᵀ` [H, M_e] | M_e |

use serde::{Deserialize, Serialize};

/// A storage precision for a tensor held in memory between stages (or an output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    F64,
    F32,
    Bf16,
    F16,
}

impl Storage {
    /// Unit roundoff (half an ulp, relative) of round-to-nearest into this precision.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Storage::F64 => 2f64.powi(-53),
            Storage::F32 => 2f64.powi(-24),
            Storage::Bf16 => 2f64.powi(-8),
            Storage::F16 => 2f64.powi(-11),
        }
    }

    /// Half the smallest subnormal: the absolute error rounding may add in the underflow range.
    pub fn underflow(self) -> f64 {
        match self {
            Storage::F64 => 2f64.powi(-1075),
            Storage::F32 => 2f64.powi(-150),
            Storage::Bf16 => 2f64.powi(-134),
            Storage::F16 => 2f64.powi(-25),
        }
    }

    /// `x` rounded to nearest-even into this precision (non-saturating: overflow gives ±inf).
    #[inline]
    pub fn round(self, x: f64) -> f64 {
        use crate::formats::{quantize, Format, Overflow};
        match self {
            Storage::F64 => x,
            Storage::F32 => x as f32 as f64,
            Storage::Bf16 => bf16_of_f32(x).unwrap_or_else(|| quantize(Format::Bf16, x, Overflow::NonSaturating)),
            Storage::F16 => quantize(Format::F16, x, Overflow::NonSaturating),
        }
    }

    /// [`Self::round`] of every element, in place (the precision chosen once, not per element).
    pub fn round_all(self, xs: &mut [f64]) {
        match self {
            Storage::F64 => {}
            Storage::F32 => xs.iter_mut().for_each(|x| *x = *x as f32 as f64),
            Storage::Bf16 => xs.iter_mut().for_each(|x| *x = Storage::Bf16.round(*x)),
            Storage::F16 => xs.iter_mut().for_each(|x| *x = Storage::F16.round(*x)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Storage::F64 => "f64",
            Storage::F32 => "f32",
            Storage::Bf16 => "bf16",
            Storage::F16 => "f16",
        }
    }
}

/// How one GEMM operand is quantised before the tensor cores read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperandQuant {
    /// Element format: `e4m3`, `e5m2`, `e2m1`.
    pub format: String,
    /// Block shape in the NT operand layout: `1x128`, `128x128`, `1x32`, ...
    pub block: String,
    /// Scale rule: `deepgemm`, `deepgemm-pow2`, `deepgemm-div`, `deepgemm-max-over-amax`, `te`, `te-pow2`,
    /// `mx-floor`, `mx-rceil`, `mx-ceil`, `mx-even`.
    pub scale: String,
}

impl OperandQuant {
    fn new(format: &str, block: &str, scale: &str) -> Self {
        OperandQuant { format: format.into(), block: block.into(), scale: scale.into() }
    }
}

/// One GEMM of the layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GemmRecipe {
    /// `None`: the operand is read as stored (bf16 or f32).
    pub a: Option<OperandQuant>,
    pub b: Option<OperandQuant>,
    /// Accumulation model name (see `accum::Model::parse`): `exact`, `f32`, `f32-fma`, `hopper`, `hopper-fp8`,
    /// `hopper-fp8-fast`, `blackwell`.
    pub accumulate: String,
}

/// Where the combine weight is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CombineWeight {
    /// `y = Σ_j w_j·o_j` after GEMM2 (the format's `fwd.o` is the unweighted expert output). Default.
    AfterGemm2,
}

/// Storage precision of every tensor the layer reads or keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageTable {
    /// What the kernel reads `x`, `w13`, `w2`, `dy` as (a case's inputs are rounded to it first).
    pub inputs: Storage,
    /// Combine weights (`topk_weights`).
    pub weights: Storage,
    pub h: Storage,
    pub a: Storage,
    pub o: Storage,
    pub y: Storage,
    pub do_: Storage,
    pub da: Storage,
    pub dh: Storage,
    pub dx_rows: Storage,
    pub grad_x: Storage,
    /// `grad.w13`, `grad.w2`, `grad.router.weight`.
    pub grad_w: Storage,
    pub grad_topk_weights: Storage,
}

/// Nearest-even bf16 of a finite `x` that is an f32 (every accumulator the emulator stores is), on the
/// f32's bits: the carry out of the dropped half runs into the exponent, and past the largest finite to
/// infinity, as the general cast does (a test compares them). `None` for any other `x`. The general
/// cast is a tenth of the emulator's time when every weight-gradient entry goes through it.
#[inline]
fn bf16_of_f32(x: f64) -> Option<f64> {
    let f = x as f32;
    if !f.is_finite() || f64::from(f) != x {
        return None;
    }
    let b = f.to_bits();
    Some(f64::from(f32::from_bits((b + 0x7fff + ((b >> 16) & 1)) & 0xffff_0000)))
}

impl StorageTable {
    fn uniform(inputs: Storage, inter: Storage) -> Self {
        StorageTable {
            inputs,
            weights: Storage::F32,
            h: inter,
            a: inter,
            o: inter,
            y: inter,
            do_: inter,
            da: inter,
            dh: inter,
            dx_rows: inter,
            grad_x: inter,
            grad_w: Storage::F32,
            grad_topk_weights: Storage::F32,
        }
    }
}

/// A low-precision recipe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipe {
    pub name: String,
    pub storage: StorageTable,
    pub gemm1: GemmRecipe,
    pub gemm2: GemmRecipe,
    pub dgrad2: GemmRecipe,
    pub wgrad2: GemmRecipe,
    pub dgrad1: GemmRecipe,
    pub wgrad1: GemmRecipe,
    /// Model of the short f32 reductions outside the GEMMs: the combine over slots, the un-dispatch sum,
    /// the row dots of `grad.topk_weights`.
    pub vector_accumulate: String,
    pub combine_weight: CombineWeight,
}

/// The names `Recipe::named` knows, in the order `--help` lists them.
pub const NAMED: [&str; 6] = ["fp32", "bf16", "fp8-block", "fp8-block-te", "mxfp8", "fp8-bwd"];

fn plain(acc: &str) -> GemmRecipe {
    GemmRecipe { a: None, b: None, accumulate: acc.into() }
}

/// FP8 GEMMs with activations in 1xN groups and weights in NxN tiles (N = 128), for one scale rule.
fn fp8_fwd(rule: &str) -> [GemmRecipe; 2] {
    let act = OperandQuant::new("e4m3", "1x128", rule);
    let wt = OperandQuant::new("e4m3", "128x128", rule);
    let g = GemmRecipe { a: Some(act), b: Some(wt), accumulate: "hopper-fp8".into() };
    [g.clone(), g]
}

/// The four backward GEMMs of blockwise FP8: dgrad with 1x128 gradients and 128x128 weight tiles, wgrad
/// with both operands re-quantised 1x128 along tokens.
fn fp8_bwd(rule: &str) -> [GemmRecipe; 4] {
    let act = OperandQuant::new("e4m3", "1x128", rule);
    let wt = OperandQuant::new("e4m3", "128x128", rule);
    let dgrad = GemmRecipe { a: Some(act.clone()), b: Some(wt), accumulate: "hopper-fp8".into() };
    let wgrad = GemmRecipe { a: Some(act.clone()), b: Some(act), accumulate: "hopper-fp8".into() };
    [dgrad.clone(), wgrad.clone(), dgrad, wgrad]
}

impl Recipe {
    /// A named recipe, or `None`.
    pub fn named(name: &str) -> Option<Recipe> {
        let bf16_table = StorageTable::uniform(Storage::Bf16, Storage::Bf16);
        let (storage, fwd, bwd, vector) = match name {
            // Plain f32 kernels on CUDA cores: f32 storage, sequential FMA accumulation.
            "fp32" => {
                let g = plain("f32-fma");
                (StorageTable::uniform(Storage::F32, Storage::F32), [g.clone(), g.clone()], [g.clone(), g.clone(), g.clone(), g], "f32-fma")
            }
            // bf16 storage, bf16 wgmma with f32 accumulation chained through the whole K.
            "bf16" => {
                let g = plain("hopper");
                (bf16_table, [g.clone(), g.clone()], [g.clone(), g.clone(), g.clone(), g], "f32-fma")
            }
            // DeepSeek-V3 / DeepGEMM: E4M3 everywhere, f32 scales amax/448, promotion every 128.
            "fp8-block" => (bf16_table, fp8_fwd("deepgemm"), fp8_bwd("deepgemm"), "f32-fma"),
            // TransformerEngine Float8BlockScaling: multiplier 448/amax rounded down to a power of two.
            "fp8-block-te" => (bf16_table, fp8_fwd("te-pow2"), fp8_bwd("te-pow2"), "f32-fma"),
            // OCP MX: E4M3 in 1x32 blocks along K for every operand, UE8M0 scales (FLOOR, the spec's rule),
            // Blackwell block-scaled MMA accumulation.
            "mxfp8" => {
                let q = OperandQuant::new("e4m3", "1x32", "mx-floor");
                let g = GemmRecipe { a: Some(q.clone()), b: Some(q), accumulate: "blackwell".into() };
                (bf16_table, [g.clone(), g.clone()], [g.clone(), g.clone(), g.clone(), g], "f32-fma")
            }
            // bf16 forward, blockwise FP8 (DeepGEMM rules) backward.
            "fp8-bwd" => {
                let g = plain("hopper");
                (bf16_table, [g.clone(), g], fp8_bwd("deepgemm"), "f32-fma")
            }
            _ => return None,
        };
        let [gemm1, gemm2] = fwd;
        let [dgrad2, wgrad2, dgrad1, wgrad1] = bwd;
        Some(Recipe {
            name: name.into(),
            storage,
            gemm1,
            gemm2,
            dgrad2,
            wgrad2,
            dgrad1,
            wgrad1,
            vector_accumulate: vector.into(),
            combine_weight: CombineWeight::AfterGemm2,
        })
    }

    /// The six GEMMs with their names, in pipeline order.
    pub fn gemms(&self) -> [(&'static str, &GemmRecipe); 6] {
        [
            ("gemm1", &self.gemm1),
            ("gemm2", &self.gemm2),
            ("dgrad2", &self.dgrad2),
            ("wgrad2", &self.wgrad2),
            ("dgrad1", &self.dgrad1),
            ("wgrad1", &self.wgrad1),
        ]
    }

    /// The same recipe with every GEMM's accumulation model replaced (`--accumulate`).
    pub fn with_accumulate(mut self, model: &str) -> Recipe {
        for g in [&mut self.gemm1, &mut self.gemm2, &mut self.dgrad2, &mut self.wgrad2, &mut self.dgrad1, &mut self.wgrad1] {
            g.accumulate = model.into();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_recipe_exists_and_round_trips_through_json() {
        for n in NAMED {
            let r = Recipe::named(n).unwrap();
            assert_eq!(r.name, n);
            let j = serde_json::to_string(&r).unwrap();
            let back: Recipe = serde_json::from_str(&j).unwrap();
            assert_eq!(back, r);
        }
        assert!(Recipe::named("fp7").is_none());
    }

    #[test]
    fn bf16_rounding_of_f32_values_is_the_general_cast() {
        use crate::formats::{quantize, Format, Overflow};
        let mut g = crate::test_rng::XorShift(0x9E3779B97F4A7C15);
        let mut bits = || g.next_u64() as u32;
        let edges = [0u32, 0x8000_0000, 1, 0x8000, 0x8001, 0x7fff, 0x1_8000, 0x7f7f_ffff, 0xff7f_ffff, 0x7f7f_8000, 0x7f7f_7fff, 0x007f_ffff, 0x0080_0000];
        let all = edges.iter().copied().chain((0..1_000_000).map(|_| bits()));
        for b in all {
            let v = f64::from(f32::from_bits(b));
            let general = quantize(Format::Bf16, v, Overflow::NonSaturating);
            let fast = Storage::Bf16.round(v);
            assert!(general.to_bits() == fast.to_bits() || (general.is_nan() && fast.is_nan()), "{b:#x}: {general} vs {fast}");
        }
        // Values that are no f32 take the general cast.
        for v in [1.0 + 2f64.powi(-30), 3.0e38 * 1.5, f64::MIN_POSITIVE, -1e-300] {
            assert_eq!(Storage::Bf16.round(v).to_bits(), quantize(Format::Bf16, v, Overflow::NonSaturating).to_bits());
        }
    }

    #[test]
    fn fp8_bwd_has_a_bf16_forward_and_an_fp8_backward() {
        let r = Recipe::named("fp8-bwd").unwrap();
        assert!(r.gemm1.a.is_none() && r.gemm2.b.is_none());
        assert_eq!(r.dgrad1.a.as_ref().unwrap().format, "e4m3");
        assert_eq!(r.wgrad1.b.as_ref().unwrap().block, "1x128");
    }
}
