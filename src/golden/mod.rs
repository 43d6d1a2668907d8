//! `moe-oracle golden`: golden cases, i.e. case files (`golden-format.md`) whose inputs are drawn from
//! realistic distributions for a model preset and whose expected outputs (`y`, `grad.*`, optionally
//! `fwd.*`/`bwd.*`) are the exact oracle's, as F64.
//!
//! - [`preset`]: the model layers of `anchors.md`.
//! - [`recipe`]: recipe names and their storage dtype.
//! - [`inputs`]: the deterministic input generator and the bug-class scenarios.
//! - [`size`]: the memory estimate that refuses absurd sizes up front.
//! - [`curated`]: the committed set under `golden/` and its `MANIFEST.json`.
//!
//! The same arguments give a byte-identical file: inputs come from seeded streams, the oracle is exact (no
//! dependence on threads), the writer orders tensors and metadata, and the metadata holds no time stamp
//! or crate version, only [`GENERATOR`] (bumped whenever the same arguments would draw other values).

pub mod curated;
pub mod inputs;
pub mod preset;
pub mod recipe;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use moe_reference::{layer, Backward, Forward, LayerInputs, MoeConfig, Options};

use crate::case::{self, TensorData};
use crate::error::CaseError;

/// Default limit of `--max-memory-gib` (the estimate of [`crate::memory::estimate_bytes`]).
pub const DEFAULT_MAX_GIB: f64 = 8.0;

pub use inputs::Scenario;
pub use preset::Preset;
pub use recipe::Recipe;

/// Version of the generator's streams, recorded in every file as `moe.golden.generator`.
// 2: emulated results and bounds for low-precision recipes; 3 (session 33): SwiGLU's bounds cover its f32
// evaluation as kernels do it (the clamped argument's rounding, exp's overflow, the sigmoid's error in the
// backward), and so do the routing weights' (`emulate::route_bound`)
pub const GENERATOR: &str = "moe-oracle golden 4";

/// Arguments of `moe-oracle golden`.
#[derive(Clone, Debug, Args)]
#[command(after_long_help = "\
Inputs: weights normal with std 1/sqrt(fan-in); x normal around a shared mean with a few outlier channels \
(x16); a router that prefers some experts (skewed load: with many experts some get no token). Stored in the \
recipe's dtype (fp32: F32; bf16 and the FP8/MX recipes: BF16); the expected outputs are the exact oracle's on \
the stored values, as F64. DeepSeek-V3's shared expert (a dense MLP) is left out. The same arguments give a \
byte-identical file. Sizes whose estimated memory exceeds --max-memory-gib are refused before anything runs.")]
pub struct GoldenArgs {
    /// Model whose MoE layer to imitate (shapes, routing, activation; anchors.md).
    #[arg(long, value_enum)]
    pub preset: Preset,
    /// Number of tokens T.
    #[arg(long, default_value_t = 64)]
    pub tokens: usize,
    /// Hidden size H (default: the preset's).
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Expert intermediate size I (default: the preset's).
    #[arg(long)]
    pub intermediate: Option<usize>,
    /// Number of experts E (default: the preset's).
    #[arg(long)]
    pub experts: Option<usize>,
    /// Experts per token k (default: the preset's).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Expert-parallel ranks (must divide the experts).
    #[arg(long, default_value_t = 1)]
    pub ep_ranks: usize,
    /// Training recipe, recorded in moe.config; decides the storage dtype of the inputs.
    #[arg(long, value_enum, default_value_t = Recipe::Bf16)]
    pub recipe: Recipe,
    /// Seed of the input generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Hand-shaped input for one bug class.
    #[arg(long, value_enum, default_value_t = Scenario::Realistic)]
    pub scenario: Scenario,
    /// Store the router's choice as `topk_ids`/`topk_weights` (routing null) instead of `router.weight`.
    #[arg(long)]
    pub given_routing: bool,
    /// Also store the oracle's intermediates (fwd.*, bwd.*).
    #[arg(long)]
    pub intermediates: bool,
    /// Refuse sizes whose estimated memory exceeds this many GiB.
    #[arg(long, default_value_t = DEFAULT_MAX_GIB, value_parser = crate::memory::parse_gib)]
    pub max_memory_gib: f64,
    /// Output file (safetensors).
    #[arg(short, long)]
    pub output: PathBuf,
    /// No progress lines on stderr (there are none when stderr is not a terminal either).
    #[arg(short, long)]
    pub quiet: bool,
}

/// Why a golden case cannot be made; `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// The arguments describe no valid layer or scenario.
    #[error("golden --preset {preset}: {why}")]
    Args { preset: &'static str, why: String },
    /// The case would need more memory than allowed.
    #[error(
        "golden --preset {preset}: T={t} H={h} I={i} E={e} k={k} needs about {need:.1} GiB (estimate), more than \
         --max-memory-gib {limit}; shrink it with --tokens/--hidden/--intermediate/--experts or raise the limit"
    )]
    TooLarge { preset: &'static str, t: usize, h: usize, i: usize, e: usize, k: usize, need: f64, limit: f64 },
    /// Writing the file failed.
    #[error("writing {}: {source}", .path.display())]
    Write { path: PathBuf, source: CaseError },
}

