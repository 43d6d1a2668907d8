//! Edge cases of the exact MoE layer: idle experts, crowded experts, k = E, one token, no tokens,
//! tokens with no used slot, every routing mode (softmax normalised or not, DeepSeek-style sigmoid with
//! bias and groups, scaling), ties in the router, and clamped SwiGLU at and beyond its limits.

mod common;

use common::*;
use moe_reference::config::{Groups, Score};
use moe_reference::layer::{self, Options};
use moe_reference::{Activation, MoeConfig, Routing};
use ndarray::{array, Array1, Array2, Array3, Axis};

fn is_pos_zero(v: f64) -> bool {
    v.to_bits() == 0
}

#[track_caller]
fn assert_checked(r: Naive) {
    assert!(
        matches!(r, Naive::Checked),
        "case unexpectedly near a tie or clamp kink"
    );
}

/// Within `n` ulps (of the larger magnitude).
#[track_caller]
fn close_ulps(name: &str, a: f64, b: f64, n: f64) {
    let tol = n * f64::EPSILON * a.abs().max(b.abs());
    assert!(
        (a - b).abs() <= tol,
        "{name}: {a:e} vs {b:e} (more than {n} ulps apart)"
    );
}

fn routing(score: Score, normalize: bool, scaling: f64, groups: Option<Groups>) -> Option<Routing> {
    Some(Routing {
        score,
        normalize_topk: normalize,
        scaling,
        groups,
    })
}

// ---------------------------------------------------------------------------------------------------
// Experts with no tokens, experts with all of them
// ---------------------------------------------------------------------------------------------------

/// Experts that receive no row get grad.w13/grad.w2 exactly +0, and only those: every expert with a
/// row has a nonzero weight gradient.
#[test]
fn idle_experts_have_exactly_zero_weight_grads() {
    for seed in 0..6u64 {
        let mut g = Gen::new(seed);
        let (t, e, k) = (7, 8, 2);
        // Tokens only ever use experts 1, 4 and 6 (and some -1 slots).
        let pool = [1, 4, 6];
        let mut ids = Array2::from_elem((t, k), -1i32);
        for tok in 0..t {
            let p = g.perm(3);
            for j in 0..k {
                if g.below(4) != 0 {
                    ids[[tok, j]] = pool[p[j]];
                }
            }
        }
        ids[[0, 0]] = 1;
        ids[[1, 0]] = 4;
        ids[[2, 0]] = 6;
        let mut cfg = MoeConfig::swiglu(t, 6, 3, e, k);
        cfg.ep_ranks = [1, 2, 4, 8][seed as usize % 4];
        let inp = given_case(cfg, ids.clone(), seed);
        let (fwd, bwd) = run_default(&inp);
        for ex in 0..e {
            let used = ids.iter().any(|&i| i == ex as i32);
            let w13 = bwd.grad_w13.index_axis(Axis(0), ex);
            let w2 = bwd.grad_w2.index_axis(Axis(0), ex);
            assert_eq!(fwd.rows.expert_rows(ex).is_empty(), !used);
            if used {
                assert!(
                    w13.iter().any(|&v| v != 0.0),
                    "expert {ex} has rows but grad.w13 is zero"
                );
                assert!(
                    w2.iter().any(|&v| v != 0.0),
                    "expert {ex} has rows but grad.w2 is zero"
                );
            } else {
                assert!(
                    w13.iter().all(|&v| is_pos_zero(v)),
                    "idle expert {ex}: grad.w13 not exactly +0"
                );
                assert!(
                    w2.iter().all(|&v| is_pos_zero(v)),
                    "idle expert {ex}: grad.w2 not exactly +0"
                );
            }
        }
        assert_checked(check_against_naive(&inp, seed + 100));
    }
}

