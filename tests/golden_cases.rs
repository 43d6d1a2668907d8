//! The committed golden cases (`golden/`): each reads as a valid case, its stored outputs are what the
//! oracle computes from its stored inputs, and each scenario has the property it was made for, checked on
//! the stored tensors themselves (zero gradients of empty experts, 128 rows on an all-zero channel, ...).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use moe_oracle::case::{self, ReadOptions};
use moe_oracle::golden::curated;
use moe_reference::{layer, Backward, Forward, LayerInputs, Options};
use ndarray::{s, ArrayD, Axis, IxDyn};
use safetensors::{Dtype, SafeTensors};

fn golden(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(file)
}

/// The stored float tensors of a file as f64 arrays, with their dtypes.
fn stored(bytes: &[u8]) -> BTreeMap<String, (Dtype, ArrayD<f64>)> {
    let st = SafeTensors::deserialize(bytes).unwrap();
    let mut out = BTreeMap::new();
    for (name, t) in st.tensors() {
        let b = t.data();
        let v: Vec<f64> = match t.dtype() {
            Dtype::F64 => b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            Dtype::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            Dtype::BF16 => {
                b.chunks_exact(2).map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64()).collect()
            }
            Dtype::I32 => b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            d => panic!("{name}: unexpected dtype {d:?}"),
        };
        out.insert(name.clone(), (t.dtype(), ArrayD::from_shape_vec(IxDyn(t.shape()), v).unwrap()));
    }
    out
}

struct Loaded {
    file: &'static str,
    inputs: LayerInputs,
    metadata: BTreeMap<String, String>,
    tensors: BTreeMap<String, (Dtype, ArrayD<f64>)>,
    fwd: Forward,
    bwd: Backward,
}

fn load(file: &'static str) -> Loaded {
    let bytes = std::fs::read(golden(file)).unwrap();
    let c = case::parse_case(&bytes, ReadOptions::default()).unwrap_or_else(|e| panic!("{file}: {e}"));
    let fwd = layer::forward(&c.inputs, Options::default());
    let bwd = layer::backward(&c.inputs, &fwd, c.inputs.dy.as_ref().unwrap().view(), Options::default());
    Loaded { file, inputs: c.inputs, metadata: c.metadata, tensors: stored(&bytes), fwd, bwd }
}

impl Loaded {
    fn t(&self, name: &str) -> &ArrayD<f64> {
        &self.tensors.get(name).unwrap_or_else(|| panic!("{}: no `{name}`", self.file)).1
    }
    fn rows_of(&self, e: usize) -> usize {
        self.fwd.rows.expert_rows(e).len()
    }
}

fn all_cases() -> Vec<Loaded> {
    curated::CASES.iter().map(|e| load(e.file)).collect()
}

#[test]
fn stored_outputs_are_the_oracle_on_the_stored_inputs() {
    for g in all_cases() {
        let f = g.file;
        // Metadata: format, generator, seed and the arguments that reproduce the file.
        assert_eq!(g.metadata["moe.format"], "1", "{f}");
        assert_eq!(g.metadata["moe.golden.generator"], moe_oracle::golden::GENERATOR, "{f}");
        assert!(g.metadata["moe.golden.args"].contains(&format!("--seed {}", g.metadata["moe.golden.seed"])));
        // Inputs in the recipe's storage dtype, outputs F64.
        let storage = if g.inputs.cfg.recipe == "fp32" { Dtype::F32 } else { Dtype::BF16 };
        for name in ["x", "w13", "w2", "dy"] {
            assert_eq!(g.tensors[name].0, storage, "{f}: {name}");
        }
        for name in ["y", "grad.x", "grad.w13", "grad.w2", "grad.topk_weights"] {
            assert_eq!(g.tensors[name].0, Dtype::F64, "{f}: {name}");
        }
        // Bitwise equal to a fresh oracle run on what the reader sees.
        let same = |name: &str, a: &ArrayD<f64>| {
            let b = g.t(name);
            assert_eq!(b.shape(), a.shape(), "{f}: {name}");
            for (x, y) in a.iter().zip(b.iter()) {
                assert_eq!(x.to_bits(), y.to_bits(), "{f}: {name} differs from the oracle");
            }
        };
        same("y", &g.fwd.y.clone().into_dyn());
        same("grad.x", &g.bwd.grad_x.clone().into_dyn());
        same("grad.w13", &g.bwd.grad_w13.clone().into_dyn());
        same("grad.w2", &g.bwd.grad_w2.clone().into_dyn());
        same("grad.topk_weights", &g.bwd.grad_topk_weights.clone().into_dyn());
        match &g.bwd.grad_router_weight {
            Some(r) => same("grad.router.weight", &r.clone().into_dyn()),
            None => assert!(!g.tensors.contains_key("grad.router.weight"), "{f}"),
        }
        if g.tensors.contains_key("fwd.h") {
            same("fwd.h", &g.fwd.h.clone().into_dyn());
            same("fwd.a", &g.fwd.a.clone().into_dyn());
            same("fwd.o", &g.fwd.o.clone().into_dyn());
            same("bwd.dh", &g.bwd.dh.clone().into_dyn());
            same("bwd.dx_rows", &g.bwd.dx_rows.clone().into_dyn());
        }
        // A self-routing case must not also carry topk_ids (a reader would take them as given routing).
        if g.inputs.cfg.routing.is_some() {
            assert!(!g.tensors.contains_key("topk_ids") && g.inputs.topk_ids.is_none(), "{f}");
            assert!(g.tensors.contains_key("router.weight"), "{f}");
        }
        for (name, (_, a)) in &g.tensors {
            if name.starts_with("bound.") {
                // A bound beyond the f32 range is stored as +inf (rounded up: still a bound, a vacuous one).
                assert!(a.iter().all(|v| *v >= 0.0), "{f}: {name} negative or NaN");
            } else if name.starts_with("emulated.") {
                // The recipe's kernel may overflow its f32 range on the large-magnitude case: ±inf, not NaN.
                assert!(a.iter().all(|v| !v.is_nan()), "{f}: {name} NaN");
            } else {
                assert!(a.iter().all(|v| v.is_finite()), "{f}: {name} not finite");
            }
        }
    }
}

