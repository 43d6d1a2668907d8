//! How much memory generating a golden case needs, computed before anything is allocated, so an absurd size
//! is refused with one line instead of being killed by the kernel half-way.

use moe_reference::MoeConfig;

/// Default limit of `--max-memory-gib`.
pub const DEFAULT_MAX_GIB: f64 = 8.0;

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