/// Sigmoid routing: an expert no token selects gets a grad.router.weight row of exact zeros (its
/// score never reaches a weight), while softmax couples every expert.
#[test]
fn unselected_expert_gets_no_router_gradient_under_sigmoid() {
    let (t, h, e, k) = (5, 4, 4, 1);
    let mut g = Gen::new(7);
    // Expert 3's logit is far below the others for every token (x > 0, its router row very negative).
    let x = Array2::from_shape_fn((t, h), |_| 0.5 + g.unit());
    let mut rw = Array2::from_shape_fn((e, h), |_| g.normal() * 0.3);
    rw.row_mut(3).fill(-3.0);
    for score in [Score::Sigmoid, Score::Softmax] {
        let mut cfg = MoeConfig::swiglu(t, h, 3, e, k);
        cfg.routing = routing(score, false, 1.0, None);
        let mut inp = routed_case(cfg, rw.clone(), None, 11);
        inp.x = x.clone();
        let (fwd, bwd) = run_default(&inp);
        assert!(fwd.topk_ids.iter().all(|&i| i != 3));
        let grw = bwd.grad_router_weight.as_ref().unwrap();
        let row_zero = grw.row(3).iter().all(|&v| is_pos_zero(v));
        match score {
            Score::Sigmoid => assert!(
                row_zero,
                "sigmoid: unselected expert has router gradient {:?}",
                grw.row(3)
            ),
            Score::Softmax => assert!(!row_zero, "softmax: every expert's logit gets a gradient"),
        }
        assert!(bwd
            .grad_w13
            .index_axis(Axis(0), 3)
            .iter()
            .all(|&v| is_pos_zero(v)));
        assert_checked(check_against_naive(&inp, 12));
    }
}

/// Every token on one expert (k = 1, and k = 2 with the second slot unused).
#[test]
fn all_tokens_on_one_expert() {
    for (k, seed) in [(1usize, 1u64), (2, 2)] {
        let (t, e) = (10, 4);
        let mut ids = Array2::from_elem((t, k), -1i32);
        ids.column_mut(0).fill(2);
        let mut cfg = MoeConfig::swiglu(t, 8, 5, e, k);
        cfg.ep_ranks = 2;
        let inp = given_case(cfg, ids, seed);
        let (fwd, bwd) = run_default(&inp);
        assert_eq!(fwd.rows.expert_offsets, vec![0, 0, 0, t, t]);
        assert_eq!(fwd.ranks.counts(), vec![0, t]);
        assert_eq!(fwd.rows.row_token, (0..t).collect::<Vec<_>>());
        for ex in [0, 1, 3] {
            assert!(bwd
                .grad_w13
                .index_axis(Axis(0), ex)
                .iter()
                .all(|&v| is_pos_zero(v)));
            assert!(bwd
                .grad_w2
                .index_axis(Axis(0), ex)
                .iter()
                .all(|&v| is_pos_zero(v)));
        }
        if k == 2 {
            assert!(bwd
                .grad_topk_weights
                .column(1)
                .iter()
                .all(|&v| is_pos_zero(v)));
        }
        assert_checked(check_against_naive(&inp, seed));
    }
}

/// k = E: every token uses every expert, given or routed.
#[test]
fn k_equals_experts() {
    let (t, e) = (5, 4);
    let mut g = Gen::new(3);
    let mut ids = Array2::zeros((t, e));
    for tok in 0..t {
        for (j, p) in g.perm(e).into_iter().enumerate() {
            ids[[tok, j]] = p as i32;
        }
    }
    let inp = given_case(MoeConfig::swiglu(t, 6, 3, e, e), ids, 4);
    let (fwd, _) = run_default(&inp);
    assert_eq!(
        fwd.rows.expert_offsets,
        (0..=e).map(|i| i * t).collect::<Vec<_>>()
    );
    assert_checked(check_against_naive(&inp, 5));

    for (score, normalize) in [
        (Score::Softmax, true),
        (Score::Softmax, false),
        (Score::Sigmoid, true),
    ] {
        let mut cfg = MoeConfig::swiglu(t, 6, 3, e, e);
        cfg.routing = routing(score, normalize, 1.0, None);
        let rw = Array2::from_shape_fn((e, 6), |_| g.normal());
        let inp = routed_case(cfg, rw, None, 6);
        let (fwd, _) = run_default(&inp);
        for tok in 0..t {
            let mut row: Vec<i32> = fwd.topk_ids.row(tok).to_vec();
            row.sort();
            assert_eq!(row, vec![0, 1, 2, 3]);
            if score == Score::Softmax && !normalize {
                // All of the softmax: weights sum to 1.
                close_ulps("Σ p", fwd.topk_weights.row(tok).sum(), 1.0, 8.0);
            }
        }
        assert_checked(check_against_naive(&inp, 7));
    }
}

/// A single token.
#[test]
fn single_token() {
    let mut g = Gen::new(9);
    let inp = given_case(MoeConfig::swiglu(1, 12, 6, 6, 3), array![[4, -1, 0]], 8);
    assert_checked(check_against_naive(&inp, 9));
    let mut cfg = MoeConfig::swiglu(1, 12, 6, 6, 3);
    cfg.routing = routing(
        Score::Sigmoid,
        true,
        2.5,
        Some(Groups {
            n_group: 3,
            topk_group: 2,
        }),
    );
    let rw = Array2::from_shape_fn((6, 12), |_| g.normal() * 0.5);
    let bias = Array1::from_shape_fn(6, |_| g.normal() * 0.1);
    let inp = routed_case(cfg, rw, Some(bias), 10);
    assert_checked(check_against_naive(&inp, 11));
}

