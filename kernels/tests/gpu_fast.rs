//! The fast fused kernels (`moe_kernels::fast`) against the exact oracle, stage by stage (`fast::check`: each
//! stored stage recomputed exactly from the kernels' own inputs to it, within an a-priori bound), on small
//! and odd shapes, plus bitwise run-to-run determinism with poisoned outputs (an element a kernel leaves
//! unwritten shows as NaN in the second run). Skips visibly without a GPU; fails with REQUIRE_GPU=1.

use moe_kernels::fast::case::FastCase;
use moe_kernels::fast::check::{check, Scope};
use moe_kernels::fast::{Engine, FastDims, FastKernels, FastLayer, FastTrace, TileOrder, ENGINES};
use moe_kernels::{gpu_for_test, Gpu, GpuError};
use moe_reference::config::Activation;

fn same(a: &FastTrace, b: &FastTrace) -> Result<(), String> {
    match a.first_difference(b) {
        Some((name, i)) => Err(format!("{name} differs between runs at {i}")),
        None => Ok(()),
    }
}

/// Forward and backward of `case` on a fresh layer (every row gather copied first, as `FastCase::run`) with
/// `setting` applied and its outputs NaN-poisoned first, and everything it stored.
fn run_poisoned(case: &FastCase, gpu: &Gpu, kern: &FastKernels, engine: Engine, setting: impl FnOnce(&mut FastLayer)) -> FastTrace {
    let mut layer = case.layer(gpu, kern, engine, true).expect("layer");
    setting(&mut layer);
    layer.poison_outputs().expect("poison");
    layer.forward().expect("forward");
    layer.backward().expect("backward");
    layer.trace().expect("trace")
}

/// Run one case twice (the second time on fresh buffers poisoned with NaN), demand bitwise equality, and
/// check the first run fully against the oracle. Returns (worst error/bound, elements checked).
#[allow(clippy::too_many_arguments)]
fn run_case(gpu: &Gpu, kern: &FastKernels, (wgmma, wgrad_wgmma, direct, persistent): Engine, seed: u64, t: usize, h: usize, i: usize, e: usize, k: usize, act: Activation, unused: f64) -> (f64, usize) {
    let case = FastCase::new(seed, t, h, i, e, k, act, unused);
    let run_with = |engine: Engine, poison: bool, gather_first: bool| -> FastTrace { case.run(gpu, kern, engine, gather_first, poison).expect("forward and backward") };
    let run = |engine: Engine, poison: bool| run_with(engine, poison, true);
    let engine = (wgmma, wgrad_wgmma, direct, persistent);
    let first = run(engine, false);
    let second = run(engine, true);
    if let Err(msg) = same(&first, &second) {
        panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}, wgmma {wgmma}/{wgrad_wgmma}/{direct}/{persistent}): not deterministic or an element left unwritten: {msg}");
    }
    if persistent {
        // same tiles and k order as the plain kernels of the same engine: the results must be bitwise theirs
        let plain = run((wgmma, wgrad_wgmma, direct, false), false);
        if let Err(msg) = same(&first, &plain) {
            panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}): the persistent GEMMs differ from the plain ones: {msg}");
        }
        // the backward's gathered operands read inside the GEMMs instead of copied into expert order first
        let in_gemm = run_with(engine, true, false);
        if let Err(msg) = same(&first, &in_gemm) {
            panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}): gathering inside the GEMMs differs from gathering first: {msg}");
        }
        // selective recomputation: H dropped (NaN) after forward and recomputed before backward
        let mut layer = case.layer(gpu, kern, engine, true).expect("layer");
        layer.forward().expect("forward");
        layer.forget_h().expect("forget H");
        layer.recompute_h().expect("recompute H");
        layer.backward().expect("backward");
        if let Err(msg) = same(&first, &layer.trace().expect("trace")) {
            panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}): backward after recompute_h differs: {msg}");
        }
        // X's rows not kept from forward (the default), gathered in GEMM1's loads (the default) or copied into
        // the o buffer first, and gathered again for grad_w13, against kept (`first`): the same bits
        for gemm1_copy in [false, true] {
            let trace = run_poisoned(&case, gpu, kern, engine, |l| {
                l.use_saved_x_rows(false);
                l.use_gemm1_gather_first(gemm1_copy);
            });
            if let Err(msg) = same(&first, &trace) {
                panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}): X's rows not kept (GEMM1 copy first: {gemm1_copy}) differ from kept: {msg}");
            }
        }
        // dY's rows for grad_w2 copied by a kernel of their own instead of written on by dA_raw (the default,
        // which `first` and the poisoned `second` ran: a row dA_raw failed to write would be NaN in grad_w2)
        if let Err(msg) = same(&first, &run_poisoned(&case, gpu, kern, engine, |l| l.use_dy_rows_from_da(false))) {
            panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}): dY's rows copied first differ from written by dA_raw: {msg}");
        }
        // the row GEMMs' tiles in groups of 3 row tiles, row tile fastest, and in one group per expert
        // (`set_tile_order`; the default orders column tiles fastest at these sizes): the same tiles, every one
        // written once (NaN-poisoned buffers)
        for order in [TileOrder::RowGroups(3), TileOrder::Experts] {
            if let Err(msg) = same(&first, &run_poisoned(&case, gpu, kern, engine, |l| l.set_tile_order(Some(order)))) {
                panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}): tiles in the order {order:?} differ: {msg}");
            }
        }
        // X replaced between forward and backward: the kept rows are stale, and the backward must gather the
        // new X as it does without them
        let x2: Vec<u16> = case.x.iter().rev().copied().collect();
        let changed = |save: bool| {
            let mut layer = case.layer(gpu, kern, engine, true).expect("layer");
            layer.use_saved_x_rows(save);
            layer.forward().expect("forward");
            layer.upload_x(&x2).expect("upload x");
            layer.backward().expect("backward");
            layer.trace().expect("trace")
        };
        if let Err(msg) = same(&changed(false), &changed(true)) {
            panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}): the backward read X's stale kept rows: {msg}");
        }
    }
    let scope = Scope::on_all_cores((0..t).collect(), None);
    match check(&case.host(), &first, &scope) {
        Ok(r) => (r.worst, r.elements),
        Err(msg) => panic!("case seed {seed} (T={t} H={h} I={i} E={e} k={k}, {act:?}, wgmma {wgmma}/{wgrad_wgmma}/{direct}/{persistent}): {msg}"),
    }
}

