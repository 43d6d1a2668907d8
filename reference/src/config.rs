//! The layer's configuration, as carried in a case file's `moe.config` (see `golden-format.md`).

use serde::{Deserialize, Serialize};

/// SwiGLU variant.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Activation {
    /// `silu(g) * u`.
    #[serde(rename = "swiglu")]
    Swiglu,
    /// gpt-oss: `g = min(g, limit)`, `u = clamp(u, -limit, limit)`, `g * sigmoid(alpha * g) * (u + 1)`.
    #[serde(rename = "swiglu_clamped")]
    SwigluClamped { alpha: f64, limit: f64 },
}

/// Score function of the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Score {
    Softmax,
    Sigmoid,
}

/// Group-limited selection (DeepSeek-V3): score each group by the sum of its top-2, keep `topk_group`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Groups {
    pub n_group: usize,
    pub topk_group: usize,
}

/// In-layer routing (when the case gives `router.weight` instead of `topk_ids`/`topk_weights`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Routing {
    pub score: Score,
    pub normalize_topk: bool,
    pub scaling: f64,
    pub groups: Option<Groups>,
}

impl Routing {
    /// Softmax scores, the top k renormalised to sum to 1, no scaling, no groups (Mixtral, Qwen3, OLMoE).
    pub fn softmax() -> Routing {
        Routing { score: Score::Softmax, normalize_topk: true, scaling: 1.0, groups: None }
    }
}

/// Shapes and semantics of one MoE layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MoeConfig {
    pub tokens: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub experts: usize,
    pub top_k: usize,
    pub activation: Activation,
    pub routing: Option<Routing>,
    #[serde(default = "default_recipe")]
    pub recipe: String,
    #[serde(default = "one")]
    pub ep_ranks: usize,
}

fn default_recipe() -> String {
    "fp32".to_string()
}
fn one() -> usize {
    1
}

/// A configuration that cannot describe a layer.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("moe.config: {0} must be at least 1")]
    Zero(&'static str),
    #[error("moe.config: top_k {k} exceeds experts {e}")]
    TopKTooLarge { k: usize, e: usize },
    #[error("moe.config: experts {e} do not split evenly over ep_ranks {r}")]
    Ranks { e: usize, r: usize },
    #[error("moe.config: {0}")]
    Groups(String),
    #[error("moe.config: {0}")]
    Value(String),
}

impl MoeConfig {
    /// A plain SwiGLU layer of these shapes with the routing given (no router), the fp32 recipe and one
    /// rank, as a case file's defaults are; change the rest with struct-update syntax
    /// (`MoeConfig { recipe: "bf16".into(), ..MoeConfig::swiglu(16, 64, 32, 8, 2) }`).
    pub fn swiglu(tokens: usize, hidden: usize, intermediate: usize, experts: usize, top_k: usize) -> MoeConfig {
        MoeConfig {
            tokens,
            hidden,
            intermediate,
            experts,
            top_k,
            activation: Activation::Swiglu,
            routing: None,
            recipe: default_recipe(),
            ep_ranks: 1,
        }
    }

    /// Check the relations between fields (tokens may be zero: an empty batch is valid).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("hidden", self.hidden),
            ("intermediate", self.intermediate),
            ("experts", self.experts),
            ("top_k", self.top_k),
            ("ep_ranks", self.ep_ranks),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.top_k > self.experts {
            return Err(ConfigError::TopKTooLarge { k: self.top_k, e: self.experts });
        }
        if self.experts % self.ep_ranks != 0 {
            return Err(ConfigError::Ranks { e: self.experts, r: self.ep_ranks });
        }
        if let Activation::SwigluClamped { alpha, limit } = self.activation {
            if !alpha.is_finite() || !limit.is_finite() || limit < 0.0 {
                return Err(ConfigError::Value(format!(
                    "activation swiglu_clamped needs finite alpha and limit >= 0 (got alpha {alpha}, limit {limit})"
                )));
            }
        }
        if let Some(r) = &self.routing {
            if !r.scaling.is_finite() {
                return Err(ConfigError::Value(format!("routing.scaling must be finite (got {})", r.scaling)));
            }
            if let Some(g) = r.groups {
                if g.n_group == 0 || self.experts % g.n_group != 0 {
                    return Err(ConfigError::Groups(format!(
                        "routing.groups.n_group {} must divide experts {}",
                        g.n_group, self.experts
                    )));
                }
                if g.topk_group == 0 || g.topk_group > g.n_group {
                    return Err(ConfigError::Groups(format!(
                        "routing.groups.topk_group {} must be in 1..={}",
                        g.topk_group, g.n_group
                    )));
                }
                let per_group = self.experts / g.n_group;
                if g.topk_group * per_group < self.top_k {
                    return Err(ConfigError::Groups(format!(
                        "routing.groups keep {} experts, fewer than top_k {}",
                        g.topk_group * per_group,
                        self.top_k
                    )));
                }
            }
        }
        Ok(())
    }

    /// Experts owned by each expert-parallel rank (they split evenly, in order).
    pub fn experts_per_rank(&self) -> usize {
        self.experts / self.ep_ranks
    }
}
