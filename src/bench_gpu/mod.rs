//! `moe-oracle bench-gpu`: time the fast fused bf16 MoE layer (`moe_kernels::fast`) on GPU 0 at a model's
//! shape, check the same run against the exact oracle on a token subset, and optionally run the PyTorch
//! baseline (plain and compiled) in the same process tree so the ratio is a same-run comparison.
//!
//! Inputs follow the baseline's statistics: x and dY of unit variance, W13 of variance 1/H, W2 of 1/I
//! (uniform, bf16), and a softmax router (weights of variance 1/H) computed on the host, top-k renormalised,
//! passed to the kernels as given routing. FLOPs: forward 2·T·k·3·H·I, backward twice that.

use std::path::PathBuf;
use std::process::Command as Process;

use clap::Args;
use half::bf16;
use moe_kernels::fast::check::{check, HostCase, Scope};
use moe_kernels::fast::{Engine, FastDims, FastKernels, FastLayer, InputDist, KernelSettings, KernelTime, TileOrder, ENGINES};
use moe_kernels::{Gpu, GpuError};
use moe_reference::config::Activation;
use moe_reference::dispatch::RowMap;
use ndarray::ArrayView2;
use rayon::prelude::*;

use crate::cli::CliError;
use crate::gpu::GpuRunError;

mod energy;
use energy::Heat;

#[derive(Debug, Args)]
pub struct BenchGpuArgs {
    /// Model shape: qwen3-30b-a3b, qwen3-235b-a22b, olmoe-1b-7b or mixtral-8x7b.
    #[arg(long, default_value = "qwen3-30b-a3b")]
    pub preset: String,
    /// Tokens per batch.
    #[arg(long, default_value_t = 16384)]
    pub tokens: usize,
    /// Tokens whose rows and outputs are checked against the oracle (spread over the batch; 0 skips).
    #[arg(long, default_value_t = 8)]
    pub check_tokens: usize,
    /// Weight-gradient entries sampled for the check (each of dW13 and dW2).
    #[arg(long, default_value_t = 256)]
    pub check_wgrad: usize,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 20)]
    pub reps: usize,
    /// cp.async pipeline depth of the mma.sync GEMMs (2, 3 or 4; the wgmma ones use 4).
    #[arg(long, default_value_t = 3)]
    pub stages: usize,
    /// The PyTorch baseline script; when given it runs after the kernels, plain and with --compile.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Engines to run, comma-separated: mma (mma.sync everywhere), wgmma-rows (wgmma row GEMMs only),
    /// wgmma-t (wgmma with transposed weights and the fused dA epilogue), wgmma (wgmma reading the weights as
    /// stored), ws (the same GEMMs as persistent warp-specialised kernels fed by TMA: the default engine);
    /// the wgmma ones need sm_90a.
    #[arg(long, default_value = "mma,wgmma-t,wgmma,ws")]
    pub engines: String,
    /// Random seed of the inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A/B comparison in one process: a second layer built with these settings, `NAME=VALUE` pairs
    /// separated by `;` (MOE_FAST_DEFINES, MOE_FAST_CLUSTERED, MOE_FAST_CLUSTERS, MOE_FAST_DYNAMIC,
    /// MOE_FAST_LINEINFO for the kernels; MOE_FAST_GATHER_FIRST, MOE_FAST_GEMM1_GATHER_FIRST, MOE_FAST_SAVE_X_ROWS,
    /// MOE_FAST_RASTER_M, MOE_FAST_DY_ROWS_FROM_DA for the layer; INPUTS=normal|uniform for B's inputs;
    /// SEED_FROM_A=1: B's GEMM-written intermediates copied from A, for experiments that write none),
    /// timed against the settings of the environment rep by rep in the order A B B A A B ..., so that the
    /// clock's drift under the power cap falls on both; reports both medians, the per-round ratio, per-kernel
    /// times, whether the outputs are bitwise the same, and B's oracle check. One engine; not with --baseline.
    #[arg(long)]
    pub ab: Option<String>,
    /// Milliseconds of the timed work run back to back before each timed phase (0: none, the default: the
    /// reps follow 3 warm-up passes, a burst of well under a second, as the baseline script's do). A training
    /// run keeps the GPU at its power cap; heat measures that state. With --baseline, the script gets the
    /// same `--heat-ms`: give it `.gpu/bench/torch_moe_heated.py`, the baseline with that option. At most 600000.
    #[arg(long, default_value_t = 0)]
    pub heat_ms: u64,
    /// Energy per kernel (NVML's counter; after the timings): each kernel of 0.05 ms or more launched back to
    /// back for about this many milliseconds inside one forward+backward pass, compared with plain passes
    /// over as long: its joules, milliseconds and watts per launch, and pJ per FLOP for the GEMMs (0: off,
    /// the default; 1000 gives ~1 % with a counter updated every few ms). At most 60000.
    #[arg(long, default_value_t = 0)]
    pub kernel_energy_ms: u64,
    /// The inputs' distribution (x, the router's and the experts' weights, dY; standard deviations 1, H^-1/2,
    /// H^-1/2 and I^-1/2, dY 1): normal, as the PyTorch baseline's torch.randn (under the power cap the
    /// tensor cores' joules, so the times, may depend on the operands' bits; session 30 measured both at the
    /// same speed), or uniform (every run before session 30).
    #[arg(long, value_enum, default_value_t = InputsArg::Normal)]
    pub inputs: InputsArg,
}

/// `--inputs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InputsArg {
    Normal,
    Uniform,
}
impl InputsArg {
    fn dist(self) -> InputDist {
        match self {
            InputsArg::Normal => InputDist::Normal,
            InputsArg::Uniform => InputDist::Uniform,
        }
    }
}

/// `--heat-ms`'s bound: ten minutes, a device call's whole limit.
const MAX_HEAT_MS: u64 = 600_000;
/// `--reps`'s bound: far more than a median needs (the session scripts' rounds use 10), and a typo's extra
/// digits do not hold the GPU for hours.
const MAX_REPS: usize = 10_000;
/// `--kernel-energy-ms`'s bound: a minute per kernel, a dozen kernels.
const MAX_KERNEL_ENERGY_MS: u64 = 60_000;

/// The environment variables of the layer's switches (`layer_switches`).
const LAYER_VARIABLES: [&str; 5] = ["MOE_FAST_GATHER_FIRST", "MOE_FAST_GEMM1_GATHER_FIRST", "MOE_FAST_SAVE_X_ROWS", "MOE_FAST_RASTER_M", "MOE_FAST_DY_ROWS_FROM_DA"];