impl GoldenArgs {
    /// The layer configuration these arguments describe (validated, size-checked).
    pub fn config(&self) -> Result<MoeConfig, GoldenError> {
        let p = self.preset.layer();
        let cfg = MoeConfig {
            tokens: self.tokens,
            hidden: self.hidden.unwrap_or(p.hidden),
            intermediate: self.intermediate.unwrap_or(p.intermediate),
            experts: self.experts.unwrap_or(p.experts),
            top_k: self.top_k.unwrap_or(p.top_k),
            activation: p.activation,
            routing: Some(p.routing),
            recipe: self.recipe.name().to_string(),
            ep_ranks: self.ep_ranks,
        };
        let bad = |why: String| GoldenError::Args { preset: self.preset.name(), why };
        cfg.validate().map_err(|e| bad(e.to_string()))?;
        let need = crate::memory::estimate_bytes(&cfg);
        // A finite number above 0: `memory::parse_gib` parses it (GoldenArgs come only from clap).
        let limit = self.max_memory_gib;
        if crate::memory::gib(need) > limit {
            let (t, h, i, e, k) = (cfg.tokens, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
            return Err(GoldenError::TooLarge {
                preset: self.preset.name(),
                t,
                h,
                i,
                e,
                k,
                need: crate::memory::gib(need),
                limit,
            });
        }
        case::check_size(&cfg).map_err(|e| bad(e.to_string()))?;
        self.scenario.check_config(&cfg).map_err(bad)?;
        Ok(cfg)
    }

    /// The arguments that decide the file's contents, in a canonical order (recorded in the file and in
    /// the manifest): dimensions spelled out, so the line reproduces the file by itself.
    pub fn canonical(&self, cfg: &MoeConfig) -> Vec<String> {
        let mut a: Vec<String> = [
            ("--preset", self.preset.name().to_string()),
            ("--tokens", cfg.tokens.to_string()),
            ("--hidden", cfg.hidden.to_string()),
            ("--intermediate", cfg.intermediate.to_string()),
            ("--experts", cfg.experts.to_string()),
            ("--top-k", cfg.top_k.to_string()),
            ("--ep-ranks", cfg.ep_ranks.to_string()),
            ("--recipe", self.recipe.name().to_string()),
            ("--seed", self.seed.to_string()),
            ("--scenario", self.scenario.name().to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect();
        if self.given_routing {
            a.push("--given-routing".into());
        }
        if self.intermediates {
            a.push("--intermediates".into());
        }
        a
    }
}

/// A generated golden case: the stored inputs and the oracle's results on them.
pub struct Golden {
    pub inputs: LayerInputs,
    pub forward: Forward,
    pub backward: Backward,
    pub recipe: Recipe,
    pub intermediates: bool,
    pub metadata: BTreeMap<String, String>,
    /// For low-precision recipes: what a faithful kernel of the recipe computes, with its bounds.
    pub emulated: Option<moe_reference::emulate::Emulated>,
}

/// Stage lines on stderr, only when asked for and stderr is a terminal.
struct Stages {
    on: bool,
    start: Instant,
}

impl Stages {
    fn line(&self, n: usize, what: &str) {
        if self.on {
            let s = self.start.elapsed().as_secs_f64();
            let _ = writeln!(std::io::stderr(), "moe-oracle golden: [{n}/4] {what} ({s:.1} s)");
        }
    }
}

/// Draw the inputs and run the oracle (no file is touched).
pub fn generate(args: &GoldenArgs) -> Result<Golden, GoldenError> {
    generate_with_progress(args, &Stages { on: false, start: Instant::now() })
}

fn generate_with_progress(args: &GoldenArgs, stages: &Stages) -> Result<Golden, GoldenError> {
    let cfg = args.config()?;
    stages.line(1, "drawing inputs");
    let draw = inputs::Draw {
        cfg: &cfg,
        router_bias: args.preset.layer().router_bias,
        scenario: args.scenario,
        given_routing: args.given_routing,
        seed: args.seed,
        storage: args.recipe.storage(),
    };
    let inputs = inputs::draw(&draw).map_err(|why| GoldenError::Args { preset: args.preset.name(), why })?;
    // The generator's own output must be a valid case; a failure here is a bug, reported as one line.
    case::validate_inputs(&inputs, case::ReadOptions::default()).map_err(|e| GoldenError::Args {
        preset: args.preset.name(),
        why: format!("internal: drawn inputs invalid: {e}"),
    })?;
    stages.line(2, "forward (exact oracle)");
    let opt = Options::default();
    let forward = layer::forward(&inputs, opt);
    stages.line(3, "backward (exact oracle)");
    let dy = inputs.dy.as_ref().expect("golden inputs always have dy");
    let backward = layer::backward(&inputs, &forward, dy.view(), opt);

    let emulated = if args.recipe == Recipe::Fp32 {
        None
    } else {
        let r = moe_reference::recipe::Recipe::named(args.recipe.name()).expect("golden recipes are named recipes");
        // (no deviation bounds: a golden case holds values and bounds)
        let opts = moe_reference::emulate::EmulateOptions { keep_quantised: false, same_schedule: false, deviations: false };
        Some(moe_reference::emulate::run_opts(&inputs, &r, opt, opts).map_err(|e| GoldenError::Args {
            preset: args.preset.name(),
            why: format!("internal: emulating {}: {e}", args.recipe.name()),
        })?)
    };

    let mut metadata = BTreeMap::new();
    metadata.insert(case::KEY_FORMAT.to_string(), case::FORMAT.to_string());
    metadata.insert(case::KEY_CONFIG.to_string(), case::config_json(&inputs.cfg));
    metadata.insert("moe.golden.generator".into(), GENERATOR.into());
    metadata.insert("moe.golden.preset".into(), args.preset.name().into());
    metadata.insert("moe.golden.seed".into(), args.seed.to_string());
    metadata.insert("moe.golden.scenario".into(), args.scenario.name().into());
    metadata.insert("moe.golden.args".into(), args.canonical(&cfg).join(" "));
    Ok(Golden { inputs, forward, backward, recipe: args.recipe, intermediates: args.intermediates, metadata, emulated })
}

impl Golden {
    /// The file's tensors: inputs in the recipe's storage dtype, then the oracle's outputs as F64. When the
    /// layer routes itself, the router's choice is not stored as `topk_ids`/`topk_weights` (a reader would
    /// take them as given routing) but, with intermediates, as `fwd.topk_ids`/`fwd.topk_weights`.
    pub fn tensors(&self) -> Result<Vec<(String, TensorData<'_>)>, CaseError> {
        let mut out = case::case_tensors(&self.inputs, self.recipe.storage());
        let routed = self.inputs.topk_ids.is_none();
        for (name, t) in case::output_tensors(&self.forward, Some(&self.backward), self.intermediates)? {
            match name.as_str() {
                "topk_ids" | "topk_weights" if routed => {
                    if self.intermediates {
                        out.push((format!("fwd.{name}"), t));
                    }
                }
                _ => out.push((name, t)),
            }
        }
        // The emulated kernel result (F32) and its bounds (F32, already rounded up by the emulator so they
        // stay bounds), for the outputs (and, with intermediates, every intermediate).
        if let Some(em) = &self.emulated {
            for (name, bound) in &em.bounds {
                if !self.intermediates && (name.starts_with("fwd.") || name.starts_with("bwd.")) {
                    continue;
                }
                if let Some(v) = moe_reference::layer::named_tensor(&em.fwd, em.bwd.as_ref(), name) {
                    out.push((format!("emulated.{name}"), TensorData::F32(v.mapv(|x| x as f32).into())));
                }
                out.push((format!("bound.{name}"), TensorData::F32(bound.clone().into())));
            }
        }
        Ok(out)
    }

    /// Write the case atomically (nothing is left behind on failure).
    pub fn write(&self, path: &Path) -> Result<(), GoldenError> {
        let err = |source| GoldenError::Write { path: path.to_path_buf(), source };
        let tensors = self.tensors().map_err(err)?;
        case::write_tensors(path, &self.metadata, &tensors).map_err(err)
    }
}

/// Generate and write one golden case to `args.output`.
pub fn write_golden(args: &GoldenArgs) -> Result<Golden, GoldenError> {
    let stages = Stages { on: !args.quiet && std::io::stderr().is_terminal(), start: Instant::now() };
    let g = generate_with_progress(args, &stages)?;
    stages.line(4, &format!("writing {}", args.output.display()));
    g.write(&args.output)?;
    stages.line(4, "done");
    Ok(g)
}

/// The `golden` subcommand: check the output path, generate, write, print a summary on stdout.
pub fn run_cli(args: &GoldenArgs) -> Result<(), crate::cli::CliError> {
    crate::paths::check_output(&args.output)?;
    let g = write_golden(args)?;
    let c = &g.inputs.cfg;
    let rows = g.forward.rows.rows();
    let busy = (0..c.experts).filter(|&e| !g.forward.rows.expert_rows(e).is_empty()).count();
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "moe-oracle golden {}", g.metadata["moe.golden.args"]);
    let _ = writeln!(
        o,
        "  T={} H={} I={} E={} k={} ep_ranks={} recipe {} ({} routing): {rows} rows on {busy} of {} experts",
        c.tokens,
        c.hidden,
        c.intermediate,
        c.experts,
        c.top_k,
        c.ep_ranks,
        c.recipe,
        if c.routing.is_some() { "computed" } else { "given" },
        c.experts
    );
    let _ = writeln!(o, "  wrote {}", args.output.display());
    Ok(())
}
