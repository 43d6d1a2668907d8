//! The simple GPU forward and backward (bf16 storage, f32 accumulation) against the exact oracle, stage by stage: each
//! stage is recomputed exactly from the GPU's own inputs to that stage and must lie within an a-priori
//! bound of f32 accumulation plus one bf16 rounding. Skips visibly without a GPU; fails with REQUIRE_GPU=1.

use moe_kernels::check::{case, check_case};
use moe_kernels::{gpu_for_test, Gpu, Routing};
use moe_reference::config::Activation;

#[test]
fn forward_and_backward_match_the_oracle_stage_by_stage() {
    let Some(gpu) = gpu_for_test("forward_and_backward_match_the_oracle_stage_by_stage") else { return };
    eprintln!("GPU: {}", gpu.name);
    let clamped = Activation::SwigluClamped { alpha: 1.702, limit: 7.0 };
    // (seed, T, H, I, E, k, activation, fraction of -1 slots): edge cases of the golden set included.
    let cases = [
        (1, 32, 64, 32, 8, 2, Activation::Swiglu, 0.0),
        (2, 1, 48, 16, 4, 4, Activation::Swiglu, 0.0),     // T = 1, k = E
        (3, 40, 32, 16, 8, 2, clamped, 0.2),               // -1 slots, clamped SwiGLU
        (4, 20, 32, 16, 16, 1, Activation::Swiglu, 0.0),   // empty experts
        (5, 0, 32, 16, 4, 2, Activation::Swiglu, 0.0),     // no tokens
        (6, 12, 32, 16, 4, 2, Activation::Swiglu, 1.0),    // every slot -1
        (7, 127, 64, 32, 1, 1, Activation::Swiglu, 0.0),   // 127 rows on one expert
        (8, 128, 64, 32, 1, 1, Activation::Swiglu, 0.0),   // 128
        (9, 129, 64, 32, 1, 1, Activation::Swiglu, 0.0),   // 129
        (10, 64, 256, 96, 8, 4, Activation::Swiglu, 0.05), // longer contractions
    ];
    let mut worst = 0.0f64;
    for (seed, t, h, i, e, k, act, unused) in cases {
        let (cfg, x, w13, w2, ids, w) = case(seed, t, h, i, e, k, act, unused);
        worst = worst.max(check_case(&gpu, &cfg, &x, &w13, &w2, &ids, &w));
    }
    eprintln!("{} cases, worst error/bound {worst:.3}", cases.len());
    // bad routing is an error value, not a kernel fault
    let (cfg, x, w13, w2, mut ids, w) = case(11, 4, 16, 8, 4, 2, Activation::Swiglu, 0.0);
    ids[[1, 0]] = 4;
    let r = gpu.forward(&cfg, &x, &w13, &w2, &Routing::Given { topk_ids: ids.clone(), topk_weights: w.clone() }, None);
    assert!(matches!(r, Err(moe_kernels::GpuError::Input(_))), "out-of-range id must be refused");
    ids[[1, 0]] = ids[[1, 1]];
    let r = gpu.forward(&cfg, &x, &w13, &w2, &Routing::Given { topk_ids: ids, topk_weights: w }, None);
    assert!(matches!(r, Err(moe_kernels::GpuError::Input(_))), "a repeated id must be refused");
}

#[test]
fn no_gpu_is_an_error_not_a_panic() {
    // With or without a GPU, opening a device that does not exist is an error value.
    match Gpu::open(1000) {
        Ok(_) => panic!("device 1000 should not exist"),
        Err(e) => eprintln!("as expected: {e}"),
    }
}

#[test]
fn random_shapes_and_routings_match_the_oracle() {
    use proptest::test_runner::{Config, TestRunner};
    let Some(gpu) = gpu_for_test("random_shapes_and_routings_match_the_oracle") else { return };
    let cases = std::env::var("GPU_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64u32);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let count = std::cell::Cell::new(0usize);
    let worst = std::cell::Cell::new(0.0f64);
    // flat tuple, clamped below so that shrinking stays meaningful
    let strategy = (0usize..48, 1usize..80, 1usize..40, 1usize..10, 1usize..10, 0u8..3, 0u8..4, proptest::num::u64::ANY);
    runner
        .run(&strategy, |(t, h, i, e, k, act, unused, seed)| {
            let k = k.min(e);
            let act = match act {
                0 | 1 => Activation::Swiglu,
                _ => Activation::SwigluClamped { alpha: 1.702, limit: 7.0 },
            };
            let unused = [0.0, 0.0, 0.3, 1.0][unused as usize];
            let (cfg, x, w13, w2, ids, w) = case(seed, t, h, i, e, k, act, unused);
            worst.set(worst.get().max(check_case(&gpu, &cfg, &x, &w13, &w2, &ids, &w)));
            count.set(count.get() + 1);
            Ok(())
        })
        .unwrap();
    eprintln!("{} random cases passed, worst error/bound {:.3}", count.get(), worst.get());
}
