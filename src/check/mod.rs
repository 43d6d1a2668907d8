//! `moe-oracle check CASE --candidate CAND [--json REPORT] [--recipe R]`: every tensor the candidate holds
//! against the exact oracle (recomputed from the case's inputs), element by element, within the recipe's
//! a-priori per-element bounds ([`moe_reference::emulate`]): |faithful kernel − exact| ≤ bound.
//!
//! Per tensor: max abs error, max error/bound, violations, and the worst element in model terms
//! ([`coords`]). The kernel's dispatch offsets (`fwd.expert_offsets`), when given, must equal the oracle's
//! exactly ([`check_offsets`]). Exit status 0 when every checked tensor passes, 1 when any violates its bound (a NaN or
//! infinity in the candidate is a violation), 2 on bad input (one `error:` line, no report written).

pub mod candidate;
pub mod coords;
pub mod report;

use std::path::{Path, PathBuf};

use clap::Args;
use moe_reference::emulate::{self, tightness::tightness, Emulated};
use moe_reference::layer::{self, named_tensor};
use moe_reference::recipe::Recipe;
use moe_reference::{Backward, Forward, Options};
use ndarray::ArrayViewD;

use crate::case::{self, Case, ReadOptions};
use crate::cli::CliError;
use candidate::{Candidate, CHECKED, EXPERT_OFFSETS};
use coords::{Coords, Layout};
pub use report::{CheckReport, NotChecked, TensorResult, Worst};

/// What `check` and `diagnose` both read: the case, the candidate and the bounds that apply.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Case file (safetensors, moe.format 1): the inputs the candidate was computed from.
    pub case: PathBuf,
    /// The kernel's results: any of y, grad.*, fwd.*, bwd.* (F64, F32, BF16 or F16); per-row tensors in
    /// the oracle's row order, or in the kernel's own with `fwd.row_token` and `fwd.row_slot`. `diagnose`
    /// localises best with the intermediates (fwd.*, bwd.*). A name outside the case format, or a
    /// `moe.config` that contradicts the case's, is an error.
    #[arg(long)]
    pub candidate: PathBuf,
    /// Recipe whose bounds apply (named or a JSON file); default: the case config's `recipe`.
    #[arg(long)]
    pub recipe: Option<String>,
    /// The kernel follows the recipe's accumulation schedule exactly (K order, instruction width, promotion
    /// interval, slot order of the short sums), as DeepGEMM's unfused chain does: much tighter bounds, which
    /// a kernel with another summation order fails (`diagnose`: GEMM stages replayed from known operands
    /// must then match the emulation up to storage rounding).
    #[arg(long)]
    pub same_schedule: bool,
    /// Refuse a case whose estimated memory (the exact run, the recipe's emulation and the candidate)
    /// exceeds this many GiB (default: this machine's memory).
    #[arg(long, value_parser = crate::memory::parse_gib)]
    pub max_memory_gib: Option<f64>,
}

