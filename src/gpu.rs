//! `moe-oracle run CASE --device cuda`: the case through the GPU kernels (`moe-kernels`), written as a
//! candidate file (F32 tensors with the format's names) for `check` and `diagnose`.

use std::path::Path;

use moe_kernels::{Gpu, GpuError, Routing};
use moe_reference::LayerInputs;
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

/// Run the case on GPU 0 and write the candidate to `out` (atomically, like every output).
pub fn run_on_gpu(inputs: &LayerInputs, config_json: &str, out: &Path, intermediates: bool) -> Result<usize, GpuRunError> {
    let (Some(ids), Some(w)) = (&inputs.topk_ids, &inputs.topk_weights) else {
        return Err(GpuRunError::Unsupported(
            "the GPU kernels take the routing as given (topk_ids and topk_weights); routing on the GPU is not built yet".into(),
        ));
    };
    let gpu = Gpu::open(0)?;
    let routing = Routing::Given { topk_ids: ids.clone(), topk_weights: w.mapv(|v| v as f32) };
    let r = gpu.forward(&inputs.cfg, &inputs.x, &inputs.w13, &inputs.w2, &routing, inputs.dy.as_ref())?;
    let mut t: Vec<(String, TensorData)> = vec![("y".into(), f32_tensor(r.y))];
    let rows = r.rows;
    if let Some(b) = r.backward {
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