/// The engines to test (`moe_kernels::fast::ENGINES`): mma.sync always, the wgmma variants where the GPU has
/// them; `MOE_FAST_ENGINES=ws` (or a comma list of their names) narrows the list, e.g. for a compute-sanitizer
/// run.
fn engines(kern: &FastKernels) -> Vec<Engine> {
    let only = std::env::var("MOE_FAST_ENGINES").unwrap_or_default();
    let chosen: Vec<Engine> = ENGINES
        .iter()
        .filter(|(n, e)| (kern.wgmma || !e.0) && (only.is_empty() || only.split(',').any(|o| o.trim() == *n)))
        .map(|&(_, e)| e)
        .collect();
    assert!(!chosen.is_empty(), "MOE_FAST_ENGINES={only:?} names no engine this GPU has");
    chosen
}

fn kernels_for(gpu: &Gpu) -> FastKernels {
    let stages = std::env::var("MOE_FAST_STAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    FastKernels::load(gpu, stages).expect("fast kernels compile and load")
}

#[test]
fn fast_layer_matches_the_oracle_on_edge_shapes() {
    let Some(gpu) = gpu_for_test("fast_layer_matches_the_oracle_on_edge_shapes") else { return };
    let kern = kernels_for(&gpu);
    eprintln!("GPU: {} ({}, {} stages)", gpu.name, kern.arch, kern.stages);
    let clamped = Activation::SwigluClamped { alpha: 1.702, limit: 7.0 };
    let sw = Activation::Swiglu;
    // (seed, T, H, I, E, k, activation, fraction of -1 slots)
    let cases = [
        (1, 32, 64, 32, 8, 2, sw, 0.0),
        (2, 1, 48, 16, 4, 4, sw, 0.0),        // T = 1, k = E
        (3, 40, 32, 16, 8, 2, clamped, 0.2),  // -1 slots, clamped SwiGLU
        (4, 20, 32, 16, 16, 1, sw, 0.0),      // empty experts
        (5, 0, 32, 16, 4, 2, sw, 0.0),        // no tokens
        (6, 12, 32, 16, 4, 2, sw, 1.0),       // every slot -1
        (7, 127, 64, 32, 1, 1, sw, 0.0),      // 127 rows on one expert
        (8, 128, 64, 32, 1, 1, sw, 0.0),      // 128: one full tile
        (9, 129, 64, 32, 1, 1, sw, 0.0),      // 129: a tile of one row
        (10, 64, 72, 40, 8, 4, sw, 0.05),     // H, I not multiples of the tiles
        (11, 300, 256, 192, 4, 2, sw, 0.0),   // several row, column and k tiles; pipeline wraps
        (12, 160, 200, 136, 3, 3, clamped, 0.1), // k = E, odd tiles everywhere
        (13, 260, 8, 8, 2, 1, sw, 0.0),       // the smallest H and I
        (14, 200, 520, 264, 2, 2, sw, 0.0),   // more than one 256-wide tile and several k tiles on every GEMM
    ];
    // MOE_FAST_CASES=11,14: only the cases of these seeds (e.g. for the slow compute-sanitizer racecheck)
    let only = std::env::var("MOE_FAST_CASES").unwrap_or_default();
    let chosen: Vec<_> = cases.iter().filter(|c| only.is_empty() || only.split(',').any(|o| o.trim() == c.0.to_string())).copied().collect();
    assert!(!chosen.is_empty(), "MOE_FAST_CASES={only:?} names no case (seeds 1..={})", cases.len());
    let (mut worst, mut elements) = (0.0f64, 0usize);
    for wgmma in engines(&kern) {
        for &(seed, t, h, i, e, k, act, unused) in &chosen {
            let start = std::time::Instant::now();
            let (w, n) = run_case(&gpu, &kern, wgmma, seed, t, h, i, e, k, act, unused);
            eprintln!("  case seed {seed} (T={t} H={h} I={i} E={e} k={k}): worst error/bound {w:.3}, {:.1} s", start.elapsed().as_secs_f64());
            worst = worst.max(w);
            elements += n;
        }
        eprintln!("engine (wgmma rows, wgmma wgrad, weights as stored, persistent) = {wgmma:?}: {} cases passed", chosen.len());
    }
    eprintln!("{elements} elements checked in all, worst error/bound {worst:.3}");
}

#[test]
fn fast_layer_refuses_bad_input_with_an_error() {
    let Some(gpu) = gpu_for_test("fast_layer_refuses_bad_input_with_an_error") else { return };
    let kern = kernels_for(&gpu);
    let dims = |h, i| FastDims { tokens: 2, hidden: h, inter: i, experts: 4, top_k: 2 };
    let ids = [0, 1, 2, 3];
    let w = [0.5f32; 4];
    for (h, i) in [(30, 16), (32, 12), (0, 16)] {
        let r = FastLayer::new(&gpu, &kern, dims(h, i), Activation::Swiglu, &ids, &w);
        assert!(matches!(r, Err(GpuError::Input(_))), "H = {h}, I = {i} must be refused with an input error");
    }
    for bad in [[0, 4, 2, 3], [0, 0, 2, 3], [0, -2, 1, 2]] {
        let r = FastLayer::new(&gpu, &kern, dims(32, 16), Activation::Swiglu, &bad, &w);
        assert!(matches!(r, Err(GpuError::Input(_))), "ids {bad:?} must be refused");
    }
    let r = FastLayer::new(&gpu, &kern, dims(32, 16), Activation::Swiglu, &ids[..3], &w);
    assert!(matches!(r, Err(GpuError::Input(_))), "a short ids array must be refused");
}

#[test]
fn fast_layer_matches_the_oracle_on_random_shapes() {
    use proptest::test_runner::{Config, TestRunner};
    let Some(gpu) = gpu_for_test("fast_layer_matches_the_oracle_on_random_shapes") else { return };
    let kern = kernels_for(&gpu);
    let cases = std::env::var("GPU_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24u32);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let count = std::cell::Cell::new(0usize);
    let worst = std::cell::Cell::new(0.0f64);
    // H and I in multiples of 8 (what the kernels take), T up to a few row tiles
    let strategy = (0usize..300, 1usize..24, 1usize..20, 1usize..10, 1usize..10, 0u8..3, 0u8..4, proptest::num::u64::ANY);
    runner
        .run(&strategy, |(t, h8, i8, e, k, act, unused, seed)| {
            let k = k.min(e);
            let act = if act < 2 { Activation::Swiglu } else { Activation::SwigluClamped { alpha: 1.702, limit: 7.0 } };
            let unused = [0.0, 0.0, 0.3, 1.0][unused as usize];
            let mut w = 0.0f64;
            for wgmma in engines(&kern) {
                w = w.max(run_case(&gpu, &kern, wgmma, seed, t, 8 * h8, 8 * i8, e, k, act, unused).0);
            }
            worst.set(worst.get().max(w));
            count.set(count.get() + 1);
            Ok(())
        })
        .unwrap();
    eprintln!("{} random cases passed, worst error/bound {:.3}", count.get(), worst.get());
}

/// The dynamic tile scheduler (`MOE_FAST_DYNAMIC`: which persistent GEMMs take tiles from a global counter)
/// changes which block computes a tile, never its bits: every persistent GEMM dynamic, and none, against the
/// default choice, on two small cases and one with more tiles than an H100/H200 has SMs in every row GEMM
/// (T = 8192, k = 2: 16384 rows, 128+ row tiles), so that blocks come back to the queue. Each other choice
/// runs twice per case: the counters one launch leaves must be zero for the next. The row tiles in groups of 8
/// and in one group per expert (`FastLayer::set_tile_order`) with each scheduler too. And the same with every
/// persistent GEMM in clusters of two (`MOE_FAST_CLUSTERED=all`, B multicast), with the default dynamic choice
/// and with all dynamic: the cluster-wide tile queue.
#[test]
fn the_dynamic_tile_scheduler_changes_no_bits() {
    use moe_kernels::fast::KernelSettings;
    let Some(gpu) = gpu_for_test("the_dynamic_tile_scheduler_changes_no_bits") else { return };
    let kern = kernels_for(&gpu);
    if !kern.wgmma {
        moe_kernels::skip_notice(&format!("the_dynamic_tile_scheduler_changes_no_bits: no persistent GEMMs on {}", kern.arch));
        return;
    }
    let ws = ENGINES.iter().find(|(n, _)| *n == "ws").expect("the ws engine").1;
    let base = KernelSettings::from_env();
    // (name, MOE_FAST_DYNAMIC, MOE_FAST_CLUSTERED, MOE_FAST_DEFINES): the clustered kernels with the default
    // dynamic choice and with all dynamic run the cluster-wide tile queue (block 0 of a cluster claims, the
    // partner reads its slot). And the padding skips (a warpgroup whose 64 rows of a tile are all padding issues
    // no wgmma, nor do the weight gradients' empty 16-row slices): outside dX (WS_SKIP_EMPTY_WG=2), and in dX too
    // with every GEMM clustered and dynamic (the clusters' padding tiles have no rows in either warpgroup).
    let variants = [
        ("all", "all", "none", ""),
        ("none", "none", "none", ""),
        ("clustered", "", "all", ""),
        ("clustered+all", "all", "all", ""),
        ("skips", "", "none", "WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"),
        ("skips+dx+clustered+all", "all", "all", "WS_SKIP_EMPTY_WG=1 WS_SKIP_EMPTY_K=1"),
    ];
    let others: Vec<(&str, FastKernels)> = variants
        .into_iter()
        .map(|(name, dynamic, clustered, defines)| {
            let mut set = vec![("MOE_FAST_CLUSTERED".to_string(), clustered.to_string())];
            if !dynamic.is_empty() {
                set.push(("MOE_FAST_DYNAMIC".into(), dynamic.into()));
            }
            if !defines.is_empty() {
                set.push(("MOE_FAST_DEFINES".into(), defines.into()));
            }
            (name, FastKernels::load_with(&gpu, kern.stages, &base.with(&set).unwrap()).expect("kernels load"))
        })
        .collect();
    for (seed, t, h, i, e, k) in [(11u64, 300, 256, 192, 4, 2), (14, 200, 520, 264, 2, 2), (21, 8192, 1024, 256, 8, 2)] {
        let case = FastCase::new(seed, t, h, i, e, k, Activation::Swiglu, 0.05);
        let a = case.run(&gpu, &kern, ws, true, false).expect("default kernels");
        for (choice, other) in &others {
            for run in 0..2 {
                let b = case.run(&gpu, other, ws, true, run == 1).expect("other kernels");
                if let Err(msg) = same(&a, &b) {
                    panic!("scheduler variant {choice}, case seed {seed} (T={t} H={h} I={i} E={e} k={k}), run {run}: {msg}");
                }
            }
        }
        // the row tiles fastest in groups of 8 and in one group per expert (`set_tile_order`), with each
        // scheduler: blocks that come back to the queue take the tiles in that order
        for (choice, kernels) in std::iter::once(("default", &kern)).chain(others.iter().map(|(c, k)| (*c, k))) {
            for order in [TileOrder::RowGroups(8), TileOrder::Experts] {
                if let Err(msg) = same(&a, &run_poisoned(&case, &gpu, kernels, ws, |l| l.set_tile_order(Some(order)))) {
                    panic!("scheduler variant {choice} with the tile order {order:?}, case seed {seed} (T={t} H={h} I={i} E={e} k={k}): {msg}");
                }
            }
        }
    }
}

/// `FastLayer::set_repeat` (what `bench-gpu --kernel-energy-ms` uses to run one kernel for a second): a pass in
/// which any one kernel runs three times in a row stores exactly what a plain pass stores, for every kernel
/// label of every engine, with the layer's default settings (bench-gpu's) and with every row gather copied
/// first; and the in-place kernel is refused.
#[test]
fn repeating_one_kernel_changes_no_output() {
    use moe_kernels::fast::NOT_REPEATABLE;
    let Some(gpu) = gpu_for_test("repeating_one_kernel_changes_no_output") else { return };
    let kern = kernels_for(&gpu);
    let case = FastCase::new(31, 300, 256, 192, 4, 2, Activation::Swiglu, 0.05);
    for engine in engines(&kern) {
        for all_copied_first in [false, true] {
            let run = |repeat: Option<(&'static str, usize)>, profile: bool| -> Result<(FastTrace, Vec<&'static str>), GpuError> {
                let mut layer = if all_copied_first {
                    case.layer(&gpu, &kern, engine, true)?
                } else {
                    let mut l = FastLayer::new(&gpu, &kern, case.dims, case.act, &case.ids, &case.weights)?;
                    l.set_engine(engine)?;
                    l.upload(&case.x, &case.w13, &case.w2, &case.dy)?;
                    l
                };
                layer.set_repeat(repeat)?;
                layer.set_profiling(profile);
                layer.poison_outputs()?;
                layer.forward()?;
                layer.backward()?;
                layer.sync()?;
                let labels = layer.kernel_times()?.into_iter().map(|k| k.name).collect();
                Ok((layer.trace()?, labels))
            };
            let (plain, labels) = run(None, true).expect("plain pass");
            assert!(labels.len() >= 8, "engine {engine:?}: only {labels:?} profiled");
            for &label in labels.iter().filter(|l| !NOT_REPEATABLE.contains(l)) {
                let (again, _) = run(Some((label, 3)), false).unwrap_or_else(|e| panic!("engine {engine:?}, {label} three times: {e}"));
                if let Err(msg) = same(&plain, &again) {
                    panic!("engine {engine:?} (every row gather copied first: {all_copied_first}), {label} launched three times: {msg}");
                }
            }
            for &label in NOT_REPEATABLE {
                assert!(labels.contains(&label), "{label} is not a kernel of engine {engine:?}: {labels:?}");
                let err = run(Some((label, 2)), false).err().expect("an in-place kernel is refused");
                assert!(err.to_string().contains(label), "{err}");
            }
        }
    }
}

/// `FastLayer::fill_random_from` (bench-gpu's inputs): normal draws (`fc_fill_normal`) with each buffer's
/// standard deviation (x and dY 1, W13 H^-1/2, W2 I^-1/2) and a normal's tails, uniform draws inside their
/// interval; a different seed gives different bits.
#[test]
fn device_random_inputs_have_their_distribution() {
    use moe_kernels::fast::InputDist;
    let Some(gpu) = gpu_for_test("device_random_inputs_have_their_distribution") else { return };
    let kern = kernels_for(&gpu);
    let case = FastCase::new(5, 4096, 256, 128, 4, 2, Activation::Swiglu, 0.0);
    let (h, i) = (case.dims.hidden as f64, case.dims.inter as f64);
    let draw = |seed: u64, dist: InputDist| {
        let mut layer = FastLayer::new(&gpu, &kern, case.dims, case.act, &case.ids, &case.weights).expect("layer");
        layer.fill_random_from(seed, dist).expect("fill");
        layer.inputs().expect("inputs")
    };
    let vals = |b: &[u16], std: f64| -> Vec<f64> { b.iter().map(|&v| half::bf16::from_bits(v).to_f64() / std).collect() };
    let (x, w13, w2, dy) = draw(3, InputDist::Normal);
    for (name, v) in [("x", vals(&x, 1.0)), ("w13", vals(&w13, h.powf(-0.5))), ("w2", vals(&w2, i.powf(-0.5))), ("dy", vals(&dy, 1.0))] {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let std = (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
        let beyond2 = v.iter().filter(|x| x.abs() > 2.0).count() as f64 / n;
        assert!(mean.abs() < 0.01 && (std - 1.0).abs() < 0.01, "{name}: mean {mean}, std {std} in units of its std");
        assert!((beyond2 - 0.0455).abs() < 0.005, "{name}: P(|z| > 2) = {beyond2}, a normal's is 0.0455");
        assert!(v.iter().all(|x| x.is_finite() && x.abs() < 6.0), "{name}: a value beyond 6 std");
    }
    assert_ne!(draw(4, InputDist::Normal).0, x, "another seed, other bits");
    let (ux, ..) = draw(3, InputDist::Uniform);
    assert!(vals(&ux, 1.0).iter().all(|v| v.abs() <= 3f64.sqrt() * 1.004), "uniform x inside [-sqrt 3, sqrt 3]");
}

/// `FastLayer::seed_intermediates_from` (bench-gpu `--ab "...; SEED_FROM_A=1"`): a layer that has run no pass
/// holds, after seeding, the other layer's H, A and o bitwise (dA_raw is not in the trace; the same copy),
/// and a forward of its own then leaves them as they were (same inputs); layers of other dims are refused.
#[test]
fn seeding_copies_the_gemm_written_intermediates() {
    let Some(gpu) = gpu_for_test("seeding_copies_the_gemm_written_intermediates") else { return };
    let kern = kernels_for(&gpu);
    let case = FastCase::new(9, 300, 256, 192, 4, 2, Activation::Swiglu, 0.05);
    let layer = |c: &FastCase| {
        let mut l = FastLayer::new(&gpu, &kern, c.dims, c.act, &c.ids, &c.weights).expect("layer");
        l.upload(&c.x, &c.w13, &c.w2, &c.dy).expect("upload");
        l
    };
    let mut a = layer(&case);
    a.forward().expect("forward");
    a.backward().expect("backward");
    let ta = a.trace().expect("trace");
    assert!(ta.h.iter().any(|&v| v != 0), "A's pass wrote H");
    let mut b = layer(&case);
    assert!(b.trace().expect("trace").h.iter().all(|&v| v == 0), "B has run no pass");
    b.seed_intermediates_from(&a).expect("seed");
    let tb = b.trace().expect("trace");
    assert!(ta.h == tb.h && ta.a == tb.a && ta.o == tb.o, "H, A and o copied bitwise");
    assert!(tb.dh.iter().all(|&v| v == 0), "only the GEMM-written intermediates are copied");
    let other = FastCase::new(9, 300, 256, 128, 4, 2, Activation::Swiglu, 0.05);
    let err = layer(&other).seed_intermediates_from(&a).expect_err("other dims are refused");
    assert!(err.to_string().contains("seed_intermediates_from"), "{err}");
}

/// The GPU fuzz target's seeds, from the repository root (the GPU machine runs the staged binaries there) or
/// from this crate's directory (`cargo test`).
fn seeds_dir() -> &'static std::path::Path {
    ["fuzz/corpus/gpu_fast", "../fuzz/corpus/gpu_fast"]
        .into_iter()
        .map(std::path::Path::new)
        .find(|d| d.is_dir())
        .expect("fuzz/corpus/gpu_fast not found from the repository root or kernels/")
}

/// The GPU fuzz target's committed seeds (`fuzz/corpus/gpu_fast/`, and any crash input added there as a
/// regression), each decoded and checked as the target does (`FuzzCase`): twice for bitwise equality, then
/// every token and weight-gradient entry against the oracle.
#[test]
fn the_fuzz_seeds_pass() {
    let Some(gpu) = gpu_for_test("the_fuzz_seeds_pass") else { return };
    let kern = kernels_for(&gpu);
    let dir = seeds_dir();
    let mut seeds: Vec<_> = std::fs::read_dir(dir).expect("read the seeds").map(|e| e.expect("a seed").path()).collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    for path in &seeds {
        let data = std::fs::read(path).expect("read a seed");
        let input = moe_kernels::fast::case::FuzzCase::decode(&data, kern.wgmma);
        match input.run_and_check(&gpu, &kern) {
            Ok(r) => eprintln!("{}: {} ({} elements, worst error/bound {:.3})", path.display(), input.what, r.elements, r.worst),
            Err(msg) => panic!("{}: {msg}", path.display()),
        }
    }
}

/// The seeds cover what their names say (no GPU needed): each file decodes to these parameters, worked out
/// by hand from the byte layout in `FuzzParams::decode` (which `FuzzCase::decode` builds its case from).
#[test]
fn the_fuzz_seeds_decode_to_their_names() {
    let expected = [
        ("all-slots-unused", "seed 6 T=200 H=136 I=200 E=3 k=3 Swiglu unused 1 engine ws gather-first true"),
        ("clamped-half-unused-wgmma", "seed 5 T=64 H=72 I=64 E=8 k=3 SwigluClamped { alpha: 1.702, limit: 7.0 } unused 0.5 engine wgmma gather-first true"),
        ("full-size-clamped-ws", "seed 2 T=299 H=264 I=200 E=8 k=8 SwigluClamped { alpha: 1.702, limit: 7.0 } unused 0.1 engine ws gather-first true"),
        ("mma-engine-clamped", "seed 9 T=255 H=128 I=192 E=7 k=5 SwigluClamped { alpha: 1.702, limit: 7.0 } unused 0.1 engine mma gather-first true"),
        ("one-token-wgmma-rows", "seed 4 T=1 H=8 I=8 E=1 k=1 Swiglu unused 0 engine wgmma-rows gather-first true"),
        ("row-tile-plus-one-wgmma-t", "seed 7 T=129 H=264 I=72 E=1 k=1 SwigluClamped { alpha: 1.702, limit: 7.0 } unused 0 engine wgmma-t gather-first false"),
        ("two-row-tiles-plain-ws", "seed 3 T=256 H=256 I=128 E=1 k=1 Swiglu unused 0 engine ws gather-first false"),
        ("zero-tokens", "seed 8 T=0 H=64 I=64 E=4 k=2 Swiglu unused 0 engine ws gather-first true"),
    ];
    let dir = seeds_dir();
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, expected.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>(), "the seeds and this table differ");
    for (name, what) in expected {
        let data = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(moe_kernels::fast::case::FuzzParams::decode(&data, true).what(), what, "{name}");
    }
}
