//! The emulated recipes against the exact oracle: every output and intermediate of every named recipe
//! lies within its a-priori bound (soundness), over generated shapes, routings, activations and input
//! scales; and the bounds are not uselessly loose (tightness, printed per tensor).

mod common;

use common::{build, Kind, Spec};
use moe_reference::emulate::{self, tightness::tightness};
use moe_reference::layer::{self, named_tensor, LayerInputs, Options};
use moe_reference::recipe::{Recipe, NAMED};
use proptest::prelude::*;

fn scaled(mut inp: LayerInputs, sx: i32, sw: i32) -> LayerInputs {
    let (fx, fw) = (2f64.powi(sx), 2f64.powi(sw));
    inp.x.mapv_inplace(|v| v * fx);
    inp.w13.mapv_inplace(|v| v * fw);
    inp.w2.mapv_inplace(|v| v * fw);
    inp
}

/// Every bounded tensor within its bound. Then a second faithful "kernel" of the same recipe (every sum
/// accumulated exactly, then rounded to f32, instead of the recipe's order and truncations) is checked the
/// way `moe-oracle check` does: within min(a-priori bound, |emulated − exact| + deviation bound). Returns
/// the per-tensor statistics of the emulation under its a-priori bound and of that check.
fn check_sound(inp: &LayerInputs, recipe: &Recipe) -> Vec<(emulate::tightness::Tightness, emulate::tightness::Tightness)> {
    let (fwd, bwd) = common::run_default(inp);
    if fwd.y.iter().chain(bwd.grad_x.iter()).any(|v| !v.is_finite()) {
        // Degenerate routing (e.g. sigmoid scores that all underflow to 0, normalised: 0/0): the exact
        // result itself is undefined, so there is nothing to bound.
        return Vec::new();
    }
    let em = emulate::run(inp, recipe, Options::default()).expect("named recipes run");
    let other = emulate::run(inp, &recipe.clone().with_accumulate("exact"), Options::default()).expect("runs");
    let mut stats = Vec::new();
    for (name, bound) in &em.bounds {
        let got = named_tensor(&em.fwd, em.bwd.as_ref(), name).unwrap_or_else(|| panic!("{name} not emulated"));
        let exact = named_tensor(&fwd, Some(&bwd), name).unwrap_or_else(|| panic!("{name} not in the oracle"));
        let cand = named_tensor(&other.fwd, other.bwd.as_ref(), name).unwrap();
        let check = em.check_bound(name, exact.view()).unwrap();
        let bound = bound.mapv(f64::from);
        for (what, got, bound) in [("a-priori", got.view(), bound.view()), ("check", cand.view(), check.view())] {
            let t = tightness(name, got.view(), exact.view(), bound.view());
            if t.violations > 0 {
                let i = t.worst.unwrap();
                panic!(
                    "recipe {} ({what}): {name} violates its bound at flat index {i}: got {:e}, exact {:e}, bound {:e} (ratio {:.3}, {} violations of {})",
                    recipe.name,
                    got.iter().nth(i).unwrap(),
                    exact.iter().nth(i).unwrap(),
                    bound.iter().nth(i).unwrap(),
                    t.max,
                    t.violations,
                    t.elements
                );
            }
        }
        stats.push((tightness(name, got.view(), exact.view(), bound.view()), tightness(name, cand.view(), exact.view(), check.view())));
    }
    stats
}