impl CompareArgs {
    /// Read both files and run the oracle and the recipe's emulation ([`Context::load_with`]).
    pub fn load(&self) -> Result<Context, CliError> {
        Context::load_limited(&self.case, &self.candidate, self.recipe.as_deref(), self.same_schedule, self.max_memory_gib)
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub compare: CompareArgs,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Everything a comparison needs: the case, the exact oracle's results, the recipe's emulation (its
/// bounds) and the candidate.
pub struct Context {
    pub case: Case,
    pub case_path: PathBuf,
    pub recipe: Recipe,
    pub exact_fwd: Forward,
    pub exact_bwd: Option<Backward>,
    pub em: Emulated,
    pub cand: Candidate,
    /// The kernel is declared to follow the recipe's accumulation schedule (`--same-schedule`).
    pub same_schedule: bool,
}

impl Context {
    /// Read the case and the candidate, run the exact oracle and the recipe's emulation.
    pub fn load(case_path: &Path, cand_path: &Path, recipe: Option<&str>) -> Result<Context, CliError> {
        Self::load_with(case_path, cand_path, recipe, false)
    }

    /// [`Context::load`], with the kernel declared to follow the recipe's accumulation schedule.
    pub fn load_with(case_path: &Path, cand_path: &Path, recipe: Option<&str>, same_schedule: bool) -> Result<Context, CliError> {
        Self::load_limited(case_path, cand_path, recipe, same_schedule, None)
    }

    /// [`Context::load_with`], refusing a case whose estimated memory exceeds `max_memory_gib` (default:
    /// the machine's memory) before the oracle runs.
    pub fn load_limited(
        case_path: &Path,
        cand_path: &Path,
        recipe: Option<&str>,
        same_schedule: bool,
        max_memory_gib: Option<f64>,
    ) -> Result<Context, CliError> {
        let case = case::read_case(case_path, ReadOptions::default())
            .map_err(|e| CliError::Case { path: case_path.to_path_buf(), source: e })?;
        let recipe = crate::emulated::load_recipe(recipe.unwrap_or(&case.inputs.cfg.recipe), None)?;
        // The exact run, the emulation and the candidate: about three sets of the oracle's arrays.
        crate::memory::check_fits(&case_path.display().to_string(), &case.inputs.cfg, 3, max_memory_gib)?;
        let opt = Options::default();
        let exact_fwd = layer::forward(&case.inputs, opt);
        let cand = candidate::read_candidate(cand_path, &case.inputs.cfg, &exact_fwd.rows)
            .map_err(|e| CliError::Check(e.to_string()))?;
        if cand.tensors.is_empty() && cand.expert_offsets.is_none() {
            return Err(CliError::Check(format!(
                "candidate {}: holds none of the tensors to check ({}, {EXPERT_OFFSETS})",
                cand_path.display(),
                CHECKED.join(", ")
            )));
        }
        let exact_bwd = case.inputs.dy.as_ref().map(|dy| layer::backward(&case.inputs, &exact_fwd, dy.view(), opt));
        if let Some(why) = crate::overflow::first_non_finite(&exact_fwd, exact_bwd.as_ref()) {
            return Err(CliError::Overflow(format!("{}: {why}", case_path.display())));
        }
        let opts = emulate::EmulateOptions { keep_quantised: true, same_schedule, deviations: true };
        let em = emulate::run_opts(&case.inputs, &recipe, opt, opts).map_err(|e| CliError::Recipe(e.to_string()))?;
        Ok(Context { case, case_path: case_path.to_path_buf(), recipe, exact_fwd, exact_bwd, em, cand, same_schedule })
    }

    pub fn layout(&self) -> Layout<'_> {
        Layout {
            rows: &self.exact_fwd.rows,
            topk_ids: &self.exact_fwd.topk_ids,
            intermediate: self.case.inputs.cfg.intermediate,
            kernel_row: self.cand.kernel_row.as_deref(),
        }
    }

    /// The exact oracle's value of a tensor.
    pub fn exact(&self, name: &str) -> Option<ArrayViewD<'_, f64>> {
        named_tensor(&self.exact_fwd, self.exact_bwd.as_ref(), name)
    }

    /// Why a tensor the candidate lacks, or the run cannot produce, is not checked.
    fn why_not(&self, name: &str) -> Option<String> {
        let fwd_only = self.exact_bwd.is_none() && !(name.starts_with("fwd.") || name == "y");
        if fwd_only {
            return Some("the case has no dy (forward only)".into());
        }
        if name == "grad.router.weight" && self.exact_fwd.routed.is_none() {
            return Some("the case gives its routing (no router)".into());
        }
        if self.cand.get(name).is_none() {
            return Some("not in the candidate".into());
        }
        None
    }
}

/// Compare `got` with `exact` under `bound` (same shapes): the tensor's numbers and its worst element.
pub fn compare(name: &str, got: ArrayViewD<f64>, exact: ArrayViewD<f64>, bound: ArrayViewD<f64>, layout: &Layout) -> TensorResult {
    let t = tightness(name, got.view(), exact.view(), bound.view());
    let max_abs_error = got.iter().zip(exact.iter()).map(|(&g, &x)| (g - x).abs()).fold(0.0f64, |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) });
    let non_finite = got.iter().filter(|v| !v.is_finite()).count();
    let worst = t.worst.map(|i| {
        let g = got.iter().nth(i).copied().unwrap_or(f64::NAN);
        let x = exact.iter().nth(i).copied().unwrap_or(f64::NAN);
        let b = bound.iter().nth(i).copied().unwrap_or(f64::NAN);
        Worst { at: layout.describe(name, i, got.shape()), got: g, exact: x, bound: b, ratio: t.max }
    });
    TensorResult {
        name: name.to_string(),
        verdict: if t.violations == 0 { "pass" } else { "fail" },
        elements: t.elements,
        violations: t.violations,
        non_finite,
        max_abs_error,
        max_ratio: t.max,
        median_ratio: t.median,
        p99_ratio: t.p99,
        worst,
    }
}

