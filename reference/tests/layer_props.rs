//! Property tests of the exact MoE layer (`layer::forward` / `layer::backward`):
//!
//! 1. gradients against an independent naive layer (forward-mode duals), and the naive f64 forward
//!    against the oracle's y and selection;
//! 2. dispatch and combine are adjoint;
//! 3. linearity in topk_weights (and exact power-of-two scaling);
//! 4. a `-1` slot is the same as no slot (position independent, same as a zero weight);
//! 5. expert relabelling; 6. thread-count and engine invariance; 7. rank-count invariance;
//! 8. hidden-feature, intermediate-feature and token permutations.
//!
//! Shapes come as flat tuples and are clamped in `Spec::from_tuple`, so failures shrink to small cases.

mod common;

use common::*;
use moe_reference::dispatch::RowMap;
use moe_reference::exact;
use moe_reference::gemm::Engine;
use moe_reference::layer::{LayerInputs, Options};
use ndarray::{Array, Array2, Axis, Dimension, RemoveAxis};
use proptest::prelude::*;

type Shape = (usize, usize, usize, usize, usize, u8, u8, u64);

/// `(T, H, I, E, k, mode, activation, seed)`: T <= 12, H <= 24, I <= 12, E <= 8, k clamped to E.
fn shape() -> impl Strategy<Value = Shape> {
    (
        0usize..=12,
        1usize..=24,
        1usize..=12,
        1usize..=8,
        1usize..=8,
        any::<u8>(),
        any::<u8>(),
        any::<u64>(),
    )
}

fn kind_of(sel: u8, allow_wide: bool) -> Kind {
    match sel % if allow_wide { 3 } else { 2 } {
        0 => Kind::F64,
        1 => Kind::Bf16,
        _ => Kind::Wide,
    }
}

/// Same bits, except that +0 and -0 count as equal (a power-of-two scaling by a negative number turns
/// a +0 into -0, while an exact sum that is 0 always rounds to +0).
#[track_caller]
fn same_bits_or_zeros<D: Dimension>(name: &str, a: &Array<f64, D>, b: &Array<f64, D>) {
    assert_eq!(a.shape(), b.shape(), "{name}: shapes differ");
    for ((idx, x), y) in a.indexed_iter().zip(b.iter()) {
        assert!(
            x.to_bits() == y.to_bits() || (*x == 0.0 && *y == 0.0),
            "{name}{idx:?}: {x:e} vs {y:e}"
        );
    }
}

/// `a` with axis `axis` reordered: `out[.., j, ..] = a[.., p[j], ..]`.
fn take<D: Dimension + RemoveAxis>(a: &Array<f64, D>, axis: usize, p: &[usize]) -> Array<f64, D> {
    a.select(Axis(axis), p)
}

fn given(spec: &mut Spec) {
    spec.mode = Mode::Given;
}

// ---------------------------------------------------------------------------------------------------
// 1. Gradients and forward against the naive layer
// ---------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, max_global_rejects: 3000, ..ProptestConfig::default() })]

    /// The naive f64 forward (written from the format's semantics) matches the oracle's y within 1e-12
    /// relative and its topk_ids exactly; the directional derivative of L = <dy, y> from duals matches
    /// Σ <grad, V> from `layer::backward` within 1e-9 relative, for a random direction over x, w13, w2,
    /// topk_weights (given routing) and router.weight (in-layer routing). Cases within 1e-9 of a selection
    /// tie or a clamp kink are skipped.
    #[test]
    fn gradients_match_naive_duals(s in shape(), kind in any::<u8>(), dir_seed in any::<u64>()) {
        let spec = Spec::from_tuple(s, kind_of(kind, false));
        let inp = build(&spec);
        let r = check_against_naive(&inp, dir_seed);
        prop_assume!(matches!(r, Naive::Checked), "near a tie or a clamp kink");
    }
}

