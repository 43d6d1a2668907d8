//! Host side of the fast path: the layer's device buffers and the launch helpers (optionally timed kernel by
//! kernel with CUDA events); the forward's launches are in `forward.rs`, the backward's in `backward.rs`.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaSlice, CudaView, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
use moe_reference::config::Activation;

use super::source;
use super::tma::{tma_desc, TmaDesc};
use super::trace::FastTrace;
use super::kernels::with_cluster_config;
use super::FastKernels;
use crate::{Gpu, GpuError};

mod backward;
mod forward;

/// Rows per GEMM tile (the kernels' FG_BM / FR_TILE_M).
const TILE_M: usize = 128;
/// Columns per GEMM tile (FG_BN).
const TILE_N: usize = 128;
/// Columns per wgmma GEMM tile (WG_BN).
const WG_TILE_N: usize = 256;
/// Slots per routing chunk (FR_CHUNK).
const ROUTE_CHUNK: usize = 256;
/// Kernels that [`FastLayer::set_repeat`] refuses: they read what they write (fr_scan's counts become offsets).
pub const NOT_REPEATABLE: &[&str] = &["route_scan"];

/// Layer shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastDims {
    pub tokens: usize,
    pub hidden: usize,
    pub inter: usize,
    pub experts: usize,
    pub top_k: usize,
}

/// The persistent row GEMMs' tile order (`FastLayer::set_tile_order`): which tiles run close in time, hence
/// which weights and rows the L2 must hold at once. The same tiles in any order: bitwise the same results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileOrder {
    /// column tile fastest (a row tile's gathered rows stay in L2 across its column tiles)
    Columns,
    /// groups of this many row tiles by all column tiles, row tile fastest inside a group (0: `Columns`)
    RowGroups(u32),
    /// each expert's row tiles as one group (its weights' column tile read by all its row tiles at once: 235b
    /// reads 6.7 GB less from HBM per pass, and runs no faster, session 19)
    Experts,
}

/// `raster_group`: a persistent row GEMM whose weights per expert exceed this many bytes runs its tiles in groups
/// of `RASTER_GROUP` row tiles, so that the ~8 tiles reading one weight column start together (the H100's and
/// H200's L2 hold 50 MB; 235b's W13 is 25 MB per expert: dX 5% faster; its W2 12.5 MB: no gain; 30b's 6 MB experts
/// lost 1%: session 16).
const RASTER_MIN_WEIGHT_BYTES: usize = 16 << 20;
const RASTER_GROUP: TileOrder = TileOrder::RowGroups(8);

/// `FastGemmParams.raster_m` for a persistent row GEMM with `n` x `k` bf16 weights per expert under the
/// layer's setting (`FastLayer::set_tile_order`): 0 column tile fastest, G > 0 groups of G row tiles, -1 one
/// group per expert.
fn raster_group(setting: Option<TileOrder>, n: i32, k: i32) -> i32 {
    let order = setting.unwrap_or(if n.max(0) as usize * k.max(0) as usize * 2 > RASTER_MIN_WEIGHT_BYTES { RASTER_GROUP } else { TileOrder::Columns });
    match order {
        TileOrder::Columns => 0,
        TileOrder::RowGroups(g) => g.min(1 << 16) as i32,
        TileOrder::Experts => -1,
    }
}

/// Mirrors `FastGemmParams` in `cuda/fast/fast_gemm.cu` field for field.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct GemmParams {
    a: u64,
    a_idx: u64,
    b: u64,
    b_idx: u64,
    c: u64,
    c2: u64,
    h: u64,
    row_w: u64,
    ds_part: u64,
    tiles: u64,
    tile_count: u64,
    offsets: u64,
    tile_ctr: u64,
    a_rows: u64,
    lda: i64,
    ldb: i64,
    ldc: i64,
    b_estride: i64,
    c_estride: i64,
    m_dim: i32,
    n_dim: i32,
    k_dim: i32,
    inter: i32,
    alpha: f32,
    clamp_limit: f32,
    raster_m: i32,
}
// SAFETY: plain old data with the C layout of FastGemmParams (pointers as u64, then i64s, i32s, f32s, an i32).
unsafe impl DeviceRepr for GemmParams {}

/// The distribution of `FastLayer::fill_random_from`'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputDist {
    /// Uniform on [-√3 σ, √3 σ) (`fill_random`; every benchmark before session 30).
    Uniform,
    /// Normal (Box-Muller), as the PyTorch baseline's `torch.randn`.
    Normal,
}

