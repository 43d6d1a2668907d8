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
