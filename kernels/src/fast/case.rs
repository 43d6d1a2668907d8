//! One test case of the fast layer as its kernels take it, shared by the GPU tests (`tests/gpu_fast.rs`) and
//! the GPU fuzz target (`fuzz/fuzz_targets/gpu_fast.rs`): `check::case`'s inputs for a seed and shape, plus a dY
//! from the same seed, in bf16 bits, i32 ids and f32 weights; a forward and backward on a fresh layer; and the
//! stage checker's view of the inputs.

use super::check::{check, HostCase, Report, Scope};
use super::{Engine, FastDims, FastKernels, FastLayer, FastTrace, ENGINES};
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

/// A GPU fuzz input decoded: the bytes the fuzz target (`fuzz/fuzz_targets/gpu_fast.rs`) takes, and its
/// committed seeds (`fuzz/corpus/gpu_fast/`, replayed by `tests/gpu_fast.rs`), as a case, an engine and the
/// gather mode.
pub struct FuzzCase {
    pub case: FastCase,
    pub engine: Engine,
    pub gather_first: bool,
    /// The decoded parameters, for messages.
    pub what: String,
}

/// The parameters a fuzz input decodes to (`FuzzParams::decode`), before any array is built.
#[derive(Clone, Debug, PartialEq)]
pub struct FuzzParams {
    pub seed: u64,
    pub dims: FastDims,
    pub act: Activation,
    /// Fraction of the routing slots set to -1.
    pub unused: f64,
    pub engine_name: &'static str,
    pub engine: Engine,
    pub gather_first: bool,
}

/// The bytes a fuzz input decodes from: its own, then (for inputs shorter than the 12 the decoding reads) a
/// splitmix64 stream seeded by an FNV-1a hash of the input. Not zeros: libFuzzer sees only the decoding's
/// branches (the kernels run on the GPU and the check is built without coverage counters), so it keeps
/// ever shorter inputs (s35b: five units of 1-12 bytes, 38 in all). With zeros past the end, every input
/// shorter than 11 bytes ran on the first engine (mma, not the default ws) and every one shorter than 9 with
/// seed 1; one shorter than 3 bytes was H = I = 8, E = k = 1.
fn fuzz_bytes(data: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut state = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)) ^ data.len() as u64;
    let pad = std::iter::repeat_with(move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u8
    });
    data.iter().copied().chain(pad)
}

impl FuzzParams {
    /// Shapes around the tiles (128 rows, 256 columns, 64 k): T up to 299, H up to 264 and I up to 200 in
    /// multiples of 8, E up to 8, either SwiGLU, a fraction of unused slots, a seed, an engine (those that
    /// need wgmma only when `wgmma`), gather first or not; 12 bytes, any past the input's end from `fuzz_bytes`.
    pub fn decode(data: &[u8], wgmma: bool) -> FuzzParams {
        let mut b = fuzz_bytes(data);
        let mut byte = || b.next().map_or(0, usize::from);
        let tokens = byte() + byte() % 45;
        let hidden = 8 * (1 + byte() % 33);
        let inter = 8 * (1 + byte() % 25);
        let experts = 1 + byte() % 8;
        let top_k = 1 + byte() % experts;
        let act = if byte() % 2 == 0 { Activation::Swiglu } else { Activation::SwigluClamped { alpha: 1.702, limit: 7.0 } };
        let unused = [0.0, 0.0, 0.1, 0.5, 1.0][byte() % 5];
        let seed = 1 + (byte() as u64) * 256 + byte() as u64;
        let usable: Vec<_> = ENGINES.iter().filter(|(_, e)| wgmma || !e.0).collect();
        let (engine_name, engine) = *usable[byte() % usable.len()];
        let gather_first = byte() % 2 == 0;
        FuzzParams { seed, dims: FastDims { tokens, hidden, inter, experts, top_k }, act, unused, engine_name, engine, gather_first }
    }