/// Fill bf16 buffers with NaN (fc_fill_random with a NaN scale), so that a test sees any element left unwritten.
fn fill_nan<const N: usize>(gpu: &Gpu, k: &FastKernels, bufs: [&mut CudaSlice<u16>; N]) -> Result<(), GpuError> {
    let (nan, f) = (f32::NAN, k.f("fc_fill_random"));
    let cfg = LaunchConfig { grid_dim: (1024, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    for buf in bufs {
        let n = buf.len() as i64;
        // SAFETY: fc_fill_random(bf16*, long long, unsigned long long, float) writes n elements of buf; a NaN
        // scale makes every element NaN.
        unsafe { gpu.stream.launch_builder(f).arg(buf).arg(&n).arg(&0u64).arg(&nan).launch(cfg)? };
    }
    Ok(())
}

/// An engine of the fast layer: (row GEMMs on wgmma, weight gradients on wgmma, weights read as stored with
/// the row-wise SwiGLU backward, those GEMMs as persistent warp-specialised kernels); see `set_engine`.
pub type Engine = (bool, bool, bool, bool);

/// The engines by name, slowest first: mma.sync everywhere (any GPU), then the sm_90a ones.
pub const ENGINES: &[(&str, Engine)] = &[
    ("mma", (false, false, false, false)),
    ("wgmma-rows", (true, false, false, false)),
    ("wgmma-t", (true, true, false, false)),
    ("wgmma", (true, true, true, false)),
    ("ws", (true, true, true, true)),
];

/// The layer's inputs as bf16 bits: x, W13, W2, dY.
pub type Inputs = (Vec<u16>, Vec<u16>, Vec<u16>, Vec<u16>);

/// One kernel's time from a profiled pass.
#[derive(Clone, Debug)]
pub struct KernelTime {
    pub name: &'static str,
    pub ms: f32,
}

/// Views of the layer's device buffers at their exact lengths (bf16 tensors as raw bits); the same tensors
/// as [`FastTrace`], left on the device.
pub struct FastBuffers<'a> {
    pub row_token: CudaView<'a, i32>,
    pub row_slot: CudaView<'a, i32>,
    pub offsets: CudaView<'a, i32>,
    pub slot_row: CudaView<'a, i32>,
    pub h: CudaView<'a, u16>,
    pub a: CudaView<'a, u16>,
    pub o: CudaView<'a, u16>,
    pub y: CudaView<'a, u16>,
    pub dh: CudaView<'a, u16>,
    /// A' = w·A, the dW2 operand
    pub aw: CudaView<'a, u16>,
    pub dx_rows: CudaView<'a, u16>,
    pub grad_x: CudaView<'a, u16>,
    pub grad_w13: CudaView<'a, u16>,
    pub grad_w2: CudaView<'a, u16>,
    pub grad_topk_weights: CudaView<'a, f32>,
}

/// The layer's device buffers for one shape and routing, and its launches.
pub struct FastLayer<'g> {
    gpu: &'g Gpu,
    k: &'g FastKernels,
    pub dims: FastDims,
    /// dispatched rows (slots that are not -1)
    pub rows: usize,
    alpha: f32,
    limit: f32,
    max_tiles: usize,
    pub x: CudaSlice<u16>,
    pub w13: CudaSlice<u16>,
    pub w2: CudaSlice<u16>,
    pub dy: CudaSlice<u16>,
    ids: CudaSlice<i32>,
    weights: CudaSlice<f32>,
    counts: CudaSlice<i32>,
    offsets: CudaSlice<i32>,
    tiles: CudaSlice<i32>,
    tile_count: CudaSlice<i32>,
    /// the tile list with each expert's tiles padded to an even count (persistent GEMMs in clusters of two)
    tiles2: CudaSlice<i32>,
    tile_count2: CudaSlice<i32>,
    /// the persistent GEMMs' tile counter and finished-block count (the dynamic tile scheduler: blocks take
    /// tiles as they finish); zero between launches (the last block of each launch resets them)
    tile_ctr: CudaSlice<i32>,
    row_token: CudaSlice<i32>,
    row_slot: CudaSlice<i32>,
    row_w: CudaSlice<f32>,
    slot_row: CudaSlice<i32>,
    h: CudaSlice<u16>,
    a: CudaSlice<u16>,
    o: CudaSlice<u16>,
    y: CudaSlice<u16>,
    dh: CudaSlice<u16>,
    aw: CudaSlice<u16>,
    ds_part: CudaSlice<f32>,
    dx_rows: CudaSlice<u16>,
    grad_x: CudaSlice<u16>,
    grad_w13: CudaSlice<u16>,
    grad_w2: CudaSlice<u16>,
    grad_tw: CudaSlice<f32>,
    /// W2 and W13 transposed per expert ([E, I, H], [E, H, 2I]) for the wgmma backward's K-major operands
    w2t: CudaSlice<u16>,
    w13t: CudaSlice<u16>,
    wgmma: bool,
    wgrad_wgmma: bool,
    /// wgmma data gradients reading the weights as stored (MN-major B) and the SwiGLU backward as its own
    /// row-wise kernel over dA_raw (bf16), instead of transposed weights and the fused epilogue
    direct: bool,
    /// the default engine's GEMMs as persistent warp-specialised kernels (fast_ws.cu)
    persistent: bool,
    /// persistent engine: the backward's gathered operands (dY's and X's rows) copied into expert order first
    /// (into the dX-rows buffer, before dX writes it), so that dA_raw and the weight gradients read them by TMA
    gather_first: bool,
    /// persistent engine: X's rows copied into expert order (into the o buffer, free until GEMM2) before GEMM1,
    /// so that GEMM1 reads A by TMA instead of gathering it by cp.async
    gemm1_gather_first: bool,
    /// persistent engine with `gather_first`: dY's rows for grad_w2 written by dA_raw, which gathers them from dY
    /// in its loads anyway (its column-0 tiles store each stage's rows on: `FastGemmParams::a_rows`), instead of
    /// a copy kernel before it (`gather_dy`)
    dy_rows_from_da: bool,
    /// persistent engine: X's rows copied into expert order before GEMM1 into a buffer of their own (`x_rows`),
    /// which GEMM1 reads by TMA and the backward's grad_w13 reads again instead of gathering X a second time
    /// (as PyTorch's grouped-GEMM MoE keeps `x[order]` for its weight gradient): rows x H bf16 more memory
    save_x_rows: bool,
    /// X's rows in expert order (allocated on first use by `save_x_rows`), and whether they are X's current rows
    /// (a forward made them and X has not changed since)
    x_rows: CudaSlice<u16>,
    x_rows_fresh: bool,
    /// the persistent row GEMMs' tile order: None = by the weights' size (`raster_group`)
    tile_order: Option<TileOrder>,
    /// dA_raw = dY[token]·W2 (unweighted), bf16: the direct backward's input to fc_swiglu_bwd_rows
    da_raw: CudaSlice<u16>,
    profile: Option<Vec<(&'static str, CudaEvent, CudaEvent)>>,
    /// `set_repeat`: the kernel label launched several times in a row wherever a pass launches it, and how often
    repeat: Option<(&'static str, usize)>,
    /// MOE_FAST_TRACE_LAUNCHES=1: each launch's label on stderr before it is submitted, and "done" after the
    /// stream has drained it, so that a run that hangs names the kernel it waits on: the last label without
    /// its "done". (Session 25: without the drain, a stalled racecheck run had submitted every launch of the
    /// test, the launches being asynchronous under compute-sanitizer too, so the last label named nothing.)
    trace_launches: bool,
}

fn i32_of(n: usize, what: &str) -> Result<i32, GpuError> {
    i32::try_from(n).map_err(|_| GpuError::Input(format!("{what} = {n} does not fit an i32")))
}

/// Check the routing ids on the host: -1 or an expert, no expert twice in one token. Returns the row count.
fn validate_ids(ids: &[i32], k: usize, e: usize) -> Result<usize, GpuError> {
    let mut rows = 0;
    for (tok, row) in ids.chunks(k.max(1)).enumerate() {
        for (j, &id) in row.iter().enumerate() {
            if id < -1 || id >= e as i32 {
                return Err(GpuError::Input(format!("topk_ids[{tok}, {j}] = {id} is not -1 or an expert in 0..{e}")));
            }
            if id >= 0 {
                if row[..j].contains(&id) {
                    return Err(GpuError::Input(format!("topk_ids: token {tok} names expert {id} twice")));
                }
                rows += 1;
            }
        }
    }
    Ok(rows)
}

impl<'g> FastLayer<'g> {
    /// Buffers for `dims` with the routing given (`ids`, `weights`: [T, k], -1 for unused slots). Inputs start
    /// as zeros: set them with [`FastLayer::upload`] or [`FastLayer::fill_random`].
    pub fn new(gpu: &'g Gpu, k: &'g FastKernels, dims: FastDims, act: Activation, ids: &[i32], weights: &[f32]) -> Result<FastLayer<'g>, GpuError> {
        let FastDims { tokens: t, hidden: hd, inter: id, experts: e, top_k: kk } = dims;
        if hd == 0 || id == 0 || hd % 8 != 0 || id % 8 != 0 {
            return Err(GpuError::Input(format!("the fast kernels need hidden and intermediate to be positive multiples of 8 (16-byte rows); got H = {hd}, I = {id}")));
        }
        if e == 0 || e > 1024 || kk == 0 || kk > e {
            return Err(GpuError::Input(format!("the fast kernels need 1 <= top_k <= experts <= 1024; got k = {kk}, E = {e}")));
        }
        if ids.len() != t * kk || weights.len() != t * kk {
            return Err(GpuError::Input(format!("topk_ids and topk_weights must hold tokens * top_k = {} values", t * kk)));
        }
        let rows = validate_ids(ids, kk, e)?;
        let max_tiles = rows.div_ceil(TILE_M) + e;
        if max_tiles > 65535 || hd.div_ceil(TILE_N) > 65535 {
            return Err(GpuError::Input(format!("{rows} rows need {max_tiles} row tiles, over one launch's 65535")));
        }
        for (n, what) in [(t * kk, "slots"), (rows * 2 * id, "rows * 2I"), (e * 2 * id * hd, "E * 2I * H"), (t * hd, "T * H")] {
            i32_of(n / 8, what)?;
        }
        let (alpha, limit) = match act {
            Activation::Swiglu => (1.0f32, -1.0f32),
            Activation::SwigluClamped { alpha, limit } => (alpha as f32, limit as f32),
        };
        let s = &gpu.stream;
        let z16 = |n: usize| -> Result<CudaSlice<u16>, GpuError> { Ok(s.alloc_zeros::<u16>(n.max(1))?) };
        let up_i32 = |v: &[i32]| -> Result<CudaSlice<i32>, GpuError> { Ok(if v.is_empty() { s.alloc_zeros::<i32>(1)? } else { s.clone_htod(v)? }) };
        let chunks = (t * kk).div_ceil(ROUTE_CHUNK);
        Ok(FastLayer {
            gpu,
            k,
            dims,
            rows,
            alpha,
            limit,
            max_tiles,
            x: z16(t * hd)?,
            w13: z16(e * 2 * id * hd)?,
            w2: z16(e * hd * id)?,
            dy: z16(t * hd)?,
            ids: up_i32(ids)?,
            weights: if weights.is_empty() { s.alloc_zeros::<f32>(1)? } else { s.clone_htod(weights)? },
            counts: zeros(gpu, chunks * e)?,
            offsets: zeros(gpu, e + 1)?,
            tiles: zeros(gpu, 3 * max_tiles)?,
            tile_count: zeros(gpu, 1)?,
            tiles2: zeros(gpu, 3 * (max_tiles + e))?,
            tile_count2: zeros(gpu, 1)?,
            tile_ctr: zeros(gpu, 2)?,
            row_token: zeros(gpu, rows)?,
            row_slot: zeros(gpu, rows)?,
            row_w: zeros(gpu, rows)?,
            slot_row: zeros(gpu, t * kk)?,
            h: z16(rows * 2 * id)?,
            a: z16(rows * id)?,
            o: z16(rows * hd)?,
            y: z16(t * hd)?,
            dh: z16(rows * 2 * id)?,
            aw: z16(rows * id)?,
            ds_part: zeros(gpu, rows * id.div_ceil(TILE_N))?,
            dx_rows: z16(rows * hd)?,
            grad_x: z16(t * hd)?,
            grad_w13: z16(e * 2 * id * hd)?,
            grad_w2: z16(e * hd * id)?,
            grad_tw: zeros(gpu, t * kk)?,
            // allocated on first use by the transposed-weights engine
            w2t: z16(1)?,
            w13t: z16(1)?,
            // the fastest engine the GPU has (measured: BENCHMARKS numbers in the bench-gpu output)
            wgmma: k.wgmma,
            wgrad_wgmma: k.wgmma,
            direct: k.wgmma,
            persistent: k.wgmma,
            gather_first: true,
            gemm1_gather_first: false,
            dy_rows_from_da: true,
            save_x_rows: false,
            x_rows: z16(1)?,
            x_rows_fresh: false,
            tile_order: None,
            da_raw: z16(if k.wgmma { rows * id } else { 1 })?,
            profile: None,
            repeat: None,
            trace_launches: std::env::var("MOE_FAST_TRACE_LAUNCHES").is_ok_and(|v| v == "1"),
        })
    }

    /// Upload bf16 inputs (raw bits): x [T, H], w13 [E, 2I, H], w2 [E, H, I], dy [T, H].
    pub fn upload(&mut self, x: &[u16], w13: &[u16], w2: &[u16], dy: &[u16]) -> Result<(), GpuError> {
        let FastDims { tokens: t, hidden: hd, inter: id, experts: e, .. } = self.dims;
        if x.len() != t * hd || w13.len() != e * 2 * id * hd || w2.len() != e * hd * id || dy.len() != t * hd {
            return Err(GpuError::Input("input sizes do not match the layer's dims".into()));
        }
        self.x_rows_fresh = false;
        let s = &self.gpu.stream;
        for (src, dst) in [(x, &mut self.x), (w13, &mut self.w13), (w2, &mut self.w2), (dy, &mut self.dy)] {
            if !src.is_empty() {
                s.memcpy_htod(src, dst)?;
            }
        }
        Ok(())
    }

    /// Fill x, dy with uniform values of standard deviation 1, w13 with std H^-1/2 and w2 with std I^-1/2
    /// (the PyTorch baseline's scales), on the device.
    pub fn fill_random(&mut self, seed: u64) -> Result<(), GpuError> {
        self.fill_random_from(seed, InputDist::Uniform)
    }

    /// `fill_random` with the values drawn from `dist` (same standard deviations).
    pub fn fill_random_from(&mut self, seed: u64, dist: InputDist) -> Result<(), GpuError> {
        let FastDims { hidden: hd, inter: id, .. } = self.dims;
        self.x_rows_fresh = false;
        // the kernels' parameter: the half-width of the uniform interval, or the normal's standard deviation
        let (kernel, unit) = match dist {
            InputDist::Uniform => ("fc_fill_random", 3f32.sqrt()),
            InputDist::Normal => ("fc_fill_normal", 1.0),
        };
        let plan = [(0u64, unit), (1, unit / (hd as f32).sqrt()), (2, unit / (id as f32).sqrt()), (3, unit)];
        for (i, scale) in plan {
            let buf = match i {
                0 => &mut self.x,
                1 => &mut self.w13,
                2 => &mut self.w2,
                _ => &mut self.dy,
            };
            let n = buf.len() as i64;
            let sd = seed.wrapping_mul(0x9E37_79B9).wrapping_add(i);
            let cfg = LaunchConfig { grid_dim: (1024, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: fc_fill_random and fc_fill_normal (bf16*, long long, unsigned long long, float) write n
            // elements of buf.
            unsafe { self.gpu.stream.launch_builder(self.k.f(kernel)).arg(buf).arg(&n).arg(&sd).arg(&scale).launch(cfg)? };
        }
        Ok(())
    }

    /// Fill every bf16 output and intermediate with NaN, so that a test sees any element a kernel leaves unwritten.
    pub fn poison_outputs(&mut self) -> Result<(), GpuError> {
        self.x_rows_fresh = false;
        let bufs = [&mut self.h, &mut self.a, &mut self.o, &mut self.y, &mut self.dh, &mut self.aw, &mut self.dx_rows, &mut self.grad_x, &mut self.grad_w13, &mut self.grad_w2, &mut self.x_rows];
        fill_nan(self.gpu, self.k, bufs)
    }

    /// Choose the row GEMMs' engine: wgmma (Hopper only; the default there) or mma.sync (every GPU).
    pub fn use_wgmma(&mut self, on: bool) -> Result<(), GpuError> {
        if on && !self.k.wgmma {
            return Err(GpuError::Input(format!("wgmma needs an sm_90a GPU; these kernels were built for {}", self.k.arch)));
        }
        self.wgmma = on;
        if !on {
            self.wgrad_wgmma = false;
            self.direct = false;
            self.persistent = false;
        }
        Ok(())
    }

    /// Run the GEMMs of the weights-as-stored wgmma engine as persistent warp-specialised kernels (one block
    /// per SM, a producer warpgroup feeding two consumer warpgroups; Hopper only). Same tiles and k order:
    /// bitwise the same results.
    pub fn use_persistent(&mut self, on: bool) -> Result<(), GpuError> {
        if on {
            self.use_wgmma_direct(true)?;
        }
        self.persistent = on;
        Ok(())
    }

    /// With the persistent engine, copy the backward's gathered operands into expert order before the GEMMs
    /// that read them (on, the default) or gather them inside the GEMMs' loads (off); bitwise the same results.
    pub fn use_gather_first(&mut self, on: bool) {
        self.gather_first = on;
    }

    /// With the persistent engine and `use_gather_first`, let dA_raw gather dY's rows in its loads and write them
    /// on in expert order for grad_w2 (on, the default), or copy them first with a kernel of their own (off);
    /// bitwise the same results.
    pub fn use_dy_rows_from_da(&mut self, on: bool) {
        self.dy_rows_from_da = on;
    }

    /// With the persistent engine, copy X's rows into expert order before GEMM1 (into the o buffer, which
    /// GEMM2 overwrites) instead of gathering them in GEMM1's loads (off, the default); bitwise the same results.
    pub fn use_gemm1_gather_first(&mut self, on: bool) {
        self.gemm1_gather_first = on;
    }

    /// With the persistent engine, copy X's rows into expert order before GEMM1 into a buffer kept until the
    /// backward (rows x H bf16), so that GEMM1 reads A by TMA and grad_w13 needs no second gather of X. Off by
    /// default: issue #6 asks for no permuted copy of X and at most X and H kept per token; on, it keeps k
    /// copies of X's rows (512 MiB on 30b at T = 16384, what PyTorch's grouped-GEMM layer keeps as `x[order]`)
    /// for forward+backward in 0.984x the time on 30b, 0.989x on 235b (session 16, H100). Bitwise the same
    /// results. Supersedes `use_gemm1_gather_first`.
    pub fn use_saved_x_rows(&mut self, on: bool) {
        self.save_x_rows = on;
    }

    /// The persistent row GEMMs' tile order (`TileOrder`) for every row GEMM; `None` (the default) chooses per
    /// GEMM by the size of one expert's weights (`RASTER_MIN_WEIGHT_BYTES`). Bitwise the same results.
    pub fn set_tile_order(&mut self, order: Option<TileOrder>) {
        self.tile_order = order;
    }

    /// Every GEMM on wgmma, the data gradients reading the weights as stored (no transposed copies), and the
    /// SwiGLU backward as a row-wise kernel after a bf16 dA_raw GEMM (Hopper only).
    pub fn use_wgmma_direct(&mut self, on: bool) -> Result<(), GpuError> {
        if on {
            self.use_wgmma_wgrad(true)?;
        } else {
            self.persistent = false;
        }
        self.direct = on;
        Ok(())
    }

    /// Also run the weight-gradient GEMMs on wgmma (MN-major operands; Hopper only).
    pub fn use_wgmma_wgrad(&mut self, on: bool) -> Result<(), GpuError> {
        if on && !self.k.wgmma {
            return Err(GpuError::Input(format!("wgmma needs an sm_90a GPU; these kernels were built for {}", self.k.arch)));
        }
        self.wgrad_wgmma = on;
        if on {
            self.wgmma = true;
        } else {
            self.direct = false;
            self.persistent = false;
        }
        Ok(())
    }

    /// Choose an engine (one of `ENGINES`; the wgmma ones need sm_90a).
    pub fn set_engine(&mut self, (wgmma, wgrad, direct, persistent): Engine) -> Result<(), GpuError> {
        self.use_wgmma(wgmma)?;
        self.use_wgmma_wgrad(wgrad)?;
        self.use_wgmma_direct(direct)?;
        self.use_persistent(persistent)
    }

    /// Which engines the GEMMs use.
    pub fn engine(&self) -> &'static str {
        if self.persistent {
            return if self.gather_first {
                "wgmma persistent warp-specialised (weights as stored, row-wise SwiGLU bwd, backward operands gathered first)"
            } else {
                "wgmma persistent warp-specialised (weights as stored, row-wise SwiGLU bwd, backward operands gathered in the GEMMs)"
            };
        }
        match (self.wgmma, self.wgrad_wgmma, self.direct) {
            (false, _, _) => "mma.sync",
            (true, false, _) => "wgmma rows (transposed weights), mma.sync wgrad",
            (true, true, false) => "wgmma (transposed weights, fused dA epilogue)",
            (true, true, true) => "wgmma (weights as stored, row-wise SwiGLU bwd)",
        }
    }

    /// Replace x [T, H] (bf16 bits) only.
    pub fn upload_x(&mut self, x: &[u16]) -> Result<(), GpuError> {
        if x.len() != self.dims.tokens * self.dims.hidden {
            return Err(GpuError::Input("x size does not match the layer's dims".into()));
        }
        self.x_rows_fresh = false;
        if !x.is_empty() {
            self.gpu.stream.memcpy_htod(x, &mut self.x)?;
        }
        Ok(())
    }

    /// Median wall time on the GPU (CUDA events around each repetition) of `reps` runs of `f`.
    pub fn median_ms<F: FnMut(&mut Self) -> Result<(), GpuError>>(&mut self, reps: usize, mut f: F) -> Result<f32, GpuError> {
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut ts = Vec::with_capacity(reps);
        for _ in 0..reps.max(1) {
            let a = self.gpu.stream.record_event(flags)?;
            f(self)?;
            let b = self.gpu.stream.record_event(flags)?;
            ts.push(a.elapsed_ms(&b)?);
        }
        ts.sort_by(f32::total_cmp);
        Ok(ts[ts.len() / 2])
    }

    /// Time each kernel of the following passes with CUDA events (read with [`FastLayer::kernel_times`]).
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(Vec::new);
    }

    /// Launch the kernel labelled `label` (a name of [`FastLayer::kernel_times`]) `times` times in a row wherever
    /// a pass launches it; None: every kernel once. `bench-gpu --kernel-energy-ms` runs one kernel long enough for
    /// the GPU's energy counter this way. Each kernel of a pass writes only buffers it does not read, so the
    /// repeats leave every output as a plain pass makes it (tests/gpu_fast.rs checks each label bitwise), except
    /// `route_scan`, which turns the counts into offsets in place: refused.
    pub fn set_repeat(&mut self, repeat: Option<(&'static str, usize)>) -> Result<(), GpuError> {
        if let Some((label, times)) = repeat {
            if NOT_REPEATABLE.contains(&label) {
                return Err(GpuError::Input(format!("kernel {label} works in place: a repeat would change its output")));
            }
            if times == 0 {
                return Err(GpuError::Input(format!("kernel {label} repeated 0 times: at least once")));
            }
        }
        self.repeat = repeat;
        Ok(())
    }

    /// The kernel times of the profiled passes since the last call.
    pub fn kernel_times(&mut self) -> Result<Vec<KernelTime>, GpuError> {
        let Some(p) = self.profile.as_mut() else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for (name, a, b) in p.drain(..) {
            out.push(KernelTime { name, ms: a.elapsed_ms(&b)? });
        }
        Ok(out)
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        s.device_ptr(&self.gpu.stream).0
    }

    fn launch<F>(&mut self, name: &'static str, f: F) -> Result<(), GpuError>
    where
        F: Fn(&Self) -> Result<(), GpuError>,
    {
        if self.trace_launches {
            eprintln!("fast layer: launch {name}");
        }
        let timing = self.profile.is_some();
        let start = if timing { Some(self.gpu.stream.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?) } else { None };
        let times = match self.repeat {
            Some((label, n)) if label == name => n,
            _ => 1,
        };
        for _ in 0..times {
            f(self)?;
        }
        if let Some(start) = start {
            let end = self.gpu.stream.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
            self.profile.as_mut().expect("profiling").push((name, start, end));
        }
        // (after the profile's end event, so that a profiled pass does not time the host's wait)
        if self.trace_launches {
            self.gpu.stream.synchronize()?;
            eprintln!("fast layer: done {name}");
        }
        Ok(())
    }

    fn gemm(&mut self, name: &'static str, label: &'static str, grid: (usize, usize, usize), p: GemmParams) -> Result<(), GpuError> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        if let Some(ws) = self.persistent_kernel(name) {
            let mut p = p;
            if self.k.cluster(ws) > 1 {
                // the clusters' blocks pair up row tiles of one expert: the padded list
                p.tiles = self.ptr(&self.tiles2);
                p.tile_count = self.ptr(&self.tile_count2);
            }
            if !self.k.dynamic(ws) {
                p.tile_ctr = 0;  // the fixed tile order (see DEFAULT_DYNAMIC in kernels.rs)
            }
            p.raster_m = raster_group(self.tile_order, p.n_dim, p.k_dim);
            let cfg = self.persistent_config(ws, grid);
            let maps = self.tensor_maps(ws, &p)?;
            return self.launch(label, |me| me.launch_persistent(ws, cfg, &p, &maps));
        }
        let smem = if name.starts_with("wg_") { source::WG_SMEM as u32 } else { self.k.smem() };
        let cfg = LaunchConfig { grid_dim: (grid.0 as u32, grid.1 as u32, grid.2 as u32), block_dim: (256, 1, 1), shared_mem_bytes: smem };
        self.launch(label, |me| {
            // SAFETY: every pointer in `p` is a live buffer of this layer sized from the same dims as the
            // indices the kernel forms (see the field comments in fast_gemm.cu); one stream orders the launches.
            unsafe { me.gpu.stream.launch_builder(me.k.f(name)).arg(&p).launch(cfg)? };
            Ok(())
        })
    }

    /// The persistent version of a plain wgmma GEMM, when the persistent engine is on and one exists.
    fn persistent_kernel(&self, name: &str) -> Option<&'static str> {
        if !self.persistent {
            return None;
        }
        source::WS_GEMMS.iter().copied().find(|ws| ws.strip_prefix("ws_") == name.strip_prefix("wg_"))
    }

    /// One persistent block per SM, at most one per tile of the plain grid (an upper bound on the tiles: the
    /// row GEMMs' tile count is known only on the device); with clusters, as many whole clusters as fit at once.
    fn persistent_config(&self, ws: &str, grid: (usize, usize, usize)) -> LaunchConfig {
        let tiles = (grid.0 * grid.1 * grid.2).max(1);
        let blocks = match self.k.cluster(ws) {
            1 => tiles.min(self.k.sms),
            c => c * tiles.div_ceil(c).min(self.k.max_clusters(ws)),
        };
        LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (source::WS_THREADS, 1, 1), shared_mem_bytes: source::WS_SMEM as u32 }
    }

    /// Launch persistent GEMM `ws` (fast_ws.cu: FastGemmParams and four tensor maps), in clusters of
    /// `FastKernels::cluster(ws)` blocks, and print its cycle counts when WS_EXP_CLOCKS is compiled in.
    fn launch_persistent(&self, ws: &str, cfg: LaunchConfig, p: &GemmParams, maps: &[TmaDesc; 4]) -> Result<(), GpuError> {
        let [ta, tb, tc, td] = maps;
        if self.k.cluster(ws) == 1 {
            // SAFETY: every pointer in `p` is a live buffer of this layer sized from the same dims as the indices
            // the kernel forms (the field comments in fast_gemm.cu); the tensor maps describe live buffers of
            // this layer (tensor_maps); one stream orders the launches.
            unsafe { self.gpu.stream.launch_builder(self.k.f(ws)).arg(p).arg(ta).arg(tb).arg(tc).arg(td).launch(cfg)? };
        } else {
            let mut args: [*mut std::ffi::c_void; 5] =
                [p as *const GemmParams as *mut _, ta as *const TmaDesc as *mut _, tb as *const TmaDesc as *mut _, tc as *const TmaDesc as *mut _, td as *const TmaDesc as *mut _];
            // SAFETY: as above (the same arguments, by pointer, in the kernel's parameter order); the grid is a
            // multiple of the cluster size (persistent_config), and the configuration and args outlive the call.
            with_cluster_config(self.k.cluster(ws), cfg.grid_dim.0, self.gpu.stream.cu_stream(), |config| unsafe {
                cudarc::driver::sys::cuLaunchKernelEx(config, self.k.f(ws).cu_function(), args.as_mut_ptr(), std::ptr::null_mut())
            })
            .result()?;
        }
        if self.k.clocks {
            let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: ws_clk_dump() takes no arguments.
            unsafe { self.gpu.stream.launch_builder(self.k.f("ws_clk_dump")).launch(one)? };
        }
        Ok(())
    }

    /// The tensor maps of a persistent row GEMM: A's rows when they are not gathered (2-D, [rows][K], boxes
    /// of 128 rows x 64 k), the weights B (3-D over the experts): K-major [E][n][K] in boxes of 256 (GEMM1:
    /// 128) rows x 64 k, or as stored [E][K][N] in boxes of 64 k lines x 64 columns; and the output C of the
    /// TMA-store epilogue ([1][rows][N], boxes of 64 rows x 128 bytes; GEMM1: H [1][rows][2I], and A
    /// [1][rows][I] as the fourth map).
    fn tensor_maps(&self, ws: &str, p: &GemmParams) -> Result<[TmaDesc; 4], GpuError> {
        let (k, n, e) = (p.k_dim as u64, p.n_dim as u64, self.dims.experts as u64);
        let ta = if p.a_idx == 0 { tma_desc(p.a, &[k, self.rows.max(1) as u64], &[p.lda as u64], &[64, 128])? } else { TmaDesc::default() };
        let tb = match ws {
            "ws_gemm1_swiglu" => tma_desc(p.b, &[k, n, e], &[p.ldb as u64, p.b_estride as u64], &[64, 128, 1])?,
            // (clusters: each block loads half of the 256 rows, unless the experiment WS_EXP_CLUSTER_NO_MC)
            "ws_rows" => tma_desc(p.b, &[k, n, e], &[p.ldb as u64, p.b_estride as u64], &[64, 256 / self.k.b_share(ws) as u32, 1])?,
            "ws_rows_bmn" => tma_desc(p.b, &[n, k, e], &[p.ldb as u64, p.b_estride as u64], &[64, 64, 1])?,
            _ => return Err(GpuError::Input(format!("no tensor maps for {ws}"))),
        };
        let rows = self.rows.max(1) as u64;
        let tc = match ws {
            "ws_rows" | "ws_rows_bmn" => tma_desc(p.c, &[n, rows, 1], &[p.ldc as u64, p.ldc as u64 * rows], &[64, 64, 1])?,
            "ws_gemm1_swiglu" => tma_desc(p.c, &[2 * p.inter as u64, rows, 1], &[p.ldc as u64, p.ldc as u64 * rows], &[64, 64, 1])?,
            _ => TmaDesc::default(),
        };
        let td = match ws {
            "ws_gemm1_swiglu" => tma_desc(p.c2, &[p.inter as u64, rows, 1], &[p.inter as u64, p.inter as u64 * rows], &[64, 64, 1])?,
            _ => TmaDesc::default(),
        };
        Ok([ta, tb, tc, td])
    }

    /// `out[t] = Σ_j (w[t,j]·) rows[row(t,j)]`; `weights` 0 for the plain un-dispatch sum.
    fn combine(&mut self, name: &'static str, rows: u64, weights: u64, slot_row: u64, out: u64) -> Result<(), GpuError> {
        let FastDims { tokens: t, hidden: hd, top_k: kk, .. } = self.dims;
        let n = t * hd / 8;
        let cfg = LaunchConfig { grid_dim: (n.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let (ti, ki, hi) = (t as i32, kk as i32, hd as i32);
        self.launch(name, |me| {
            // SAFETY: fc_combine(const bf16*, const float*, const int*, bf16*, int, int, int); rows has
            // `rows` x H, slot_row T x k entries (or -1), out T x H.
            unsafe { me.gpu.stream.launch_builder(me.k.f("fc_combine")).arg(&rows).arg(&weights).arg(&slot_row).arg(&out).arg(&ti).arg(&ki).arg(&hi).launch(cfg)? };
            Ok(())
        })
    }

    /// `dst[r] = src[row_token[r]]` for every row (`cols` bf16 each), token by token: each source row is read
    /// once and written to its slots' rows (`fc_scatter_rows`).
    fn gather_rows(&mut self, label: &'static str, src: u64, dst: u64, cols: usize) -> Result<(), GpuError> {
        let FastDims { tokens: t, top_k: kk, .. } = self.dims;
        let (ti, ki, c) = (t as i32, kk as i32, cols as i32);
        let blocks = (t * cols / 8).div_ceil(256).clamp(1, 65535 * 16) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        self.launch(label, |me| {
            // SAFETY: fc_scatter_rows(const bf16*, const int*, bf16*, int, int, int); src is T x cols, slot_row
            // T x k entries, each -1 or a row < rows, and dst rows x cols.
            unsafe { me.gpu.stream.launch_builder(me.k.f("fc_scatter_rows")).arg(&src).arg(&me.slot_row).arg(&dst).arg(&ti).arg(&ki).arg(&c).launch(cfg)? };
            Ok(())
        })
    }

    fn base_params(&self) -> GemmParams {
        GemmParams {
            tiles: self.ptr(&self.tiles),
            tile_count: self.ptr(&self.tile_count),
            offsets: self.ptr(&self.offsets),
            tile_ctr: self.ptr(&self.tile_ctr),
            inter: self.dims.inter as i32,
            alpha: self.alpha,
            clamp_limit: self.limit,
            ..Default::default()
        }
    }

    /// Wait for the GPU.
    pub fn sync(&self) -> Result<(), GpuError> {
        Ok(self.gpu.stream.synchronize()?)
    }

    /// Bytes kept from forward for backward per token: the k rows of H (bf16), X's k rows in expert order with
    /// `use_saved_x_rows` (bf16), plus each row's token, slot, weight and each slot's row (the caller holds X
    /// and dY).
    pub fn bytes_kept_per_token(&self) -> f64 {
        let FastDims { tokens: t, hidden: hd, inter: id, .. } = self.dims;
        let x_rows = if self.save_x_rows && self.persistent { self.rows * hd * 2 } else { 0 };
        self.bytes_kept_per_token_recompute() + (self.rows * 2 * id * 2 + x_rows) as f64 / t.max(1) as f64
    }

    /// Bytes kept from forward for backward per token with `recompute_h`: the routing metadata only (each row's
    /// token, slot and weight, each slot's row).
    pub fn bytes_kept_per_token_recompute(&self) -> f64 {
        let FastDims { tokens: t, top_k: kk, .. } = self.dims;
        (self.rows * 12 + t * kk * 4) as f64 / t.max(1) as f64
    }

    /// Device bytes the layer allocates beyond its inputs (x, W13, W2, dY): (activations, routing and
    /// workspaces incl. the transposed weights, the gradients dX, dW13, dW2, d(topk_weights)).
    pub fn extra_bytes(&self) -> (usize, usize) {
        let b16 = |s: &CudaSlice<u16>| s.len() * 2;
        let b32 = |n: usize| n * 4;
        let work = b16(&self.h) + b16(&self.a) + b16(&self.o) + b16(&self.y) + b16(&self.dh) + b16(&self.aw) + b16(&self.dx_rows)
            + b16(&self.x_rows) + b16(&self.w2t) + b16(&self.w13t) + b16(&self.da_raw)
            + b32(self.counts.len() + self.offsets.len() + self.tiles.len() + self.row_token.len() + self.row_slot.len() + self.row_w.len() + self.slot_row.len() + self.ds_part.len());
        let grads = b16(&self.grad_x) + b16(&self.grad_w13) + b16(&self.grad_w2) + b32(self.grad_tw.len());
        (work, grads)
    }

    /// Download everything the layer wrote.
    pub fn trace(&self) -> Result<FastTrace, GpuError> {
        let FastDims { tokens: t, hidden: hd, inter: id, experts: e, top_k: kk } = self.dims;
        let m = self.rows;
        let s = &self.gpu.stream;
        fn take<T: DeviceRepr + Clone>(s: &Arc<cudarc::driver::CudaStream>, d: &CudaSlice<T>, n: usize) -> Result<Vec<T>, GpuError> {
            let mut v = s.clone_dtoh(d)?;
            v.truncate(n);
            Ok(v)
        }
        s.synchronize()?;
        Ok(FastTrace {
            row_token: take(s, &self.row_token, m)?,
            row_slot: take(s, &self.row_slot, m)?,
            offsets: take(s, &self.offsets, e + 1)?,
            slot_row: take(s, &self.slot_row, t * kk)?,
            h: take(s, &self.h, m * 2 * id)?,
            a: take(s, &self.a, m * id)?,
            o: take(s, &self.o, m * hd)?,
            y: take(s, &self.y, t * hd)?,
            dh: take(s, &self.dh, m * 2 * id)?,
            aw: take(s, &self.aw, m * id)?,
            dx_rows: take(s, &self.dx_rows, m * hd)?,
            grad_x: take(s, &self.grad_x, t * hd)?,
            grad_w13: take(s, &self.grad_w13, e * 2 * id * hd)?,
            grad_w2: take(s, &self.grad_w2, e * hd * id)?,
            grad_topk_weights: take(s, &self.grad_tw, t * kk)?,
        })
    }

    /// Copy the caller's device inputs (bf16 bits, exact lengths) into the layer's own buffers, device to
    /// device: the launches take the layer's buffers, so inputs the caller owns are copied, not aliased.
    pub fn copy_inputs_dtod(&mut self, x: &CudaSlice<u16>, w13: &CudaSlice<u16>, w2: &CudaSlice<u16>, dy: Option<&CudaSlice<u16>>) -> Result<(), GpuError> {
        let FastDims { tokens: t, hidden: hd, inter: id, experts: e, .. } = self.dims;
        let want = [(x.len(), t * hd), (w13.len(), e * 2 * id * hd), (w2.len(), e * hd * id), (dy.map_or(t * hd, |d| d.len()), t * hd)];
        if want.iter().any(|(got, n)| got != n) {
            return Err(GpuError::Input("input sizes do not match the layer's dims".into()));
        }
        self.x_rows_fresh = false;
        let s = &self.gpu.stream;
        let mut pairs = vec![(x, &mut self.x), (w13, &mut self.w13), (w2, &mut self.w2)];
        if let Some(d) = dy {
            pairs.push((d, &mut self.dy));
        }
        for (src, dst) in pairs {
            if !src.is_empty() {
                s.memcpy_dtod(src, dst)?;
            }
        }
        Ok(())
    }

    /// Copy the intermediates that only the GEMMs write (H, A, o, dA_raw) from `other`, a layer of the same
    /// dims and routing after a pass. For timing experiments whose GEMMs write nothing (`WS_EXP_NO_STORE`):
    /// the kernels after them then read `other`'s values instead of this layer's zeros, whose speed need not
    /// be that of real operands (session 30: swiglu_bwd_rows ran 25% slower on them). This layer's outputs
    /// are then no longer its own: do not compare or check them.
    pub fn seed_intermediates_from(&mut self, other: &FastLayer) -> Result<(), GpuError> {
        if other.dims != self.dims || other.rows != self.rows {
            return Err(GpuError::Input("seed_intermediates_from: the layers' dims or routed rows differ".into()));
        }
        let s = &self.gpu.stream;
        other.sync()?;
        for (src, dst) in [(&other.h, &mut self.h), (&other.a, &mut self.a), (&other.o, &mut self.o), (&other.da_raw, &mut self.da_raw)] {
            if src.len() != dst.len() {
                return Err(GpuError::Input("seed_intermediates_from: the layers' buffers differ in size".into()));
            }
            s.memcpy_dtod(src, dst)?;
        }
        Ok(())
    }

    /// The layer's device buffers, each cut to its exact length (views into the layer; valid until the
    /// next pass writes them).
    pub fn buffers(&self) -> FastBuffers<'_> {
        let FastDims { tokens: t, hidden: hd, inter: id, experts: e, top_k: kk } = self.dims;
        let m = self.rows;
        FastBuffers {
            row_token: self.row_token.slice(..m),
            row_slot: self.row_slot.slice(..m),
            offsets: self.offsets.slice(..e + 1),
            slot_row: self.slot_row.slice(..t * kk),
            h: self.h.slice(..m * 2 * id),
            a: self.a.slice(..m * id),
            o: self.o.slice(..m * hd),
            y: self.y.slice(..t * hd),
            dh: self.dh.slice(..m * 2 * id),
            aw: self.aw.slice(..m * id),
            dx_rows: self.dx_rows.slice(..m * hd),
            grad_x: self.grad_x.slice(..t * hd),
            grad_w13: self.grad_w13.slice(..e * 2 * id * hd),
            grad_w2: self.grad_w2.slice(..e * hd * id),
            grad_topk_weights: self.grad_tw.slice(..t * kk),
        }
    }

    /// Download the inputs (bf16 bits) x, W13, W2, dY, e.g. after `fill_random`, for the checker.
    pub fn inputs(&self) -> Result<Inputs, GpuError> {
        let s = &self.gpu.stream;
        s.synchronize()?;
        let FastDims { tokens: t, hidden: hd, inter: id, experts: e, .. } = self.dims;
        let get = |d: &CudaSlice<u16>, n: usize| -> Result<Vec<u16>, GpuError> {
            let mut v = s.clone_dtoh(d)?;
            v.truncate(n);
            Ok(v)
        };
        Ok((get(&self.x, t * hd)?, get(&self.w13, e * 2 * id * hd)?, get(&self.w2, e * hd * id)?, get(&self.dy, t * hd)?))
    }
}

fn zeros<T: DeviceRepr + ValidAsZeroBits>(gpu: &Gpu, n: usize) -> Result<CudaSlice<T>, GpuError> {
    Ok(gpu.stream.alloc_zeros::<T>(n.max(1))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_params_have_the_c_layout() {
        // FastGemmParams: 14 pointers (a_rows the last), 5 long longs, 4 ints, 2 floats, raster_m (an int), then
        // 4 bytes of tail padding to the 8-byte alignment, as in C
        assert_eq!(std::mem::size_of::<GemmParams>(), 14 * 8 + 5 * 8 + 4 * 4 + 2 * 4 + 4 + 4);
        assert_eq!(std::mem::align_of::<GemmParams>(), 8);
        assert_eq!(std::mem::offset_of!(GemmParams, a_rows), 13 * 8);
        assert_eq!(std::mem::offset_of!(GemmParams, raster_m), 14 * 8 + 5 * 8 + 4 * 4 + 2 * 4);
    }

    #[test]
    fn large_experts_get_the_grouped_tile_order() {
        // (n, k) of GEMM1, GEMM2, dA_raw, dX: qwen3-235b-a22b (H 4096, I 1536) and qwen3-30b-a3b (H 2048, I 768)
        let shapes = |h: i32, i: i32| [(2 * i, h), (h, i), (i, h), (h, 2 * i)];
        // 235b: W13 is 25 MB per expert (grouped: GEMM1 and dX), W2 12.5 MB (not: measured no gain)
        assert_eq!(shapes(4096, 1536).map(|(n, k)| raster_group(None, n, k)), [8, 0, 0, 8]);
        assert_eq!(shapes(2048, 768).map(|(n, k)| raster_group(None, n, k)), [0; 4]);
        // a setting wins everywhere
        assert_eq!(shapes(4096, 1536).map(|(n, k)| raster_group(Some(TileOrder::Columns), n, k)), [0; 4]);
        assert_eq!(shapes(4096, 1536).map(|(n, k)| raster_group(Some(TileOrder::RowGroups(0)), n, k)), [0; 4]);
        assert_eq!(shapes(2048, 768).map(|(n, k)| raster_group(Some(TileOrder::RowGroups(3)), n, k)), [3; 4]);
        assert_eq!(shapes(2048, 768).map(|(n, k)| raster_group(Some(TileOrder::Experts), n, k)), [-1; 4]);
        assert_eq!(raster_group(Some(TileOrder::RowGroups(u32::MAX)), 8, 8), 1 << 16);
    }

    #[test]
    fn routing_ids_are_validated_on_the_host() {
        assert_eq!(validate_ids(&[0, 1, -1, 2], 2, 3).unwrap(), 3);
        assert_eq!(validate_ids(&[], 2, 3).unwrap(), 0);
        for (ids, what) in [(&[0, 3][..], "is not -1 or an expert"), (&[1, 1][..], "twice"), (&[0, -2][..], "is not -1 or an expert")] {
            match validate_ids(ids, 2, 3) {
                Err(GpuError::Input(m)) => assert!(m.contains(what), "{m}"),
                other => panic!("{ids:?}: expected an input error, got {:?}", other.map_err(|e| e.to_string())),
            }
        }
    }
}
