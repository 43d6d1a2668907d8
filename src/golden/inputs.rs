//! Deterministic, realistic layer inputs for golden cases, and the hand-shaped scenarios of the bug classes
//! in `anchors.md`.
//!
//! Realistic means: weights normal with standard deviation 1/sqrt(fan-in); activations normal around a
//! shared mean direction with a few outlier channels (x16), as LLM hidden states have; a router whose rows
//! lean on that shared direction by a per-expert "popularity", so some experts get many tokens and some
//! none. Every tensor has its own stream of a seeded xorshift64* generator, and normals are sums of
//! uniforms (additions and one constant multiply: no libm call), so the same seed gives the same bits on
//! every platform.

use clap::ValueEnum;
use moe_reference::config::MoeConfig;
use moe_reference::gemm::{self, Engine};
use moe_reference::{route, LayerInputs};
use ndarray::{Array1, Array2, Array3, Axis};

use crate::case::{to_bf16, to_f16, FloatDtype};
use crate::demo::XorShift;

/// A hand-shaped input for one bug class (`--scenario`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Realistic distributions only (skewed routing: with many experts some get no token).
    Realistic,
    /// Every token routes to expert 0 (it gets all T tokens; k = 1 makes it the only busy expert).
    OneExpert,
    /// Experts in the upper half of 0..E never get a token (needs top-k <= E/2).
    EmptyExperts,
    /// Channel 0 of x is all zero and expert 0 gets exactly 128 tokens, the first 128 (the FP8
    /// weight-gradient block with amax 0; needs tokens >= 128, top-k < experts, hidden >= 2).
    #[value(name = "zero-channel-128")]
    ZeroChannel128,
    /// Router rows come in identical pairs (2j, 2j+1) and token 0 is all zero, so its logits all tie;
    /// ties go to the lower expert index.
    RouterTies,
    /// About a third of the routing slots are -1 (token 0 has none used); implies --given-routing.
    UnusedSlots,
    /// x scaled by 2^40 (router by 2^-40, routing unchanged), dy by 2^20.
    LargeMagnitude,
    /// x scaled by 2^-40 (router by 2^40, routing unchanged), dy by 2^-30.
    TinyMagnitude,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Realistic => "realistic",
            Scenario::OneExpert => "one-expert",
            Scenario::EmptyExperts => "empty-experts",
            Scenario::ZeroChannel128 => "zero-channel-128",
            Scenario::RouterTies => "router-ties",
            Scenario::UnusedSlots => "unused-slots",
            Scenario::LargeMagnitude => "large-magnitude",
            Scenario::TinyMagnitude => "tiny-magnitude",
        }
    }

    /// Whether the scenario can be built for this config; a one-line reason when not.
    pub fn check_config(self, cfg: &MoeConfig) -> Result<(), String> {
        let (t, h, e, k) = (cfg.tokens, cfg.hidden, cfg.experts, cfg.top_k);
        let fail = |why: String| Err(format!("--scenario {}: {why}", self.name()));
        match self {
            Scenario::EmptyExperts if 2 * k > e => fail(format!("needs top-k <= experts/2 (top-k {k}, experts {e})")),
            Scenario::ZeroChannel128 if t < 128 => fail(format!("needs --tokens >= 128 (got {t})")),
            Scenario::ZeroChannel128 if k >= e => fail(format!("needs top-k < experts (top-k {k}, experts {e})")),
            Scenario::ZeroChannel128 if h < 2 => fail(format!("needs --hidden >= 2 (got {h})")),
            Scenario::RouterTies if e < 2 => fail(format!("needs at least 2 experts (got {e})")),
            _ => Ok(()),
        }
    }
}

/// The popularity that pins an expert in or out of every token's top-k (a logit offset of about ±40).
const PIN: f64 = 40.0;
/// Outlier channels of x are this many times larger than the others.
const OUTLIER: f64 = 16.0;

