//! The built-in demo case: a small softmax-routed layer with bf16-valued inputs from a seeded generator,
//! so `moe-oracle demo` works without any file.

use moe_reference::config::{MoeConfig, Routing};
use moe_reference::LayerInputs;
use ndarray::{Array1, Array2, Array3};

use crate::case::to_bf16;

/// xorshift64* (Vigna): a tiny deterministic generator, enough for test data.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from any seed (0 is remapped, the state must be non-zero).
    pub fn new(seed: u64) -> XorShift {
        // Scramble the seed so nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        XorShift(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64) * f64::powi(2.0, -52) - 1.0
    }

    /// `scale * uniform()`, rounded to the nearest bf16 value.
    pub fn bf16_value(&mut self, scale: f64) -> f64 {
        to_bf16(scale * self.uniform()).to_f64()
    }
}

/// The demo's configuration: T=16, H=64, I=32, E=8, k=2, softmax routing with normalised top-k, SwiGLU.
pub fn demo_config() -> MoeConfig {
    MoeConfig { routing: Some(Routing::softmax()), recipe: "bf16".into(), ..MoeConfig::swiglu(16, 64, 32, 8, 2) }
}

/// Inputs for `cfg` (which must route itself, or `topk` is drawn as well): bf16-valued `x`, `w13`, `w2`,
/// `router.weight`, `dy`, deterministic in `seed`.
pub fn random_inputs(cfg: &MoeConfig, seed: u64) -> LayerInputs {
    let mut g = XorShift::new(seed);
    let (t, h, i, e, k) = (cfg.tokens, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
    let x = Array2::from_shape_simple_fn((t, h), || g.bf16_value(1.0));
    let w13 = Array3::from_shape_simple_fn((e, 2 * i, h), || g.bf16_value(1.0 / (h as f64).sqrt()));
    let w2 = Array3::from_shape_simple_fn((e, h, i), || g.bf16_value(1.0 / (i as f64).sqrt()));
    let dy = Array2::from_shape_simple_fn((t, h), || g.bf16_value(1.0));
    let (topk_ids, topk_weights, router_weight, router_bias) = if cfg.routing.is_some() {
        let rw = Array2::from_shape_simple_fn((e, h), || g.bf16_value(1.0 / (h as f64).sqrt()));
        (None, None, Some(rw), None::<Array1<f64>>)
    } else {
        // Distinct experts per token: a random rotation of 0..E, first k.
        let mut ids = Array2::from_elem((t, k), -1i32);
        for tok in 0..t {
            let start = (g.next_u64() % e as u64) as usize;
            for j in 0..k {
                ids[[tok, j]] = ((start + j) % e) as i32;
            }
        }
        let w = Array2::from_shape_simple_fn((t, k), || to_bf16(0.5 * (g.uniform() + 1.0)).to_f64());
        (Some(ids), Some(w), None, None)
    };
    LayerInputs { cfg: cfg.clone(), x, w13, w2, topk_ids, topk_weights, router_weight, router_bias, dy: Some(dy) }
}

/// The demo case.
pub fn demo_inputs(seed: u64) -> LayerInputs {
    random_inputs(&demo_config(), seed)
}
