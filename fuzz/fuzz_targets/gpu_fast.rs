//! Arbitrary bytes -> a case for the fast fused kernels (shape with H and I multiples of 8 up to a few tiles,
//! seed of the bf16 values, fraction of -1 slots, either SwiGLU, engine) -> `FastLayer` forward and backward
//! -> the stage checker (`fast::check`) against the exact oracle on every token and every weight-gradient
//! entry, and a second run on NaN-poisoned buffers that must be bitwise the first. A bound violation, a
//! difference between the runs, an element left unwritten or a kernel fault is a crash. Without a GPU every
//! input is a no-op.
//!
//!     cargo +nightly fuzz build gpu_fast --release      (here), then on the GPU machine:
//!     ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 \
//!         fuzz/target/x86_64-unknown-linux-gnu/release/gpu_fast -max_total_time=120 -max_len=16 -len_control=0 corpus_dir
//! (`-len_control=0`: at libFuzzer's default the inputs stay a few bytes long for minutes, every later byte
//! reads 0, and every run is plain SwiGLU with k = 1 on one engine)
//! (the CUDA driver needs ASan's shadow gap unprotected; the driver's one-time allocations read as leaks).
//! `fuzz/corpus/gpu_fast/` holds seeds named for what they cover (both activations, every engine, all slots
//! unused, zero tokens, a row tile plus one, the largest shape); with `-runs=0` the binary replays them only.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use moe_kernels::fast::case::FastCase;
use moe_kernels::fast::check::{check, Scope};
use moe_kernels::fast::{FastKernels, ENGINES};
use moe_kernels::Gpu;
use moe_reference::config::Activation;

static GPU: OnceLock<Option<(Gpu, FastKernels)>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let ctx = GPU.get_or_init(|| match Gpu::open(0) {
        Ok(g) => {
            let k = FastKernels::load(&g, 3).expect("fast kernels compile and load");
            Some((g, k))
        }
        Err(e) if moe_kernels::gpu_required() => panic!("REQUIRE_GPU=1 but no usable GPU: {e}"),
        Err(e) => {
            eprintln!("SKIP gpu_fast fuzzing: no usable GPU ({e}); every input is a no-op");
            None
        }
    });
    let Some((gpu, kern)) = ctx else { return };
    let mut b = data.iter().copied().chain(std::iter::repeat(0));
    let mut byte = || b.next().unwrap_or(0) as usize;
    // Shapes around the tiles (128 rows, 256 columns, 64 k): T up to 300, H and I multiples of 8.
    let t = byte() + byte() % 45;
    let h = 8 * (1 + byte() % 33);
    let i = 8 * (1 + byte() % 25);
    let e = 1 + byte() % 8;
    let k = 1 + byte() % e;
    let act = if byte() % 2 == 0 { Activation::Swiglu } else { Activation::SwigluClamped { alpha: 1.702, limit: 7.0 } };
    let unused = [0.0, 0.0, 0.1, 0.5, 1.0][byte() % 5];
    let seed = 1 + (byte() as u64) * 256 + byte() as u64;
    let usable: Vec<_> = ENGINES.iter().filter(|(_, e)| kern.wgmma || !e.0).collect();
    let (engine_name, engine) = *usable[byte() % usable.len()];
    let gather_first = byte() % 2 == 0;

    let case = FastCase::new(seed, t, h, i, e, k, act, unused);
    let what = format!("seed {seed} T={t} H={h} I={i} E={e} k={k} {act:?} unused {unused} engine {engine_name} gather-first {gather_first}");
    let run = |poison: bool| case.run(gpu, kern, engine, gather_first, poison).unwrap_or_else(|err| panic!("{what}: {err}"));
    let first = run(false);
    if let Some((name, i)) = first.first_difference(&run(true)) {
        panic!("{what}: {name} differs between two runs at {i} (not deterministic, or an element left unwritten)");
    }
    // Every token and every weight-gradient entry, on all the machine's cores: on 2 threads and before the
    // checks' dots took the certified path, an input of a few hundred tokens took tens of seconds (s34b-s34c:
    // 0.05-1 inputs a second), most of it the tokens' rows (7·I·H products a row, against 3·I·H a row for
    // all the weight gradients).
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let scope = Scope { tokens: (0..t).collect(), wgrad_samples: None, threads };
    if let Err(msg) = check(&case.host(), &first, &scope) {
        panic!("{what}: {msg}");
    }
});