// ---------------------------------------------------------------------------------------------------
// 2. Dispatch and combine are adjoint
// ---------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// `<combine(a, w), b> == <a, dispatch_weighted(b, w)>` with both inner products exact-then-rounded.
    ///
    /// Tolerance. With u = 2^-53, combine rounds each `S_tc = Σ_j w_tj a_(r(t,j))c` once
    /// (|C - S| <= u|S|) and dispatch_weighted rounds each `w_tj b_tc` once (|D - wb| <= u|wb|). The exact
    /// inner products `Σ C b` and `Σ a D` both equal `X = Σ_(t,j,c) w a b` up to those errors, so they
    /// differ by at most `u Σ|S||b| + u Σ|a||w||b| <= 2u P`, `P = Σ_(t,j,c) |w||a||b|`. Each inner product
    /// is then rounded once more (`exact::dot`), adding at most `u|L|` and `u|R|`. Hence
    /// `|L - R| <= 2u P + u(|L| + |R|)`: about two ulps of P. (P is computed in f64 with relative error
    /// below 4u; a factor 1 + 1e-12 covers it.)
    #[test]
    fn dispatch_and_combine_are_adjoint(
        t in 0usize..=12, h in 1usize..=24, e in 1usize..=8, k in 1usize..=8,
        kind in any::<u8>(), seed in any::<u64>(),
    ) {
        let k = k.min(e);
        let kind = kind_of(kind, true);
        let mut g = Gen::new(seed);
        let mut ids = Array2::from_elem((t, k), -1i32);
        for tok in 0..t {
            let p = g.perm(e);
            for j in 0..k {
                if g.below(5) != 0 {
                    ids[[tok, j]] = p[j] as i32;
                }
            }
        }
        let rows = RowMap::build(ids.view(), e);
        let m = rows.rows();
        let a = Array2::from_shape_fn((m, h), |_| draw(&mut g, kind, 1.0));
        let b = Array2::from_shape_fn((t, h), |_| draw(&mut g, kind, 1.0));
        let w = Array2::from_shape_fn((t, k), |_| draw(&mut g, kind, 1.0));
        let c = rows.combine(a.view(), w.view());
        let d = rows.dispatch_weighted(b.view(), w.view());
        prop_assert_eq!(c.dim(), (t, h));
        prop_assert_eq!(d.dim(), (m, h));
        let l = exact::dot(c.iter().copied().zip(b.iter().copied()));
        let r = exact::dot(a.iter().copied().zip(d.iter().copied()));
        let mut p_terms = Vec::new();
        for tok in 0..t {
            for j in 0..k {
                if let Some(row) = rows.slot_row[tok * k + j] {
                    for col in 0..h {
                        p_terms.push((w[[tok, j]] * a[[row, col]]).abs() * b[[tok, col]].abs());
                    }
                }
            }
        }
        let p = exact::sum(p_terms);
        let u = 2f64.powi(-53);
        let tol = 2.0 * u * p * (1.0 + 1e-12) + u * (l.abs() + r.abs());
        prop_assert!((l - r).abs() <= tol, "<combine(a,w), b> = {:e} vs <a, dispatch(b,w)> = {:e}: diff {:e} > tol {:e}", l, r, (l - r).abs(), tol);
    }
}

