//! `MoeLayer`: the fast path (`crate::fast`) behind an API of device buffers in the case-file layout, for a
//! caller whose tensors already live on the GPU (issue #5 item 4).
//!
//! Inputs are `cudarc` device slices the caller owns: bf16 (raw bits, `u16`) `x` [T, H], `w13` [E, 2I, H],
//! `w2` [E, H, I], optional `dy` [T, H]; i32 `topk_ids` [T, k] (-1 = unused slot); f32 `topk_weights`
//! [T, k]. Outputs are views of device buffers the layer owns, in the format's layouts and names.
//!
//! Copies, and why: the fast launches read the layer's own buffers (their addresses are fixed when the
//! layer is built), so `x`, `w13`, `w2` and `dy` are copied device to device once per [`MoeLayer::new`]
//! (and per [`MoeLayer::set_inputs`]); nothing goes through the host. The routing (`topk_ids`,
//! `topk_weights`, T·k values) is downloaded once: the row count sizes every buffer and the ids are
//! validated on the host (range, repeats), which must happen before any launch reads them.
//!
//! Intermediates the fast path stores: `fwd.row_token`, `fwd.row_slot`, `fwd.expert_offsets`, `fwd.h`,
//! `fwd.a`, `fwd.o`, `bwd.dh`, `bwd.dx_rows` (plus A' = w·A, not a format tensor). It cannot give `bwd.do`
//! (dY·w is never formed: the weight is applied after the dA GEMM) nor `bwd.da` (fused into the SwiGLU
//! backward and never stored).

use cudarc::driver::{CudaSlice, CudaView};
use moe_reference::config::Activation;

use crate::fast::{FastDims, FastKernels, FastLayer};
use crate::{Gpu, GpuError};

/// The caller's device inputs, case-file layout (bf16 as raw bits).
pub struct MoeInputs<'a> {
    pub x: &'a CudaSlice<u16>,
    pub w13: &'a CudaSlice<u16>,
    pub w2: &'a CudaSlice<u16>,
    /// The upstream gradient; without it only the forward can run.
    pub dy: Option<&'a CudaSlice<u16>>,
    pub topk_ids: &'a CudaSlice<i32>,
    pub topk_weights: &'a CudaSlice<f32>,
}

/// Forward outputs (valid after [`MoeLayer::forward`]).
pub struct MoeForward<'a> {
    /// `y` [T, H], bf16 bits
    pub y: CudaView<'a, u16>,
}

/// Backward outputs (valid after [`MoeLayer::backward`]).
pub struct MoeBackward<'a> {
    /// `grad.x` [T, H], bf16 bits
    pub grad_x: CudaView<'a, u16>,
    /// `grad.w13` [E, 2I, H], bf16 bits
    pub grad_w13: CudaView<'a, u16>,
    /// `grad.w2` [E, H, I], bf16 bits
    pub grad_w2: CudaView<'a, u16>,
    /// `grad.topk_weights` [T, k], f32
    pub grad_topk_weights: CudaView<'a, f32>,
}

/// The format's intermediates the fast path stores (M = dispatched rows, expert-major).
pub struct MoeIntermediates<'a> {
    /// `fwd.row_token` [M]
    pub row_token: CudaView<'a, i32>,
    /// `fwd.row_slot` [M]
    pub row_slot: CudaView<'a, i32>,
    /// `fwd.expert_offsets` [E + 1]
    pub expert_offsets: CudaView<'a, i32>,
    /// `fwd.h` [M, 2I], bf16 bits
    pub h: CudaView<'a, u16>,
    /// `fwd.a` [M, I], bf16 bits
    pub a: CudaView<'a, u16>,
    /// `fwd.o` [M, H], bf16 bits
    pub o: CudaView<'a, u16>,
    /// `bwd.dh` [M, 2I], bf16 bits (after backward)
    pub dh: CudaView<'a, u16>,
    /// `bwd.dx_rows` [M, H], bf16 bits (after backward)
    pub dx_rows: CudaView<'a, u16>,
}

/// Names of the format's intermediates the fast path does not store (see the module comment).
pub const NOT_STORED: [&str; 2] = ["bwd.do", "bwd.da"];

/// One MoE layer on the fast path over the caller's device buffers.
pub struct MoeLayer<'g> {
    layer: FastLayer<'g>,
    has_dy: bool,
    ran_forward: bool,
}

/// Check that a device slice holds exactly `n` values.
fn expect_len(what: &str, got: usize, n: usize, shape: &str) -> Result<(), GpuError> {
    if got != n {
        return Err(GpuError::Input(format!("{what} holds {got} values; {shape} needs {n}")));
    }
    Ok(())
}

/// Check every input's length against `dims` (no device access, so callable before any upload).
pub fn check_lengths(dims: FastDims, x: usize, w13: usize, w2: usize, dy: Option<usize>, ids: usize, weights: usize) -> Result<(), GpuError> {
    let FastDims { tokens: t, hidden: h, inter: i, experts: e, top_k: k } = dims;
    expect_len("x", x, t * h, &format!("[T, H] = [{t}, {h}]"))?;
    expect_len("w13", w13, e * 2 * i * h, &format!("[E, 2I, H] = [{e}, {}, {h}]", 2 * i))?;
    expect_len("w2", w2, e * h * i, &format!("[E, H, I] = [{e}, {h}, {i}]"))?;
    if let Some(d) = dy {
        expect_len("dy", d, t * h, &format!("[T, H] = [{t}, {h}]"))?;
    }
    expect_len("topk_ids", ids, t * k, &format!("[T, k] = [{t}, {k}]"))?;
    expect_len("topk_weights", weights, t * k, &format!("[T, k] = [{t}, {k}]"))
}