/// No tokens at all: every output has its shape, every weight gradient is exactly +0.
#[test]
fn empty_batch() {
    let (h, i, e, k) = (6, 3, 4, 2);
    let mut g = Gen::new(1);
    let rw = Array2::from_shape_fn((e, h), |_| g.normal());
    let mut cases = vec![given_case(MoeConfig::swiglu(0, h, i, e, k), Array2::zeros((0, k)), 1)];
    for r in [
        routing(Score::Softmax, true, 1.0, None),
        routing(
            Score::Sigmoid,
            true,
            2.0,
            Some(Groups {
                n_group: 2,
                topk_group: 1,
            }),
        ),
    ] {
        let mut cfg = MoeConfig::swiglu(0, h, i, e, k);
        cfg.routing = r;
        cfg.ep_ranks = 2;
        cases.push(routed_case(cfg, rw.clone(), None, 2));
    }
    for inp in &cases {
        let (fwd, bwd) = run_default(inp);
        assert_eq!(fwd.y.dim(), (0, h));
        assert_eq!(fwd.topk_ids.dim(), (0, k));
        assert_eq!(fwd.topk_weights.dim(), (0, k));
        assert_eq!(fwd.rows.rows(), 0);
        assert_eq!(fwd.rows.expert_offsets, vec![0; e + 1]);
        assert_eq!(fwd.ranks.counts().iter().sum::<usize>(), 0);
        assert_eq!(fwd.h.dim(), (0, 2 * i));
        assert_eq!(fwd.a.dim(), (0, i));
        assert_eq!(fwd.o.dim(), (0, h));
        assert_eq!(bwd.grad_x.dim(), (0, h));
        assert_eq!(bwd.grad_w13.dim(), (e, 2 * i, h));
        assert_eq!(bwd.grad_w2.dim(), (e, h, i));
        assert!(bwd
            .grad_w13
            .iter()
            .chain(bwd.grad_w2.iter())
            .all(|&v| is_pos_zero(v)));
        assert_eq!(bwd.grad_topk_weights.dim(), (0, k));
        assert_eq!(bwd.do_.dim(), (0, h));
        assert_eq!(bwd.da.dim(), (0, i));
        assert_eq!(bwd.dh.dim(), (0, 2 * i));
        assert_eq!(bwd.dx_rows.dim(), (0, h));
        if inp.cfg.routing.is_some() {
            assert_eq!(fwd.logits.as_ref().unwrap().dim(), (0, e));
            assert_eq!(fwd.routed.as_ref().unwrap().scores.dim(), (0, e));
            assert_eq!(bwd.dlogits.as_ref().unwrap().dim(), (0, e));
            let grw = bwd.grad_router_weight.as_ref().unwrap();
            assert_eq!(grw.dim(), (e, h));
            assert!(grw.iter().all(|&v| is_pos_zero(v)));
        } else {
            assert!(fwd.logits.is_none() && bwd.grad_router_weight.is_none());
        }
        assert!(matches!(check_against_naive(inp, 3), Naive::Checked));
    }
}

/// A token whose slots are all -1: its y row, grad.x row and grad.topk_weights row are exactly +0; the
/// other tokens are unaffected by its presence (bitwise, against the batch without it).
#[test]
fn token_with_every_slot_unused() {
    let (t, h, e, k) = (4, 8, 5, 3);
    let ids = array![[0, 3, -1], [-1, -1, -1], [4, 1, 2], [2, -1, 0]];
    let inp = given_case(MoeConfig::swiglu(t, h, 4, e, k), ids, 21);
    let (fwd, bwd) = run_default(&inp);
    assert!(
        fwd.y.row(1).iter().all(|&v| is_pos_zero(v)),
        "y row of an all -1 token: {:?}",
        fwd.y.row(1)
    );
    assert!(
        bwd.grad_x.row(1).iter().all(|&v| is_pos_zero(v)),
        "grad.x row: {:?}",
        bwd.grad_x.row(1)
    );
    assert!(bwd.grad_topk_weights.row(1).iter().all(|&v| is_pos_zero(v)));
    for tok in [0, 2, 3] {
        assert!(fwd.y.row(tok).iter().any(|&v| v != 0.0));
        assert!(bwd.grad_x.row(tok).iter().any(|&v| v != 0.0));
    }
    // Dropping the token changes nothing else.
    let keep = [0usize, 2, 3];
    let mut small = inp.clone();
    small.cfg.tokens = 3;
    small.x = inp.x.select(Axis(0), &keep);
    small.dy = Some(inp.dy.as_ref().unwrap().select(Axis(0), &keep));
    small.topk_ids = Some(inp.topk_ids.as_ref().unwrap().select(Axis(0), &keep));
    small.topk_weights = Some(inp.topk_weights.as_ref().unwrap().select(Axis(0), &keep));
    let (fs, bs) = run_default(&small);
    same_bits("y", &fwd.y.select(Axis(0), &keep), &fs.y);
    same_bits("grad.x", &bwd.grad_x.select(Axis(0), &keep), &bs.grad_x);
    same_bits("grad.w13", &bwd.grad_w13, &bs.grad_w13);
    same_bits("grad.w2", &bwd.grad_w2, &bs.grad_w2);
    same_bits(
        "grad.topk_weights",
        &bwd.grad_topk_weights.select(Axis(0), &keep),
        &bs.grad_topk_weights,
    );
    assert_checked(check_against_naive(&inp, 22));
}

