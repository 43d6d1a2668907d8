//! One test case of the fast layer as its kernels take it, shared by the GPU tests (`tests/gpu_fast.rs`) and
//! the GPU fuzz target (`fuzz/fuzz_targets/gpu_fast.rs`): `check::case`'s inputs for a seed and shape, plus a dY
//! from the same seed, in bf16 bits, i32 ids and f32 weights; a forward and backward on a fresh layer; and the
//! stage checker's view of the inputs.

use super::check::HostCase;
use super::{Engine, FastDims, FastKernels, FastLayer, FastTrace};
use crate::forward::bits;
use crate::{Gpu, GpuError};
use moe_reference::config::Activation;

/// A case's host data (bf16 values as their bits).
pub struct FastCase {
    pub dims: FastDims,
    pub act: Activation,
    pub x: Vec<u16>,
    pub w13: Vec<u16>,
    pub w2: Vec<u16>,
    pub dy: Vec<u16>,
    pub ids: Vec<i32>,
    pub weights: Vec<f32>,
}

impl FastCase {
    /// `crate::check::case(seed, t, h, i, e, k, act, unused)` (a fraction `unused` of the slots -1) and
    /// dY of T x H bf16 values in [-0.85, 0.85) from the seed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(seed: u64, t: usize, h: usize, i: usize, e: usize, k: usize, act: Activation, unused: f64) -> FastCase {
        let (_cfg, x, w13, w2, ids, w) = crate::check::case(seed, t, h, i, e, k, act, unused);
        let mut g = crate::check::Gen(seed.wrapping_mul(31).wrapping_add(7) | 1);
        let dy: Vec<f64> = (0..t * h).map(|_| g.bf16(0.5)).collect();
        // the case's arrays are freshly built in standard layout, so their slices exist
        let flat = |a: Option<&[f64]>| bits(a.expect("a freshly built array is contiguous"));
        FastCase {
            dims: FastDims { tokens: t, hidden: h, inter: i, experts: e, top_k: k },
            act,
            x: flat(x.as_slice()),
            w13: flat(w13.as_slice()),
            w2: flat(w2.as_slice()),
            dy: bits(&dy),
            ids: ids.iter().copied().collect(),
            weights: w.iter().copied().collect(),
        }
    }

    /// The stage checker's view of the inputs.
    pub fn host(&self) -> HostCase<'_> {
        HostCase { dims: self.dims, act: self.act, x: &self.x, w13: &self.w13, w2: &self.w2, dy: &self.dy, ids: &self.ids, weights: &self.weights }
    }

    /// A fresh layer with `engine` and the inputs uploaded, and `gather_first` as given (`FastLayer::use_gather_first`,
    /// `use_gemm1_gather_first`, `use_saved_x_rows`: every row gather of the persistent engine copied first, or
    /// every one inside the GEMMs' loads).
    pub fn layer<'g>(&self, gpu: &'g Gpu, kern: &'g FastKernels, engine: Engine, gather_first: bool) -> Result<FastLayer<'g>, GpuError> {
        let mut layer = FastLayer::new(gpu, kern, self.dims, self.act, &self.ids, &self.weights)?;
        layer.set_engine(engine)?;
        layer.use_gather_first(gather_first);
        layer.use_gemm1_gather_first(gather_first);
        layer.use_saved_x_rows(gather_first);
        layer.upload(&self.x, &self.w13, &self.w2, &self.dy)?;
        Ok(layer)
    }

    /// Forward and backward on a fresh layer (its outputs first overwritten with NaN when `poison`: an element
    /// the kernels leave unwritten then differs from an unpoisoned run), and everything they stored.
    pub fn run(&self, gpu: &Gpu, kern: &FastKernels, engine: Engine, gather_first: bool, poison: bool) -> Result<FastTrace, GpuError> {
        let mut layer = self.layer(gpu, kern, engine, gather_first)?;
        if poison {
            layer.poison_outputs()?;
        }
        layer.forward()?;
        layer.backward()?;
        layer.trace()
    }
}