/// The persistent engine's layer switches: `FastLayer::use_gather_first` (on unless "0"), `use_gemm1_gather_first`
/// and `use_saved_x_rows` (off unless "1"), `set_tile_order` (MOE_FAST_RASTER_M: "auto", the default, a count
/// of row tiles per group (0: column tile fastest), or "expert": one group per expert),
/// `use_dy_rows_from_da` (on unless "0").
#[derive(Debug, PartialEq)]
struct LayerSwitches {
    gather_first: bool,
    gemm1_gather_first: bool,
    save_x_rows: bool,
    tile_order: Option<TileOrder>,
    dy_rows_from_da: bool,
}

/// The layer's switches from the environment, with `NAME=VALUE` assignments applied over it.
fn layer_switches(assignments: &[(String, String)]) -> Result<LayerSwitches, CliError> {
    let var = |name: &str| assignments.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone()).or_else(|| std::env::var(name).ok());
    let [gather, gemm1, save_x, raster, dy_from_da] = LAYER_VARIABLES;
    let tile_order = match var(raster).as_deref().map(str::trim) {
        None | Some("" | "auto") => None,
        Some("expert") => Some(TileOrder::Experts),
        Some(v) => Some(TileOrder::RowGroups(v.parse::<u32>().map_err(|_| usage(format!("{raster}={v:?}: expected auto, expert or a count of row tiles (0: column tiles fastest)")))?)),
    };
    Ok(LayerSwitches {
        gather_first: var(gather).as_deref() != Some("0"),
        gemm1_gather_first: var(gemm1).as_deref() == Some("1"),
        save_x_rows: var(save_x).as_deref() == Some("1"),
        tile_order,
        dy_rows_from_da: var(dy_from_da).as_deref() != Some("0"),
    })
}

/// `--ab`'s settings: kernel assignments, layer assignments, B's input distribution (`INPUTS=normal` or
/// `uniform`; None: `--inputs`'s), and whether B's GEMM-written intermediates are seeded from A
/// (`SEED_FROM_A=1`). With another distribution B's inputs come from the same seed, routed as A's (so that
/// the tiles are the same), and B's outputs differ from A's by design. Seeding is for experiments whose
/// GEMMs write nothing (`WS_EXP_NO_STORE`): without it B's later kernels read zeros, whose speed need not be
/// that of real operands (session 30: the GEMMs' within 2%, swiglu_bwd_rows' 25% off); with it B's outputs
/// are partly A's, so they are neither compared nor checked.
#[derive(Debug, Default, PartialEq)]
struct AbSettings {
    kernel: Vec<(String, String)>,
    layer: Vec<(String, String)>,
    inputs: Option<InputDist>,
    seed_from_a: bool,
}

/// `--ab`'s names for B's input distribution and for seeding B's intermediates from A.
const AB_INPUTS: &str = "INPUTS";
const AB_SEED: &str = "SEED_FROM_A";

fn parse_ab(spec: &str) -> Result<AbSettings, CliError> {
    let mut ab = AbSettings::default();
    for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = part.split_once('=') else {
            return Err(usage(format!("--ab: {part:?} is not NAME=VALUE")));
        };
        let (name, value) = (name.trim().to_string(), value.trim().to_string());
        if name == AB_INPUTS {
            // the names of `--inputs` (clap's, so the two cannot drift apart)
            let arg = <InputsArg as clap::ValueEnum>::from_str(&value, false).map_err(|_| usage(format!("--ab: {AB_INPUTS}={value:?}: expected normal or uniform")))?;
            ab.inputs = Some(arg.dist());
        } else if name == AB_SEED {
            ab.seed_from_a = match value.as_str() {
                "1" => true,
                "0" => false,
                _ => return Err(usage(format!("--ab: {AB_SEED}={value:?}: expected 1 or 0"))),
            };
        } else if LAYER_VARIABLES.contains(&name.as_str()) {
            ab.layer.push((name, value));
        } else if KernelSettings::VARIABLES.contains(&name.as_str()) {
            ab.kernel.push((name, value));
        } else {
            return Err(usage(format!("--ab: {name} is not a setting ({}, {}, {AB_INPUTS}, {AB_SEED})", KernelSettings::VARIABLES.join(", "), LAYER_VARIABLES.join(", "))));
        }
    }
    if ab == AbSettings::default() {
        return Err(usage("--ab: no settings given".into()));
    }
    Ok(ab)
}

fn preset(name: &str) -> Option<(usize, usize, usize, usize)> {
    Some(match name {
        "qwen3-30b-a3b" => (2048, 768, 128, 8),
        "qwen3-235b-a22b" => (4096, 1536, 128, 8),
        "olmoe-1b-7b" => (2048, 1024, 64, 8),
        "mixtral-8x7b" => (4096, 14336, 8, 2),
        _ => return None,
    })
}

/// An argument (or an `--ab`/environment setting) that cannot be carried out, found before any GPU work.
fn usage(msg: String) -> CliError {
    CliError::Usage(msg)
}
/// A failure of the run itself (the GPU, the baseline, the oracle check).
fn fail(msg: String) -> CliError {
    CliError::Gpu(GpuRunError::Unsupported(msg))
}
fn gpu_err(e: GpuError) -> CliError {
    CliError::Gpu(GpuRunError::Gpu(e))
}

