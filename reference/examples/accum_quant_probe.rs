//! Throughput of `quant::quantize` on a [4096, 2048] tensor for each scale rule.
//!
//! `cargo run --release -p moe-reference --example accum_quant_probe`

use std::time::Instant;

use moe_reference::formats::{Format, Overflow};
use moe_reference::quant::{quantize, Block, MxRounding, QuantSpec, ScaleRule};
use ndarray::Array2;

fn main() {
    let mut s = 99u64;
    let x = Array2::from_shape_fn((4096, 2048), |_| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32) as f64
    });
    for (rule, block) in [
        (ScaleRule::DeepGemm { pow2: false }, Block::Rows(128)),
        (ScaleRule::DeepGemm { pow2: false }, Block::Tile(128, 128)),
        (ScaleRule::TransformerEngine { pow2: true }, Block::Cols(128)),
        (ScaleRule::Mx(MxRounding::Floor), Block::Rows(32)),
    ] {
        let spec = QuantSpec { format: Format::E4M3, block, rule, overflow: Overflow::Saturate };
        let t = Instant::now();
        let q = quantize(x.view(), &spec);
        let secs = t.elapsed().as_secs_f64();
        println!("{rule:?} {block}: {secs:.3} s, {:.1} M elements/s (checksum {})", x.len() as f64 / secs / 1e6, q.q.sum());
    }
}
