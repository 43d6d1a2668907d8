//! Arbitrary bytes -> a small MoE case (shapes, routing with -1 slots and empty experts, bf16 values of
//! moderate magnitude, either SwiGLU) -> the GPU kernels, forward and backward -> the stage checker against
//! the exact oracle. A bound violation or a kernel fault is a crash. Without a GPU every input is a no-op.
//!
//!     cargo +nightly fuzz build gpu_layer --release      (here), then on the GPU machine:
//!     ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 \
//!         fuzz/target/x86_64-unknown-linux-gnu/release/gpu_layer -max_total_time=120 corpus_dir
//! (the CUDA driver needs ASan's shadow gap unprotected; the driver's one-time allocations read as leaks).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use moe_kernels::check::check_case;
use moe_kernels::Gpu;
use moe_reference::config::{Activation, MoeConfig};
use ndarray::{Array2, Array3};

static GPU: OnceLock<Option<Gpu>> = OnceLock::new();

/// Bytes consumed front to back; zeros once exhausted.
struct Bytes<'a>(&'a [u8]);
impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    /// A bf16 value with a small exponent range (no overflow in f32 accumulation).
    fn value(&mut self) -> f64 {
        let (m, e) = (self.u8(), self.u8());
        let sign = if m & 0x80 != 0 { -1.0 } else { 1.0 };
        let mant = 1.0 + (m & 0x7f) as f64 / 128.0;
        if e % 17 == 0 {
            return 0.0;
        }
        sign * mant * 2f64.powi((e % 24) as i32 - 12)
    }
}

fuzz_target!(|data: &[u8]| {
    let gpu = GPU.get_or_init(|| match Gpu::open(0) {
        Ok(g) => Some(g),
        Err(e) if moe_kernels::gpu_required() => panic!("REQUIRE_GPU=1 but no usable GPU: {e}"),
        Err(e) => {
            eprintln!("SKIP gpu_layer fuzzing: no usable GPU ({e}); every input is a no-op");
            None
        }
    });
    let Some(gpu) = gpu else { return };
    let mut b = Bytes(data);
    let t = (b.u8() % 12) as usize;
    let h = 1 + (b.u8() % 24) as usize;
    let i = 1 + (b.u8() % 12) as usize;
    let e = 1 + (b.u8() % 6) as usize;
    let k = 1 + (b.u8() as usize % e);
    let act = if b.u8() % 2 == 0 {
        Activation::Swiglu
    } else {
        Activation::SwigluClamped { alpha: 1.702, limit: 7.0 }
    };
    let cfg = MoeConfig { tokens: t, hidden: h, intermediate: i, experts: e, top_k: k, activation: act, routing: None, recipe: "bf16".into(), ep_ranks: 1 };
    let mut ids = Array2::from_elem((t, k), -1i32);
    let mut w = Array2::<f32>::zeros((t, k));
    for tok in 0..t {
        for j in 0..k {
            let v = b.u8();
            let id = (v as usize % (e + 1)) as i32 - 1; // -1 .. e-1
            if id >= 0 && !ids.row(tok).iter().any(|&p| p == id) {
                ids[[tok, j]] = id;
                w[[tok, j]] = (b.u8() as f32) / 255.0;
            }
        }
    }
    let x = Array2::from_shape_fn((t, h), |_| b.value());
    let w13 = Array3::from_shape_fn((e, 2 * i, h), |_| b.value());
    let w2 = Array3::from_shape_fn((e, h, i), |_| b.value());
    check_case(gpu, &cfg, &x, &w13, &w2, &ids, &w);
});
