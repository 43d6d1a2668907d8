//! Arbitrary bytes -> a case for the fast fused kernels (shape with H and I multiples of 8 up to a few tiles,
//! seed of the bf16 values, fraction of -1 slots, either SwiGLU, engine) -> `FastLayer` forward and backward
//! -> the stage checker (`fast::check`) against the exact oracle on every token and every weight-gradient
//! entry, and a second run on NaN-poisoned buffers that must be bitwise the first. A bound violation, a
//! difference between the runs, an element left unwritten or a kernel fault is a crash. Without a GPU every
//! input is a no-op.
//!
//!     bash kernels/tools/stage_gpu.sh      (here: builds this target into .gpu/fuzz/), then on the GPU machine:
//!     ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 \
//!         .gpu/fuzz/gpu_fast -max_total_time=120 -max_len=16 -len_control=0 corpus_dir
//! (the staging script builds it with `fuzz/tools/rustc_check_uninstrumented.sh`, which leaves the oracle and
//! moe_kernels without coverage counters: with them the check's threads contend for the counters, and one
//! input of the largest shape took 248 s on 16 cores; a plain `cargo +nightly fuzz build gpu_fast --release`
//! still works, slower)
//! (`-len_control=0`: at libFuzzer's default the inputs stay a few bytes long for minutes; an input shorter
//! than the 12 bytes the decoding reads is padded from a stream seeded by its bytes (`FuzzParams::decode`),
//! so it is still an arbitrary case, not plain SwiGLU with k = 1 on one engine as with zeros)
//! (the CUDA driver needs ASan's shadow gap unprotected; the driver's one-time allocations read as leaks).
//! `fuzz/corpus/gpu_fast/` holds seeds named for what they cover (both activations, every engine, all slots
//! unused, zero tokens, one token, a row tile plus one, two row tiles, the largest shape), replayed by
//! `kernels/tests/gpu_fast.rs` (`the_fuzz_seeds_pass`); with `-runs=0` this binary replays them only.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use moe_kernels::fast::case::FuzzCase;
use moe_kernels::fast::FastKernels;
use moe_kernels::Gpu;

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
    // Every token and every weight-gradient entry, on all the machine's cores: on 2 threads and before the
    // checks' dots took the certified path, an input of a few hundred tokens took tens of seconds (s34b-s34c:
    // 0.05-1 inputs a second), most of it the tokens' rows (7·I·H products a row, against 3·I·H a row for
    // all the weight gradients).
    let case = FuzzCase::decode(data, kern.wgmma);
    // one line an input, before it runs: a hang or a timeout then names its case, and the log shows which
    // shapes and engines the run covered (libFuzzer cannot: it sees none of the kernels' branches)
    eprintln!("case {}", case.what);
    if let Err(msg) = case.run_and_check(gpu, kern) {
        panic!("{msg}");
    }
});