// ---------------------------------------------------------------------------------------------------
// Routing modes
// ---------------------------------------------------------------------------------------------------

/// Softmax routing, not normalised: the scores are a probability vector, ids are the k largest in
/// decreasing order, weights are `p[id] · scaling`.
#[test]
fn softmax_unnormalized() {
    let (t, h, e, k) = (6, 10, 8, 3);
    let mut g = Gen::new(31);
    let rw = Array2::from_shape_fn((e, h), |_| g.normal() * 0.6);
    let mut cfg = MoeConfig::swiglu(t, h, 4, e, k);
    cfg.routing = routing(Score::Softmax, false, 1.5, None);
    let inp = routed_case(cfg, rw, None, 32);
    let (fwd, _) = run_default(&inp);
    let routed = fwd.routed.as_ref().unwrap();
    for tok in 0..t {
        let p = routed.scores.row(tok);
        close_ulps("Σ softmax", p.sum(), 1.0, 8.0);
        let ids: Vec<usize> = fwd.topk_ids.row(tok).iter().map(|&i| i as usize).collect();
        for j in 0..k {
            assert_eq!(
                fwd.topk_weights[[tok, j]].to_bits(),
                (p[ids[j]] * 1.5).to_bits()
            );
            if j > 0 {
                assert!(p[ids[j - 1]] >= p[ids[j]]);
            }
        }
        let worst_chosen = p[ids[k - 1]];
        for ex in (0..e).filter(|ex| !ids.contains(ex)) {
            assert!(p[ex] <= worst_chosen);
        }
    }
    assert_checked(check_against_naive(&inp, 33));
}

/// Softmax routing, normalised over the chosen k: weights sum to `scaling`.
#[test]
fn softmax_normalized() {
    let (t, h, e, k) = (6, 10, 8, 3);
    let mut g = Gen::new(41);
    let rw = Array2::from_shape_fn((e, h), |_| g.normal() * 0.6);
    let mut cfg = MoeConfig::swiglu(t, h, 4, e, k);
    cfg.routing = routing(Score::Softmax, true, 1.0, None);
    let inp = routed_case(cfg, rw, None, 42);
    let (fwd, _) = run_default(&inp);
    for tok in 0..t {
        close_ulps("Σ w", fwd.topk_weights.row(tok).sum(), 1.0, 8.0);
    }
    assert_checked(check_against_naive(&inp, 43));
}

fn logit(s: f64) -> f64 {
    (s / (1.0 - s)).ln()
}

