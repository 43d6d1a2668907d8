//! `moe-oracle diagnose CASE --candidate CAND [--json REPORT] [--plot FILE.png] [--recipe R]`: localise a
//! mismatch.
//!
//! Walks the pipeline forward then backward ([`STAGES`]), replaying every stage the candidate holds from
//! the candidate's own inputs to that stage ([`replay`]), and reports the first stage that violates its
//! bound; then blames experts, tokens and feature ranges ([`blame`]) and names the bug pattern where one
//! fits ([`patterns`]). The kernel's dispatch (`fwd.expert_offsets`, when the candidate holds it) comes
//! before every replayed stage: wrong offsets make it the first bad stage, blamed on the experts whose
//! ranges they bound. Exit status 0 when no stage violates, 1 when one does, 2 on bad input.

pub mod blame;
pub mod patterns;
pub mod plot;
pub mod replay;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use crate::check::candidate::EXPERT_OFFSETS;
use crate::check::{check_offsets, compare, write_json, CompareArgs, Context, Worst};
use crate::cli::CliError;
use blame::{Blame, FeatureRange};
use patterns::Pattern;
use replay::Replay;

/// Pipeline order: forward, then backward (each gradient after the intermediates it is made from).
pub const STAGES: [&str; 13] = crate::check::candidate::CHECKED;

