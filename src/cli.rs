//! The `moe-oracle` command line.
//!
//! ```text
//! moe-oracle run CASE.safetensors -o OUT.safetensors [--intermediates] [--allow-nonfinite] [--engine ozaki|reference]
//! moe-oracle run --demo -o OUT.safetensors
//! moe-oracle demo -o OUT.safetensors [--seed N] [--save-case CASE.safetensors]
//! moe-oracle cast IN.safetensors -o OUT.safetensors --format bf16|f16|e4m3|e5m2|e8m0|e2m1 [--saturate]
//! ```
//!
//! Exit status 0 on success, 2 on any error (usage, bad input, failed write, internal error); an error is
//! one line `error: <message>` on stderr and no output file is written. Progress and timing go to stderr,
//! the summary to stdout.

use std::any::Any;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use moe_reference::formats::{self, Format, Overflow};
use moe_reference::gemm::Engine;
use moe_reference::{layer, LayerInputs, Options};

use crate::case::{self, FloatDtype, ReadOptions};
use crate::demo;
use crate::error::one_line;
use crate::error::CaseError;
use crate::paths::{check_output, check_outputs};

/// Exit status of every failure.
pub const EXIT_ERROR: i32 = 2;
/// Exit status of `check`/`diagnose` when the candidate violates its bounds.
pub const EXIT_FAILED: i32 = 1;

#[derive(Debug, Parser)]
#[command(name = "moe-oracle", version, about = "Exact CPU oracle for Mixture-of-Experts layers")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the exact layer (forward, and backward when the case has `dy`) on a case file.
    Run(RunArgs),
    /// Run the built-in demo case (T=16, H=64, I=32, E=8, k=2, softmax routing, bf16-valued inputs).
    Demo(DemoArgs),
    /// Round every float tensor (F64, F32, BF16, F16) of a safetensors file to a low-precision format and
    /// write the rounded values as F32, same names; other tensors and the metadata are copied unchanged.
    Cast(CastArgs),
    /// List the low-precision recipes, or print one as JSON.
    Recipes(RecipesArgs),
    /// Write a golden case: realistic inputs for a model preset (or a bug-class scenario) and the exact
    /// oracle's outputs and gradients (F64), byte-identical for the same arguments.
    Golden(crate::golden::GoldenArgs),
    /// Check a kernel's results against the oracle within the recipe's per-element bounds (exit 0 pass,
    /// 1 violation, 2 bad input).
    Check(crate::check::CheckArgs),
    /// Localise a mismatch: replay each stage from the candidate's own inputs, name the first bad stage,
    /// blame experts, tokens and features, and recognise common bug patterns.
    Diagnose(crate::diagnose::DiagnoseArgs),
    /// Time the fast fused GPU kernels at a model's shape (forward, forward+backward, per kernel), check the
    /// same run against the oracle on a token subset, and optionally run the PyTorch baseline beside them.
    BenchGpu(crate::bench_gpu::BenchGpuArgs),
    /// Print the expert-parallel exchanges of a model's layer: rows each rank sends each other in dispatch and
    /// combine, and the bytes of a forward+backward pass per rank (random routing; no GPU, no case file).
    EpPlan(crate::ep_plan::EpPlanArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Case file (safetensors, moe.format 1).
    #[arg(required_unless_present = "demo", conflicts_with = "demo")]
    pub case: Option<PathBuf>,
    /// Run the built-in demo case instead of a file.
    #[arg(long)]
    pub demo: bool,
    /// Output file (safetensors): y, gradients, and intermediates on request.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Accept NaN and infinities in the inputs.
    #[arg(long)]
    pub allow_nonfinite: bool,
    /// Where to run: `cpu` is the exact oracle; `cuda` runs the GPU kernels (bf16 storage, f32
    /// accumulation) on GPU 0 and writes their results as a candidate file (F32).
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// With --device cuda: `simple` (one kernel per stage, every format tensor) or `fast` (the fused
    /// tensor-core path through `moe_kernels::MoeLayer`; H and I multiples of 8; no bwd.do, bwd.da).
    #[arg(long, value_enum, default_value_t = crate::gpu::KernelChoice::Simple)]
    pub kernels: crate::gpu::KernelChoice,
    /// Emulate a low-precision recipe instead of the exact layer: fp32, bf16, fp8-block, fp8-block-te,
    /// mxfp8, fp8-bwd, or a JSON file (`moe-oracle recipes --show NAME` prints one). Outputs are F32.
    #[arg(long, conflicts_with = "device")]
    pub recipe: Option<String>,
    /// With --recipe: one accumulation model for every GEMM (exact, f32, f32-fma, hopper, hopper-fp8,
    /// hopper-fp8-fast, blackwell) instead of the recipe's.
    #[arg(long, requires = "recipe")]
    pub accumulate: Option<String>,
    /// With --recipe: also write every tensor's a-priori error bound as `bound.<name>` (F64).
    #[arg(long, requires = "recipe")]
    pub bounds: bool,
    /// With --recipe: also run the exact oracle and print |emulated - exact| / bound per tensor.
    #[arg(long, requires = "recipe")]
    pub compare_exact: bool,
    /// Refuse a case whose estimated memory exceeds this many GiB (default: this machine's memory).
    #[arg(long, value_parser = crate::memory::parse_gib)]
    pub max_memory_gib: Option<f64>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct RecipesArgs {
    /// Print this recipe as JSON (the shape `run --recipe FILE.json` reads).
    #[arg(long)]
    pub show: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    Cpu,
    Cuda,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Output file (safetensors).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Seed of the demo's generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the demo case itself (bf16 inputs) to this file.
    #[arg(long)]
    pub save_case: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct CastArgs {
    /// Input file (any safetensors file).
    pub input: PathBuf,
    /// Output file (safetensors).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Format to round to (round to nearest, ties to even; UE8M0: up from 1.5·2^e).
    #[arg(long, value_enum)]
    pub format: FormatArg,
    /// Overflow and infinities become ±max (PTX satfinite; UE8M0: zero and negatives its smallest value)
    /// instead of ml_dtypes' inf or NaN.
    #[arg(long)]
    pub saturate: bool,
    /// No progress lines on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `--format` of `cast`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Bf16,
    F16,
    E4m3,
    E5m2,
    E8m0,
    E2m1,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Bf16 => Format::Bf16,
            FormatArg::F16 => Format::F16,
            FormatArg::E4m3 => Format::E4M3,
            FormatArg::E5m2 => Format::E5M2,
            FormatArg::E8m0 => Format::E8M0,
            FormatArg::E2m1 => Format::E2M1,
        }
    }
}

