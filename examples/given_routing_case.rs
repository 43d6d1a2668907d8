//! Write a small case with given routing (topk_ids / topk_weights) and an upstream gradient, for runs of
//! the GPU kernels: `cargo run --release --example given_routing_case -- OUT.safetensors [SEED]`.
use moe_oracle::case::{self, FloatDtype};
use moe_oracle::demo;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(out) = args.get(1) else {
        eprintln!("usage: given_routing_case OUT.safetensors [SEED]");
        std::process::exit(2);
    };
    let seed = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let mut cfg = demo::demo_config();
    cfg.routing = None; // random_inputs draws topk_ids / topk_weights itself
    let inputs = demo::random_inputs(&cfg, seed);
    if let Err(e) = case::write_case(std::path::Path::new(out), &inputs, FloatDtype::BF16) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}