/// DeepSeek-V3 style: E = 8, 4 groups of 2, keep 2 groups, k = 2, sigmoid scores, selection bias,
/// normalised weights, scaling. Hand-made scores where the group limit and the bias change the choice.
#[test]
fn sigmoid_deepseek_groups_and_bias() {
    let (e, k) = (8, 2);
    // Token 0 (x = +1) has these sigmoid scores; token 1 (x = -1) has 1 - s.
    let s = [0.95, 0.02, 0.7, 0.7, 0.9, 0.2, 0.5, 0.5];
    let rw = Array2::from_shape_fn((e, 1), |(ex, _)| logit(s[ex]));
    let groups = Some(Groups {
        n_group: 4,
        topk_group: 2,
    });
    let make = |groups: Option<Groups>, bias: [f64; 8]| {
        let mut cfg = MoeConfig::swiglu(2, 1, 3, e, k);
        cfg.routing = routing(Score::Sigmoid, true, 2.5, groups);
        let mut inp = routed_case(cfg, rw.clone(), Some(Array1::from(bias.to_vec())), 51);
        inp.x = array![[1.0], [-1.0]];
        inp
    };
    let ids_of = |inp: &layer::LayerInputs| layer::forward(inp, Options::default()).topk_ids;
    // Without groups: the global top-2.
    assert_eq!(ids_of(&make(None, [0.0; 8])), array![[0, 4], [1, 5]]);
    // Groups scored by their top-2 sums: token 0 keeps groups {1, 2} (1.4, 1.1) -> 4, then 2 (tie with
    // 3, lower index first); token 1 (scores 1 - s) keeps groups {0, 3} (1.03, 1.0) -> 1, then 6 (tie).
    assert_eq!(ids_of(&make(groups, [0.0; 8])), array![[4, 2], [1, 6]]);
    // A bias on expert 3 breaks its tie with 2 (selection only: the weight stays s[3]).
    let biased = make(groups, [0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0]);
    let fwd = layer::forward(&biased, Options::default());
    assert_eq!(fwd.topk_ids.row(0).to_vec(), vec![4, 3]);
    let sc = &fwd.routed.as_ref().unwrap().scores;
    let (s4, s3) = (sc[[0, 4]], sc[[0, 3]]);
    close_ulps("s4", s4, 0.9, 4.0);
    close_ulps("s3", s3, 0.7, 4.0);
    close_ulps(
        "w[0,0]",
        fwd.topk_weights[[0, 0]],
        2.5 * s4 / (s4 + s3),
        4.0,
    );
    close_ulps(
        "w[0,1]",
        fwd.topk_weights[[0, 1]],
        2.5 * s3 / (s4 + s3),
        4.0,
    );
    // A bias on group 3 makes it the best group for token 0 (group scores use biased scores).
    let fwd = layer::forward(
        &make(groups, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.3]),
        Options::default(),
    );
    assert_eq!(fwd.topk_ids.row(0).to_vec(), vec![6, 7]);
    close_ulps("w[0,0]", fwd.topk_weights[[0, 0]], 1.25, 4.0);

    // The whole layer against the naive one, on scores moved off the ties.
    let s2 = [0.95, 0.02, 0.71, 0.69, 0.9, 0.2, 0.52, 0.49];
    let mut inp = make(groups, [0.0, 0.01, -0.02, 0.05, 0.0, 0.03, 0.0, -0.01]);
    inp.router_weight = Some(Array2::from_shape_fn((e, 1), |(ex, _)| logit(s2[ex])));
    assert_checked(check_against_naive(&inp, 52));
    // And a random DeepSeek-shaped batch.
    let mut g = Gen::new(53);
    let mut cfg = MoeConfig::swiglu(12, 16, 6, e, k);
    cfg.routing = routing(Score::Sigmoid, true, 2.5, groups);
    let rw = Array2::from_shape_fn((e, 16), |_| g.normal() * 0.5);
    let bias = Array1::from_shape_fn(e, |_| g.normal() * 0.1);
    let inp = routed_case(cfg, rw, Some(bias), 54);
    assert_checked(check_against_naive(&inp, 55));
}

/// `scaling` multiplies the weights after normalisation (one rounding); a power-of-two scaling scales
/// y and every gradient exactly, and leaves grad.topk_weights alone.
#[test]
fn routing_scaling() {
    let (t, h, e, k) = (7, 9, 6, 2);
    let mut g = Gen::new(61);
    let rw = Array2::from_shape_fn((e, h), |_| g.normal() * 0.5);
    let bias = Array1::from_shape_fn(e, |_| g.normal() * 0.1);
    for (score, normalize) in [
        (Score::Softmax, false),
        (Score::Softmax, true),
        (Score::Sigmoid, true),
        (Score::Sigmoid, false),
    ] {
        let with = |scaling: f64| {
            let mut cfg = MoeConfig::swiglu(t, h, 4, e, k);
            cfg.routing = routing(score, normalize, scaling, None);
            // The format defines the selection bias for sigmoid routing only.
            let b = (score == Score::Sigmoid).then(|| bias.clone());
            routed_case(cfg, rw.clone(), b, 62)
        };
        let (f1, b1) = run_default(&with(1.0));
        let (f25, _) = run_default(&with(2.5));
        assert_eq!(f1.topk_ids, f25.topk_ids);
        same_bits(
            "topk_weights x2.5",
            &f1.topk_weights.mapv(|w| w * 2.5),
            &f25.topk_weights,
        );
        let (f4, b4) = run_default(&with(4.0));
        same_bits(
            "topk_weights x4",
            &(&f1.topk_weights * 4.0),
            &f4.topk_weights,
        );
        same_bits("y x4", &(&f1.y * 4.0), &f4.y);
        same_bits("grad.x x4", &(&b1.grad_x * 4.0), &b4.grad_x);
        same_bits("grad.w13 x4", &(&b1.grad_w13 * 4.0), &b4.grad_w13);
        same_bits("grad.w2 x4", &(&b1.grad_w2 * 4.0), &b4.grad_w2);
        same_bits(
            "grad.router.weight x4",
            &(b1.grad_router_weight.as_ref().unwrap() * 4.0),
            b4.grad_router_weight.as_ref().unwrap(),
        );
        same_bits(
            "grad.topk_weights",
            &b1.grad_topk_weights,
            &b4.grad_topk_weights,
        );
        assert_checked(check_against_naive(&with(2.5), 63));
    }
}

