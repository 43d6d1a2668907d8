//! Where the time of one exact GEMM goes: `cargo run --release -p moe-reference --example gemm_probe -- M N K KIND_A KIND_B`
//! (KIND: bf16 | f64). Prints the slicing plan and the times of the two fast exact engines (which must agree
//! bit for bit) next to a plain f64 GEMM; `MOE_ORACLE_GEMM_PROBE=1` adds each call's breakdown.
use moe_reference::gemm::{matmul_nt_with, plan_for, Engine};
use ndarray::Array2;
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let p = |i: usize, d: usize| a.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let (m, n, k) = (p(1, 64), p(2, 1536), p(3, 2048));
    let kind = |i: usize| a.get(i).cloned().unwrap_or_else(|| "bf16".into());
    let mut s = 0x12345u64;
    let mut gen = |kind: &str| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let u = (s >> 11) as f64 / (1u64 << 53) as f64;
        let v = (u - 0.5) * 3.4 + (u * 7.0).sin();
        if kind == "bf16" {
            let b = (v as f32).to_bits() & 0xffff_0000;
            f32::from_bits(b) as f64
        } else {
            v * (1.0 + u * 1e-3).ln_1p()
        }
    };
    let ka = kind(4);
    let kb = kind(5);
    let x = Array2::from_shape_fn((m, k), |_| gen(&ka));
    let y = Array2::from_shape_fn((n, k), |_| gen(&kb));
    println!("plan {:?}", plan_for(x.view(), y.view()));
    // three calls: the first one also pays for the scratch buffers' page faults
    let mut te = 0.0;
    let mut c = Array2::zeros((0, 0));
    for _ in 0..3 {
        let t = Instant::now();
        c = matmul_nt_with(Engine::Ozaki, x.view(), y.view());
        te = t.elapsed().as_secs_f64();
    }
    let mut tc = 0.0;
    for _ in 0..3 {
        let t = Instant::now();
        let cc = matmul_nt_with(Engine::Certified, x.view(), y.view());
        tc = t.elapsed().as_secs_f64();
        assert!(cc.iter().zip(c.iter()).all(|(u, v)| u.to_bits() == v.to_bits()), "engines differ");
    }
    println!("certified {tc:.4} s");
    let t = Instant::now();
    let d = x.dot(&y.t());
    let tp = t.elapsed().as_secs_f64();
    std::hint::black_box((c, d));
    println!("ozaki {:.4} s  ndarray f64 {:.4} s  ratio {:.1}", te, tp, te / tp);
}
