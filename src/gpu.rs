//! `moe-oracle run CASE --device cuda`: the case through the GPU kernels (`moe-kernels`), written as a
//! candidate file (F32 tensors with the format's names) for `check` and `diagnose`; `--kernels fast` runs
//! the fused tensor-core path through `moe_kernels::MoeLayer` instead of the simple kernels.

use std::path::Path;

use moe_kernels::fast::{FastDims, FastKernels};
use moe_kernels::{Gpu, GpuError, MoeInputs, MoeLayer, Routing};
use moe_reference::dispatch::RowMap;
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

/// Which kernels `run --device cuda` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelChoice {
    /// The simple kernels (one stage per kernel, f32 intermediates decoded from bf16; every format tensor).
    #[default]
    Simple,
    /// The fast fused tensor-core path through `moe_kernels::MoeLayer` (no `bwd.do`, `bwd.da`).
    Fast,
}

/// The routing as (topk_ids, topk_weights, the host router when the case routes itself).
type HostRouting = (ndarray::Array2<i32>, ndarray::Array2<f64>, Option<HostRouter>);

/// The routing the kernels take: given by the case, or computed on the host from its router.
fn host_routing(inputs: &LayerInputs) -> Result<HostRouting, GpuRunError> {
    match (&inputs.topk_ids, &inputs.topk_weights, &inputs.cfg.routing, &inputs.router_weight) {
        (Some(ids), Some(w), _, _) => Ok((ids.clone(), w.clone(), None)),
        (_, _, Some(rcfg), Some(rw)) => {
            let logits = gemm::matmul_nt(inputs.x.view(), rw.view());
            let routed = route::forward(rcfg, inputs.cfg.top_k, logits.view(), inputs.router_bias.as_ref().map(|b| b.view()));
            let (ids, w) = (routed.topk_ids.clone(), routed.topk_weights.clone());
            Ok((ids, w, Some(HostRouter { logits, routed, cfg: *rcfg })))
        }
        _ => Err(GpuRunError::Unsupported("the case has neither topk_ids/topk_weights nor a router".into())),
    }
}