// ---------------------------------------------------------------------------------------------------
// 3. Linearity in topk_weights
// ---------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// y(w1 + w2) vs y(w1) + y(w2), with w1, w2 multiples of 2^-8 below 4 in magnitude so that w1 + w2 is
    /// exact. Each y entry is one rounding of an exact sum S (|y - S| <= u|y| + η/2, u = 2^-53, η = 2^-1074
    /// the subnormal spacing: on `Kind::Wide` data a saturated SiLU can make o subnormal), and
    /// S(w1 + w2) = S(w1) + S(w2) exactly (the expert outputs o do not depend on the weights), so
    /// `y12 - y1 - y2` (computed exactly, then rounded once) is at most
    /// `u(1+u)(|y12| + |y1| + |y2|) + 2η`.
    #[test]
    fn linear_in_topk_weights(s in shape(), kind in any::<u8>(), wseed in any::<u64>()) {
        let mut spec = Spec::from_tuple(s, kind_of(kind, true));
        given(&mut spec);
        let base = build(&spec);
        let mut g = Gen::new(wseed);
        let (t, k) = (spec.t, spec.k);
        let w1 = Array2::from_shape_fn((t, k), |_| (g.below(2049) as f64 - 1024.0) / 256.0);
        let w2 = Array2::from_shape_fn((t, k), |_| (g.below(2049) as f64 - 1024.0) / 256.0);
        let w12 = &w1 + &w2;
        let y_of = |w: &Array2<f64>| {
            let mut inp = base.clone();
            inp.topk_weights = Some(w.clone());
            moe_reference::layer::forward(&inp, Options::default()).y
        };
        let (y1, y2, y12) = (y_of(&w1), y_of(&w2), y_of(&w12));
        let u = 2f64.powi(-53);
        for ((idx, &a), (&b, &c)) in y12.indexed_iter().zip(y1.iter().zip(y2.iter())) {
            let d = exact::sum([a, -b, -c]);
            let tol = u * (a.abs() + b.abs() + c.abs()) * (1.0 + 2f64.powi(-50)) + 2.0 * f64::from_bits(1); // 2η
            prop_assert!(d.abs() <= tol, "y{:?}: y(w1+w2) = {:e}, y(w1) + y(w2) = {:e} + {:e}: diff {:e} > {:e}", idx, a, b, c, d, tol);
        }
    }

    /// y(c·w) == c·y(w) bitwise for c a power of two (exact scaling commutes with every rounding), and
    /// the same for grad.x, grad.w13, grad.w2 and the backward intermediates; grad.topk_weights and the
    /// forward intermediates do not change at all. (Not on `Kind::Wide` data: there SiLU saturates and
    /// dh meets subnormals, where scaling by a power of two does not commute with rounding.)
    #[test]
    fn power_of_two_weight_scaling_is_exact(s in shape(), kind in any::<u8>(), csel in 0usize..10) {
        let mut spec = Spec::from_tuple(s, kind_of(kind, false));
        given(&mut spec);
        let inp = build(&spec);
        let c = [0.125, 0.25, 0.5, 2.0, 4.0, 8.0, -1.0, -0.5, -2.0, 1024.0][csel];
        let mut scaled = inp.clone();
        scaled.topk_weights = Some(inp.topk_weights.as_ref().unwrap() * c);
        let (f1, b1) = run_default(&inp);
        let (fc, bc) = run_default(&scaled);
        same_bits_or_zeros("y", &(&f1.y * c), &fc.y);
        same_bits("fwd.h", &f1.h, &fc.h);
        same_bits("fwd.a", &f1.a, &fc.a);
        same_bits("fwd.o", &f1.o, &fc.o);
        same_bits("grad.topk_weights", &b1.grad_topk_weights, &bc.grad_topk_weights);
        same_bits_or_zeros("grad.x", &(&b1.grad_x * c), &bc.grad_x);
        same_bits_or_zeros("grad.w13", &(&b1.grad_w13 * c), &bc.grad_w13);
        same_bits_or_zeros("grad.w2", &(&b1.grad_w2 * c), &bc.grad_w2);
        same_bits_or_zeros("bwd.do", &(&b1.do_ * c), &bc.do_);
        same_bits_or_zeros("bwd.da", &(&b1.da * c), &bc.da);
        same_bits_or_zeros("bwd.dh", &(&b1.dh * c), &bc.dh);
        same_bits_or_zeros("bwd.dx_rows", &(&b1.dx_rows * c), &bc.dx_rows);
    }
}

// ---------------------------------------------------------------------------------------------------
// 4. -1 slots
// ---------------------------------------------------------------------------------------------------