fn recipe_of(sel: u8) -> Recipe {
    let name = NAMED[sel as usize % NAMED.len()];
    let r = Recipe::named(name).unwrap();
    match sel / NAMED.len() as u8 % 4 {
        1 => r.with_accumulate("f32"),
        2 if name.starts_with("fp8") => r.with_accumulate("hopper-fp8-fast"),
        3 => r.with_accumulate("exact"),
        _ => r,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn emulated_results_lie_within_their_bounds(
        shape in (0usize..24, 1usize..300, 1usize..160, 1usize..6, 1usize..4, 0u8..7, 0u8..2, any::<u64>()),
        recipe in 0u8..24,
        sx in -12i32..12,
        sw in -12i32..12,
    ) {
        let inp = scaled(build(&Spec::from_tuple(shape, Kind::F64)), sx, sw);
        check_sound(&inp, &recipe_of(recipe));
    }
}

/// Boundary shapes: block edges (127/128/129 rows on one expert, K = 128·n ± 1), an empty expert, k = E.
#[test]
fn block_edges_and_empty_experts_stay_within_bounds() {
    for (t, h, i, e, k) in [(129, 129, 127, 3, 1), (128, 256, 64, 2, 2), (127, 128, 129, 4, 4), (1, 1, 1, 1, 1)] {
        for name in NAMED {
            let spec = Spec::from_tuple((t, h, i, e, k, 0, 0, 7), Kind::Bf16);
            check_sound(&build(&spec), &Recipe::named(name).unwrap());
        }
    }
}

/// Tightness on a mid-size case: the median |error|/bound of every tensor of every recipe, printed, and
/// required to be above a floor that a grossly loose bound would miss.
#[test]
fn bounds_are_not_grossly_loose() {
    let spec = Spec::from_tuple((64, 512, 256, 4, 2, 3, 0, 11), Kind::Bf16);
    let inp = build(&spec);
    for name in NAMED {
        for (a, t) in check_sound(&inp, &Recipe::named(name).unwrap()) {
            eprintln!(
                "{name:<13} {:<20} a-priori median {:.1e} p99 {:.1e}  check median {:.3e}  p99 {:.3e}  max {:.3}",
                t.name, a.median, a.p99, t.median, t.p99, t.max
            );
        }
    }
    let _ = layer::forward; // the oracle is what the ratios are measured against
}

/// The per-instruction truncation bound where the GEMM stage applies it (blockwise FP8: the model writes
/// its instructions' magnitudes, the stage turns them into bounds). Inputs whose every small product the
/// Hopper FP8 accumulator drops (per 128-block: C = 2^20 from sixteen 256·256, then 94 products 14·9 =
/// 126 below its unit 2^7): the emulated values lie within their a-priori bound of the exact result, and
/// within their deviation bound of an exactly accumulating kernel fed the same codes, at a third of it
/// (the bound covers the emulator's truncation and any other kernel's, each at most ~1.5x its worst case).
/// `--same-schedule` with deviating operands: a kernel that follows the recipe's schedule exactly but is fed a
/// slightly different code truncates differently, so the deviation bound must keep the truncation terms. One
/// instruction holds a term of 256 (alignment unit 2^(8-13) = 1/32) and a small one that the emulator's code
/// 0.0586 (1.875 units: truncated to 1) and the next E4M3 code 0.0625 (2 units, kept) put on either side of a
/// unit: the results differ by 1/32, far more than the fed deviation (~0.004) through the products.
#[test]
fn same_schedule_deviation_covers_a_changed_truncation() {
    use moe_reference::emulate::stage::{gemm_stage_with, GemmPlan};
    use moe_reference::recipe::Storage;
    use ndarray::Array2;
    let recipe = Recipe::named("fp8-block").unwrap();
    let plan = GemmPlan { same_schedule: true, ..GemmPlan::parse("gemm1", &recipe.gemm1).unwrap() };
    let k = 128;
    let operands = |small: f64| {
        let (mut a, mut b) = (Array2::<f64>::zeros((1, k)), Array2::<f64>::zeros((1, k)));
        for (j, x, w) in [(0, 16.0, 16.0), (1, small, 1.0), (40, 448.0, 0.0), (72, 0.0, 448.0)] {
            a[[0, j]] = x; // block maxima 448: scale 1, codes = values
            b[[0, j]] = w;
        }
        (a, b)
    };
    let ((a, b), (a2, _)) = (operands(0.05859375), operands(0.0625));
    let mut ad = Array2::<f64>::zeros((1, k));
    ad[[0, 1]] = 0.0625 - 0.05859375; // the kernel's operand may differ from the emulator's by this much
    let (za, zb) = (Array2::<f64>::zeros((1, k)), Array2::<f64>::zeros((1, k)));
    let em = gemm_stage_with(&plan, a.view(), za.view(), Some(ad.view()), b.view(), zb.view(), Some(zb.view()), Storage::F32);
    let kernel = gemm_stage_with(&plan, a2.view(), za.view(), None, b.view(), zb.view(), None, Storage::F32);
    let (v, v2, dev) = (em.out.v[[0, 0]], kernel.out.v[[0, 0]], em.dev.expect("deviations asked for")[[0, 0]]);
    assert_eq!((v, v2), (256.03125, 256.0625), "the model truncates the small term to 1 and 2 units of 1/32");
    assert!((v2 - v).abs() <= dev, "deviation bound {dev:e} below the same-schedule kernel's {:e}", (v2 - v).abs());
}

#[test]
fn fp8_truncation_through_the_stage() {
    use moe_reference::emulate::stage::{gemm_stage_with, GemmPlan};
    use moe_reference::recipe::Storage;
    use ndarray::Array2;
    let recipe = Recipe::named("fp8-block").unwrap();
    let plan = GemmPlan::parse("gemm1", &recipe.gemm1).unwrap();
    let exact_plan = GemmPlan::parse("gemm1", &recipe.clone().with_accumulate("exact").gemm1).unwrap();
    let (m, n, k) = (2, 3, 256);
    let (mut a, mut b) = (Array2::<f64>::zeros((m, k)), Array2::<f64>::zeros((n, k)));
    for o in [0, 128] {
        for j in 0..128 {
            let (x, w) = match j {
                0..16 => (256.0, 256.0),
                40 => (448.0, 0.0), // block maxima 448: scale 1, codes = values
                72 => (0.0, 448.0),
                32.. => (14.0, 9.0),
                _ => (0.0, 0.0),
            };
            a.column_mut(o + j).fill(x);
            b.column_mut(o + j).fill(w);
        }
    }
    let (za, zb) = (Array2::<f64>::zeros((m, k)), Array2::<f64>::zeros((n, k)));
    let stage = |p: &GemmPlan| gemm_stage_with(p, a.view(), za.view(), Some(za.view()), b.view(), zb.view(), Some(zb.view()), Storage::F32);
    let (em, other) = (stage(&plan), stage(&exact_plan));
    let dev = em.dev.expect("deviations asked for");
    let exact = 2.0 * (16.0 * 65536.0 + 94.0 * 126.0);
    for ((i, j), &v) in em.out.v.indexed_iter() {
        assert_eq!(v, 2.0 * 1048576.0, "the model drops every small product");
        assert_eq!(other.out.v[[i, j]], exact, "the exact kernel");
        let (err, bound) = ((v - exact).abs(), em.out.b[[i, j]]);
        assert!(err <= bound, "({i},{j}): a-priori bound {bound:e} below the error {err:e}");
        let (d, dv) = ((v - other.out.v[[i, j]]).abs(), dev[[i, j]]);
        eprintln!("({i},{j}): |emulated - exact kernel| {d:e}, deviation bound {dv:e} (ratio {:.3}), a-priori {bound:e}", d / dv);
        assert!(d <= dv, "({i},{j}): deviation bound {dv:e} below {d:e}");
        assert!(d >= 0.3 * dv, "({i},{j}): deviation bound {dv:e} loose for {d:e}");
    }
}

/// Deviations off (as `moe-oracle run --recipe` runs): the same values and bounds, bit for bit, as with
/// them, and no deviation bounds at all (so that `check_bound` falls back to the a-priori bound instead of
/// reading zeros as deviations). Routed (router gradients too) and given routing, every named recipe.
#[test]
fn deviations_off_changes_no_value_or_bound() {
    for (mode, seed) in [(0u8, 3u64), (3, 5)] {
        let spec = Spec::from_tuple((40, 136, 72, 4, 2, mode, 0, seed), Kind::Bf16);
        let inp = build(&spec);
        for name in NAMED {
            let recipe = Recipe::named(name).unwrap();
            let on = emulate::EmulateOptions { keep_quantised: false, same_schedule: false, deviations: true };
            let with = emulate::run_opts(&inp, &recipe, Options::default(), on).unwrap();
            let without = emulate::run_opts(&inp, &recipe, Options::default(), emulate::EmulateOptions { deviations: false, ..on }).unwrap();
            assert!(without.deviations.is_empty(), "{name}: deviations computed although not asked for");
            assert!(!with.deviations.is_empty(), "{name}: no deviations although asked for");
            assert_eq!(with.bounds.len(), without.bounds.len(), "{name}");
            for ((n1, b1), (n2, b2)) in with.bounds.iter().zip(&without.bounds) {
                assert_eq!(n1, n2);
                let bits = |a: &ndarray::ArrayD<f32>| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(b1), bits(b2), "{name}: bound of {n1} changed");
                let v1 = named_tensor(&with.fwd, with.bwd.as_ref(), n1).unwrap();
                let v2 = named_tensor(&without.fwd, without.bwd.as_ref(), n1).unwrap();
                assert!(v1.iter().zip(v2.iter()).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}: value of {n1} changed");
                // The check's bound without deviations is the a-priori bound itself.
                let exact = v1.mapv(|v| v + 1.0);
                let cb = without.check_bound(n1, exact.view()).unwrap();
                assert!(cb.iter().zip(b2.iter()).all(|(c, b)| c.to_bits() == f64::from(*b).to_bits()), "{name}: {n1}");
            }
        }
    }
}