/// Run the case on GPU 0 with `kernels` and write the candidate to `out` (atomically, like every output). A
/// case that routes itself (`router.weight`) is routed on the host in f64 (exact logits, then the oracle's
/// router): the experts, combine and their backward run on the GPU, and `grad.router.weight` and the
/// router's part of `grad.x` are formed on the host from the GPU's `grad.topk_weights`. The fast kernels
/// do not store `bwd.do` and `bwd.da`, so their candidate lacks those two intermediates. `gpu` comes from
/// [`open_for`], which has checked that `kernels` take the case's shape.
pub fn run_on_gpu(gpu: &Gpu, inputs: &LayerInputs, config_json: &str, out: &Path, intermediates: bool, kernels: KernelChoice) -> Result<usize, GpuRunError> {
    let (ids, w, router) = host_routing(inputs)?;
    let w32 = w.mapv(|v| v as f32);
    let r = match kernels {
        KernelChoice::Simple => {
            let routing = Routing::Given { topk_ids: ids.clone(), topk_weights: w32.clone() };
            gpu.forward(&inputs.cfg, &inputs.x, &inputs.w13, &inputs.w2, &routing, inputs.dy.as_ref())?
        }
        KernelChoice::Fast => run_fast(gpu, inputs, &ids, &w32)?,
    };
    let omit: &[&str] = if kernels == KernelChoice::Fast { &moe_kernels::NOT_STORED } else { &[] };
    let mut t: Vec<(String, TensorData)> = vec![("y".into(), f32_tensor(r.y))];
    if router.is_some() {
        t.push(("topk_ids".into(), TensorData::i32_owned(ids)));
        t.push(("topk_weights".into(), f32_tensor(w32)));
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
            for (name, v) in [("bwd.do", b.do_), ("bwd.da", b.da), ("bwd.dh", b.dh), ("bwd.dx_rows", b.dx_rows)] {
                if !omit.contains(&name) {
                    t.push((name.into(), f32_tensor(v)));
                }
            }
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

/// GPU 0, opened for a case of shape `cfg` once the kernels can take that shape: the caller opens it
/// before printing anything, so that a machine without a GPU (or a shape the fast kernels refuse) gives
/// the error line alone.
pub fn open_for(cfg: &moe_reference::config::MoeConfig, kernels: KernelChoice) -> Result<Gpu, GpuRunError> {
    if kernels == KernelChoice::Fast {
        fast_shape_ok(cfg)?;
    }
    Ok(Gpu::open(0)?)
}

/// The shapes the fast kernels take, checked on the host before any GPU work (`MoeLayer` checks them
/// again; this makes a bad shape one clear line even on a machine without a GPU).
fn fast_shape_ok(c: &moe_reference::config::MoeConfig) -> Result<(), GpuRunError> {
    if c.tokens == 0 {
        return Err(GpuRunError::Unsupported("the fast kernels need at least one token".into()));
    }
    if c.hidden == 0 || c.intermediate == 0 || !c.hidden.is_multiple_of(8) || !c.intermediate.is_multiple_of(8) {
        return Err(GpuRunError::Unsupported(format!("the fast kernels need H and I to be positive multiples of 8; the case has H = {}, I = {}", c.hidden, c.intermediate)));
    }
    if c.experts > 1024 {
        return Err(GpuRunError::Unsupported(format!("the fast kernels take at most 1024 experts; the case has E = {}", c.experts)));
    }
    Ok(())
}

/// bf16 bits of a case tensor (its values are bf16 in a bf16 case; otherwise rounded to nearest, as the
/// simple kernels' upload does).
fn bf16_bits<'a>(v: impl IntoIterator<Item = &'a f64>) -> Vec<u16> {
    v.into_iter().map(|&x| half::bf16::from_f64(x).to_bits()).collect()
}

fn decode2(v: &[u16], shape: (usize, usize)) -> Result<ndarray::Array2<f32>, GpuRunError> {
    ndarray::Array2::from_shape_vec(shape, v.iter().map(|&b| half::bf16::from_bits(b).to_f32()).collect()).map_err(|e| GpuRunError::Unsupported(format!("fast kernels returned a wrong-sized tensor: {e}")))
}

fn decode3(v: &[u16], shape: (usize, usize, usize)) -> Result<ndarray::Array3<f32>, GpuRunError> {
    ndarray::Array3::from_shape_vec(shape, v.iter().map(|&b| half::bf16::from_bits(b).to_f32()).collect()).map_err(|e| GpuRunError::Unsupported(format!("fast kernels returned a wrong-sized tensor: {e}")))
}

fn indices(v: &[i32], what: &str) -> Result<Vec<usize>, GpuRunError> {
    v.iter().map(|&i| usize::try_from(i).map_err(|_| GpuRunError::Unsupported(format!("fast kernels wrote {what} = {i}")))).collect()
}

/// The case through `moe_kernels::MoeLayer` (the fast path): inputs uploaded to device buffers in the
/// case-file layout, forward (and backward with dy), everything downloaded and decoded to f32 in the shape
/// of the simple kernels' results; `bwd.do` and `bwd.da` are not stored by the fast path and come back empty.
fn run_fast(gpu: &Gpu, inputs: &LayerInputs, ids: &ndarray::Array2<i32>, w: &ndarray::Array2<f32>) -> Result<moe_kernels::GpuForward, GpuRunError> {
    let c = &inputs.cfg;
    let dims = FastDims { tokens: c.tokens, hidden: c.hidden, inter: c.intermediate, experts: c.experts, top_k: c.top_k };
    let kern = FastKernels::load(gpu, 3)?;
    let s = &gpu.stream;
    let up16 = |v: Vec<u16>| s.clone_htod(&v).map_err(GpuError::from);
    let x = up16(bf16_bits(inputs.x.iter()))?;
    let w13 = up16(bf16_bits(inputs.w13.iter()))?;
    let w2 = up16(bf16_bits(inputs.w2.iter()))?;
    let dy = match &inputs.dy {
        Some(d) => Some(up16(bf16_bits(d.iter()))?),
        None => None,
    };
    let ids_d = s.clone_htod(&ids.iter().copied().collect::<Vec<i32>>()).map_err(GpuError::from)?;
    let w_d = s.clone_htod(&w.iter().copied().collect::<Vec<f32>>()).map_err(GpuError::from)?;
    let mi = MoeInputs { x: &x, w13: &w13, w2: &w2, dy: dy.as_ref(), topk_ids: &ids_d, topk_weights: &w_d };
    let mut layer = MoeLayer::new(gpu, &kern, dims, c.activation, &mi)?;
    layer.run()?;
    let tr = layer.trace()?;
    let FastDims { tokens: t, hidden: h, inter: i, experts: e, top_k: k } = dims;
    let m = layer.rows();
    let rows = RowMap {
        tokens: t,
        top_k: k,
        experts: e,
        row_token: indices(&tr.row_token, "fwd.row_token")?,
        row_slot: indices(&tr.row_slot, "fwd.row_slot")?,
        expert_offsets: indices(&tr.offsets, "fwd.expert_offsets")?,
        slot_row: tr.slot_row.iter().map(|&r| usize::try_from(r).ok()).collect(),
    };
    let backward = match &inputs.dy {
        None => None,
        Some(_) => Some(moe_kernels::GpuBackward {
            do_: ndarray::Array2::zeros((0, 0)),
            da: ndarray::Array2::zeros((0, 0)),
            dh: decode2(&tr.dh, (m, 2 * i))?,
            dx_rows: decode2(&tr.dx_rows, (m, h))?,
            grad_x: decode2(&tr.grad_x, (t, h))?,
            grad_w13: decode3(&tr.grad_w13, (e, 2 * i, h))?,
            grad_w2: decode3(&tr.grad_w2, (e, h, i))?,
            grad_topk_weights: ndarray::Array2::from_shape_vec((t, k), tr.grad_topk_weights.clone()).map_err(|e| GpuRunError::Unsupported(format!("fast kernels returned a wrong-sized tensor: {e}")))?,
        }),
    };
    Ok(moe_kernels::GpuForward { rows, h: decode2(&tr.h, (m, 2 * i))?, a: decode2(&tr.a, (m, i))?, o: decode2(&tr.o, (m, h))?, y: decode2(&tr.y, (t, h))?, backward })
}
