//! CPU time of one emulated GEMM stage (values, bound and deviation) under a named recipe's GEMM.
//!
//! `cargo run --release -p moe-reference --example stage_probe [M N K] [recipe] [gemm] [reps]`
//! (default 1536 2048 64 fp8-block wgrad1 8: a weight gradient of qwen3-30b-a3b over 64 rows). Operands
//! are seeded pseudo-random bf16 values with small bounds, A with a deviation bound too; outputs are
//! allocated and touched once, bounds and deviations kept in f32 as the emulator keeps weight gradients.
//! `nodev` among the words: no deviation bounds (as `moe-oracle run --recipe` runs a stage).

use std::time::Instant;

use moe_reference::emulate::stage::{gemm_stage_into, GemmPlan, StageIn, StageOut};
use moe_reference::formats::{quantize, Format, Overflow};
use moe_reference::recipe::{Recipe, Storage};
use ndarray::Array2;

fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0) + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let nums: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (m, n, k) = if nums.len() >= 3 { (nums[0], nums[1], nums[2]) } else { (1536, 2048, 64) };
    let reps = nums.get(3).copied().unwrap_or(8);
    let nodev = args.iter().any(|a| a == "nodev");
    let words: Vec<&str> = args.iter().filter(|a| a.parse::<usize>().is_err() && *a != "nodev").map(|s| s.as_str()).collect();
    let recipe = Recipe::named(words.first().copied().unwrap_or("fp8-block")).expect("a named recipe");
    let gemm = words.get(1).copied().unwrap_or("wgrad1");
    let g = match gemm {
        "gemm1" => &recipe.gemm1,
        "gemm2" => &recipe.gemm2,
        "dgrad1" => &recipe.dgrad1,
        "dgrad2" => &recipe.dgrad2,
        "wgrad2" => &recipe.wgrad2,
        _ => &recipe.wgrad1,
    };
    let plan = GemmPlan::parse("probe", g).expect("the recipe's GEMM parses");
    let mut seed = 11u64;
    let mut r = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    let a = Array2::from_shape_fn((m, k), |_| quantize(Format::Bf16, r(), Overflow::Saturate));
    let b = Array2::from_shape_fn((n, k), |_| quantize(Format::Bf16, r() * 0.05, Overflow::Saturate));
    let (ab, ad) = (a.mapv(|v| v.abs() * 2f64.powi(-8)), a.mapv(|v| v.abs() * 2f64.powi(-12)));
    let bb = Array2::<f64>::zeros((n, k));
    let (mut v, mut bo, mut dv) = (Array2::<f64>::from_elem((m, n), 1.0), Array2::<f32>::from_elem((m, n), 1.0), Array2::<f32>::from_elem((m, n), 1.0));
    println!("{} {gemm} M={m} N={n} K={k}, {reps} reps", recipe.name);
    let (t, cpu) = (Instant::now(), cpu_seconds());
    for _ in 0..reps {
        let out = StageOut { v: v.view_mut(), b: bo.view_mut(), d: (!nodev).then(|| dv.view_mut()) };
        gemm_stage_into(&plan, StageIn { v: a.view(), b: ab.view(), d: (!nodev).then(|| ad.view()) }, StageIn { v: b.view(), b: bb.view(), d: None }, Storage::F32, out);
    }
    let (s, cpu) = (t.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let sum: f64 = bo.iter().map(|&x| f64::from(x)).sum::<f64>() + dv.iter().map(|&x| f64::from(x)).sum::<f64>();
    println!("{:.3} s wall, {:.3} CPU-s per stage, {:.2} ns CPU per output  (bounds checksum {sum:.6e})", s / reps as f64, cpu / reps as f64, cpu / reps as f64 / (m * n) as f64 * 1e9);
}
