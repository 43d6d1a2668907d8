//! How much memory the oracle needs for a layer, computed from the config before anything large is
//! allocated, so that an absurd size is refused with one line (exit 2) instead of aborting in the
//! allocator or being killed half-way. `golden` limits it by `--max-memory-gib` (default 8); `run`,
//! `check` and `diagnose` by `--max-memory-gib`, default this machine's physical memory.

use moe_reference::MoeConfig;

use crate::cli::CliError;

/// Estimated peak bytes of generating the case (an upper-leaning estimate, not a measurement): f64 inputs,
/// the oracle's forward and backward arrays, its GEMM operand slices, and the stored copies written out.
pub fn estimate_bytes(cfg: &MoeConfig) -> u128 {
    let (t, h, i, e, k) =
        (cfg.tokens as u128, cfg.hidden as u128, cfg.intermediate as u128, cfg.experts as u128, cfg.top_k as u128);
    let m = t.saturating_mul(k);
    let weights = e.saturating_mul(i).saturating_mul(h).saturating_mul(3);
    let sum = |terms: &[u128]| terms.iter().fold(0u128, |a, &b| a.saturating_add(b));
    // f64 inputs: x, dy, w13, w2, router (+ bias), routing.
    let inputs = sum(&[t.saturating_mul(h).saturating_mul(2), weights, e.saturating_mul(h + 1), m.saturating_mul(2)]);
    // Forward: gathered rows, h, a, o, y, logits and scores.
    let forward = sum(&[
        m.saturating_mul(h.saturating_mul(2).saturating_add(i.saturating_mul(3))),
        t.saturating_mul(h),
        t.saturating_mul(e).saturating_mul(2),
    ]);
    // Backward: weight gradients, do, da, dh, dx_rows, grad.x, router gradient, dlogits.
    let backward = sum(&[
        weights,
        m.saturating_mul(h.saturating_mul(2).saturating_add(i.saturating_mul(3))),
        t.saturating_mul(h),
        e.saturating_mul(h),
        t.saturating_mul(e),
    ]);
    // The exact GEMM slices its operands (about one more copy of the largest one, the weights).
    let workspace = weights;
    // Stored copies of the inputs (at most 4 bytes each: half an f64); outputs and intermediates are
    // written from the arrays above without copies.
    let stored = inputs.div_ceil(2);
    sum(&[inputs, forward, backward, workspace, stored]).saturating_mul(8)
}

/// Bytes as GiB for messages.
pub fn gib(bytes: u128) -> f64 {
    bytes as f64 / f64::powi(2.0, 30)
}

/// This machine's memory, if known: `MemTotal` of /proc/meminfo, or the cgroup (v2) limit of a container
/// when that is lower.
pub fn physical_bytes() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let total = line.split_whitespace().nth(1)?.parse::<u128>().ok()? * 1024;
    // "max" (no limit) or a missing file leave the physical memory.
    let limit = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|s| s.trim().parse::<u128>().ok());
    Some(limit.map_or(total, |l| l.min(total)))
}

/// `--max-memory-gib`'s parser: a finite number of GiB above zero.
pub fn parse_gib(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a number of GiB above 0, got '{s}'")),
    }
}

/// Refuse, before the work, a layer whose `copies` oracle-sized sets of arrays (1 for the exact run; more
/// when an emulation and a candidate are held beside it) would need more than `limit_gib` (default: the
/// physical memory; no limit when that is unknown). `what` (the case file) begins the message.
pub fn check_fits(what: &str, cfg: &MoeConfig, copies: u32, limit_gib: Option<f64>) -> Result<(), CliError> {
    let (limit, source) = match limit_gib {
        Some(l) => (l, "--max-memory-gib"),
        None => match physical_bytes() {
            Some(b) => (gib(b), "this machine's memory; --max-memory-gib raises it"),
            None => return Ok(()),
        },
    };
    let need = gib(estimate_bytes(cfg).saturating_mul(u128::from(copies)));
    if need > limit {
        let (t, h, i, e, k) = (cfg.tokens, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
        return Err(CliError::Memory(format!(
            "{what}: T={t} H={h} I={i} E={e} k={k} needs about {need:.1} GiB (estimate), more than {limit:.1} GiB ({source})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::{curated, generate};

    /// The estimate covers at least the arrays a generated case holds (inputs, forward, backward).
    #[test]
    fn estimate_covers_the_arrays_held() {
        let out = std::path::Path::new("unused.safetensors");
        for a in [
            "--preset qwen3-30b-a3b --hidden 32 --intermediate 16 --experts 16 --tokens 40",
            "--preset deepseek-v3 --hidden 64 --intermediate 8 --experts 32 --tokens 3 --intermediates",
            "--preset mixtral-8x7b --hidden 8 --intermediate 64 --tokens 200 --given-routing",
        ] {
            let args = curated::parse_args(a, out).unwrap();
            let g = generate(&args).unwrap();
            let (i, f, b) = (&g.inputs, &g.forward, &g.backward);
            let opt = |a: Option<usize>| a.unwrap_or(0);
            let held = i.x.len()
                + i.w13.len()
                + i.w2.len()
                + opt(i.dy.as_ref().map(|a| a.len()))
                + opt(i.router_weight.as_ref().map(|a| a.len()))
                + f.y.len()
                + f.h.len()
                + f.a.len()
                + f.o.len()
                + opt(f.logits.as_ref().map(|a| a.len()))
                + b.grad_x.len()
                + b.grad_w13.len()
                + b.grad_w2.len()
                + b.do_.len()
                + b.da.len()
                + b.dh.len()
                + b.dx_rows.len();
            let est = estimate_bytes(&args.config().unwrap());
            assert!(est >= 8 * held as u128, "{a}: estimate {est} < held {}", 8 * held);
            assert!(est <= 8 * 4 * held as u128, "{a}: estimate {est} far above held {}", 8 * held);
        }
    }
}