/// Equal logits: the lower expert index wins, for softmax and sigmoid, with and without groups (a tie
/// between groups keeps the lower group).
#[test]
fn router_ties_go_to_lower_index() {
    let (h, e) = (5, 8);
    let mut g = Gen::new(71);
    // Experts 5, 1 and 3 share the largest router row (bitwise equal logits through the exact GEMM).
    let mut rw = Array2::from_shape_fn((e, h), |_| g.normal() * 0.1);
    let top = Array1::from_shape_fn(h, |_| 1.0 + g.unit());
    for ex in [5, 1, 3] {
        rw.row_mut(ex).assign(&top);
    }
    let x = Array2::from_shape_fn((3, h), |_| 0.5 + g.unit()); // positive, so `top` wins
    for score in [Score::Softmax, Score::Sigmoid] {
        for (k, want) in [(1, vec![1]), (2, vec![1, 3]), (3, vec![1, 3, 5])] {
            let mut cfg = MoeConfig::swiglu(3, h, 2, e, k);
            cfg.routing = routing(score, true, 1.0, None);
            let mut inp = routed_case(cfg, rw.clone(), None, 72);
            inp.x = x.clone();
            let fwd = layer::forward(&inp, Options::default());
            for tok in 0..3 {
                assert_eq!(fwd.topk_ids.row(tok).to_vec(), want, "{score:?} k={k}");
                for j in 1..k {
                    assert_eq!(
                        fwd.topk_weights[[tok, j]].to_bits(),
                        fwd.topk_weights[[tok, 0]].to_bits()
                    );
                }
            }
        }
    }
    // All logits equal (zero router): ids 0..k, softmax weights 1/E, sigmoid weights 1/2.
    for (score, w) in [(Score::Softmax, 1.0 / 8.0), (Score::Sigmoid, 0.5)] {
        let mut cfg = MoeConfig::swiglu(2, h, 2, e, 3);
        cfg.routing = routing(score, false, 1.0, None);
        let inp = routed_case(cfg, Array2::zeros((e, h)), None, 73);
        let fwd = layer::forward(&inp, Options::default());
        assert_eq!(fwd.topk_ids, array![[0, 1, 2], [0, 1, 2]]);
        assert!(fwd.topk_weights.iter().all(|&v| v == w));
    }
    // Group tie: groups 1 ({2,3}) and 3 ({6,7}) have identical scores and the best top-2 sums; keeping
    // one group must keep group 1.
    let mut rw = Array2::from_shape_fn((e, h), |_| g.normal() * 0.1);
    let (a, b) = (Array1::from_elem(h, 1.0), Array1::from_elem(h, 0.8));
    rw.row_mut(2).assign(&b);
    rw.row_mut(3).assign(&a);
    rw.row_mut(6).assign(&a);
    rw.row_mut(7).assign(&b);
    let mut cfg = MoeConfig::swiglu(3, h, 2, e, 2);
    cfg.routing = routing(
        Score::Sigmoid,
        true,
        1.0,
        Some(Groups {
            n_group: 4,
            topk_group: 1,
        }),
    );
    let mut inp = routed_case(cfg, rw, None, 74);
    inp.x = x.clone();
    let fwd = layer::forward(&inp, Options::default());
    for tok in 0..3 {
        assert_eq!(fwd.topk_ids.row(tok).to_vec(), vec![3, 2]);
    }
}

// ---------------------------------------------------------------------------------------------------
// Clamped SwiGLU
// ---------------------------------------------------------------------------------------------------

