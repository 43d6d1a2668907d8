//! `moe_kernels::MoeLayer` over caller-owned device buffers: its outputs on small odd shapes checked stage by
//! stage against the exact oracle by the fast-path checker (`fast::check`, a-priori bounds, inputs the
//! caller's own host values, not read back from the layer), the returned device views equal to the trace, and
//! clear `GpuError::Input`s for wrong lengths, bad ids and unsupported shapes. Skips visibly without a GPU;
//! fails with REQUIRE_GPU=1.

use cudarc::driver::CudaSlice;
use moe_kernels::fast::case::FastCase;
use moe_kernels::fast::check::{check, Scope};
use moe_kernels::fast::FastKernels;
use moe_kernels::{gpu_for_test, Gpu, GpuError, MoeInputs, MoeLayer};
use moe_reference::config::Activation;

/// x, w13, w2, dy (bf16 bits), topk_ids, topk_weights on the device.
type Dev = (CudaSlice<u16>, CudaSlice<u16>, CudaSlice<u16>, CudaSlice<u16>, CudaSlice<i32>, CudaSlice<f32>);

/// A case's host values and their device copies.
struct Case {
    host: FastCase,
    dev: Dev,
}

#[allow(clippy::too_many_arguments)]
fn make(gpu: &Gpu, seed: u64, t: usize, h: usize, i: usize, e: usize, k: usize, act: Activation, unused: f64) -> Case {
    let host = FastCase::new(seed, t, h, i, e, k, act, unused);
    let s = &gpu.stream;
    let dev = (s.clone_htod(&host.x).unwrap(), s.clone_htod(&host.w13).unwrap(), s.clone_htod(&host.w2).unwrap(), s.clone_htod(&host.dy).unwrap(), s.clone_htod(&host.ids).unwrap(), s.clone_htod(&host.weights).unwrap());
    Case { host, dev }
}

fn inputs(c: &Case) -> MoeInputs<'_> {
    MoeInputs { x: &c.dev.0, w13: &c.dev.1, w2: &c.dev.2, dy: Some(&c.dev.3), topk_ids: &c.dev.4, topk_weights: &c.dev.5 }
}

fn kernels(gpu: &Gpu) -> FastKernels {
    FastKernels::load(gpu, 3).expect("fast kernels compile and load")
}

#[test]
fn moe_layer_matches_the_oracle_on_odd_shapes() {
    let Some(gpu) = gpu_for_test("moe_layer_matches_the_oracle_on_odd_shapes") else { return };
    let kern = kernels(&gpu);
    let clamped = Activation::SwigluClamped { alpha: 1.702, limit: 7.0 };
    // (seed, T, H, I, E, k, activation, fraction of -1 slots): odd T, H and I not multiples of the tiles
    let cases = [(11, 7, 24, 40, 5, 3, Activation::Swiglu, 0.0), (12, 13, 72, 56, 3, 2, clamped, 0.2), (13, 1, 8, 8, 1, 1, Activation::Swiglu, 0.0)];
    let mut checked = 0;
    for (seed, t, h, i, e, k, act, unused) in cases {
        let c = make(&gpu, seed, t, h, i, e, k, act, unused);
        let mut layer = MoeLayer::new(&gpu, &kern, c.host.dims, c.host.act, &inputs(&c)).expect("layer");
        layer.run().expect("forward + backward");
        let tr = layer.trace().expect("trace");
        // the views the API returns are the buffers the trace read
        let s = &gpu.stream;
        assert_eq!(s.clone_dtoh(&layer.y()).unwrap(), tr.y, "y view");
        let g = layer.grads();
        assert_eq!(s.clone_dtoh(&g.grad_x).unwrap(), tr.grad_x, "grad.x view");
        assert_eq!(s.clone_dtoh(&g.grad_w13).unwrap(), tr.grad_w13, "grad.w13 view");
        assert_eq!(s.clone_dtoh(&g.grad_w2).unwrap(), tr.grad_w2, "grad.w2 view");
        assert_eq!(s.clone_dtoh(&g.grad_topk_weights).unwrap(), tr.grad_topk_weights, "grad.topk_weights view");
        let im = layer.intermediates();
        assert_eq!(s.clone_dtoh(&im.h).unwrap(), tr.h, "fwd.h view");
        assert_eq!(s.clone_dtoh(&im.expert_offsets).unwrap(), tr.offsets, "fwd.expert_offsets view");
        assert_eq!(im.row_token.len(), layer.rows());
        // the checker gets the caller's host values, so a wrong device-to-device copy shows as a violation
        let hc = c.host.host();
        let scope = Scope { tokens: (0..t).collect(), wgrad_samples: None, threads: 2 };
        match check(&hc, &tr, &scope) {
            Ok(r) => {
                eprintln!("seed {seed} T={t} H={h} I={i} E={e} k={k}: worst error/bound {:.3}, {} elements", r.worst, r.elements);
                checked += r.elements;
            }
            Err(m) => panic!("seed {seed} (T={t} H={h} I={i} E={e} k={k}): {m}"),
        }
    }
    assert!(checked > 0);
}

fn input_error(r: Result<MoeLayer<'_>, GpuError>, want: &str) {
    match r {
        Err(GpuError::Input(m)) => {
            assert!(m.contains(want), "expected '{want}' in: {m}");
            assert!(!m.contains('\n'), "one line: {m}");
        }
        Err(e) => panic!("expected an input error with '{want}', got {e}"),
        Ok(_) => panic!("expected an input error with '{want}', got a layer"),
    }
}

#[test]
fn moe_layer_rejects_bad_inputs() {
    let Some(gpu) = gpu_for_test("moe_layer_rejects_bad_inputs") else { return };
    let kern = kernels(&gpu);
    let c = make(&gpu, 21, 5, 16, 24, 4, 2, Activation::Swiglu, 0.0);
    let s = &gpu.stream;
    let short = s.clone_htod(&c.host.x[..c.host.x.len() - 1]).unwrap();
    input_error(MoeLayer::new(&gpu, &kern, c.host.dims, c.host.act, &MoeInputs { x: &short, ..inputs(&c) }), "x holds 79 values");
    let mut ids = c.host.ids.clone();
    ids[3] = 4;
    let bad = s.clone_htod(&ids).unwrap();
    input_error(MoeLayer::new(&gpu, &kern, c.host.dims, c.host.act, &MoeInputs { topk_ids: &bad, ..inputs(&c) }), "is not -1 or an expert");
    let mut ids = c.host.ids.clone();
    ids[1] = ids[0];
    let twice = s.clone_htod(&ids).unwrap();
    input_error(MoeLayer::new(&gpu, &kern, c.host.dims, c.host.act, &MoeInputs { topk_ids: &twice, ..inputs(&c) }), "twice");
    // H = 12 is not a multiple of 8: same buffers, dims that fit their lengths
    let d = make(&gpu, 22, 2, 12, 8, 2, 1, Activation::Swiglu, 0.0);
    input_error(MoeLayer::new(&gpu, &kern, d.host.dims, d.host.act, &inputs(&d)), "multiples of 8");
    // backward without dy
    let mut layer = MoeLayer::new(&gpu, &kern, c.host.dims, c.host.act, &MoeInputs { dy: None, ..inputs(&c) }).expect("forward-only layer");
    match layer.backward() {
        Err(GpuError::Input(m)) => assert!(m.contains("needs dy"), "{m}"),
        _ => panic!("backward without dy must be an input error"),
    }
}