#[test]
fn each_routing_recipe_and_activation_is_covered() {
    let cases = all_cases();
    let cfgs: Vec<_> = cases.iter().map(|g| &g.inputs.cfg).collect();
    for r in ["fp32", "bf16", "fp8-block", "fp8-block-te", "mxfp8", "fp8-bwd"] {
        assert!(cfgs.iter().any(|c| c.recipe == r), "recipe {r} not covered");
    }
    use moe_reference::config::{Activation, Score};
    let routed = |f: &dyn Fn(&moe_reference::Routing) -> bool| cfgs.iter().any(|c| c.routing.as_ref().is_some_and(f));
    assert!(routed(&|r| r.score == Score::Softmax && r.normalize_topk), "softmax renormalised");
    assert!(routed(&|r| r.score == Score::Softmax && !r.normalize_topk), "softmax not renormalised");
    assert!(routed(&|r| r.score == Score::Sigmoid && r.groups.is_some()), "sigmoid with groups");
    assert!(cases.iter().any(|g| g.inputs.router_bias.is_some()), "router bias");
    assert!(cfgs.iter().any(|c| c.routing.is_none()), "given top-k");
    assert!(cfgs.iter().any(|c| c.activation == Activation::Swiglu));
    assert!(cfgs.iter().any(|c| matches!(c.activation, Activation::SwigluClamped { .. })));
    assert!(cfgs.iter().any(|c| c.ep_ranks > 1), "ep_ranks > 1");
    assert!(cfgs.iter().any(|c| c.tokens == 1), "T = 1");
    assert!(cfgs.iter().any(|c| c.top_k == c.experts), "k = E");
    // Fewer than 64 rows on some busy expert, and empty experts in a realistic (unshaped) case.
    assert!(cases.iter().any(|g| (0..g.inputs.cfg.experts).any(|e| (1..64).contains(&g.rows_of(e)))));
}