/// gpt-oss clamped SwiGLU on hand-picked pre-activations (H = 1, x = 1, so h is w13 exactly):
/// g is clamped from above only, u on both sides; the gradient passes at the limit itself (as
/// PyTorch's clamp) and is exactly 0 beyond it.
#[test]
fn clamped_swiglu_values_and_gradients() {
    let (alpha, limit) = (1.702, 7.0);
    let gate = [-3.0, 0.5, 7.0, 9.0, -9.0];
    let up = [8.0, -9.0, 7.0, -7.0, 0.5];
    let i_n = gate.len();
    let mut cfg = MoeConfig::swiglu(1, 1, i_n, 1, 1);
    cfg.activation = Activation::SwigluClamped { alpha, limit };
    let mut inp = given_case(cfg, array![[0]], 81);
    inp.x = array![[1.0]];
    inp.w13 = Array3::from_shape_fn(
        (1, 2 * i_n, 1),
        |(_, r, _)| if r < i_n { gate[r] } else { up[r - i_n] },
    );
    inp.w2 = Array3::from_elem((1, 1, i_n), 1.0);
    inp.topk_weights = Some(array![[1.0]]);
    inp.dy = Some(array![[1.0]]);
    let (fwd, bwd) = run_default(&inp);
    let sig = |z: f64| 1.0 / (1.0 + (-z).exp());
    for i in 0..i_n {
        assert_eq!(fwd.h[[0, i]], gate[i]);
        assert_eq!(fwd.h[[0, i_n + i]], up[i]);
        let gc = gate[i].min(limit);
        let uc = up[i].clamp(-limit, limit);
        close_ulps(
            &format!("a[{i}]"),
            fwd.a[[0, i]],
            gc * sig(alpha * gc) * (uc + 1.0),
            8.0,
        );
        // da = 1 for every i (do = 1, w2 = 1), so dh is the activation's derivative.
        assert_eq!(bwd.da[[0, i]], 1.0);
        let (dg, du) = (bwd.dh[[0, i]], bwd.dh[[0, i_n + i]]);
        if gate[i] > limit {
            assert_eq!(dg, 0.0, "dg[{i}] beyond the limit");
        } else {
            let s = sig(alpha * gc);
            close_ulps(
                &format!("dg[{i}]"),
                dg,
                s * (1.0 + alpha * gc * (1.0 - s)) * (uc + 1.0),
                16.0,
            );
        }
        if up[i].abs() > limit {
            assert_eq!(du, 0.0, "du[{i}] beyond the limit");
        } else {
            close_ulps(&format!("du[{i}]"), du, gc * sig(alpha * gc), 8.0);
        }
        // grad.w13 = dhᵀ x = dh exactly.
        assert_eq!(bwd.grad_w13[[0, i, 0]].to_bits(), dg.to_bits());
        assert_eq!(bwd.grad_w13[[0, i_n + i, 0]].to_bits(), du.to_bits());
    }
    // At the limit itself the gradient passes (g = 7, u = 7, u = -7).
    assert!(bwd.dh[[0, 2]] != 0.0 && bwd.dh[[0, i_n + 2]] != 0.0 && bwd.dh[[0, i_n + 3]] != 0.0);
    let y: f64 = fwd.a.row(0).sum();
    close_ulps("y", fwd.y[[0, 0]], y, 64.0);

    // Random clamped layers against the naive one (cases near a kink are skipped, so try a few).
    let mut checked = 0;
    for seed in 0..8u64 {
        let mut cfg = MoeConfig::swiglu(9, 12, 8, 4, 2);
        cfg.activation = Activation::SwigluClamped { alpha, limit: 0.8 };
        let mut g = Gen::new(seed);
        let mut ids = Array2::zeros((9, 2));
        for tok in 0..9 {
            let p = g.perm(4);
            ids[[tok, 0]] = p[0] as i32;
            ids[[tok, 1]] = p[1] as i32;
        }
        let inp = given_case(cfg, ids, seed + 90);
        if let Naive::Checked = check_against_naive(&inp, seed) {
            checked += 1;
        }
        // Clamping happens on both sides in these cases.
        let (fwd, _) = run_default(&inp);
        let (ig, iu) = (
            fwd.h.slice(ndarray::s![.., ..8]),
            fwd.h.slice(ndarray::s![.., 8..]),
        );
        assert!(
            ig.iter().any(|&v| v > 0.8)
                && iu.iter().any(|&v| v < -0.8)
                && iu.iter().any(|&v| v > 0.8)
        );
    }
    assert!(
        checked >= 6,
        "only {checked} of 8 clamped cases were away from the kinks"
    );
}

// ---------------------------------------------------------------------------------------------------
// Accuracy of the router gradient at saturated scores
// ---------------------------------------------------------------------------------------------------