/// A generator for the tensor named `tag`, from the case's seed (FNV-1a of the tag, mixed into the seed).
fn stream(seed: u64, tag: &str) -> XorShift {
    let mut hsh: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.bytes() {
        hsh = (hsh ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    XorShift::new(seed.rotate_left(17) ^ hsh)
}

/// Approximately standard normal: Irwin-Hall sum of four uniforms on [-1, 1), scaled to variance 1.
fn normal(g: &mut XorShift) -> f64 {
    // Each uniform has variance 1/3; four have 4/3; times sqrt(3)/2 gives 1.
    const SCALE: f64 = 0.866_025_403_784_438_6;
    (g.uniform() + g.uniform() + g.uniform() + g.uniform()) * SCALE
}

/// `v` rounded to the storage dtype (nearest, ties to even), as f64.
pub fn round_to(dtype: FloatDtype, v: f64) -> f64 {
    match dtype {
        FloatDtype::F64 => v,
        FloatDtype::F32 => v as f32 as f64,
        FloatDtype::BF16 => to_bf16(v).to_f64(),
        FloatDtype::F16 => to_f16(v).to_f64(),
    }
}

/// What to draw: `cfg.routing` must be set (the preset's router); `given_routing` replaces the router by
/// the `topk_ids`/`topk_weights` it computes (and `cfg.routing` by null).
pub struct Draw<'a> {
    pub cfg: &'a MoeConfig,
    pub router_bias: bool,
    pub scenario: Scenario,
    pub given_routing: bool,
    pub seed: u64,
    pub storage: FloatDtype,
}

/// Draw the inputs of a golden case, every float already rounded to `storage` (so the oracle runs on
/// exactly the stored values). Fails when the scenario's property does not hold for this seed and shape.
pub fn draw(d: &Draw<'_>) -> Result<LayerInputs, String> {
    let cfg = d.cfg;
    let routing = cfg.routing.expect("presets always have a router");
    d.scenario.check_config(cfg)?;
    let (t, h, i, e, k) = (cfg.tokens, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
    let seed = d.seed;

    // Activations: a shared mean direction plus per-token noise, a few channels much larger.
    let mut g = stream(seed, "x.channels");
    let mut chan = vec![1.0; h];
    for _ in 0..(h / 256).max(1) {
        chan[(g.next_u64() % h as u64) as usize] = OUTLIER;
    }
    // The mean leaves the outlier channels out: the router's popularity term reads x through the mean, and
    // an outlier channel there would make it as noisy as the popularity itself.
    let mean: Vec<f64> = (0..h).map(|c| if chan[c] == 1.0 { normal(&mut g) } else { 0.0 }).collect();
    let mut g = stream(seed, "x");
    let mut x = Array2::from_shape_fn((t, h), |_| 0.0);
    for mut row in x.axis_iter_mut(Axis(0)) {
        for (c, v) in row.iter_mut().enumerate() {
            *v = normal(&mut g) * chan[c] + mean[c];
        }
    }
    let mut g = stream(seed, "w13");
    let w13 = Array3::from_shape_simple_fn((e, 2 * i, h), || normal(&mut g) / (h as f64).sqrt());
    let mut g = stream(seed, "w2");
    let w2 = Array3::from_shape_simple_fn((e, h, i), || normal(&mut g) / (i as f64).sqrt());
    let mut g = stream(seed, "dy");
    let mut dy = Array2::from_shape_simple_fn((t, h), || normal(&mut g));

    // Router: noise plus popularity along the mean direction, so logit_e(x) ~ popularity_e + noise.
    let mut g = stream(seed, "router.popularity");
    let mut pop: Vec<f64> = (0..e).map(|_| 1.5 * normal(&mut g)).collect();
    match d.scenario {
        Scenario::OneExpert => pop[0] = PIN,
        Scenario::EmptyExperts => pop[e.div_ceil(2)..].iter_mut().for_each(|p| *p = -PIN),
        Scenario::ZeroChannel128 => pop[0] = 0.0,
        _ => {}
    }
    let mm: f64 = mean.iter().map(|m| m * m).sum::<f64>().max(f64::MIN_POSITIVE);
    let mut g = stream(seed, "router.weight");
    let mut rw = Array2::from_shape_fn((e, h), |(ex, c)| normal(&mut g) / (h as f64).sqrt() + pop[ex] * mean[c] / mm);
    let mut g = stream(seed, "router.bias");
    let mut bias = d.router_bias.then(|| Array1::from_shape_simple_fn(e, || 0.1 * normal(&mut g)));
    if let Some(b) = bias.as_mut() {
        // Sigmoid scores saturate at 1, so a pinned logit alone cannot outrank another expert's score plus
        // its bias: pin the selection bias too (scores lie in (0, 1), the drawn biases near ±0.3 at most).
        match d.scenario {
            Scenario::OneExpert => b[0] = 2.0,
            Scenario::EmptyExperts => b.slice_mut(ndarray::s![e.div_ceil(2)..]).fill(-2.0),
            Scenario::ZeroChannel128 => b[0] = 0.5,
            _ => {}
        }
    }

    match d.scenario {
        Scenario::ZeroChannel128 => {
            // Channel 0 all zero; channel 1 steers: +4 for the first 128 tokens, -4 after, and only
            // expert 0 reads it (7.5 · ±4 = ±30 on its logit).
            for (tok, mut row) in x.axis_iter_mut(Axis(0)).enumerate() {
                row[0] = 0.0;
                row[1] = if tok < 128 { 4.0 } else { -4.0 };
            }
            rw.column_mut(1).fill(0.0);
            rw[[0, 1]] = 7.5;
        }
        Scenario::RouterTies => {
            for ex in (1..e).step_by(2) {
                let prev = rw.row(ex - 1).to_owned();
                rw.row_mut(ex).assign(&prev);
                if let Some(b) = bias.as_mut() {
                    b[ex] = b[ex - 1];
                }
            }
            if t > 0 {
                x.row_mut(0).fill(0.0);
            }
        }
        Scenario::LargeMagnitude => {
            x *= 2f64.powi(40);
            rw *= 2f64.powi(-40);
            dy *= 2f64.powi(20);
        }
        Scenario::TinyMagnitude => {
            x *= 2f64.powi(-40);
            rw *= 2f64.powi(40);
            dy *= 2f64.powi(-30);
        }
        _ => {}
    }

    let r = |a: &mut dyn Iterator<Item = &mut f64>| a.for_each(|v| *v = round_to(d.storage, *v));
    let (mut x, mut w13, mut w2, mut dy) = (x, w13, w2, dy);
    r(&mut x.iter_mut());
    r(&mut w13.iter_mut());
    r(&mut w2.iter_mut());
    r(&mut dy.iter_mut());
    r(&mut rw.iter_mut());
    if let Some(b) = bias.as_mut() {
        r(&mut b.iter_mut());
    }

    // Route here (exact logits, the oracle's router) to check the scenario and, for given routing, to
    // store the result.
    let logits = gemm::matmul_nt_with(Engine::Ozaki, x.view(), rw.view());
    let routed = route::forward(&routing, k, logits.view(), bias.as_ref().map(|b| b.view()));
    check_routing(d.scenario, &routed.topk_ids, e)?;

    let mut inputs = LayerInputs {
        cfg: cfg.clone(),
        x,
        w13,
        w2,
        topk_ids: None,
        topk_weights: None,
        router_weight: Some(rw),
        router_bias: bias,
        dy: Some(dy),
    };
    if d.given_routing || d.scenario == Scenario::UnusedSlots {
        let mut ids = routed.topk_ids;
        let w = routed.topk_weights.mapv(|v| round_to(d.storage, v));
        if d.scenario == Scenario::UnusedSlots {
            // A third of the slots unused, and all of token 0's. Their weights stay non-zero: a kernel
            // that reads the weight of an unused slot must still ignore it.
            let mut g = stream(seed, "unused-slots");
            for ((tok, _), id) in ids.indexed_iter_mut() {
                if tok == 0 || g.next_u64() % 3 == 0 {
                    *id = -1;
                }
            }
        }
        inputs.topk_ids = Some(ids);
        inputs.topk_weights = Some(w);
        inputs.router_weight = None;
        inputs.router_bias = None;
        inputs.cfg.routing = None;
    }
    Ok(inputs)
}

/// The scenario's routing property, checked on the router's choice (before any slot is blanked).
fn check_routing(scenario: Scenario, ids: &Array2<i32>, experts: usize) -> Result<(), String> {
    let fail = |why: String| {
        Err(format!("--scenario {}: not achieved for this seed and shape ({why}); try another --seed", scenario.name()))
    };
    match scenario {
        Scenario::OneExpert => {
            if let Some(tok) = ids.outer_iter().position(|row| !row.iter().any(|&id| id == 0)) {
                return fail(format!("token {tok} does not route to expert 0"));
            }
        }
        Scenario::EmptyExperts => {
            if let Some(&id) = ids.iter().find(|&&id| id as usize >= experts.div_ceil(2)) {
                return fail(format!("expert {id} got a token"));
            }
        }
        Scenario::ZeroChannel128 => {
            let on0: Vec<usize> =
                ids.outer_iter().enumerate().filter(|(_, row)| row.iter().any(|&id| id == 0)).map(|(t, _)| t).collect();
            if on0.len() != 128 || on0.last().is_some_and(|&t| t != 127) {
                return fail(format!("expert 0 got {} tokens, not the first 128", on0.len()));
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::{curated, generate};

    #[test]
    fn normal_has_mean_0_and_variance_1() {
        let mut g = stream(7, "t");
        let n = 200_000;
        let v: Vec<f64> = (0..n).map(|_| normal(&mut g)).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "variance {var}");
        // Tails exist (Irwin-Hall(4) reaches about 3.46 sigma).
        assert!(v.iter().any(|x| x.abs() > 3.0));
    }

    #[test]
    fn streams_differ_by_tag_and_seed() {
        let first = |seed, tag| stream(seed, tag).next_u64();
        assert_ne!(first(1, "x"), first(1, "w13"));
        assert_ne!(first(1, "x"), first(2, "x"));
        assert_eq!(first(1, "x"), first(1, "x"));
    }

    #[test]
    fn drawn_inputs_are_stored_values_and_reproducible() {
        let out = std::path::Path::new("unused.safetensors");
        let args =
            curated::parse_args("--preset deepseek-v3 --hidden 16 --intermediate 8 --experts 16 --tokens 8", out)
                .unwrap();
        let (a, b) = (generate(&args).unwrap(), generate(&args).unwrap());
        let bits = |g: &crate::golden::Golden| g.forward.y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        // Every input is a bf16 value (the oracle ran on exactly what the file stores).
        let i = &a.inputs;
        let all = i.x.iter().chain(i.w13.iter()).chain(i.w2.iter()).chain(i.dy.as_ref().unwrap().iter());
        let all = all.chain(i.router_weight.as_ref().unwrap().iter()).chain(i.router_bias.as_ref().unwrap().iter());
        for &v in all {
            assert_eq!(to_bf16(v).to_f64(), v);
        }
        let args = curated::parse_args(
            "--preset deepseek-v3 --hidden 16 --intermediate 8 --experts 16 --tokens 8 --seed 9",
            out,
        )
        .unwrap();
        assert_ne!(bits(&a), bits(&generate(&args).unwrap()));
    }
}