#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Also write the forward and backward intermediates (fwd.*, bwd.*).
    #[arg(long)]
    pub intermediates: bool,
    /// Exact GEMM engine (both give identical bits; reference is slower).
    #[arg(long, value_enum, default_value_t = EngineArg::Ozaki)]
    pub engine: EngineArg,
    /// No progress lines on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    Ozaki,
    Reference,
}

impl From<EngineArg> for Engine {
    fn from(e: EngineArg) -> Engine {
        match e {
            EngineArg::Ozaki => Engine::Ozaki,
            EngineArg::Reference => Engine::Reference,
        }
    }
}

/// A failure of one command; `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Reading or validating the case.
    #[error("{}", case_msg(.path, .source))]
    Case { path: PathBuf, source: CaseError },
    /// The output cannot be written where asked.
    #[error("output {}: {why}", .path.display())]
    Output { path: PathBuf, why: String },
    /// Writing a file failed.
    #[error("writing {}: {source}", .path.display())]
    Write { path: PathBuf, source: CaseError },
    /// In-memory inputs (the demo) failed validation.
    #[error("demo inputs: {0}")]
    Inputs(CaseError),
    /// Running on the GPU.
    #[error("{0}")]
    Gpu(#[from] crate::gpu::GpuRunError),
    /// An unknown or malformed recipe.
    #[error("{0}")]
    Recipe(String),
    /// Making a golden case.
    #[error("{0}")]
    Golden(#[from] crate::golden::GoldenError),
    /// A candidate that cannot be checked (`check`, `diagnose`).
    #[error("{0}")]
    Check(String),
    /// Arguments that cannot be carried out (`ep-plan`).
    #[error("{0}")]
    Usage(String),
    /// The case would need more memory than allowed ([`crate::memory::check_fits`]).
    #[error("{0}")]
    Memory(String),
    /// Finite inputs whose exact results overflow f64 ([`crate::overflow`]).
    #[error("{0}")]
    Overflow(String),
    /// `check`/`diagnose` ran and found a violation (its report is already printed): exit status 1.
    #[error("violations found")]
    Failed,
}

fn case_msg(path: &Path, e: &CaseError) -> String {
    match e {
        CaseError::Io { .. } => e.to_string(),
        _ => format!("{}: {e}", path.display()),
    }
}

struct Progress {
    quiet: bool,
}

impl Progress {
    fn line(&self, msg: std::fmt::Arguments<'_>) {
        if !self.quiet {
            let _ = writeln!(std::io::stderr(), "moe-oracle: {msg}");
        }
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// What a run did, for the summary.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub tensors: Vec<(String, Vec<usize>)>,
    pub y_norm: f64,
    pub rows: usize,
    pub forward_ms: f64,
    /// The backward's own time; `None` when there was none (no dy) or when `forward_ms` covers both.
    pub backward_ms: Option<f64>,
    /// `forward_ms` is the forward and the backward together (the emulation runs them as one).
    pub together: bool,
}

/// Run the layer on validated inputs and write the outputs to `out`.
pub fn execute(
    inputs: &LayerInputs,
    config_json: &str,
    out: &Path,
    common: &CommonArgs,
) -> Result<RunSummary, CliError> {
    let p = Progress { quiet: common.quiet };
    let opt = Options { engine: common.engine.into() };
    let t = Instant::now();
    let fwd = layer::forward(inputs, opt);
    let forward_ms = ms(t);
    p.line(format_args!("forward: {} dispatched rows in {forward_ms:.1} ms", fwd.rows.rows()));
    let (bwd, backward_ms) = match &inputs.dy {
        Some(dy) => {
            let t = Instant::now();
            let b = layer::backward(inputs, &fwd, dy.view(), opt);
            let d = ms(t);
            p.line(format_args!("backward: {d:.1} ms"));
            (Some(b), Some(d))
        }
        None => {
            p.line(format_args!("backward: skipped (no dy in the case)"));
            (None, None)
        }
    };
    // With finite inputs (the reader refuses others unless --allow-nonfinite), a non-finite result left f64.
    if case::check_inputs_finite(inputs).is_ok() {
        if let Some(why) = crate::overflow::first_non_finite(&fwd, bwd.as_ref()) {
            return Err(CliError::Overflow(why));
        }
    }
    let t = Instant::now();
    let tensors = case::output_tensors(&fwd, bwd.as_ref(), common.intermediates)
        .map_err(|e| CliError::Write { path: out.to_path_buf(), source: e })?;
    case::write_outputs(out, config_json, &tensors)
        .map_err(|e| CliError::Write { path: out.to_path_buf(), source: e })?;
    p.line(format_args!("wrote {} tensors to {} in {:.1} ms", tensors.len(), out.display(), ms(t)));
    let y_norm = fwd.y.iter().map(|v| v * v).sum::<f64>().sqrt();
    Ok(RunSummary {
        tensors: tensors.iter().map(|(n, t)| (n.clone(), t.shape().to_vec())).collect(),
        y_norm,
        rows: fwd.rows.rows(),
        forward_ms,
        backward_ms,
        together: false,
    })
}

fn print_summary(title: &str, s: &RunSummary, out: &Path) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{title}");
    let _ = writeln!(
        o,
        "  rows M = {}, |y| = {:.6e}, {}",
        s.rows,
        s.y_norm,
        match (s.together, s.backward_ms) {
            (true, _) => format!("forward and backward {:.1} ms", s.forward_ms),
            (false, Some(b)) => format!("forward {:.1} ms, backward {b:.1} ms", s.forward_ms),
            (false, None) => format!("forward {:.1} ms, backward skipped (no dy in the case)", s.forward_ms),
        }
    );
    let _ = writeln!(o, "  wrote {}:", out.display());
    for (name, shape) in &s.tensors {
        let _ = writeln!(o, "    {name:<20} {shape:?}");
    }
}

fn run_case(path: &Path, args: &RunArgs) -> Result<(), CliError> {
    let recipe_file = args.recipe.as_deref().map(Path::new).filter(|r| r.is_file());
    let inputs: Vec<&Path> = std::iter::once(path).chain(recipe_file).collect();
    check_outputs(&inputs, &[&args.output])?;
    let p = Progress { quiet: args.common.quiet };
    let t = Instant::now();
    // Arguments first: a bad recipe is one error line, before the case is read.
    let recipe = match &args.recipe {
        Some(r) => Some(crate::emulated::load_recipe(r, args.accumulate.as_deref())?),
        None => None,
    };
    let opts = ReadOptions { allow_nonfinite: args.allow_nonfinite };
    let case = case::read_case(path, opts).map_err(|e| CliError::Case { path: path.to_path_buf(), source: e })?;
    if args.device == DeviceArg::Cpu {
        // The exact run holds one set of the oracle's arrays; an emulation about one more, and the exact
        // run beside it for --compare-exact.
        let copies = if recipe.is_none() { 1 } else if args.compare_exact { 3 } else { 2 };
        crate::memory::check_fits(&path.display().to_string(), &case.inputs.cfg, copies, args.max_memory_gib)?;
    }
    // The GPU before the progress line: without one, the error is the only line.
    let gpu = match args.device {
        DeviceArg::Cuda => Some(crate::gpu::open_for(&case.inputs.cfg, args.kernels)?),
        DeviceArg::Cpu => None,
    };
    let c = &case.inputs.cfg;
    p.line(format_args!(
        "read {}: T={} H={} I={} E={} k={} ({} routing{}) in {:.1} ms",
        path.display(),
        c.tokens,
        c.hidden,
        c.intermediate,
        c.experts,
        c.top_k,
        if case.routes_itself() { "computed" } else { "given" },
        if case.inputs.dy.is_some() { ", with dy" } else { "" },
        ms(t)
    ));
    if let Some(gpu) = &gpu {
        let t = Instant::now();
        let n = crate::gpu::run_on_gpu(gpu, &case.inputs, &case.config_json, &args.output, args.common.intermediates, args.kernels)?;
        println!("moe-oracle run {} --device cuda: wrote {n} tensors to {} in {:.1} ms", path.display(), args.output.display(), ms(t));
        return Ok(());
    }
    if let Some(recipe) = &recipe {
        let s = crate::emulated::execute(&case.inputs, &case.config_json, &args.output, &args.common, recipe, args.bounds, args.compare_exact)?;
        print_summary(&format!("moe-oracle run {} --recipe {}", path.display(), recipe.name), &s, &args.output);
        return Ok(());
    }
    let s = execute(&case.inputs, &case.config_json, &args.output, &args.common)?;
    print_summary(&format!("moe-oracle run {}", path.display()), &s, &args.output);
    Ok(())
}

fn run_demo(output: &Path, seed: u64, save_case: Option<&Path>, common: &CommonArgs) -> Result<(), CliError> {
    let outputs: Vec<&Path> = std::iter::once(output).chain(save_case).collect();
    check_outputs(&[], &outputs)?;
    let inputs = demo::demo_inputs(seed);
    case::validate_inputs(&inputs, ReadOptions::default()).map_err(CliError::Inputs)?;
    let cfg_json = case::config_json(&inputs.cfg);
    if let Some(c) = save_case {
        case::write_case(c, &inputs, FloatDtype::BF16)
            .map_err(|e| CliError::Write { path: c.to_path_buf(), source: e })?;
    }
    let s = execute(&inputs, &cfg_json, output, common)?;
    let c = &inputs.cfg;
    print_summary(
        &format!(
            "moe-oracle demo (seed {seed}): T={} H={} I={} E={} k={}, softmax routing, bf16-valued inputs",
            c.tokens, c.hidden, c.intermediate, c.experts, c.top_k
        ),
        &s,
        output,
    );
    Ok(())
}

/// `run --demo --device cuda [--kernels K]`: the demo case through the GPU kernels (routed on the host,
/// like any case with a router), written as a candidate file.
fn run_demo_gpu(args: &RunArgs) -> Result<(), CliError> {
    check_output(&args.output)?;
    let inputs = demo::demo_inputs(1);
    case::validate_inputs(&inputs, ReadOptions::default()).map_err(CliError::Inputs)?;
    let cfg_json = case::config_json(&inputs.cfg);
    let t = Instant::now();
    let gpu = crate::gpu::open_for(&inputs.cfg, args.kernels)?;
    let n = crate::gpu::run_on_gpu(&gpu, &inputs, &cfg_json, &args.output, args.common.intermediates, args.kernels)?;
    println!("moe-oracle run --demo --device cuda: wrote {n} tensors to {} in {:.1} ms", args.output.display(), ms(t));
    Ok(())
}

/// `run --demo --recipe R`: the demo case under an emulated recipe.
fn run_demo_recipe(args: &RunArgs) -> Result<(), CliError> {
    check_output(&args.output)?;
    let recipe = crate::emulated::load_recipe(args.recipe.as_deref().unwrap_or("bf16"), args.accumulate.as_deref())?;
    let inputs = demo::demo_inputs(1);
    case::validate_inputs(&inputs, ReadOptions::default()).map_err(CliError::Inputs)?;
    let cfg_json = case::config_json(&inputs.cfg);
    let s = crate::emulated::execute(&inputs, &cfg_json, &args.output, &args.common, &recipe, args.bounds, args.compare_exact)?;
    print_summary(&format!("moe-oracle run --demo --recipe {}", recipe.name), &s, &args.output);
    Ok(())
}

/// What `cast` did to one tensor.
#[derive(Clone, Debug)]
pub struct CastedTensor {
    pub name: String,
    /// The stored dtype of the input.
    pub dtype: safetensors::Dtype,
    pub shape: Vec<usize>,
    /// Rounded (a float tensor, written as F32) or copied unchanged.
    pub rounded: bool,
    /// Values that rounding changed (NaN to NaN counts as unchanged).
    pub changed: usize,
    /// Values that were finite and came out as infinity or NaN (overflow).
    pub overflowed: usize,
}

/// `x` rounded to `fmt`, as an f32 (exact: every value of these formats is an f32; a NaN keeps its sign).
fn round_to_f32(fmt: Format, x: f64, overflow: Overflow) -> f32 {
    let q = formats::quantize(fmt, x, overflow);
    if q.is_nan() {
        f32::NAN.copysign(if q.is_sign_negative() { -1.0 } else { 1.0 })
    } else {
        q as f32
    }
}

/// Round every float tensor of `input` to `fmt` and write the file to `output` (F32 values, other tensors
/// and the metadata unchanged). Nothing is written when anything fails.
pub fn cast_file(input: &Path, output: &Path, fmt: Format, overflow: Overflow) -> Result<Vec<CastedTensor>, CliError> {
    use safetensors::Dtype;
    check_outputs(&[input], &[output])?;
    let case_err = |e: CaseError| CliError::Case { path: input.to_path_buf(), source: e };
    let bytes = std::fs::read(input).map_err(|e| case_err(CaseError::io(input, e)))?;
    let (header_len, meta) = case::parse_framing(&bytes).map_err(case_err)?;
    let data = &bytes[8 + header_len..];
    let metadata: std::collections::BTreeMap<String, String> =
        meta.metadata().as_ref().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
    let mut infos: Vec<(String, &safetensors::tensor::TensorInfo)> = meta.tensors().into_iter().collect();
    infos.sort_by(|a, b| a.0.cmp(&b.0));

    let mut tensors: Vec<(String, case::TensorData<'_>)> = Vec::with_capacity(infos.len());
    let mut report = Vec::with_capacity(infos.len());
    for (name, info) in infos {
        let raw = &data[info.data_offsets.0..info.data_offsets.1];
        let mut t = CastedTensor {
            name: name.clone(),
            dtype: info.dtype,
            shape: info.shape.clone(),
            rounded: false,
            changed: 0,
            overflowed: 0,
        };
        if matches!(info.dtype, Dtype::F64 | Dtype::F32 | Dtype::BF16 | Dtype::F16) {
            use rayon::prelude::*;
            let values = case::floats(info.dtype, raw);
            let rounded: Vec<f32> = values.par_iter().map(|&x| round_to_f32(fmt, x, overflow)).collect();
            for (&x, &q) in values.iter().zip(&rounded) {
                let q = f64::from(q);
                t.changed += usize::from(q != x && !(q.is_nan() && x.is_nan()));
                t.overflowed += usize::from(x.is_finite() && !q.is_finite());
            }
            t.rounded = true;
            let a = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&info.shape), rounded)
                .expect("the header's shape matches its data (checked when reading)");
            tensors.push((name, case::TensorData::F32(ndarray::CowArray::from(a))));
        } else {
            let bytes = std::borrow::Cow::Borrowed(raw);
            tensors.push((name, case::TensorData::Raw { dtype: info.dtype, shape: info.shape.clone(), bytes }));
        }
        report.push(t);
    }
    case::write_tensors(output, &metadata, &tensors)
        .map_err(|e| CliError::Write { path: output.to_path_buf(), source: e })?;
    Ok(report)
}