/// The kernel's `fwd.expert_offsets` against the oracle's.
pub struct OffsetsCheck {
    /// Entries that differ from the oracle's.
    pub wrong: Vec<usize>,
    /// Oracle rows whose kernel row (row map) lies outside its expert's range in the kernel's offsets.
    pub misplaced: Vec<usize>,
    /// As a checked tensor: exact comparison (bound 0), one violation per wrong entry and misplaced row;
    /// the worst element is the first wrong entry (got/exact: the offsets), or else the first misplaced
    /// row (got: the expert whose kernel range holds its kernel row, NaN when none; exact: its expert).
    pub result: TensorResult,
}

/// Compare the candidate's `fwd.expert_offsets`, when it has them, with the oracle's. They depend only on
/// how many rows each expert gets, so they are the same in the kernel's row order as in the oracle's; with
/// a row map, every kernel row in `offsets[e]..offsets[e+1]` must also be a row of expert `e`.
pub fn check_offsets(ctx: &Context) -> Option<OffsetsCheck> {
    let got = ctx.cand.expert_offsets.as_ref()?;
    let rows = &ctx.exact_fwd.rows;
    let exact = &rows.expert_offsets;
    let wrong: Vec<usize> = (0..got.len()).filter(|&i| i64::from(got[i]) != exact[i] as i64).collect();
    // The expert whose range in the kernel's offsets holds kernel row `k`.
    let range_of = |k: usize| (0..rows.experts).find(|&e| i64::from(got[e]) <= k as i64 && (k as i64) < i64::from(got[e + 1]));
    let mut misplaced = Vec::new();
    if let Some(kr) = &ctx.cand.kernel_row {
        for e in 0..rows.experts {
            misplaced.extend(rows.expert_rows(e).filter(|&r| range_of(kr[r]) != Some(e)));
        }
    }
    let elements = got.len() + ctx.cand.kernel_row.as_ref().map_or(0, |k| k.len());
    let violations = wrong.len() + misplaced.len();
    let max_abs_error = got.iter().zip(exact).map(|(&g, &x)| (f64::from(g) - x as f64).abs()).fold(0.0, f64::max);
    let inf = |n: usize| if n > 0 { f64::INFINITY } else { 0.0 };
    // Ratios are 0 (exact) or infinite (bound 0): quantiles of that two-valued distribution.
    let q = |p: f64| if violations > 0 && ((elements - 1) as f64 * p).round() as usize >= elements - violations { f64::INFINITY } else { 0.0 };
    let worst = if let Some(&i) = wrong.first() {
        let at = Coords { index: vec![i], expert: (i < rows.experts).then_some(i), ..Coords::default() };
        Some(Worst { at, got: f64::from(got[i]), exact: exact[i] as f64, bound: 0.0, ratio: f64::INFINITY })
    } else {
        misplaced.first().map(|&r| {
            let e = coords::expert_of_row(rows, r);
            let k = ctx.cand.kernel_row.as_ref().expect("misplaced rows need a row map")[r];
            let at = Coords {
                index: vec![r],
                token: Some(rows.row_token[r]),
                slot: Some(rows.row_slot[r]),
                expert: Some(e),
                row: Some(r),
                kernel_row: Some(k),
                ..Coords::default()
            };
            let got = range_of(k).map_or(f64::NAN, |x| x as f64);
            Worst { at, got, exact: e as f64, bound: 0.0, ratio: f64::INFINITY }
        })
    };
    let result = TensorResult {
        name: EXPERT_OFFSETS.to_string(),
        verdict: if violations == 0 { "pass" } else { "fail" },
        elements,
        violations,
        non_finite: 0,
        max_abs_error,
        max_ratio: inf(violations),
        median_ratio: q(0.5),
        p99_ratio: q(0.99),
        worst,
    };
    Some(OffsetsCheck { wrong, misplaced, result })
}