impl<'g> MoeLayer<'g> {
    /// Build the layer for `dims` over the caller's inputs: checks lengths, downloads and validates the
    /// routing (ids in -1..E, no expert twice per token), copies x, w13, w2, dy device to device. Unsupported
    /// shapes (H or I not a positive multiple of 8, k > E, E > 1024) are `GpuError::Input`.
    pub fn new(gpu: &'g Gpu, kernels: &'g FastKernels, dims: FastDims, act: Activation, inputs: &MoeInputs) -> Result<MoeLayer<'g>, GpuError> {
        let MoeInputs { x, w13, w2, dy, topk_ids, topk_weights } = inputs;
        check_lengths(dims, x.len(), w13.len(), w2.len(), dy.map(|d| d.len()), topk_ids.len(), topk_weights.len())?;
        let s = &gpu.stream;
        let ids = if topk_ids.is_empty() { Vec::new() } else { s.clone_dtoh(*topk_ids)? };
        let weights = if topk_weights.is_empty() { Vec::new() } else { s.clone_dtoh(*topk_weights)? };
        let mut layer = FastLayer::new(gpu, kernels, dims, act, &ids, &weights)?;
        layer.copy_inputs_dtod(x, w13, w2, *dy)?;
        Ok(MoeLayer { layer, has_dy: dy.is_some(), ran_forward: false })
    }

    /// Replace x, w13, w2, dy (same shapes and routing) by device-to-device copies.
    pub fn set_inputs(&mut self, x: &CudaSlice<u16>, w13: &CudaSlice<u16>, w2: &CudaSlice<u16>, dy: Option<&CudaSlice<u16>>) -> Result<(), GpuError> {
        let d = self.layer.dims;
        check_lengths(d, x.len(), w13.len(), w2.len(), dy.map(|v| v.len()), d.tokens * d.top_k, d.tokens * d.top_k)?;
        self.layer.copy_inputs_dtod(x, w13, w2, dy)?;
        self.has_dy |= dy.is_some();
        Ok(())
    }

    /// The shape.
    pub fn dims(&self) -> FastDims {
        self.layer.dims
    }

    /// Dispatched rows M (slots that are not -1).
    pub fn rows(&self) -> usize {
        self.layer.rows
    }

    /// Routing, GEMM1 + SwiGLU, GEMM2, combine. Asynchronous on the GPU's stream.
    pub fn forward(&mut self) -> Result<MoeForward<'_>, GpuError> {
        self.layer.forward()?;
        self.ran_forward = true;
        Ok(MoeForward { y: self.layer.buffers().y })
    }

    /// The backward (needs `dy` and a forward first). Asynchronous on the GPU's stream.
    pub fn backward(&mut self) -> Result<MoeBackward<'_>, GpuError> {
        if !self.has_dy {
            return Err(GpuError::Input("backward needs dy; none was given".into()));
        }
        if !self.ran_forward {
            return Err(GpuError::Input("backward needs a forward first (it reads the forward's rows and H)".into()));
        }
        self.layer.backward()?;
        let b = self.layer.buffers();
        Ok(MoeBackward { grad_x: b.grad_x, grad_w13: b.grad_w13, grad_w2: b.grad_w2, grad_topk_weights: b.grad_topk_weights })
    }

    /// Forward, then backward when `dy` was given.
    pub fn run(&mut self) -> Result<(), GpuError> {
        self.forward()?;
        if self.has_dy {
            self.backward()?;
        }
        Ok(())
    }

    /// `y` (after a forward).
    pub fn y(&self) -> CudaView<'_, u16> {
        self.layer.buffers().y
    }

    /// The gradients (after a backward).
    pub fn grads(&self) -> MoeBackward<'_> {
        let b = self.layer.buffers();
        MoeBackward { grad_x: b.grad_x, grad_w13: b.grad_w13, grad_w2: b.grad_w2, grad_topk_weights: b.grad_topk_weights }
    }

    /// The stored intermediates; the backward's are meaningful only after a backward.
    pub fn intermediates(&self) -> MoeIntermediates<'_> {
        let b = self.layer.buffers();
        MoeIntermediates { row_token: b.row_token, row_slot: b.row_slot, expert_offsets: b.offsets, h: b.h, a: b.a, o: b.o, dh: b.dh, dx_rows: b.dx_rows }
    }

    /// Everything downloaded, for the fast-path checker (`fast::check`).
    pub fn trace(&self) -> Result<crate::fast::FastTrace, GpuError> {
        self.layer.trace()
    }

    /// Wait for the GPU.
    pub fn sync(&self) -> Result<(), GpuError> {
        self.layer.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims() -> FastDims {
        FastDims { tokens: 3, hidden: 8, inter: 16, experts: 4, top_k: 2 }
    }

    #[test]
    fn exact_lengths_pass() {
        check_lengths(dims(), 24, 4 * 32 * 8, 4 * 8 * 16, Some(24), 6, 6).unwrap();
        check_lengths(dims(), 24, 4 * 32 * 8, 4 * 8 * 16, None, 6, 6).unwrap();
    }

    #[test]
    fn each_wrong_length_is_named() {
        let good = [24, 4 * 32 * 8, 4 * 8 * 16, 24, 6, 6];
        for (i, name) in ["x", "w13", "w2", "dy", "topk_ids", "topk_weights"].iter().enumerate() {
            let mut v = good;
            v[i] += 1;
            match check_lengths(dims(), v[0], v[1], v[2], Some(v[3]), v[4], v[5]) {
                Err(GpuError::Input(m)) => assert!(m.starts_with(&format!("{name} holds {}", v[i])), "{m}"),
                other => panic!("{name}: expected an input error, got {:?}", other.map_err(|e| e.to_string())),
            }
        }
    }
}