fn run_cast(args: &CastArgs) -> Result<(), CliError> {
    let p = Progress { quiet: args.quiet };
    let fmt = Format::from(args.format);
    let (overflow, mode) =
        if args.saturate { (Overflow::Saturate, "saturating") } else { (Overflow::NonSaturating, "non-saturating") };
    let t = Instant::now();
    let report = cast_file(&args.input, &args.output, fmt, overflow)?;
    p.line(format_args!("cast {} tensors to {fmt} ({mode}) in {:.1} ms", report.len(), ms(t)));
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "moe-oracle cast {}: {fmt}, {mode}", args.input.display());
    let _ = writeln!(o, "  wrote {}:", args.output.display());
    for t in &report {
        let dtype = format!("{:?}", t.dtype);
        if t.rounded {
            let n: usize = t.shape.iter().product();
            let _ = writeln!(
                o,
                "    {:<20} {dtype:<5} -> F32 {:?}: {} of {n} values changed, {} overflowed",
                t.name, t.shape, t.changed, t.overflowed
            );
        } else {
            let _ = writeln!(o, "    {:<20} {dtype:<5} {:?}: copied", t.name, t.shape);
        }
    }
    Ok(())
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match &cli.command {
        Command::Run(args) if args.kernels != crate::gpu::KernelChoice::Simple && args.device != DeviceArg::Cuda => {
            Err(crate::gpu::GpuRunError::Unsupported("--kernels fast needs --device cuda".into()).into())
        }
        Command::Run(args) => match (&args.case, args.demo) {
            (Some(path), false) => run_case(path, args),
            _ if args.device == DeviceArg::Cuda => run_demo_gpu(args),
            _ if args.recipe.is_some() => run_demo_recipe(args),
            _ => run_demo(&args.output, 1, None, &args.common),
        },
        Command::Recipes(args) => crate::emulated::recipes(args.show.as_deref()),
        Command::Demo(args) => run_demo(&args.output, args.seed, args.save_case.as_deref(), &args.common),
        Command::Cast(args) => run_cast(args),
        Command::Golden(args) => crate::golden::run_cli(args),
        Command::Check(args) => crate::check::run(args),
        Command::Diagnose(args) => crate::diagnose::run(args),
        Command::BenchGpu(args) => crate::bench_gpu::run(args),
        Command::EpPlan(args) => crate::ep_plan::run(args),
    }
}