#[test]
fn scenarios_have_their_properties_in_the_stored_tensors() {
    let zero3 = |a: &ArrayD<f64>, e: usize| a.index_axis(Axis(0), e).iter().all(|v| v.to_bits() == 0);

    // One expert with every token; with k = 1 every other expert is empty, and its gradients exactly +0.
    let g = load("qwen3-30b-a3b_one-expert.safetensors");
    let t = g.inputs.cfg.tokens;
    assert_eq!(g.rows_of(0), t);
    for e in 1..g.inputs.cfg.experts {
        assert!(zero3(g.t("grad.w13"), e) && zero3(g.t("grad.w2"), e), "expert {e}");
    }
    assert!(!zero3(g.t("grad.w13"), 0));

    // Empty experts: the upper half gets nothing, and their stored gradients are exactly +0.
    let g = load("olmoe-1b-7b_empty-experts.safetensors");
    let e = g.inputs.cfg.experts;
    for ex in e / 2..e {
        assert_eq!(g.rows_of(ex), 0, "expert {ex}");
        assert!(zero3(g.t("grad.w13"), ex) && zero3(g.t("grad.w2"), ex), "expert {ex}");
    }
    assert!((0..e / 2).all(|ex| g.rows_of(ex) > 0));

    // Exactly 128 tokens (the first 128) on expert 0, x channel 0 all zero, so grad.w13[0][:, 0] is zero.
    let g = load("mixtral-8x7b_zero-channel-128_fp8-block.safetensors");
    assert_eq!(g.rows_of(0), 128);
    assert!(g.t("x").slice(s![.., 0]).iter().all(|&v| v == 0.0));
    assert!(g.t("grad.w13").slice(s![0, .., 0]).iter().all(|&v| v == 0.0));
    assert!(g.t("grad.w13").slice(s![0, .., 1]).iter().any(|&v| v != 0.0));

    // -1 slots: about a third, all of token 0's; they contribute nothing and get zero weight gradient.
    let g = load("qwen3-30b-a3b_unused-slots.safetensors");
    let ids = g.t("topk_ids");
    let (t, k) = (ids.shape()[0], ids.shape()[1]);
    let unused = ids.iter().filter(|&&v| v == -1.0).count();
    assert!(unused * 5 > t * k && unused * 2 < t * k, "{unused} of {}", t * k);
    assert!(ids.slice(s![0, ..]).iter().all(|&v| v == -1.0));
    for ((tok, j), &id) in ids.clone().into_dimensionality::<ndarray::Ix2>().unwrap().indexed_iter() {
        if id == -1.0 {
            assert_ne!(g.t("topk_weights")[[tok, j]], 0.0, "unused slots keep a weight");
            assert_eq!(g.t("grad.topk_weights")[[tok, j]].to_bits(), 0, "token {tok} slot {j}");
        }
    }
    assert!(g.t("y").slice(s![0, ..]).iter().all(|v| v.to_bits() == 0));
    assert!(g.t("grad.x").slice(s![0, ..]).iter().all(|v| v.to_bits() == 0));

    // Ties: token 0 is all zero, so its logits all tie and softmax routing takes experts 0..k in order.
    let g = load("qwen3-30b-a3b_router-ties.safetensors");
    assert!(g.t("x").slice(s![0, ..]).iter().all(|&v| v == 0.0));
    let want: Vec<i32> = (0..g.inputs.cfg.top_k as i32).collect();
    assert_eq!(g.fwd.topk_ids.row(0).to_vec(), want);
    let rw = g.t("router.weight");
    assert_eq!(rw.slice(s![0, ..]), rw.slice(s![1, ..]), "router rows come in identical pairs");
    let g = load("deepseek-v3_router-ties.safetensors");
    let (rw, b) = (g.t("router.weight"), g.t("router.bias"));
    assert_eq!(rw.slice(s![2, ..]), rw.slice(s![3, ..]));
    assert_eq!(b[[2]], b[[3]]);

    // k = E: every token on every expert.
    let g = load("mixtral-8x7b_k-equals-e.safetensors");
    let c = &g.inputs.cfg;
    assert_eq!(c.top_k, c.experts);
    assert!((0..c.experts).all(|e| g.rows_of(e) == c.tokens));

    // T = 1.
    assert_eq!(load("qwen3-30b-a3b_t1.safetensors").t("x").shape()[0], 1);

    // Magnitudes.
    let amax = |a: &ArrayD<f64>| a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let g = load("qwen3-30b-a3b_large-magnitude.safetensors");
    assert!(amax(g.t("x")) > 2f64.powi(38) && amax(g.t("y")) > 2f64.powi(36));
    let g = load("qwen3-235b-a22b_tiny-magnitude_fp32.safetensors");
    assert!(amax(g.t("x")) < 2f64.powi(-34) && amax(g.t("x")) > 0.0);
    assert!(amax(g.t("grad.w13")) > 0.0, "tiny gradients must not flush to zero");

    // Expert parallelism: the stored results equal a single-rank run bit for bit.
    for file in ["deepseek-v3_ep4.safetensors", "qwen3-30b-a3b_ep2_given-routing.safetensors"] {
        let g = load(file);
        assert!(g.inputs.cfg.ep_ranks > 1);
        let mut one = g.inputs.clone();
        one.cfg.ep_ranks = 1;
        let f1 = layer::forward(&one, Options::default());
        let b1 = layer::backward(&one, &f1, one.dy.as_ref().unwrap().view(), Options::default());
        let bits = |a: &ArrayD<f64>| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(g.t("y")), bits(&f1.y.into_dyn()), "{file}");
        assert_eq!(bits(g.t("grad.w13")), bits(&b1.grad_w13.into_dyn()), "{file}");
        assert_eq!(bits(g.t("grad.x")), bits(&b1.grad_x.into_dyn()), "{file}");
    }
}

#[test]
fn realistic_routing_is_skewed() {
    // A qwen3-like router over 128 experts: some experts get no token, the busiest several times the mean.
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("g.safetensors");
    let args = curated::parse_args("--preset qwen3-30b-a3b --hidden 64 --intermediate 8", &out).unwrap();
    let g = moe_oracle::golden::generate(&args).unwrap();
    let counts: Vec<usize> = (0..128).map(|e| g.forward.rows.expert_rows(e).len()).collect();
    let empty = counts.iter().filter(|&&c| c == 0).count();
    let max = *counts.iter().max().unwrap();
    let mean = (64 * 8) as f64 / 128.0;
    assert!(empty >= 8, "only {empty} empty experts: {counts:?}");
    assert!(max as f64 >= 4.0 * mean, "busiest expert has {max} rows: {counts:?}");
}
