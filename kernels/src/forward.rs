//! The forward pass on the GPU with the simple kernels (bf16 storage, f32 accumulation), returning every
//! intermediate of the case-file format so the oracle can check each stage.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use half::bf16;
use moe_reference::config::{Activation, MoeConfig};
use moe_reference::dispatch::RowMap;
use ndarray::{Array2, Array3};

use crate::device::Gpu;
use crate::error::GpuError;

/// How the tokens are routed (this version takes the routing as given).
pub enum Routing {
    Given { topk_ids: Array2<i32>, topk_weights: Array2<f32> },
}

/// Forward results, decoded to f32 on the host: `fwd.h`, `fwd.a`, `fwd.o` in the expert-major row order
/// of `rows`, and `y`; and the backward's when an upstream gradient was given.
pub struct GpuForward {
    pub rows: RowMap,
    pub h: Array2<f32>,
    pub a: Array2<f32>,
    pub o: Array2<f32>,
    pub y: Array2<f32>,
    pub backward: Option<GpuBackward>,
}

/// Backward results: `bwd.do`, `bwd.da`, `bwd.dh`, `bwd.dx_rows` (bf16 values), the gradients.
pub struct GpuBackward {
    pub do_: Array2<f32>,
    pub da: Array2<f32>,
    pub dh: Array2<f32>,
    pub dx_rows: Array2<f32>,
    pub grad_x: Array2<f32>,
    pub grad_w13: Array3<f32>,
    pub grad_w2: Array3<f32>,
    pub grad_topk_weights: Array2<f32>,
}

