//! `moe-oracle run CASE --device cuda`: the case through the GPU kernels (`moe-kernels`), written as a
//! candidate file (F32 tensors with the format's names) for `check` and `diagnose`.

use std::path::Path;

use moe_kernels::{Gpu, GpuError, Routing};
use moe_reference::{gemm, route, LayerInputs};
use ndarray::CowArray;

use crate::case::{self, TensorData};
use crate::error::CaseError;

/// Why a GPU run failed; one line.
#[derive(Debug, thiserror::Error)]
pub enum GpuRunError {
    #[error("GPU: {0}")]
    Gpu(#[from] GpuError),
    #[error("GPU: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Write(#[from] CaseError),
}

fn f32_tensor<'a, D: ndarray::Dimension>(a: ndarray::Array<f32, D>) -> TensorData<'a> {
    TensorData::F32(CowArray::from(a.into_dyn()))
}

/// The router of a case that routes itself, computed on the host in f64 (the kernels take the routing as
/// given): logits, the router's results.
struct HostRouter {
    logits: ndarray::Array2<f64>,
    routed: route::Routed,
    cfg: moe_reference::config::Routing,
}

/// Run the case on GPU 0 and write the candidate to `out` (atomically, like every output). A case that
/// routes itself (`router.weight`) is routed on the host in f64 (exact logits, then the oracle's router):
/// the experts, combine and their backward run on the GPU, and `grad.router.weight` and the router's part of
/// `grad.x` are formed on the host from the GPU's `grad.topk_weights`.
pub fn run_on_gpu(inputs: &LayerInputs, config_json: &str, out: &Path, intermediates: bool) -> Result<usize, GpuRunError> {
    let (ids, w, router) = match (&inputs.topk_ids, &inputs.topk_weights, &inputs.cfg.routing, &inputs.router_weight) {
        (Some(ids), Some(w), _, _) => (ids.clone(), w.clone(), None),
        (_, _, Some(rcfg), Some(rw)) => {
            let logits = gemm::matmul_nt(inputs.x.view(), rw.view());
            let routed = route::forward(rcfg, inputs.cfg.top_k, logits.view(), inputs.router_bias.as_ref().map(|b| b.view()));
            let (ids, w) = (routed.topk_ids.clone(), routed.topk_weights.clone());
            (ids, w, Some(HostRouter { logits, routed, cfg: *rcfg }))
        }
        _ => return Err(GpuRunError::Unsupported("the case has neither topk_ids/topk_weights nor a router".into())),
    };
    let gpu = Gpu::open(0)?;
    let routing = Routing::Given { topk_ids: ids.clone(), topk_weights: w.mapv(|v| v as f32) };
    let r = gpu.forward(&inputs.cfg, &inputs.x, &inputs.w13, &inputs.w2, &routing, inputs.dy.as_ref())?;
    let mut t: Vec<(String, TensorData)> = vec![("y".into(), f32_tensor(r.y))];
    if router.is_some() {
        t.push(("topk_ids".into(), TensorData::i32_owned(ids)));
        t.push(("topk_weights".into(), f32_tensor(w.mapv(|v| v as f32))));
    }
    let rows = r.rows;
    if let Some(mut b) = r.backward {
        if let (Some(hr), Some(rw)) = (&router, &inputs.router_weight) {
            let g = b.grad_topk_weights.mapv(f64::from);
            let dl = route::backward(&hr.cfg, &hr.routed, hr.logits.view(), g.view());
            let grw = gemm::matmul_nt(dl.t(), inputs.x.t());
            let term = gemm::matmul_nt(dl.view(), rw.t());
            b.grad_x.zip_mut_with(&term, |gx, &r| *gx = (f64::from(*gx) + r) as f32);
            t.push(("grad.router.weight".into(), f32_tensor(grw.mapv(|v| v as f32))));
        }
        t.push(("grad.x".into(), f32_tensor(b.grad_x)));
        t.push(("grad.w13".into(), f32_tensor(b.grad_w13)));
        t.push(("grad.w2".into(), f32_tensor(b.grad_w2)));
        t.push(("grad.topk_weights".into(), f32_tensor(b.grad_topk_weights)));
        if intermediates {
            t.push(("bwd.do".into(), f32_tensor(b.do_)));
            t.push(("bwd.da".into(), f32_tensor(b.da)));
            t.push(("bwd.dh".into(), f32_tensor(b.dh)));
            t.push(("bwd.dx_rows".into(), f32_tensor(b.dx_rows)));
        }
    }
    if intermediates {
        for (name, v) in [("fwd.row_token", &rows.row_token), ("fwd.row_slot", &rows.row_slot), ("fwd.expert_offsets", &rows.expert_offsets)] {
            let ints: Result<Vec<i32>, _> = v.iter().map(|&x| i32::try_from(x)).collect();
            let ints = ints.map_err(|_| GpuRunError::Unsupported(format!("{name} does not fit I32")))?;
            t.push((name.into(), TensorData::i32_owned(ndarray::Array1::from(ints))));
        }
        t.push(("fwd.h".into(), f32_tensor(r.h)));
        t.push(("fwd.a".into(), f32_tensor(r.a)));
        t.push(("fwd.o".into(), f32_tensor(r.o)));
    }
    case::write_outputs(out, config_json, &t)?;
    Ok(t.len())
}