static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

fn payload_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

fn print_error(msg: &str) {
    let _ = writeln!(std::io::stderr(), "error: {}", one_line(msg));
}

/// The whole program: parse `args`, run, and return the exit status. Errors (and, as a last resort, panics)
/// become one `error:` line on stderr and status 2.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            if !e.use_stderr() {
                // --help, --version
                let _ = e.print();
                return 0;
            }
            if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                // No subcommand: clap's rendering would begin with the about line.
                let names: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_string()).collect();
                print_error(&format!("a subcommand is required: {} (see moe-oracle --help)", names.join(", ")));
                return EXIT_ERROR;
            }
            // clap's message, up to its usage block, on one line.
            let rendered = e.render().to_string();
            let text: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .collect();
            let text = text.join(" ");
            let text = text.strip_prefix("error:").unwrap_or(&text).trim();
            print_error(&format!("{text} (see moe-oracle --help)"));
            return EXIT_ERROR;
        }
    };

    guarded(|| run(cli))
}

/// Run `f`; an error becomes one `error:` line and status 2, and so does a panic (reported as an internal
/// error with its message and place, instead of Rust's multi-line panic report).
pub fn guarded<F: FnOnce() -> Result<(), CliError>>(f: F) -> i32 {
    // Record a panic's message and place instead of printing it; report it below as one line.
    std::panic::set_hook(Box::new(|info| {
        let mut slot = PANIC_MESSAGE.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            *slot = Some(format!("{}{place}", payload_text(info.payload())));
        }
    }));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let _ = std::panic::take_hook();
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(CliError::Failed)) => EXIT_FAILED,
        Ok(Err(e)) => {
            print_error(&e.to_string());
            EXIT_ERROR
        }
        Err(payload) => {
            let msg = PANIC_MESSAGE
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or_else(|| payload_text(payload.as_ref()));
            print_error(&format!("internal error (panic: {msg}); please report this with the case file"));
            EXIT_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_exit_2() {
        assert_eq!(guarded(|| Ok(())), 0);
        assert_eq!(guarded(|| panic!("boom")), EXIT_ERROR);
        // A panic inside a rayon worker reaches the caller too.
        assert_eq!(
            guarded(|| {
                use rayon::prelude::*;
                (0..64).into_par_iter().for_each(|i| assert!(i != 37, "worker {i}"));
                Ok(())
            }),
            EXIT_ERROR
        );
        let e = CliError::Output { path: "a/b".into(), why: "x".into() };
        assert_eq!(guarded(move || Err(e)), EXIT_ERROR);
    }
}
