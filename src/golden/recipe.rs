//! Training recipes a golden case can be made for, and the dtype its high-precision inputs are stored in.
//!
//! The recipe is recorded in `moe.config` for the checker (which derives its bounds from it). The golden
//! file's expected outputs are always the exact oracle on the stored inputs; quantisation is the kernel's.

use clap::ValueEnum;

use crate::case::FloatDtype;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Recipe {
    /// fp32 storage and compute.
    #[value(name = "fp32")]
    Fp32,
    /// bf16 storage, fp32 accumulation.
    #[value(name = "bf16")]
    Bf16,
    /// FP8 (E4M3) GEMM operands with 1x128 / 128x128 block scales (DeepSeek-V3 style).
    #[value(name = "fp8-block")]
    Fp8Block,
    /// FP8 block scaling as Transformer Engine does it.
    #[value(name = "fp8-block-te")]
    Fp8BlockTe,
    /// MXFP8: E4M3 with power-of-two (UE8M0) scales per 32 elements.
    #[value(name = "mxfp8")]
    Mxfp8,
    /// bf16 forward, FP8 backward GEMMs.
    #[value(name = "fp8-bwd")]
    Fp8Bwd,
}

impl Recipe {
    /// The name recorded in `moe.config`.
    pub fn name(self) -> &'static str {
        match self {
            Recipe::Fp32 => "fp32",
            Recipe::Bf16 => "bf16",
            Recipe::Fp8Block => "fp8-block",
            Recipe::Fp8BlockTe => "fp8-block-te",
            Recipe::Mxfp8 => "mxfp8",
            Recipe::Fp8Bwd => "fp8-bwd",
        }
    }

    /// Storage dtype of the inputs: F32 for fp32, BF16 for everything else (the FP8/MX recipes quantise
    /// from bf16 master copies inside the kernel).
    pub fn storage(self) -> FloatDtype {
        match self {
            Recipe::Fp32 => FloatDtype::F32,
            _ => FloatDtype::BF16,
        }
    }
}