#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    #[command(flatten)]
    pub compare: CompareArgs,
    /// Also write the diagnosis as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a PNG heat map of error/bound (experts x feature blocks) of the first bad stage (or, when
    /// none, of the stage closest to its bound).
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// One replayed stage.
#[derive(Clone, Debug, Serialize)]
pub struct StageResult {
    pub name: &'static str,
    /// `pass`, `fail`, `not in candidate`, or `not replayed` (backward without `dy` in the case, or
    /// `grad.router.weight` when the case gives its routing). `fwd.expert_offsets` (the dispatch) is
    /// compared, not replayed: exactly, with the oracle's.
    pub verdict: &'static str,
    pub violations: usize,
    pub elements: usize,
    pub max_ratio: f64,
    /// The stage's intermediate inputs: `candidate` (replayed from the candidate's own) or `emulated`.
    pub inputs: Vec<(String, &'static str)>,
    /// Fraction of elements bit-equal to the recipe's emulation from the same inputs (GEMM and SwiGLU
    /// stages): 1.0 for a kernel that follows the recipe's quantisation and accumulation model exactly.
    /// Information only (a kernel may accumulate in another order and be right); it shows deviations that
    /// the a-priori bounds, loose for FP8, let through (e.g. power-of-two scales where the recipe has f32).
    pub emulation_match: Option<f64>,
    pub worst: Option<Worst>,
}

/// The diagnosis.
#[derive(Clone, Debug, Serialize)]
pub struct Diagnosis {
    pub case: String,
    pub candidate: String,
    pub recipe: String,
    pub first_bad_stage: Option<&'static str>,
    /// Other stages that violate their bounds after the first (each replayed from its own inputs).
    pub also_bad: Vec<&'static str>,
    pub experts: Vec<usize>,
    pub tokens: Vec<usize>,
    pub features: Vec<FeatureRange>,
    /// Short name of the recognised bug pattern, or null.
    pub pattern: Option<&'static str>,
    pub pattern_detail: Option<String>,
    pub stages: Vec<StageResult>,
}

/// Diagnose a loaded context; also returns the replayed stage to plot.
pub fn diagnose(ctx: &Context) -> Result<(Diagnosis, Option<replay::Replayed>), CliError> {
    let rp = Replay::new(ctx)?;
    let layout = ctx.layout();
    let mut stages = Vec::new();
    let mut first: Option<(replay::Replayed, Vec<bool>)> = None;
    let mut closest: Option<(f64, replay::Replayed)> = None;
    let mut also_bad = Vec::new();
    // The dispatch, before every stage that runs on its rows.
    let offsets = check_offsets(ctx);
    let offsets_bad = offsets.as_ref().is_some_and(|o| o.result.violations > 0);
    stages.push(match &offsets {
        Some(o) => StageResult {
            name: EXPERT_OFFSETS,
            verdict: o.result.verdict,
            violations: o.result.violations,
            elements: o.result.elements,
            max_ratio: o.result.max_ratio,
            inputs: vec![],
            emulation_match: None,
            worst: o.result.worst.clone().filter(|_| offsets_bad),
        },
        None => StageResult { name: EXPERT_OFFSETS, verdict: "not in candidate", violations: 0, elements: 0, max_ratio: 0.0, inputs: vec![], emulation_match: None, worst: None },
    });
    for name in STAGES {
        let Some(st) = rp.stage(name) else {
            // Held but not replayable: backward without `dy`, or the router's gradient without a router.
            let verdict = if ctx.cand.get(name).is_some() { "not replayed" } else { "not in candidate" };
            stages.push(StageResult { name, verdict, violations: 0, elements: 0, max_ratio: 0.0, inputs: vec![], emulation_match: None, worst: None });
            continue;
        };
        let r = compare(name, st.got.view(), st.exact.view(), st.bound.view(), &layout);
        let inputs = st.inputs.iter().map(|(n, c)| (n.to_string(), if *c { "candidate" } else { "emulated" })).collect();
        let emulation_match = st.emulated.as_ref().filter(|e| !e.is_empty()).map(|e| {
            let same = st.got.iter().zip(e.iter()).filter(|(g, v)| g.to_bits() == v.to_bits() || (**g == 0.0 && **v == 0.0)).count();
            same as f64 / e.len() as f64
        });
        stages.push(StageResult {
            name,
            verdict: r.verdict,
            violations: r.violations,
            elements: r.elements,
            max_ratio: r.max_ratio,
            inputs,
            emulation_match,
            worst: r.worst.filter(|_| r.violations > 0),
        });
        if r.violations > 0 {
            if first.is_none() {
                let bad = blame::violations(&st.got, &st.exact, &st.bound);
                first = Some((st, bad));
            } else {
                also_bad.push(name);
            }
        } else if first.is_none() && closest.as_ref().is_none_or(|(m, _)| r.max_ratio > *m) {
            closest = Some((r.max_ratio, st));
        }
    }
    let mut d = Diagnosis {
        case: ctx.case_path.display().to_string(),
        candidate: ctx.cand.path.clone(),
        recipe: ctx.recipe.name.clone(),
        first_bad_stage: None,
        also_bad,
        experts: vec![],
        tokens: vec![],
        features: vec![],
        pattern: None,
        pattern_detail: None,
        stages,
    };
    let plot = match (offsets.filter(|_| offsets_bad), first) {
        (Some(o), first) => {
            // Wrong offsets: the entries bound experts e-1 (its end) and e (its start); misplaced rows name
            // their expert and token. Later stages are replayed from the candidate's own rows, so they are
            // reported as also bad; the plot shows the first of them (or the closest to its bound).
            let rows = &ctx.exact_fwd.rows;
            let mut experts: Vec<usize> = o.wrong.iter().flat_map(|&i| [i.checked_sub(1), Some(i)]).flatten().filter(|&e| e < rows.experts).collect();
            experts.extend(o.misplaced.iter().map(|&r| crate::check::coords::expert_of_row(rows, r)));
            experts.sort_unstable();
            experts.dedup();
            let mut tokens: Vec<usize> = o.misplaced.iter().map(|&r| rows.row_token[r]).collect();
            tokens.sort_unstable();
            tokens.dedup();
            d.first_bad_stage = Some(EXPERT_OFFSETS);
            d.experts = experts;
            d.tokens = tokens;
            match first {
                Some((st, _)) => {
                    d.also_bad.insert(0, st.name);
                    Some(st)
                }
                None => closest.map(|(_, st)| st),
            }
        }
        (None, Some((st, bad))) => {
            let cfg = &ctx.case.inputs.cfg;
            let b: Blame = blame::blame(st.name, st.got.shape(), &bad, &ctx.exact_fwd.rows, &ctx.exact_fwd.topk_ids, cfg.intermediate);
            let p: Option<Pattern> = patterns::recognise(&rp, &st, &bad, &b);
            d.first_bad_stage = Some(st.name);
            d.experts = b.experts;
            d.tokens = b.tokens;
            d.features = b.features;
            d.pattern = p.as_ref().map(|p| p.name);
            d.pattern_detail = p.map(|p| p.detail);
            Some(st)
        }
        (None, None) => closest.map(|(_, st)| st),
    };
    Ok((d, plot))
}

fn list(v: &[usize]) -> String {
    let shown: Vec<String> = v.iter().take(24).map(|x| x.to_string()).collect();
    let more = if v.len() > 24 { format!(" ... ({} in all)", v.len()) } else { String::new() };
    format!("[{}]{more}", shown.join(", "))
}

impl Diagnosis {
    pub fn human(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "moe-oracle diagnose {} --candidate {} (recipe {})", self.case, self.candidate, self.recipe);
        let _ = writeln!(s, "  {:<20} {:<17} {:>14} {:>12} {:>10}  inputs", "stage", "verdict", "max err/bound", "violations", "=emulated");
        for st in &self.stages {
            let inputs: Vec<String> = st.inputs.iter().map(|(n, w)| format!("{n} ({w})")).collect();
            let ratio = if st.elements == 0 { "-".to_string() } else if st.max_ratio.is_infinite() { "inf".into() } else { format!("{:.3e}", st.max_ratio) };
            let em = st.emulation_match.map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
            let _ = writeln!(s, "  {:<20} {:<17} {:>14} {:>12} {:>10}  {}", st.name, st.verdict, ratio, st.violations, em, inputs.join(", "));
        }
        match self.first_bad_stage {
            None => {
                let _ = writeln!(s, "no stage violates its bound");
            }
            Some(name) => {
                let _ = writeln!(s, "first bad stage: {name}");
                if let Some(w) = self.stages.iter().find(|x| x.name == name).and_then(|x| x.worst.as_ref()) {
                    let _ = writeln!(s, "  worst: {}", w.human());
                }
                let _ = writeln!(s, "  experts: {}", list(&self.experts));
                let _ = writeln!(s, "  tokens: {}", list(&self.tokens));
                let f: Vec<String> = self
                    .features
                    .iter()
                    .take(12)
                    .map(|f| format!("{}{} {}..{}", f.half.map(|h| format!("{h} ")).unwrap_or_default(), f.axis, f.start, f.end))
                    .collect();
                let _ = writeln!(s, "  features: {}{}", f.join(", "), if self.features.len() > 12 { " ..." } else { "" });
                let _ = writeln!(
                    s,
                    "  pattern: {}",
                    match (&self.pattern, &self.pattern_detail) {
                        (Some(p), Some(d)) => format!("{p} ({d})"),
                        _ => "none recognised".into(),
                    }
                );
                if !self.also_bad.is_empty() {
                    let _ = writeln!(s, "  later stages also violating (from their own inputs): {}", self.also_bad.join(", "));
                }
            }
        }
        s
    }
}

/// The `diagnose` command.
pub fn run(args: &DiagnoseArgs) -> Result<(), CliError> {
    let c = &args.compare;
    let outputs: Vec<&Path> = [&args.json, &args.plot].into_iter().flatten().map(|p| p.as_path()).collect();
    crate::paths::check_outputs(&[&c.case, &c.candidate], &outputs)?;
    let ctx = args.compare.load()?;
    let (d, st) = diagnose(&ctx)?;
    print!("{}", d.human());
    if let Some(j) = &args.json {
        write_json(j, &d)?;
    }
    if let (Some(p), Some(st)) = (&args.plot, &st) {
        plot::write_plot(p, st, &ctx.exact_fwd.rows, &ctx.exact_fwd.topk_ids)
            .map_err(|e| CliError::Output { path: p.clone(), why: e.to_string() })?;
    }
    if d.first_bad_stage.is_some() {
        Err(CliError::Failed)
    } else {
        Ok(())
    }
}