/// bf16 values of standard deviation `std` from `dist` and a seeded xorshift: uniform, or normal by Box-Muller
/// on two 24-bit uniforms of one draw (the device's `fc_fill_normal` does the same on its own hash).
fn random_bits(n: usize, std: f32, seed: u64, dist: InputDist) -> Vec<u16> {
    let a = 3f32.sqrt() * std;
    (0..n)
        .into_par_iter()
        .chunks(1 << 16)
        .flat_map_iter(|idx| {
            let mut g = (seed ^ (idx[0] as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
            idx.into_iter().map(move |_| {
                g ^= g << 13;
                g ^= g >> 7;
                g ^= g << 17;
                let u = (g >> 40) as f32 / (1u64 << 24) as f32;
                let v = match dist {
                    InputDist::Uniform => (2.0 * u - 1.0) * a,
                    InputDist::Normal => {
                        let (u1, u2) = (u + 0.5 / (1u64 << 24) as f32, ((g >> 16) & 0xFF_FFFF) as f32 / (1u64 << 24) as f32);
                        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos() * std
                    }
                };
                bf16::from_f32(v).to_bits()
            })
        })
        .collect()
}

/// Softmax router on the host: logits = x·wrᵀ in f32, softmax, top-k (ties to the lower expert), renormalised.
fn route(x: &[u16], wr: &[u16], t: usize, h: usize, e: usize, k: usize) -> (Vec<i32>, Vec<f32>) {
    let xf: Vec<f32> = x.par_iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
    let wf: Vec<f32> = wr.iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
    let per_token: Vec<(Vec<i32>, Vec<f32>)> = (0..t)
        .into_par_iter()
        .map(|tok| {
            let xr = &xf[tok * h..(tok + 1) * h];
            let logits: Vec<f32> = (0..e).map(|ex| xr.iter().zip(&wf[ex * h..(ex + 1) * h]).map(|(a, b)| a * b).sum()).collect();
            let mx = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let p: Vec<f32> = logits.iter().map(|l| (l - mx).exp()).collect();
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
            let top = &order[..k];
            let s: f32 = top.iter().map(|&i| p[i]).sum();
            (top.iter().map(|&i| i as i32).collect(), top.iter().map(|&i| p[i] / s).collect())
        })
        .collect();
    let ids = per_token.iter().flat_map(|(i, _)| i.iter().copied()).collect();
    let w = per_token.iter().flat_map(|(_, w)| w.iter().copied()).collect();
    (ids, w)
}

fn median(v: Vec<f32>) -> f32 {
    spread(v).1
}

/// (minimum, median, maximum) of a non-empty sample.
fn spread(mut v: Vec<f32>) -> (f32, f32, f32) {
    v.sort_by(f32::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// What one run of the baseline script gave.
struct BaselineRun {
    fwd: f64,
    both: f64,
    /// with the heated wrapper and NVML: the joules per pass of its two heats (forward, forward+backward)
    joules: Option<(f64, f64)>,
}

/// Run the PyTorch baseline script.
fn baseline(script: &PathBuf, preset: &str, tokens: usize, compiled: bool, heat_ms: u64) -> Result<BaselineRun, CliError> {
    let mut cmd = Process::new("python3");
    cmd.arg(script).args(["--preset", preset, "--tokens", &tokens.to_string()]);
    if heat_ms > 0 {
        cmd.args(["--heat-ms", &heat_ms.to_string()]);
    }
    if compiled {
        cmd.arg("--compile");
    }
    let out = cmd.output().map_err(|e| fail(format!("running the baseline {}: {e}", script.display())))?;
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{'));
    let Some(line) = line.filter(|_| out.status.success()) else {
        if heat_ms > 0 && err.contains("unrecognized arguments: --heat-ms") {
            return Err(fail(format!("{} does not take --heat-ms: give --baseline .gpu/bench/torch_moe_heated.py (kernels/tools/, staged beside the baseline)", script.display())));
        }
        return Err(fail(format!("the baseline failed ({}): {}", out.status, err.lines().last().unwrap_or(""))));
    };
    let label = if compiled { "baseline --compile" } else { "baseline" };
    // the heated wrapper's lines (passes and joules of each heat) go to stderr, its JSON to stdout
    let mut heats = Vec::new();
    for l in err.lines().filter(|l| l.starts_with("heat:") || l.starts_with("energy:")) {
        println!("{label} {l}");
        heats.extend(energy::joules_per_pass(l));
    }
    // (the wrapper heats the forward's phase, then the forward+backward's)
    let joules = match heats[..] {
        [f, b] => Some((f, b)),
        _ => None,
    };
    println!("{label}: {line}");
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| fail(format!("baseline output: {e}")))?;
    match (v["fwd_ms"].as_f64(), v["fwd_bwd_ms"].as_f64()) {
        (Some(fwd), Some(both)) => Ok(BaselineRun { fwd, both, joules }),
        _ => Err(fail("baseline output lacks fwd_ms / fwd_bwd_ms".into())),
    }
}

/// What `measure` found for one engine.
struct Measured {
    fwd: f32,
    both: f32,
    /// joules per pass over the heats (forward, forward+backward), when metered
    joules: Option<(f64, f64)>,
    /// the oracle check's failure, if it failed (reported after the remaining measurements, so that one run
    /// shows every engine)
    failure: Option<String>,
}

/// Warm up, time forward and forward+backward (medians), per-kernel times, and the oracle check, for the
/// layer's current engine.
fn measure(layer: &mut FastLayer, args: &BenchGpuArgs, heat: &Heat, ids: &[i32], w: &[f32], (h, i, e, k): (usize, usize, usize, usize)) -> Result<Measured, CliError> {
    let t = args.tokens;
    let flops = 2.0 * (t * k) as f64 * 3.0 * (h * i) as f64;
    let tf = |f: f64, ms: f32| f / (ms as f64 * 1e-3) / 1e12;
    // warm-up (module load and first-touch stay out of the numbers)
    for _ in 0..3 {
        layer.forward().map_err(gpu_err)?;
        layer.backward().map_err(gpu_err)?;
    }
    layer.sync().map_err(gpu_err)?;
    let fwd_j = heat.run(layer, |l| l.forward())?;
    let fwd = layer.median_ms(args.reps, |l| l.forward()).map_err(gpu_err)?;
    let both_j = heat.run(layer, fwd_bwd)?;
    let both = layer.median_ms(args.reps, fwd_bwd).map_err(gpu_err)?;
    // selective recomputation: keep only X and the routing, recompute H before the backward
    let recompute = layer
        .median_ms(args.reps, |l| {
            l.forward()?;
            l.recompute_h()?;
            l.backward()
        })
        .map_err(gpu_err)?;
    // per-kernel medians from profiled passes
    let per = kernel_medians(&mut [&mut *layer], 5)?.remove(0);

    println!("-- engine {} (row GEMMs); preset {} tokens {t}: H={h} I={i} E={e} k={k}, {} dispatched rows", layer.engine(), args.preset, layer.rows);
    println!("fast forward          {fwd:8.3} ms  {:6.1} TFLOP/s", tf(flops, fwd));
    println!("fast forward+backward {both:8.3} ms  {:6.1} TFLOP/s", tf(3.0 * flops, both));
    println!("per kernel (median of 5 profiled passes; events around each launch):");
    for &(name, m) in &per {
        match gemm_flops(name, layer.rows, h, i) {
            Some(f) => println!("  {name:<18} {m:8.3} ms  {:6.1} TFLOP/s", tf(f, m)),
            None => println!("  {name:<18} {m:8.3} ms"),
        }
    }
    // (sessions 23-24: these medians summed to 1-19% more than the unprofiled pass, by machine and preset, so
    // they split a pass only roughly; printed so that no reader has to add them up)
    let sum: f32 = per.iter().map(|&(_, m)| m).sum();
    println!("  (sum of the per-kernel medians {sum:.3} ms, the unprofiled forward+backward {both:.3} ms: {:+.1}%)", 100.0 * (sum - both) / both);
    println!("kept for backward: {:.0} bytes per token (H rows in bf16 + routing metadata; X and dY are the caller's)", layer.bytes_kept_per_token());
    println!(
        "selective recomputation (keep only X + routing, {:.0} bytes per token; H recomputed before backward): forward+backward {recompute:.3} ms, +{:.3} ms ({:+.1}%)",
        layer.bytes_kept_per_token_recompute(),
        recompute - both,
        100.0 * (recompute - both) / both
    );
    let (work, grads) = layer.extra_bytes();
    println!("device memory beyond the inputs: {:.0} MiB activations + workspaces (incl. transposed weights), {:.0} MiB gradients", work as f64 / 1048576.0, grads as f64 / 1048576.0);
    if args.kernel_energy_ms > 0 {
        let rows = layer.rows;
        energy::per_kernel(layer, heat, &per, args.kernel_energy_ms, |name| gemm_flops(name, rows, h, i))?;
    }

    let joules = fwd_j.zip(both_j);
    Ok(Measured { fwd, both, joules, failure: oracle_check(layer, args, ids, w)? })
}

/// The useful FLOPs of the GEMM kernel labelled `name` over `rows` dispatched rows (None: not a GEMM).
fn gemm_flops(name: &str, rows: usize, h: usize, i: usize) -> Option<f64> {
    let rows = rows as f64;
    Some(match name {
        "gemm1+swiglu" | "wgrad_w13" | "dX_rows" => 2.0 * rows * (2 * i * h) as f64,
        "gemm2" | "dA+swiglu_bwd" | "dA_raw" | "wgrad_w2" => 2.0 * rows * (h * i) as f64,
        _ => return None,
    })
}

/// One forward+backward pass (asynchronous), the work of the forward+backward timings.
fn fwd_bwd(l: &mut FastLayer) -> Result<(), GpuError> {
    l.forward()?;
    l.backward()
}

/// The oracle check of the layer's last forward+backward on `args.check_tokens` tokens (spread over the
/// batch) and `args.check_wgrad` weight-gradient entries; prints the result. Returns the failure, if any.
fn oracle_check(layer: &FastLayer, args: &BenchGpuArgs, ids: &[i32], w: &[f32]) -> Result<Option<String>, CliError> {
    let (t, dims) = (args.tokens, layer.dims);
    if args.check_tokens > 0 {
        let n = args.check_tokens.min(t);
        let tr = layer.trace().map_err(gpu_err)?;
        let (xb, w13b, w2b, dyb) = layer.inputs().map_err(gpu_err)?;
        let host = HostCase { dims, act: Activation::Swiglu, x: &xb, w13: &w13b, w2: &w2b, dy: &dyb, ids, weights: w };
        let scope = Scope::on_all_cores((0..n).map(|j| j * t / n).collect(), Some(args.check_wgrad));
        let started = std::time::Instant::now();
        let report = match check(&host, &tr, &scope) {
            Ok(r) => r,
            Err(m) => {
                println!("oracle check FAILED ({}): {m}", layer.engine());
                return Ok(Some(format!("oracle check failed for engine {}: {m}", layer.engine())));
            }
        };
        println!(
            "oracle check: {n} tokens (all their rows and outputs) + {} weight-gradient entries: {} elements within bounds, worst error/bound {:.3} ({:.1} s)",
            2 * args.check_wgrad,
            report.elements,
            report.worst,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(None)
}

/// Per-kernel medians of `passes` profiled forward+backward passes of each layer, interleaved.
fn kernel_medians(layers: &mut [&mut FastLayer], passes: usize) -> Result<Vec<Vec<(&'static str, f32)>>, CliError> {
    let mut per: Vec<Vec<(&'static str, Vec<f32>)>> = vec![Vec::new(); layers.len()];
    for l in layers.iter_mut() {
        l.set_profiling(true);
    }
    for _ in 0..passes {
        for (l, per) in layers.iter_mut().zip(per.iter_mut()) {
            l.forward().map_err(gpu_err)?;
            l.backward().map_err(gpu_err)?;
            l.sync().map_err(gpu_err)?;
            for KernelTime { name, ms } in l.kernel_times().map_err(gpu_err)? {
                match per.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, v)) => v.push(ms),
                    None => per.push((name, vec![ms])),
                }
            }
        }
    }
    for l in layers.iter_mut() {
        l.set_profiling(false);
    }
    Ok(per.into_iter().map(|p| p.into_iter().map(|(n, v)| (n, median(v))).collect()).collect())
}

/// `--ab`: time layers A and B (same inputs, same engine, other settings) rep by rep in the order A B B A
/// A B ..., then per kernel, then compare their outputs bitwise and check B against the oracle.
fn ab_measure<'g>(a: &mut FastLayer<'g>, b: &mut FastLayer<'g>, args: &BenchGpuArgs, heat: &Heat, ids: &[i32], w: &[f32], seed_from_a: bool) -> Result<Option<String>, CliError> {
    let pass = |l: &mut FastLayer| -> Result<f32, CliError> { l.median_ms(1, fwd_bwd).map_err(gpu_err) };
    for _ in 0..3 {
        pass(a)?;
        pass(b)?;
    }
    if seed_from_a {
        b.seed_intermediates_from(a).map_err(gpu_err)?;
        println!("B's H, A, o and dA_raw seeded from A's pass ({AB_SEED}=1): B's outputs are not compared or checked");
    }
    // (--heat-ms: A alone heats; the rounds then alternate, so B runs as hot)
    heat.run(a, fwd_bwd)?;
    let (mut ta, mut tb, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..args.reps {
        let (x, y) = if r % 2 == 0 {
            let x = pass(a)?;
            (x, pass(b)?)
        } else {
            let y = pass(b)?;
            (pass(a)?, y)
        };
        ta.push(x);
        tb.push(y);
        ratio.push(y / x);
    }
    let rounds = ratio.len();
    let b_faster = ratio.iter().filter(|&&q| q < 1.0).count();
    let ((a_lo, a_med, a_hi), (b_lo, b_med, b_hi), (r_lo, r_med, r_hi)) = (spread(ta), spread(tb), spread(ratio));
    println!("A/B forward+backward, {rounds} interleaved rounds: A {a_med:.3} ms (min {a_lo:.3}, max {a_hi:.3}), B {b_med:.3} ms (min {b_lo:.3}, max {b_hi:.3})");
    println!("B/A per round: median {r_med:.4} (min {r_lo:.4}, max {r_hi:.4}; B faster in {b_faster} of {rounds} rounds)");
    let per = kernel_medians(&mut [&mut *a, &mut *b], 5)?;
    println!("per kernel (median of 5 profiled passes each, interleaved): A ms, B ms, B/A");
    for (name, x) in &per[0] {
        match per[1].iter().find(|(n, _)| n == name) {
            Some((_, y)) => println!("  {name:<18} {x:8.3} {y:8.3}  {:.3}", y / x),
            None => println!("  {name:<18} {x:8.3}        -"),
        }
    }
    for (name, y) in per[1].iter().filter(|(n, _)| !per[0].iter().any(|(m, _)| m == n)) {
        println!("  {name:<18}        - {y:8.3}");
    }
    if seed_from_a {
        return Ok(None);
    }
    match a.trace().map_err(gpu_err)?.first_difference(&b.trace().map_err(gpu_err)?) {
        None => println!("outputs: B's bitwise A's"),
        Some((name, i)) => println!("outputs: B DIFFERS from A ({name} at {i})"),
    }
    oracle_check(b, args, ids, w)
}

/// How the routing fills the row GEMMs' tiles (128 rows of one expert each, two warpgroups of 64): the rows
/// per expert, the row tiles, and the share of the tiles' rows that are padding, counted by whole tiles and by
/// 64-row halves (a warpgroup whose 64 rows are all padding issues no wgmma with `WS_SKIP_EMPTY_WG`).
#[derive(Debug, PartialEq)]
struct TilePadding {
    min_rows: usize,
    max_rows: usize,
    rows: usize,
    tiles: usize,
    halves: usize,
}

fn row_tile_padding(map: &RowMap) -> TilePadding {
    let count: Vec<usize> = (0..map.experts).map(|e| map.expert_rows(e).len()).collect();
    TilePadding {
        min_rows: count.iter().copied().min().unwrap_or(0),
        max_rows: count.iter().copied().max().unwrap_or(0),
        rows: map.rows(),
        tiles: count.iter().map(|c| c.div_ceil(128)).sum(),
        halves: count.iter().map(|c| c.div_ceil(64)).sum(),
    }
}

fn padding_line(p: &TilePadding) -> String {
    let pad = |slots: usize| if slots == 0 { 0.0 } else { 100.0 * (1.0 - p.rows as f64 / slots as f64) };
    format!(
        "routing: {} rows, {}..{} per expert; {} row tiles of 128: padding {:.1}% of their rows ({:.1}% counting only 64-row halves with rows)",
        p.rows,
        p.min_rows,
        p.max_rows,
        p.tiles,
        pad(p.tiles * 128),
        pad(p.halves * 64)
    )
}

/// The largest device memory of one GPU the layer may run on (B200: 192 GB); X alone must fit in it.
const MAX_GPU_BYTES: u128 = 192 << 30;

/// Reject token counts the layer cannot hold before anything is allocated: the dispatched rows must fit the
/// kernels' 32-bit row indices, and X (bf16) one GPU's memory (otherwise the host's copy of X alone could
/// exhaust the host's memory and abort instead of failing with an error).
fn check_size(preset: &str, t: usize, h: usize, k: usize) -> Result<(), CliError> {
    let rows = t as u128 * k as u128;
    if rows > i32::MAX as u128 {
        return Err(usage(format!("--tokens {t} is too large for {preset}: {t} x top-k {k} = {rows} dispatched rows exceed the kernels' 32-bit row indices")));
    }
    let x_bytes = t as u128 * h as u128 * 2;
    if x_bytes > MAX_GPU_BYTES {
        return Err(usage(format!("--tokens {t} is too large for {preset}: X alone would take {} GiB in bf16, more than one GPU holds", x_bytes >> 30)));
    }
    Ok(())
}

pub fn run(args: &BenchGpuArgs) -> Result<(), CliError> {
    let (h, i, e, k) = preset(&args.preset).ok_or_else(|| usage(format!("unknown preset {:?} (qwen3-30b-a3b, qwen3-235b-a22b, olmoe-1b-7b, mixtral-8x7b)", args.preset)))?;
    let t = args.tokens;
    if t == 0 {
        return Err(usage("--tokens must be positive".into()));
    }
    check_size(&args.preset, t, h, k)?;
    if !(1..=MAX_REPS).contains(&args.reps) {
        return Err(usage(format!("--reps {}: give 1 to {MAX_REPS} timed repetitions", args.reps)));
    }
    if !(2..=4).contains(&args.stages) {
        return Err(usage(format!("--stages {}: the pipeline depth is 2, 3 or 4", args.stages)));
    }
    if args.heat_ms > MAX_HEAT_MS {
        return Err(usage(format!("--heat-ms {}: at most {MAX_HEAT_MS} (ten minutes)", args.heat_ms)));
    }
    if args.kernel_energy_ms > MAX_KERNEL_ENERGY_MS {
        return Err(usage(format!("--kernel-energy-ms {}: at most {MAX_KERNEL_ENERGY_MS} (a minute per kernel)", args.kernel_energy_ms)));
    }
    if args.kernel_energy_ms > 0 && args.ab.is_some() {
        return Err(usage("--kernel-energy-ms measures one layer: not with --ab".into()));
    }
    // (checked before the GPU work, which a typo would otherwise waste)
    if let Some(script) = args.baseline.as_ref().filter(|s| !s.is_file()) {
        return Err(usage(format!("--baseline {}: no such file (bash kernels/tools/stage_gpu.sh stages the baselines into .gpu/bench/)", script.display())));
    }
    let mut engines: Vec<Engine> = Vec::new();
    for name in args.engines.split(',').map(str::trim) {
        match ENGINES.iter().find(|(n, _)| *n == name) {
            Some(&(_, e)) => engines.push(e),
            None => return Err(usage(format!("unknown engine {name:?} ({})", ENGINES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")))),
        }
    }
    let ab = args.ab.as_deref().map(parse_ab).transpose()?;
    if ab.is_some() && (engines.len() != 1 || args.baseline.is_some()) {
        return Err(usage("--ab compares one engine under two settings: give --engines with one engine, and no --baseline".into()));
    }
    // the persistent engine's layer switches, A's from the environment and B's with --ab's assignments over it
    // (read before any GPU work, so that a bad value is an error up front)
    let switches = layer_switches(&[])?;
    let switches_b = ab.as_ref().map(|ab| layer_switches(&ab.layer)).transpose()?;
    let gpu = Gpu::open(0).map_err(gpu_err)?;
    let settings = KernelSettings::from_env();
    let kern = FastKernels::load_with(&gpu, args.stages, &settings).map_err(gpu_err)?;
    let heat = Heat::new(&gpu, args.heat_ms, args.kernel_energy_ms > 0);
    println!("GPU: {} ({}), fast kernels: wgmma row GEMMs {}, mma.sync ({} cp.async stages); inputs {:?}", gpu.name, kern.arch, if kern.wgmma { "available" } else { "unavailable" }, kern.stages, args.inputs);
    let dist = args.inputs.dist();
    let x = random_bits(t * h, 1.0, args.seed, dist);
    let wr = random_bits(e * h, 1.0 / (h as f32).sqrt(), args.seed ^ 0x5bd1e995, dist);
    let (ids, w) = route(&x, &wr, t, h, e, k);
    let ids_2d = ArrayView2::from_shape((t, k), &ids).map_err(|err| fail(format!("routing ids: {err}")))?;
    println!("{}", padding_line(&row_tile_padding(&RowMap::build(ids_2d, e))));
    let dims = FastDims { tokens: t, hidden: h, inter: i, experts: e, top_k: k };
    let mut layer = FastLayer::new(&gpu, &kern, dims, Activation::Swiglu, &ids, &w).map_err(gpu_err)?;
    layer.fill_random_from(args.seed, dist).map_err(gpu_err)?;
    layer.upload_x(&x).map_err(gpu_err)?;

    let mut results = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    if !kern.wgmma {
        engines.retain(|e| !e.0);
        if engines.is_empty() {
            return Err(fail(format!("the wgmma engines need an sm_90a GPU; this one compiles for {}", kern.arch)));
        }
    }
    let set_switches = |layer: &mut FastLayer, sw: &LayerSwitches| {
        layer.use_gather_first(sw.gather_first);
        layer.use_gemm1_gather_first(sw.gemm1_gather_first);
        layer.use_saved_x_rows(sw.save_x_rows);
        layer.use_dy_rows_from_da(sw.dy_rows_from_da);
        layer.set_tile_order(sw.tile_order);
    };
    if let (Some(ab), Some(switches_b)) = (&ab, &switches_b) {
        let kern_b = FastKernels::load_with(&gpu, args.stages, &settings.with(&ab.kernel).map_err(gpu_err)?).map_err(gpu_err)?;
        let mut layer_b = FastLayer::new(&gpu, &kern_b, dims, Activation::Swiglu, &ids, &w).map_err(gpu_err)?;
        let dist_b = ab.inputs.unwrap_or(dist);
        layer_b.fill_random_from(args.seed, dist_b).map_err(gpu_err)?;
        let x_other;  // (A's x itself when the distribution is the same: no copy)
        let x_b = if dist_b == dist {
            &x
        } else {
            x_other = random_bits(t * h, 1.0, args.seed, dist_b);
            &x_other
        };
        layer_b.upload_x(x_b).map_err(gpu_err)?;
        for (l, sw) in [(&mut layer, &switches), (&mut layer_b, switches_b)] {
            l.set_engine(engines[0]).map_err(gpu_err)?;
            set_switches(l, sw);
        }
        println!("-- A/B, engine {}; preset {} tokens {t}: A the environment's settings, B with {}", layer.engine(), args.preset, args.ab.as_deref().unwrap_or(""));
        return match ab_measure(&mut layer, &mut layer_b, args, &heat, &ids, &w, ab.seed_from_a)? {
            None => Ok(()),
            Some(f) => Err(fail(f)),
        };
    }
    for &engine in &engines {
        layer.set_engine(engine).map_err(gpu_err)?;
        set_switches(&mut layer, &switches);
        let m = measure(&mut layer, args, &heat, &ids, &w, (h, i, e, k))?;
        match m.failure {
            None => results.push((layer.engine(), m.fwd, m.both, m.joules)),
            Some(f) => failures.push(f),
        }
    }
    let Some((_, fwd, both, joules)) = results.iter().copied().min_by(|a, b| a.2.total_cmp(&b.2)) else {
        return Err(fail(failures.join("; ")));
    };
    let flops = 2.0 * (t * k) as f64 * 3.0 * (h * i) as f64;
    let tf = |f: f64, ms: f32| f / (ms as f64 * 1e-3) / 1e12;
    drop(layer);

    if let Some(script) = &args.baseline {
        let BaselineRun { fwd: pf, both: pb, joules: pj } = baseline(script, &args.preset, t, false, args.heat_ms)?;
        let BaselineRun { fwd: cf, both: cb, joules: cj } = baseline(script, &args.preset, t, true, args.heat_ms)?;
        let (best_f, best_b) = (pf.min(cf), pb.min(cb));
        println!("| impl | fwd ms | fwd+bwd ms | fwd+bwd TFLOP/s |");
        for (name, f, b, _) in &results {
            println!("| fast, {name} (this run) | {f:.3} | {b:.3} | {:.1} |", tf(3.0 * flops, *b));
        }
        println!("| torch plain | {pf:.3} | {pb:.3} | {:.1} |", tf(3.0 * flops, pb as f32));
        println!("| torch compiled | {cf:.3} | {cb:.3} | {:.1} |", tf(3.0 * flops, cb as f32));
        println!("speedup vs the faster baseline (fastest checked engine): forward {:.2}x, forward+backward {:.2}x", best_f / fwd as f64, best_b / both as f64);
        // the same engine's and the same (faster) baseline's joules per pass, phase by phase: at the power
        // cap their ratio is what the time ratio follows
        if let (Some(ours), Some(pj), Some(cj)) = (joules, pj, cj) {
            let pick = |plain: f64, compiled: f64, p: f64, c: f64| if plain < compiled { p } else { c };
            println!("{}", energy::energy_ratio_line(ours, (pick(pf, cf, pj.0, cj.0), pick(pb, cb, pj.1, cj.1))));
        }
    }
    if !failures.is_empty() {
        return Err(fail(failures.join("; ")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(preset: &str, tokens: usize, engines: &str) -> BenchGpuArgs {
        BenchGpuArgs { preset: preset.into(), tokens, check_tokens: 1, check_wgrad: 1, reps: 1, stages: 3, baseline: None, engines: engines.into(), seed: 1, ab: None, heat_ms: 0, kernel_energy_ms: 0, inputs: InputsArg::Normal }
    }

    #[test]
    fn bad_arguments_are_errors_before_any_gpu_work() {
        let with_ab = |engines: &str, ab: &str| BenchGpuArgs { ab: Some(ab.into()), ..args("qwen3-30b-a3b", 16, engines) };
        for (a, what) in [
            (args("gpt-9", 16, "mma"), "unknown preset"),
            (args("qwen3-30b-a3b", 0, "mma"), "--tokens"),
            (args("qwen3-30b-a3b", 1 << 28, "ws"), "exceed the kernels' 32-bit row indices"),
            (args("qwen3-235b-a22b", 50_000_000, "ws"), "more than one GPU holds"),
            (args("qwen3-30b-a3b", 16, "mma,tpu"), "unknown engine"),
            (BenchGpuArgs { reps: 0, ..args("qwen3-30b-a3b", 16, "ws") }, "--reps 0: give 1 to 10000"),
            (BenchGpuArgs { reps: MAX_REPS + 1, ..args("qwen3-30b-a3b", 16, "ws") }, "--reps 10001"),
            (BenchGpuArgs { stages: 5, ..args("qwen3-30b-a3b", 16, "mma") }, "--stages 5: the pipeline depth is 2, 3 or 4"),
            (BenchGpuArgs { heat_ms: MAX_HEAT_MS + 1, ..args("qwen3-30b-a3b", 16, "ws") }, "--heat-ms 600001: at most 600000"),
            (BenchGpuArgs { kernel_energy_ms: MAX_KERNEL_ENERGY_MS + 1, ..args("qwen3-30b-a3b", 16, "ws") }, "--kernel-energy-ms 60001: at most 60000"),
            (BenchGpuArgs { kernel_energy_ms: 1000, ..with_ab("ws", "MOE_FAST_RASTER_M=expert") }, "--kernel-energy-ms measures one layer: not with --ab"),
            (BenchGpuArgs { baseline: Some("/nonexistent/torch_moe_baseline.py".into()), ..args("qwen3-30b-a3b", 16, "ws") }, "--baseline /nonexistent/torch_moe_baseline.py: no such file"),
            (with_ab("ws", "MOE_FAST_DEFINES"), "is not NAME=VALUE"),
            (with_ab("ws", "MOE_FAST_STAGES=3"), "MOE_FAST_STAGES is not a setting"),
            (with_ab("ws", " ; "), "no settings given"),
            (with_ab("wgmma,ws", "MOE_FAST_CLUSTERED=ws_wgrad"), "one engine"),
            (with_ab("ws", "MOE_FAST_RASTER_M=eight"), "MOE_FAST_RASTER_M=\"eight\""),
        ] {
            match run(&a) {
                Ok(()) => panic!("{what}: accepted"),
                Err(e) => assert!(e.to_string().contains(what), "{what}: got {e}"),
            }
        }
    }

    #[test]
    fn ab_settings_split_into_kernel_and_layer_ones() {
        let ab = parse_ab("MOE_FAST_DEFINES=WS_CLUSTER=2 WS_EXP_CLOCKS; MOE_FAST_GEMM1_GATHER_FIRST=1;MOE_FAST_CLUSTERED=ws_wgrad").unwrap();
        let pairs = |v: &[(&str, &str)]| v.iter().map(|(n, x)| (n.to_string(), x.to_string())).collect::<Vec<_>>();
        assert_eq!(ab.kernel, pairs(&[("MOE_FAST_DEFINES", "WS_CLUSTER=2 WS_EXP_CLOCKS"), ("MOE_FAST_CLUSTERED", "ws_wgrad")]));
        assert_eq!(ab.layer, pairs(&[("MOE_FAST_GEMM1_GATHER_FIRST", "1")]));
        assert_eq!(ab.inputs, None);
        // B's inputs alone are a setting too; a distribution other than the two is an error naming it
        assert_eq!(parse_ab(" INPUTS = uniform ").unwrap(), AbSettings { inputs: Some(InputDist::Uniform), ..Default::default() });
        assert_eq!(parse_ab("INPUTS=normal;MOE_FAST_RASTER_M=0").unwrap().inputs, Some(InputDist::Normal));
        let bad = parse_ab("INPUTS=gaussian").unwrap_err().to_string();
        assert!(bad.contains("INPUTS") && bad.contains("gaussian"), "{bad}");
        let seeded = parse_ab("MOE_FAST_DEFINES=WS_EXP_NO_STORE; SEED_FROM_A=1").unwrap();
        assert!(seeded.seed_from_a && seeded.kernel.len() == 1 && seeded.inputs.is_none());
        assert!(!parse_ab("MOE_FAST_RASTER_M=0").unwrap().seed_from_a);
        assert!(parse_ab("SEED_FROM_A=yes").unwrap_err().to_string().contains("SEED_FROM_A"));
        assert!(parse_ab(" ; ").unwrap_err().to_string().contains("no settings"));
        // the layer's switches: an assignment wins over the environment's (which a test cannot set safely,
        // so only the assignments' side is shown here)
        let sw = layer_switches(&pairs(&[("MOE_FAST_GATHER_FIRST", "0"), ("MOE_FAST_GEMM1_GATHER_FIRST", "1"), ("MOE_FAST_SAVE_X_ROWS", "1"), ("MOE_FAST_RASTER_M", "8"), ("MOE_FAST_DY_ROWS_FROM_DA", "0")]));
        assert_eq!(sw.unwrap(), LayerSwitches { gather_first: false, gemm1_gather_first: true, save_x_rows: true, tile_order: Some(TileOrder::RowGroups(8)), dy_rows_from_da: false });
        let sw = layer_switches(&pairs(&[("MOE_FAST_GATHER_FIRST", "1"), ("MOE_FAST_GEMM1_GATHER_FIRST", "0"), ("MOE_FAST_SAVE_X_ROWS", "0"), ("MOE_FAST_RASTER_M", "auto"), ("MOE_FAST_DY_ROWS_FROM_DA", "1")]));
        assert_eq!(sw.unwrap(), LayerSwitches { gather_first: true, gemm1_gather_first: false, save_x_rows: false, tile_order: None, dy_rows_from_da: true });
        assert_eq!(layer_switches(&pairs(&[("MOE_FAST_RASTER_M", "expert")])).unwrap().tile_order, Some(TileOrder::Experts));
        let bad = layer_switches(&pairs(&[("MOE_FAST_RASTER_M", "eight")])).unwrap_err().to_string();
        assert!(bad.contains("MOE_FAST_RASTER_M") && bad.contains("eight"), "{bad}");
    }

    #[test]
    fn row_tile_padding_counts_whole_tiles_and_halves() {
        // expert 0: 129 rows (2 tiles, 3 halves), expert 1: 64 (1 tile, 1 half), expert 2: none; -1 ignored
        let mut ids = vec![0i32; 129];
        ids.extend(std::iter::repeat_n(1, 64));
        ids.push(-1);
        let p = row_tile_padding(&RowMap::build(ArrayView2::from_shape((ids.len(), 1), &ids).unwrap(), 3));
        assert_eq!(p, TilePadding { min_rows: 0, max_rows: 129, rows: 193, tiles: 3, halves: 4 });
        let line = padding_line(&p);
        // 193 of 384 tile rows, 193 of 256 half rows
        assert!(line.contains("padding 49.7%") && line.contains("(24.6% counting"), "{line}");
        assert!(padding_line(&row_tile_padding(&RowMap::build(ArrayView2::from_shape((0, 2), &[]).unwrap(), 4))).contains("padding 0.0%"));
    }

    #[test]
    fn the_baselines_times_and_heat_joules_are_read_from_its_output() {
        if let Err(e) = Process::new("python3").arg("--version").output() {
            assert!(std::env::var_os("REQUIRE_PYTHON").is_none(), "REQUIRE_PYTHON is set but python3 is not runnable: {e}");
            moe_kernels::skip_notice(&format!("the_baselines_times_and_heat_joules_are_read_from_its_output: python3 not runnable ({e})"));
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // a stand-in for the heated wrapper: its two heat lines on stderr (forward, then forward+backward) when
        // given --heat-ms, its JSON line on stdout
        let script = dir.path().join("fake_baseline.py");
        std::fs::write(
            &script,
            r#"import json, sys
if "--heat-ms" in sys.argv:
    print("heat: 469 passes in 3001 ms before the timed reps: 1771.3 J, 3.777 J per pass, 590 W mean", file=sys.stderr)
    print("heat: 221 passes in 3003 ms before the timed reps: 2054.0 J, 9.294 J per pass, 684 W mean", file=sys.stderr)
print(json.dumps({"fwd_ms": 6.3741, "fwd_bwd_ms": 13.4767, "compile": "--compile" in sys.argv}))
"#,
        )
        .unwrap();
        let heated = baseline(&script, "qwen3-30b-a3b", 16, true, 3000).unwrap();
        assert_eq!((heated.fwd, heated.both, heated.joules), (6.3741, 13.4767, Some((3.777, 9.294))));
        let burst = baseline(&script, "qwen3-30b-a3b", 16, false, 0).unwrap();
        assert_eq!((burst.fwd, burst.both, burst.joules), (6.3741, 13.4767, None));
    }

    /// The normal draws have the standard deviation asked for and a normal's tails (a uniform of the same
    /// standard deviation has none beyond 1.73 σ); the same seed gives the same bits, another seed others.
    #[test]
    fn normal_inputs_are_normal() {
        let n = 1 << 20;
        let v: Vec<f64> = random_bits(n, 0.5, 7, InputDist::Normal).iter().map(|&b| bf16::from_bits(b).to_f64() / 0.5).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        let beyond = |c: f64| v.iter().filter(|x| x.abs() > c).count() as f64 / n as f64;
        assert!(mean.abs() < 0.005, "mean {mean}");
        assert!((var.sqrt() - 1.0).abs() < 0.005, "std {}", var.sqrt());
        // P(|Z| > 1) = 0.3173, P(|Z| > 2) = 0.0455, P(|Z| > 3) = 0.0027
        for (c, p) in [(1.0, 0.3173), (2.0, 0.0455), (3.0, 0.0027)] {
            assert!((beyond(c) - p).abs() < 0.1 * p, "P(|z| > {c}) = {} against {p}", beyond(c));
        }
        assert!(v.iter().all(|x| x.is_finite() && x.abs() < 6.0));
        assert_eq!(random_bits(1000, 1.0, 7, InputDist::Normal), random_bits(1000, 1.0, 7, InputDist::Normal));
        assert_ne!(random_bits(1000, 1.0, 7, InputDist::Normal), random_bits(1000, 1.0, 8, InputDist::Normal));
        let u: Vec<f64> = random_bits(n, 1.0, 7, InputDist::Uniform).iter().map(|&b| bf16::from_bits(b).to_f64()).collect();
        assert!(u.iter().all(|x| x.abs() <= 3f64.sqrt() * 1.004), "uniform within its interval");
    }

    #[test]
    fn host_routing_is_a_renormalised_top_k_of_the_softmax() {
        let (t, h, e, k) = (64, 32, 16, 4);
        let x = random_bits(t * h, 1.0, 5, InputDist::Uniform);
        let wr = random_bits(e * h, 0.2, 6, InputDist::Uniform);
        let (ids, w) = route(&x, &wr, t, h, e, k);
        let xf: Vec<f64> = x.iter().map(|&b| bf16::from_bits(b).to_f64()).collect();
        let wf: Vec<f64> = wr.iter().map(|&b| bf16::from_bits(b).to_f64()).collect();
        for tok in 0..t {
            let sel = &ids[tok * k..(tok + 1) * k];
            let ws = &w[tok * k..(tok + 1) * k];
            assert!((ws.iter().sum::<f32>() - 1.0).abs() < 1e-5, "weights of token {tok} sum to 1");
            let logit = |ex: usize| (0..h).map(|c| xf[tok * h + c] * wf[ex * h + c]).sum::<f64>();
            let lowest = sel.iter().map(|&s| logit(s as usize)).fold(f64::INFINITY, f64::min);
            for ex in 0..e {
                if !sel.contains(&(ex as i32)) {
                    assert!(logit(ex) <= lowest + 1e-4, "token {tok}: expert {ex} outranks a selected one");
                }
            }
            for j in 1..k {
                assert!(ws[j] <= ws[j - 1] && !sel[..j].contains(&sel[j]), "token {tok}: slots in decreasing weight, distinct");
            }
        }
    }
}
