//! Model presets (`shared/docs/anchors.md`): shapes, routing and activation of one MoE layer of each model.

use clap::ValueEnum;
use moe_reference::config::{Activation, Groups, Routing, Score};

/// A model whose MoE layer `golden` imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    #[value(name = "qwen3-30b-a3b")]
    Qwen3_30bA3b,
    #[value(name = "qwen3-235b-a22b")]
    Qwen3_235bA22b,
    #[value(name = "deepseek-v3")]
    DeepseekV3,
    #[value(name = "mixtral-8x7b")]
    Mixtral8x7b,
    #[value(name = "olmoe-1b-7b")]
    Olmoe1b7b,
    #[value(name = "gpt-oss-120b")]
    GptOss120b,
}

/// Shapes and semantics of a preset's layer (tokens are not part of a model).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PresetLayer {
    pub hidden: usize,
    pub intermediate: usize,
    pub experts: usize,
    pub top_k: usize,
    pub activation: Activation,
    pub routing: Routing,
    /// The router has a selection-only bias (`router.bias`, DeepSeek-V3).
    pub router_bias: bool,
}

fn softmax(normalize_topk: bool) -> Routing {
    Routing { score: Score::Softmax, normalize_topk, scaling: 1.0, groups: None }
}

impl Preset {
    /// The preset's name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Qwen3_30bA3b => "qwen3-30b-a3b",
            Preset::Qwen3_235bA22b => "qwen3-235b-a22b",
            Preset::DeepseekV3 => "deepseek-v3",
            Preset::Mixtral8x7b => "mixtral-8x7b",
            Preset::Olmoe1b7b => "olmoe-1b-7b",
            Preset::GptOss120b => "gpt-oss-120b",
        }
    }

    /// The layer of the table in `anchors.md`. Mixtral's and gpt-oss's "softmax over the top-k logits" is
    /// the softmax over all experts renormalised over the chosen k (the same numbers), so it is written so.
    /// DeepSeek-V3's shared expert is left out: it is a dense MLP every token passes through, not routed.
    pub fn layer(self) -> PresetLayer {
        let (hidden, intermediate, experts, top_k) = match self {
            Preset::Qwen3_30bA3b => (2048, 768, 128, 8),
            Preset::Qwen3_235bA22b => (4096, 1536, 128, 8),
            Preset::DeepseekV3 => (7168, 2048, 256, 8),
            Preset::Mixtral8x7b => (4096, 14336, 8, 2),
            Preset::Olmoe1b7b => (2048, 1024, 64, 8),
            Preset::GptOss120b => (2880, 2880, 128, 4),
        };
        let (routing, activation, router_bias) = match self {
            Preset::Qwen3_30bA3b | Preset::Qwen3_235bA22b | Preset::Mixtral8x7b => {
                (softmax(true), Activation::Swiglu, false)
            }
            Preset::Olmoe1b7b => (softmax(false), Activation::Swiglu, false),
            Preset::GptOss120b => (softmax(true), Activation::SwigluClamped { alpha: 1.702, limit: 7.0 }, false),
            Preset::DeepseekV3 => (
                Routing {
                    score: Score::Sigmoid,
                    normalize_topk: true,
                    scaling: 2.5,
                    groups: Some(Groups { n_group: 8, topk_group: 4 }),
                },
                Activation::Swiglu,
                true,
            ),
        };
        PresetLayer { hidden, intermediate, experts, top_k, activation, routing, router_bias }
    }
}