/// σ'(l) = σ(l)·σ(-l), accurate for any l.
fn sigmoid_grad(l: f64) -> f64 {
    let e = (-l.abs()).exp();
    e / ((1.0 + e) * (1.0 + e))
}

/// The router gradient at a saturated score. With H = 1, x = 1, E = 2, k = 1, no normalisation,
/// `grad.router.weight[0, 0] = dlogits[0, 0] = g·σ'(l)` for sigmoid routing and `g·p0·(1 − p0)`
/// (= g·σ'(l) too, with logits [l, 0]) for softmax routing, where `g = grad.topk_weights[0, 0]`.
/// Both are well conditioned in l; the textbook forms `s·(1 − s)` (sigmoid) and `p0·(g − p0·g)`
/// (softmax) cancel when the score is near 1 (relative error about 2^-53 / (1 − s): ~1e-3 at l = 30,
/// as `route::backward` once measured), so this pins the cancellation-free forms.
#[test]
fn saturated_router_gradient_is_accurate() {
    let mut bad = Vec::new();
    for score in [Score::Sigmoid, Score::Softmax] {
        for l in [18.0, 23.0, 30.0] {
            let mut cfg = MoeConfig::swiglu(1, 1, 2, 2, 1);
            cfg.routing = routing(score, false, 1.0, None);
            let mut inp = routed_case(cfg, array![[l], [0.0]], None, 91);
            inp.x = array![[1.0]];
            let (fwd, bwd) = run_default(&inp);
            assert_eq!(fwd.topk_ids, array![[0]]);
            let g = bwd.grad_topk_weights[[0, 0]];
            let want = g * sigmoid_grad(l);
            let got = bwd.grad_router_weight.as_ref().unwrap()[[0, 0]];
            let rel = ((got - want) / want).abs();
            if rel > 1e-13 {
                bad.push(format!("{score:?}, logit {l}: grad.router.weight {got:e}, exact {want:e}, rel. error {rel:.1e}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "router gradient inaccurate at saturated scores:\n{}",
        bad.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------------
// Regressions
// ---------------------------------------------------------------------------------------------------

/// Regression (found by `engine_invariance` and `minus_one_slot_equals_zero_weight` at e8c254a): the
/// Ozaki engine misrounded GEMMs with a contraction length of 1 when its planner chose a 52-bit slice
/// (`OzakiPlan { s_a: 1, n_a: 1, s_b: 52, n_b: 2 }`; the slicing's rounding trick assumes s <= 51, so
/// negative elements got half-integer slices that the combine truncated). Single-row experts make such
/// GEMMs: their weight gradients contract over one row. Both engines must agree bitwise.
#[test]
fn single_row_experts_engine_invariant() {
    use moe_reference::gemm::{matmul_nt_with, Engine};
    // 288.23581026423466 · -1.169766736430675: the correctly rounded product is the f64 product.
    let a = array![[f64::from_bits(0x4072_03c5_e0fb_cf2f)]];
    let b = array![[f64::from_bits(0xbff2_b75d_534e_b1c5)]];
    let want = a[[0, 0]] * b[[0, 0]];
    for engine in [Engine::Certified, Engine::Ozaki, Engine::Reference] {
        let got = matmul_nt_with(engine, a.view(), b.view())[[0, 0]];
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{engine:?}: {got:e} vs {want:e}"
        );
    }
    // The layer case proptest shrank to, and more one-token layers (every used expert has one row).
    let mut specs = vec![((1, 8, 7, 4, 1, 0, 55, 3440496298810641701), Kind::Wide)];
    for seed in 0..24u64 {
        let kind = [Kind::Wide, Kind::F64, Kind::Bf16][seed as usize % 3];
        specs.push((
            (
                1,
                1 + seed as usize % 9,
                1 + seed as usize % 5,
                4,
                1 + seed as usize % 4,
                seed as u8,
                seed as u8 / 3,
                seed,
            ),
            kind,
        ));
    }
    for (s, kind) in specs {
        let inp = build(&Spec::from_tuple(s, kind));
        let (f0, b0) = run(
            &inp,
            Options {
                engine: Engine::Ozaki,
            },
        );
        let (f1, b1) = run(
            &inp,
            Options {
                engine: Engine::Reference,
            },
        );
        same_forward(&f0, &f1, true);
        same_backward(&b0, &b1);
        let (f2, b2) = run(&inp, Options { engine: Engine::Certified });
        same_forward(&f0, &f2, true);
        same_backward(&b0, &b2);
    }
}