fn launch_cfg(n: usize) -> Result<LaunchConfig, GpuError> {
    let n = u32::try_from(n).map_err(|_| GpuError::Input(format!("{n} elements exceed one launch")))?;
    Ok(LaunchConfig { grid_dim: (n.div_ceil(256).max(1), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 })
}

fn to_i32(n: usize, what: &str) -> Result<i32, GpuError> {
    i32::try_from(n).map_err(|_| GpuError::Input(format!("{what} = {n} does not fit an i32")))
}

/// bf16 values (as f64) to their bits.
pub(crate) fn bits(v: &[f64]) -> Vec<u16> {
    v.iter().map(|&x| bf16::from_f64(x).to_bits()).collect()
}

fn decode(v: &[u16], shape: (usize, usize)) -> Array2<f32> {
    Array2::from_shape_vec(shape, v.iter().map(|&b| bf16::from_bits(b).to_f32()).collect()).expect("shape")
}

/// The row map on the device.
struct DeviceRows {
    row_token: CudaSlice<i32>,
    row_slot: CudaSlice<i32>,
    row_expert: CudaSlice<i32>,
    slot_row: CudaSlice<i32>,
    offsets: CudaSlice<i32>,
}

impl Gpu {
    /// Routing to rows on the GPU (counts, offsets, expert-major order, -1 slots), after checking the ids
    /// on the host; returns the map also as a host `RowMap` (read back) for the caller and the tests.
    fn route_rows(&self, topk_ids: &Array2<i32>, e: usize) -> Result<(RowMap, DeviceRows), GpuError> {
        let (t, k) = topk_ids.dim();
        for (tok, row) in topk_ids.rows().into_iter().enumerate() {
            for (j, &id) in row.iter().enumerate() {
                if id < -1 || id >= e as i32 {
                    return Err(GpuError::Input(format!("topk_ids[{tok}, {j}] = {id} is not -1 or an expert in 0..{e}")));
                }
                if id >= 0 && row.iter().take(j).any(|&p| p == id) {
                    return Err(GpuError::Input(format!("topk_ids: token {tok} names expert {id} twice")));
                }
            }
        }
        let s = &self.stream;
        let ids: Vec<i32> = topk_ids.iter().copied().collect();
        let d_ids = self.upload(&ids)?;
        let mut counts = self.zeros::<i32>(e)?;
        let mut offsets = self.zeros::<i32>(e + 1)?;
        let (ei, slots, ti, ki) = (to_i32(e, "experts")?, to_i32(t * k, "slots")?, to_i32(t, "tokens")?, to_i32(k, "top_k")?);
        let per_expert = LaunchConfig { grid_dim: (e.div_ceil(128) as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
        let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: argument lists match cuda/route_rows.cu; buffers sized from the same dims.
        unsafe {
            s.launch_builder(self.function("expert_counts")).arg(&d_ids).arg(&slots).arg(&ei).arg(&mut counts).launch(per_expert)?;
            s.launch_builder(self.function("expert_offsets")).arg(&counts).arg(&ei).arg(&mut offsets).launch(one)?;
        }
        let host_offsets = s.clone_dtoh(&offsets)?;
        let m = host_offsets[e] as usize;
        let mut row_token = self.zeros::<i32>(m)?;
        let mut row_slot = self.zeros::<i32>(m)?;
        let mut row_expert = self.zeros::<i32>(m)?;
        let mut slot_row = self.zeros::<i32>(t * k)?;
        // SAFETY: as above.
        unsafe {
            if t * k > 0 {
                s.launch_builder(self.function("clear_slot_rows")).arg(&mut slot_row).arg(&slots).launch(launch_cfg(t * k)?)?;
            }
            s.launch_builder(self.function("fill_rows"))
                .arg(&d_ids).arg(&ti).arg(&ki).arg(&ei).arg(&offsets)
                .arg(&mut row_token).arg(&mut row_slot).arg(&mut row_expert).arg(&mut slot_row)
                .launch(per_expert)?;
        }
        let back = |d: &CudaSlice<i32>, n: usize| -> Result<Vec<usize>, GpuError> {
            let mut v = s.clone_dtoh(d)?;
            v.truncate(n);
            Ok(v.into_iter().map(|x| x as usize).collect())
        };
        let slot_rows: Vec<i32> = {
            let mut v = s.clone_dtoh(&slot_row)?;
            v.truncate(t * k);
            v
        };
        let map = RowMap {
            tokens: t,
            top_k: k,
            experts: e,
            row_token: back(&row_token, m)?,
            row_slot: back(&row_slot, m)?,
            expert_offsets: host_offsets.iter().map(|&o| o as usize).collect(),
            slot_row: slot_rows.iter().map(|&r| (r >= 0).then_some(r as usize)).collect(),
        };
        Ok((map, DeviceRows { row_token, row_slot, row_expert, slot_row, offsets }))
    }

    /// Upload (never an empty allocation: CUDA refuses those).
    fn upload<T: cudarc::driver::DeviceRepr + Default + Clone>(&self, v: &[T]) -> Result<CudaSlice<T>, GpuError> {
        if v.is_empty() {
            return Ok(self.stream.clone_htod(&[T::default()])?);
        }
        Ok(self.stream.clone_htod(v)?)
    }
    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>, GpuError> {
        Ok(self.stream.alloc_zeros::<T>(n.max(1))?)
    }
    fn download(&self, d: &CudaSlice<u16>, n: usize) -> Result<Vec<u16>, GpuError> {
        let mut v = self.stream.clone_dtoh(d)?;
        v.truncate(n);
        Ok(v)
    }

    /// Run the forward pass, and the backward when `dy` [T, H] is given. `x` [T, H], `w13` [E, 2I, H],
    /// `w2` [E, H, I] and `dy` are rounded to bf16 on upload (pass bf16-valued data to compare with the
    /// oracle on the same inputs).
    pub fn forward(
        &self,
        cfg: &MoeConfig,
        x: &Array2<f64>,
        w13: &Array3<f64>,
        w2: &Array3<f64>,
        routing: &Routing,
        dy: Option<&Array2<f64>>,
    ) -> Result<GpuForward, GpuError> {
        let (t, hd, id, e, k) = (cfg.tokens, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
        let Routing::Given { topk_ids, topk_weights } = routing;
        if x.dim() != (t, hd) || w13.dim() != (e, 2 * id, hd) || w2.dim() != (e, hd, id) || topk_ids.dim() != (t, k) {
            return Err(GpuError::Input("shapes do not match the config".into()));
        }
        let (alpha, limit) = match cfg.activation {
            Activation::Swiglu => (1.0f32, -1.0f32),
            Activation::SwigluClamped { alpha, limit } => (alpha as f32, limit as f32),
        };
        let s = &self.stream;
        let (rows, dev_rows) = self.route_rows(topk_ids, e)?;
        let m = rows.rows();
        let DeviceRows { row_token: d_row_token, row_slot: d_row_slot, row_expert: d_row_expert, slot_row: d_slot_row, offsets: d_offsets } = dev_rows;
        let d_x = self.upload(&bits(x.as_slice().expect("standard layout")))?;
        let d_w13 = self.upload(&bits(w13.as_slice().expect("standard layout")))?;
        let d_w2 = self.upload(&bits(w2.as_slice().expect("standard layout")))?;
        let d_weights = self.upload(topk_weights.as_slice().expect("standard layout"))?;
        let mut d_xr = self.zeros::<u16>(m * hd)?;
        let mut d_h = self.zeros::<u16>(m * 2 * id)?;
        let mut d_a = self.zeros::<u16>(m * id)?;
        let mut d_o = self.zeros::<u16>(m * hd)?;
        let mut d_y = self.zeros::<u16>(t * hd)?;
        let (mi, ti, hi, ii, ki) = (to_i32(m, "rows")?, to_i32(t, "tokens")?, to_i32(hd, "hidden")?, to_i32(id, "intermediate")?, to_i32(k, "top_k")?);
        let i2 = to_i32(2 * id, "2*intermediate")?;
        // SAFETY (each launch): argument types and order match the kernel signatures in cuda/, and every
        // buffer holds at least the elements the kernel indexes (sizes computed above from the same dims).
        unsafe {
            if m > 0 {
                s.launch_builder(self.function("gather_rows"))
                    .arg(&d_x).arg(&d_row_token).arg(&mut d_xr).arg(&mi).arg(&hi)
                    .launch(launch_cfg(m * hd)?)?;
                s.launch_builder(self.function("grouped_gemm_nt"))
                    .arg(&d_xr).arg(&d_w13).arg(&d_row_expert).arg(&mut d_h).arg(&mi).arg(&i2).arg(&hi)
                    .launch(launch_cfg(m * 2 * id)?)?;
                s.launch_builder(self.function("swiglu_fwd"))
                    .arg(&d_h).arg(&mut d_a).arg(&mi).arg(&ii).arg(&alpha).arg(&limit)
                    .launch(launch_cfg(m * id)?)?;
                s.launch_builder(self.function("grouped_gemm_nt"))
                    .arg(&d_a).arg(&d_w2).arg(&d_row_expert).arg(&mut d_o).arg(&mi).arg(&hi).arg(&ii)
                    .launch(launch_cfg(m * hd)?)?;
            }
            if t > 0 {
                s.launch_builder(self.function("combine_fwd"))
                    .arg(&d_o).arg(&d_weights).arg(&d_slot_row).arg(&mut d_y).arg(&ti).arg(&ki).arg(&hi)
                    .launch(launch_cfg(t * hd)?)?;
            }
        }
        let backward = match dy {
            None => None,
            Some(dy) => {
                if dy.dim() != (t, hd) {
                    return Err(GpuError::Input("dy shape does not match the config".into()));
                }
                let d_dy = self.upload(&bits(dy.as_slice().expect("standard layout")))?;
                let mut d_do = self.zeros::<u16>(m * hd)?;
                let mut d_gw = self.zeros::<f32>(t * k)?;
                let mut d_da = self.zeros::<u16>(m * id)?;
                let mut d_dh = self.zeros::<u16>(m * 2 * id)?;
                let mut d_dxr = self.zeros::<u16>(m * hd)?;
                let mut d_gx = self.zeros::<u16>(t * hd)?;
                let mut d_gw2 = self.zeros::<f32>(e * hd * id)?;
                let mut d_gw13 = self.zeros::<f32>(e * 2 * id * hd)?;
                let ei = to_i32(e, "experts")?;
                // SAFETY: as for the forward launches above.
                unsafe {
                    if t > 0 {
                        s.launch_builder(self.function("slot_dots"))
                            .arg(&d_dy).arg(&d_o).arg(&d_slot_row).arg(&mut d_gw).arg(&ti).arg(&ki).arg(&hi)
                            .launch(launch_cfg(t * k)?)?;
                    }
                    if m > 0 {
                        s.launch_builder(self.function("dispatch_weighted"))
                            .arg(&d_dy).arg(&d_weights).arg(&d_row_token).arg(&d_row_slot).arg(&mut d_do).arg(&mi).arg(&ki).arg(&hi)
                            .launch(launch_cfg(m * hd)?)?;
                        // da = do · w2[e]   (w2[e] is [H, I]: contraction over H)
                        s.launch_builder(self.function("grouped_gemm_nn"))
                            .arg(&d_do).arg(&d_w2).arg(&d_row_expert).arg(&mut d_da).arg(&mi).arg(&ii).arg(&hi)
                            .launch(launch_cfg(m * id)?)?;
                        s.launch_builder(self.function("swiglu_bwd"))
                            .arg(&d_h).arg(&d_da).arg(&mut d_dh).arg(&mi).arg(&ii).arg(&alpha).arg(&limit)
                            .launch(launch_cfg(m * id)?)?;
                        // dx_rows = dh · w13[e]   (w13[e] is [2I, H]: contraction over 2I)
                        s.launch_builder(self.function("grouped_gemm_nn"))
                            .arg(&d_dh).arg(&d_w13).arg(&d_row_expert).arg(&mut d_dxr).arg(&mi).arg(&hi).arg(&i2)
                            .launch(launch_cfg(m * hd)?)?;
                    }
                    // weight gradients run for every expert, so experts without rows get exact zeros
                    s.launch_builder(self.function("grouped_wgrad"))
                        .arg(&d_do).arg(&d_a).arg(&d_offsets).arg(&mut d_gw2).arg(&ei).arg(&hi).arg(&ii)
                        .launch(launch_cfg(e * hd * id)?)?;
                    s.launch_builder(self.function("grouped_wgrad"))
                        .arg(&d_dh).arg(&d_xr).arg(&d_offsets).arg(&mut d_gw13).arg(&ei).arg(&i2).arg(&hi)
                        .launch(launch_cfg(e * 2 * id * hd)?)?;
                    if t > 0 {
                        s.launch_builder(self.function("undispatch"))
                            .arg(&d_dxr).arg(&d_slot_row).arg(&mut d_gx).arg(&ti).arg(&ki).arg(&hi)
                            .launch(launch_cfg(t * hd)?)?;
                    }
                }
                s.synchronize()?;
                let f32s = |d: &CudaSlice<f32>, n: usize| -> Result<Vec<f32>, GpuError> {
                    let mut v = s.clone_dtoh(d)?;
                    v.truncate(n);
                    Ok(v)
                };
                Some(GpuBackward {
                    do_: decode(&self.download(&d_do, m * hd)?, (m, hd)),
                    da: decode(&self.download(&d_da, m * id)?, (m, id)),
                    dh: decode(&self.download(&d_dh, m * 2 * id)?, (m, 2 * id)),
                    dx_rows: decode(&self.download(&d_dxr, m * hd)?, (m, hd)),
                    grad_x: decode(&self.download(&d_gx, t * hd)?, (t, hd)),
                    grad_w13: Array3::from_shape_vec((e, 2 * id, hd), f32s(&d_gw13, e * 2 * id * hd)?).expect("shape"),
                    grad_w2: Array3::from_shape_vec((e, hd, id), f32s(&d_gw2, e * hd * id)?).expect("shape"),
                    grad_topk_weights: Array2::from_shape_vec((t, k), f32s(&d_gw, t * k)?).expect("shape"),
                })
            }
        };
        s.synchronize()?;
        Ok(GpuForward {
            h: decode(&self.download(&d_h, m * 2 * id)?, (m, 2 * id)),
            a: decode(&self.download(&d_a, m * id)?, (m, id)),
            o: decode(&self.download(&d_o, m * hd)?, (m, hd)),
            y: decode(&self.download(&d_y, t * hd)?, (t, hd)),
            rows,
            backward,
        })
    }
}
