//! Throughput of `accum::gemm_nt` under each accumulation model.
//!
//! `cargo run --release -p moe-reference --example accum_probe [M N K] [model ...]`
//! (default 1024 1536 2048, every model). Operands are seeded pseudo-random bf16 values (E4M3 values with
//! 1x128 / 128-row scales for the FP8 models); a name ending in `+mag` also writes the instructions'
//! magnitudes (`accum::gemm_nt_mag_into`, what the emulator's FP8 bound reads). Prints seconds, G multiply-adds per second of wall time, and per CPU-second (steadier under load).

use std::time::Instant;

use moe_reference::accum::{gemm_nt_into, gemm_nt_mag_into, Model};
use moe_reference::formats::{quantize, Format, Overflow};
use ndarray::Array2;

fn lcg(seed: &mut u64) -> f64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

/// CPU seconds used by this process so far (user + system, from /proc/self/stat; 0 where unavailable),
/// a steadier measure than wall time on a machine shared with other jobs.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0) + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0 // USER_HZ
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nums: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (m, n, k) = if nums.len() == 3 { (nums[0], nums[1], nums[2]) } else { (1024, 1536, 2048) };
    let names: Vec<&str> = args.iter().filter(|a| a.parse::<usize>().is_err()).map(|s| s.as_str()).collect();
    let names = if names.is_empty() { vec!["exact", "f32", "f32-fma", "hopper", "hopper-fp8", "hopper-fp8-fast"] } else { names };
    let mut seed = 7u64;
    let mut gen = |rows: usize, fmt: Format, scale: f64| {
        Array2::from_shape_fn((rows, k), |_| quantize(fmt, lcg(&mut seed) * scale, Overflow::Saturate))
    };
    let (a16, b16) = (gen(m, Format::Bf16, 1.0), gen(n, Format::Bf16, 0.05));
    let (a8, b8) = (gen(m, Format::E4M3, 448.0), gen(n, Format::E4M3, 448.0));
    let nb = k.div_ceil(128);
    let sa = Array2::from_elem((m, nb), 1.0 / 448.0f32 as f64);
    let sb = Array2::from_elem((n, nb), 0.05f32 as f64 / 448.0f32 as f64);
    println!("M={m} N={n} K={k}, {} threads", rayon::current_num_threads());
    for name in names {
        let (base, mag) = name.strip_suffix("+mag").map_or((name, false), |b| (b, true));
        let model = Model::parse(base).unwrap_or_else(|e| panic!("{e}"));
        let fp8 = base.starts_with("hopper-fp8");
        let (a, b, scales) = if fp8 { (a8.view(), b8.view(), Some((sa.view(), sb.view(), 128))) } else { (a16.view(), b16.view(), None) };
        // Outputs allocated and touched before the clock starts (fresh memory is not the model's time).
        let (mut c, mut g) = (Array2::from_elem((m, n), 1.0), Array2::<f64>::from_elem((m, n), 1.0));
        let (t, cpu) = (Instant::now(), cpu_seconds());
        match (mag, model) {
            (true, Model::TensorCore(tc)) => gemm_nt_mag_into(&tc, a, b, scales, c.view_mut(), g.view_mut()),
            _ => gemm_nt_into(&model, a, b, scales, c.view_mut()),
        }
        let s = t.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu;
        let checksum: f64 = c.iter().sum();
        let gmac = (m * n * k) as f64 / 1e9;
        println!("{name:16} {s:8.3} s  {:7.2} G MAC/s wall  {:7.2} G MAC per CPU-second  (checksum {checksum:.6e})", gmac / s, gmac / cpu);
    }
}