/// Check every tensor the candidate holds.
pub fn check(ctx: &Context) -> CheckReport {
    let layout = ctx.layout();
    let mut tensors = Vec::new();
    let mut not_checked = Vec::new();
    // The dispatch first (pipeline order).
    match check_offsets(ctx) {
        Some(o) => tensors.push(o.result),
        None => not_checked.push(NotChecked { name: EXPERT_OFFSETS.to_string(), why: "not in the candidate".into() }),
    }
    for name in CHECKED {
        if let Some(why) = ctx.why_not(name) {
            not_checked.push(NotChecked { name: name.to_string(), why });
            continue;
        }
        // The tightest sound bound: the a-priori one, or |emulated − exact| plus the bound on how far any
        // faithful kernel may deviate from the emulation, whichever is smaller per element.
        let bound = ctx.exact(name).and_then(|x| ctx.em.check_bound(name, x));
        let (Some(got), Some(exact), Some(bound)) = (ctx.cand.get(name), ctx.exact(name), bound) else {
            not_checked.push(NotChecked { name: name.to_string(), why: "no bound for it under this recipe".into() });
            continue;
        };
        tensors.push(compare(name, got.view(), exact, bound.view(), &layout));
    }
    let verdict = if tensors.iter().any(|t| t.violations > 0) { "fail" } else { "pass" };
    CheckReport {
        case: ctx.case_path.display().to_string(),
        candidate: ctx.cand.path.clone(),
        recipe: ctx.recipe.name.clone(),
        verdict,
        tensors,
        not_checked,
        ignored: ctx.cand.ignored.clone(),
    }
}

/// Write a JSON value to `path` atomically (temporary file, then rename).
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).expect("reports serialise");
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let out_err = |e: std::io::Error| CliError::Output { path: path.to_path_buf(), why: e.to_string() };
    let tmp = tempfile::Builder::new().prefix(".report.").suffix(".tmp").tempfile_in(dir).map_err(out_err)?;
    std::fs::write(tmp.path(), text + "\n").map_err(out_err)?;
    tmp.persist(path).map_err(|e| out_err(e.error))?;
    Ok(())
}

/// The `check` command: exit 0 pass, 1 violation ([`CliError::Failed`]), 2 bad input.
pub fn run(args: &CheckArgs) -> Result<(), CliError> {
    let c = &args.compare;
    crate::paths::check_outputs(&[&c.case, &c.candidate], &args.json.iter().map(|j| j.as_path()).collect::<Vec<_>>())?;
    let ctx = args.compare.load()?;
    let rep = check(&ctx);
    print!("{}", rep.human());
    if let Some(j) = &args.json {
        write_json(j, &rep)?;
    }
    if rep.verdict == "pass" {
        Ok(())
    } else {
        Err(CliError::Failed)
    }
}