    /// The parameters in one line, for messages.
    pub fn what(&self) -> String {
        let FastDims { tokens: t, hidden: h, inter: i, experts: e, top_k: k } = self.dims;
        let (seed, act, unused, name, gather) = (self.seed, self.act, self.unused, self.engine_name, self.gather_first);
        format!("seed {seed} T={t} H={h} I={i} E={e} k={k} {act:?} unused {unused} engine {name} gather-first {gather}")
    }
}

impl FuzzCase {
    /// `FuzzParams::decode`'s parameters, and the case they give.
    pub fn decode(data: &[u8], wgmma: bool) -> FuzzCase {
        let p = FuzzParams::decode(data, wgmma);
        let FastDims { tokens, hidden, inter, experts, top_k } = p.dims;
        let case = FastCase::new(p.seed, tokens, hidden, inter, experts, top_k, p.act, p.unused);
        FuzzCase { case, engine: p.engine, gather_first: p.gather_first, what: p.what() }
    }

    /// Forward and backward twice, the second time on NaN-poisoned buffers, which must be bitwise the first
    /// (deterministic, nothing left unwritten); then every token and every weight-gradient entry of the first
    /// against the oracle (`fast::check`, on every core). Err names the case and what failed.
    pub fn run_and_check(&self, gpu: &Gpu, kern: &FastKernels) -> Result<Report, String> {
        let what = &self.what;
        let run = |poison: bool| self.case.run(gpu, kern, self.engine, self.gather_first, poison).map_err(|err| format!("{what}: {err}"));
        let first = run(false)?;
        if let Some((name, i)) = first.first_difference(&run(true)?) {
            return Err(format!("{what}: {name} differs between two runs at {i} (not deterministic, or an element left unwritten)"));
        }
        let scope = Scope::on_all_cores((0..self.case.dims.tokens).collect(), None);
        check(&self.case.host(), &first, &scope).map_err(|msg| format!("{what}: {msg}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Inputs shorter than 12 bytes (what libFuzzer keeps, as it sees none of the kernels' branches) still
    /// cover the shapes, activations and engines: each of the 256 one-byte inputs, and the empty one, decodes
    /// from its own padding. With zeros past the end they were all H = I = 8, E = k = 1, seed 1, on "mma".
    #[test]
    fn short_fuzz_inputs_decode_to_varied_cases() {
        let all: Vec<FuzzParams> = std::iter::once(vec![]).chain((0..=255u8).map(|b| vec![b])).map(|d| FuzzParams::decode(&d, true)).collect();
        let distinct = |f: &dyn Fn(&FuzzParams) -> String| all.iter().map(f).collect::<BTreeSet<_>>().len();
        assert_eq!(distinct(&|p| p.engine_name.to_string()), ENGINES.len(), "every engine");
        assert_eq!(distinct(&|p| p.dims.experts.to_string()), 8, "E from 1 to 8");
        assert_eq!(distinct(&|p| format!("{:?}", p.act)), 2, "both activations");
        assert_eq!(distinct(&|p| p.gather_first.to_string()), 2, "gather first or not");
        assert!(distinct(&|p| p.dims.hidden.to_string()) >= 25 && distinct(&|p| p.dims.inter.to_string()) >= 20, "H and I spread");
        assert!(all.iter().any(|p| p.dims.top_k > 1 && p.unused > 0.0 && p.dims.tokens > 128), "k > 1 with unused slots past a row tile");
        // the decoding is a function of the bytes, and bytes past the twelfth are ignored (a full-length input
        // decodes as before the padding: `the_fuzz_seeds_decode_to_their_names` pins the seeds)
        assert_eq!(FuzzParams::decode(&[7], true), FuzzParams::decode(&[7], true));
        let full = [1u8, 2, 3, 4, 5, 6, 1, 2, 0, 9, 4, 1];
        let mut longer = full.to_vec();
        longer.extend([0xff; 4]);
        assert_eq!(FuzzParams::decode(&full, true), FuzzParams::decode(&longer, true));
        // without wgmma only the mma engine is drawn
        assert!((0..=255u8).all(|b| FuzzParams::decode(&[b, b], false).engine_name == "mma"));
    }
}