/// One `-1` slot per token (when T > 0), chosen at random.
fn with_minus_one_slots(inp: &mut LayerInputs, g: &mut Gen) -> Vec<usize> {
    let (t, k) = (inp.cfg.tokens, inp.cfg.top_k);
    let ids = inp.topk_ids.as_mut().unwrap();
    (0..t)
        .map(|tok| {
            let j = g.below(k);
            ids[[tok, j]] = -1;
            j
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(120))]

    /// Permuting the slots of every token (ids and weights together), `-1` slots included, leaves y,
    /// grad.x, grad.w13 and grad.w2 bitwise unchanged and permutes grad.topk_weights, which is exactly 0
    /// at every `-1` slot.
    #[test]
    fn minus_one_slot_is_position_independent(s in shape(), kind in any::<u8>(), pseed in any::<u64>()) {
        let mut spec = Spec::from_tuple(s, kind_of(kind, true));
        given(&mut spec);
        let mut inp = build(&spec);
        let mut g = Gen::new(pseed);
        with_minus_one_slots(&mut inp, &mut g);
        let (t, k) = (spec.t, spec.k);
        let perms: Vec<Vec<usize>> = (0..t).map(|_| g.perm(k)).collect();
        let mut moved = inp.clone();
        {
            let (ids, w) = (inp.topk_ids.as_ref().unwrap(), inp.topk_weights.as_ref().unwrap());
            let (mids, mw) = (moved.topk_ids.as_mut().unwrap(), moved.topk_weights.as_mut().unwrap());
            for tok in 0..t {
                for j in 0..k {
                    mids[[tok, j]] = ids[[tok, perms[tok][j]]];
                    mw[[tok, j]] = w[[tok, perms[tok][j]]];
                }
            }
        }
        let (f0, b0) = run_default(&inp);
        let (f1, b1) = run_default(&moved);
        same_bits("y", &f0.y, &f1.y);
        same_bits("grad.x", &b0.grad_x, &b1.grad_x);
        same_bits("grad.w13", &b0.grad_w13, &b1.grad_w13);
        same_bits("grad.w2", &b0.grad_w2, &b1.grad_w2);
        let ids = inp.topk_ids.as_ref().unwrap();
        for tok in 0..t {
            for j in 0..k {
                let (a, b) = (b0.grad_topk_weights[[tok, perms[tok][j]]], b1.grad_topk_weights[[tok, j]]);
                prop_assert_eq!(a.to_bits(), b.to_bits(), "grad.topk_weights[{}, {}]", tok, j);
                if ids[[tok, perms[tok][j]]] < 0 {
                    prop_assert_eq!(b.to_bits(), 0f64.to_bits(), "grad.topk_weights at a -1 slot must be +0");
                }
            }
        }
    }

    /// A `-1` slot (whatever its weight) and the same slot on an expert the token does not otherwise use
    /// with weight exactly 0 give bitwise the same y, grad.x, grad.w13 and grad.w2 (a zero term changes
    /// no exact sum); grad.topk_weights differs only at that slot.
    #[test]
    fn minus_one_slot_equals_zero_weight(s in shape(), kind in any::<u8>(), pseed in any::<u64>()) {
        let mut spec = Spec::from_tuple(s, kind_of(kind, true));
        given(&mut spec);
        let mut off = build(&spec);
        let mut g = Gen::new(pseed);
        let slots = with_minus_one_slots(&mut off, &mut g);
        let (t, k, e) = (spec.t, spec.k, spec.e);
        // Same -1 slots with another (large) weight: nothing may change.
        let mut off2 = off.clone();
        // The -1 slots moved onto an unused expert with weight 0.
        let mut zero = off.clone();
        for (tok, &j) in slots.iter().enumerate() {
            off2.topk_weights.as_mut().unwrap()[[tok, j]] = 1e30;
            let used: Vec<i32> = off.topk_ids.as_ref().unwrap().row(tok).to_vec();
            let free: Vec<usize> = (0..e).filter(|&x| !used.contains(&(x as i32))).collect();
            zero.topk_ids.as_mut().unwrap()[[tok, j]] = free[g.below(free.len())] as i32;
            zero.topk_weights.as_mut().unwrap()[[tok, j]] = 0.0;
        }
        let (fo, bo) = run_default(&off);
        let (fo2, bo2) = run_default(&off2);
        let (fz, bz) = run_default(&zero);
        same_bits("y (-1 slot weight changed)", &fo.y, &fo2.y);
        assert_eq!(fo.rows, fo2.rows);
        same_bits("fwd.o (-1 slot weight changed)", &fo.o, &fo2.o);
        same_bits("bwd.do (-1 slot weight changed)", &bo.do_, &bo2.do_);
        same_bits("grad.x (-1 slot weight changed)", &bo.grad_x, &bo2.grad_x);
        same_bits("grad.w13 (-1 slot weight changed)", &bo.grad_w13, &bo2.grad_w13);
        same_bits("grad.w2 (-1 slot weight changed)", &bo.grad_w2, &bo2.grad_w2);
        same_bits("grad.topk_weights (-1 slot weight changed)", &bo.grad_topk_weights, &bo2.grad_topk_weights);
        same_bits("y", &fo.y, &fz.y);
        same_bits("grad.x", &bo.grad_x, &bz.grad_x);
        same_bits("grad.w13", &bo.grad_w13, &bz.grad_w13);
        same_bits("grad.w2", &bo.grad_w2, &bz.grad_w2);
        for tok in 0..t {
            for j in 0..k {
                let (a, b) = (bo.grad_topk_weights[[tok, j]], bz.grad_topk_weights[[tok, j]]);
                if j == slots[tok] {
                    prop_assert_eq!(a.to_bits(), 0f64.to_bits());
                } else {
                    prop_assert_eq!(a.to_bits(), b.to_bits(), "grad.topk_weights[{}, {}]", tok, j);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// 5. Expert relabelling
// ---------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(120))]

    /// New expert ρ(e) holds old expert e's weights and every id e becomes ρ(e): y, grad.x and
    /// grad.topk_weights are bitwise unchanged, grad.w13/grad.w2 permuted bitwise.
    #[test]
    fn expert_relabelling(s in shape(), kind in any::<u8>(), pseed in any::<u64>()) {
        let mut spec = Spec::from_tuple(s, kind_of(kind, true));
        given(&mut spec);
        let inp = build(&spec);
        let e = spec.e;
        let mut g = Gen::new(pseed);
        let rho = g.perm(e); // old e -> new rho[e]
        let mut inv = vec![0; e];
        for (old, &new) in rho.iter().enumerate() {
            inv[new] = old;
        }
        let mut re = inp.clone();
        re.w13 = take(&inp.w13, 0, &inv);
        re.w2 = take(&inp.w2, 0, &inv);
        re.topk_ids = Some(inp.topk_ids.as_ref().unwrap().mapv(|id| if id < 0 { -1 } else { rho[id as usize] as i32 }));
        let (f0, b0) = run_default(&inp);
        let (f1, b1) = run_default(&re);
        same_bits("y", &f0.y, &f1.y);
        same_bits("grad.x", &b0.grad_x, &b1.grad_x);
        same_bits("grad.topk_weights", &b0.grad_topk_weights, &b1.grad_topk_weights);
        same_bits("grad.w13", &take(&b0.grad_w13, 0, &inv), &b1.grad_w13);
        same_bits("grad.w2", &take(&b0.grad_w2, 0, &inv), &b1.grad_w2);
    }
}

// ---------------------------------------------------------------------------------------------------
// 6. Threads and engines
// ---------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// 1, 2, 3 and 7 rayon threads give bitwise the same outputs and intermediates as the global pool.
    #[test]
    fn thread_count_invariance(s in shape(), kind in any::<u8>()) {
        let inp = build(&Spec::from_tuple(s, kind_of(kind, true)));
        let (f0, b0) = run_default(&inp);
        for n in [1, 2, 3, 7] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap();
            let (f, b) = pool.install(|| run_default(&inp));
            same_forward(&f0, &f, true);
            same_backward(&b0, &b);
        }
    }

    /// The per-entry superaccumulator engine, the slicing engine and the default certified engine agree
    /// bitwise on everything.
    #[test]
    fn engine_invariance(s in shape(), kind in any::<u8>()) {
        let inp = build(&Spec::from_tuple(s, kind_of(kind, true)));
        let (f0, b0) = run_default(&inp);
        let (f1, b1) = run(&inp, Options { engine: Engine::Reference });
        same_forward(&f0, &f1, true);
        same_backward(&b0, &b1);
        let (f2, b2) = run(&inp, Options { engine: Engine::Ozaki });
        same_forward(&f0, &f2, true);
        same_backward(&b0, &b2);
    }
}

// ---------------------------------------------------------------------------------------------------
// 7. Ranks
// ---------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(80))]

    /// Every divisor of E as ep_ranks gives bitwise the same outputs and intermediates; the rank layout
    /// is the in-order, even split of the experts, its receive counts sum to M and match the expert
    /// offsets.
    #[test]
    fn rank_count_invariance(s in shape(), kind in any::<u8>()) {
        let mut inp = build(&Spec::from_tuple(s, kind_of(kind, true)));
        let e = inp.cfg.experts;
        inp.cfg.ep_ranks = 1;
        let (f0, b0) = run_default(&inp);
        for r in (1..=e).filter(|r| e % r == 0) {
            let mut c = inp.clone();
            c.cfg.ep_ranks = r;
            let (f, b) = run_default(&c);
            same_forward(&f0, &f, false);
            same_backward(&b0, &b);
            prop_assert_eq!(&f.ranks, &f.rows.ranks(r));
            let counts = f.ranks.counts();
            prop_assert_eq!(counts.len(), r);
            prop_assert_eq!(counts.iter().sum::<usize>(), f.rows.rows());
            let per = e / r;
            let off = &f.rows.expert_offsets;
            let mut next_row = 0;
            for (ri, rank) in f.ranks.ranks.iter().enumerate() {
                prop_assert_eq!(rank.experts.clone(), ri * per..(ri + 1) * per);
                prop_assert_eq!(counts[ri], off[(ri + 1) * per] - off[ri * per]);
                prop_assert_eq!(rank.rows.clone(), off[ri * per]..off[(ri + 1) * per]);
                prop_assert_eq!(rank.rows.start, next_row);
                next_row = rank.rows.end;
            }
            // Rows within each expert are in (token, slot) order and cover exactly the used slots.
            let ids = &f.topk_ids;
            let k = inp.cfg.top_k;
            let used = ids.iter().filter(|&&id| id >= 0).count();
            prop_assert_eq!(f.rows.rows(), used);
            for ex in 0..e {
                let rr = f.rows.expert_rows(ex);
                let mut prev: Option<(usize, usize)> = None;
                for row in rr {
                    let (tk, sl) = (f.rows.row_token[row], f.rows.row_slot[row]);
                    prop_assert_eq!(ids[[tk, sl]], ex as i32);
                    prop_assert_eq!(f.rows.slot_row[tk * k + sl], Some(row));
                    prop_assert!(prev.is_none_or(|p| p < (tk, sl)));
                    prev = Some((tk, sl));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// 8. Permutations of features and tokens
// ---------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Permuting the hidden features consistently (x columns, w13 last axis, w2 second axis,
    /// router.weight columns, dy columns) permutes y, grad.x, fwd.o, bwd.do, bwd.dx_rows columns and the
    /// weight gradients accordingly, bitwise; everything else (routing, h, a, da, dh, grad.topk_weights,
    /// dlogits) is bitwise unchanged.
    #[test]
    fn hidden_permutation(s in shape(), kind in any::<u8>(), pseed in any::<u64>()) {
        let inp = build(&Spec::from_tuple(s, kind_of(kind, true)));
        let p = Gen::new(pseed).perm(inp.cfg.hidden);
        let mut q = inp.clone();
        q.x = take(&inp.x, 1, &p);
        q.w13 = take(&inp.w13, 2, &p);
        q.w2 = take(&inp.w2, 1, &p);
        q.router_weight = inp.router_weight.as_ref().map(|r| take(r, 1, &p));
        q.dy = inp.dy.as_ref().map(|d| take(d, 1, &p));
        let (f0, b0) = run_default(&inp);
        let (f1, b1) = run_default(&q);
        same_bits("y", &take(&f0.y, 1, &p), &f1.y);
        assert_eq!(f0.topk_ids, f1.topk_ids);
        same_bits("topk_weights", &f0.topk_weights, &f1.topk_weights);
        same_opt("logits", &f0.logits, &f1.logits);
        same_bits("fwd.h", &f0.h, &f1.h);
        same_bits("fwd.a", &f0.a, &f1.a);
        same_bits("fwd.o", &take(&f0.o, 1, &p), &f1.o);
        same_bits("grad.x", &take(&b0.grad_x, 1, &p), &b1.grad_x);
        same_bits("grad.w13", &take(&b0.grad_w13, 2, &p), &b1.grad_w13);
        same_bits("grad.w2", &take(&b0.grad_w2, 1, &p), &b1.grad_w2);
        same_opt("grad.router.weight", &b0.grad_router_weight.as_ref().map(|g| take(g, 1, &p)), &b1.grad_router_weight);
        same_bits("grad.topk_weights", &b0.grad_topk_weights, &b1.grad_topk_weights);
        same_opt("dlogits", &b0.dlogits, &b1.dlogits);
        same_bits("bwd.do", &take(&b0.do_, 1, &p), &b1.do_);
        same_bits("bwd.da", &b0.da, &b1.da);
        same_bits("bwd.dh", &b0.dh, &b1.dh);
        same_bits("bwd.dx_rows", &take(&b0.dx_rows, 1, &p), &b1.dx_rows);
    }

    /// Permuting the intermediate features (gate row i and up row I+i together, w2 columns) changes no
    /// output bit and permutes h, a, da, dh, grad.w13 rows and grad.w2 columns.
    #[test]
    fn intermediate_permutation(s in shape(), kind in any::<u8>(), pseed in any::<u64>()) {
        let inp = build(&Spec::from_tuple(s, kind_of(kind, true)));
        let i_n = inp.cfg.intermediate;
        let p = Gen::new(pseed).perm(i_n);
        let p2: Vec<usize> = p.iter().copied().chain(p.iter().map(|&i| i_n + i)).collect();
        let mut q = inp.clone();
        q.w13 = take(&inp.w13, 1, &p2);
        q.w2 = take(&inp.w2, 2, &p);
        let (f0, b0) = run_default(&inp);
        let (f1, b1) = run_default(&q);
        same_bits("y", &f0.y, &f1.y);
        same_bits("fwd.h", &take(&f0.h, 1, &p2), &f1.h);
        same_bits("fwd.a", &take(&f0.a, 1, &p), &f1.a);
        same_bits("fwd.o", &f0.o, &f1.o);
        same_bits("grad.x", &b0.grad_x, &b1.grad_x);
        same_bits("grad.w13", &take(&b0.grad_w13, 1, &p2), &b1.grad_w13);
        same_bits("grad.w2", &take(&b0.grad_w2, 2, &p), &b1.grad_w2);
        same_bits("grad.topk_weights", &b0.grad_topk_weights, &b1.grad_topk_weights);
        same_opt("grad.router.weight", &b0.grad_router_weight, &b1.grad_router_weight);
        same_bits("bwd.da", &take(&b0.da, 1, &p), &b1.da);
        same_bits("bwd.dh", &take(&b0.dh, 1, &p2), &b1.dh);
        same_bits("bwd.dx_rows", &b0.dx_rows, &b1.dx_rows);
    }

    /// Permuting the tokens (x, dy and topk rows together) permutes y, grad.x, the routing and
    /// grad.topk_weights rows and leaves every weight gradient bitwise equal.
    #[test]
    fn token_permutation(s in shape(), kind in any::<u8>(), pseed in any::<u64>()) {
        let inp = build(&Spec::from_tuple(s, kind_of(kind, true)));
        let p = Gen::new(pseed).perm(inp.cfg.tokens);
        let mut q = inp.clone();
        q.x = take(&inp.x, 0, &p);
        q.dy = inp.dy.as_ref().map(|d| take(d, 0, &p));
        q.topk_weights = inp.topk_weights.as_ref().map(|w| take(w, 0, &p));
        q.topk_ids = inp.topk_ids.as_ref().map(|ids| ids.select(Axis(0), &p));
        let (f0, b0) = run_default(&inp);
        let (f1, b1) = run_default(&q);
        same_bits("y", &take(&f0.y, 0, &p), &f1.y);
        assert_eq!(f0.topk_ids.select(Axis(0), &p), f1.topk_ids);
        same_bits("topk_weights", &take(&f0.topk_weights, 0, &p), &f1.topk_weights);
        same_opt("logits", &f0.logits.as_ref().map(|l| take(l, 0, &p)), &f1.logits);
        same_bits("grad.x", &take(&b0.grad_x, 0, &p), &b1.grad_x);
        same_bits("grad.topk_weights", &take(&b0.grad_topk_weights, 0, &p), &b1.grad_topk_weights);
        same_opt("dlogits", &b0.dlogits.as_ref().map(|l| take(l, 0, &p)), &b1.dlogits);
        same_bits("grad.w13", &b0.grad_w13, &b1.grad_w13);
        same_bits("grad.w2", &b0.grad_w2, &b1.grad_w2);
        same_opt("grad.router.weight", &b0.grad_router_weight, &b1.grad_router_weight);
    }
}
