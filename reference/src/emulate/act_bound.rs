//! SwiGLU forward and backward as a kernel evaluates them in f32, with sound bounds.
//!
//! Inputs arrive as (emulated value, bound); the kernel's own inputs may differ from the exact ones by the
//! bound, so the output's bound is the function's variation over that interval (Lipschitz constants of
//! SiLU-like functions: `|d/dz (z·σ(z))| ≤ 1.0999`, `|d²/dz² (z·σ(z))| ≤ 0.5`) plus the f32 evaluation
//! and the storage rounding. The evaluation is modelled as a kernel does it: a few correctly rounded
//! operations around one `expf` within 2 ulp (CUDA's; not the fast `__expf`, whose error grows with the
//! argument) and a reciprocal or division within 1 ulp. It is allowed 16 units of 2^-24 forward and 32
//! backward, relative, plus three terms that no relative allowance covers: the clamped variant's argument
//! α·g rounded in f32 (`arg_error`), the sigmoid vanishing where exp overflows (`VANISH`), and the
//! backward's sigmoid factor near its zero and where s → 1. `reference/tests/act_f32_eval.rs` checks the
//! whole for every bf16 gate. Products use `|Π x̃ − Π x| ≤ Π(m + e) − Π m` for magnitudes `m ≥ |x|` and errors
//! `e ≥ |x̃ − x|`.

use crate::act;
use crate::config::Activation;

const U32: f64 = 1.0 / (1u64 << 24) as f64;
/// Lipschitz constant of `z ↦ z·σ(z)`.
const L1: f64 = 1.0999;
/// Lipschitz constant of its derivative.
const L2: f64 = 0.5;
const EVAL_FWD: f64 = 16.0 * U32;
const EVAL_BWD: f64 = 32.0 * U32;

/// `(m, e)` pairs: bound on |Π x̃ − Π x|.
fn product_bound(f: &[(f64, f64)]) -> f64 {
    let with: f64 = f.iter().map(|(m, e)| m + e).product();
    let without: f64 = f.iter().map(|(m, _)| m).product();
    (with - without).max(0.0) * (1.0 + 8.0 * f64::EPSILON)
}

fn prod_mag(f: &[(f64, f64)]) -> f64 {
    f.iter().map(|(m, e)| m + e).product()
}

/// What the f32 evaluation adds to the gate's uncertainty: the clamped variant's kernel forms the sigmoid's
/// argument z = α·gc in f32, with α itself rounded to f32, so its exp sees z off by up to 2 u relative. That
/// is the same as gc off by 2 u·|gc| at the exact α, which the Lipschitz terms (L1·bg, L2·α·bg) then carry
/// to the value (|z·σ'(z)| ≤ 0.28 < L1). Without it the 16 u allowance failed from |α·g| ≈ 10 on: up to
/// 78 u at |α·g| = 80 with a correctly rounded exp (session 33, `reference/tests/act_f32_eval.rs`). The
/// plain variant's argument, −g, is exact.
fn arg_error(act_: Activation, g: f64, bg: f64) -> f64 {
    match act_ {
        Activation::Swiglu => 0.0,
        Activation::SwigluClamped { limit, .. } => 2.0 * U32 * (g.min(limit).abs() + bg),
    }
}

/// The range of the sigmoid's argument z over the gate's interval [g − bg, g + bg].
fn arg_range(act_: Activation, g: f64, bg: f64) -> (f64, f64) {
    let (za, zb) = match act_ {
        Activation::Swiglu => (g - bg, g + bg),
        Activation::SwigluClamped { alpha, limit } => (alpha * (g - bg).min(limit), alpha * (g + bg).min(limit)),
    };
    (za.min(zb), za.max(zb))
}

/// Whether, for the lowest argument `z_lo` of [`arg_range`], f32's exp(−z) may overflow or the reciprocal
/// of 1 + exp(−z) be subnormal: from −z > 80 on the kernel's sigmoid may be 0 or a few subnormal units, and
/// so its value, while the exact value may still be a normal f32 (|g|·e^−80 ≈ 2^-115 |g|). There both lie
/// below [`VANISH`] times the other factors: that much is allowed on top (the Lipschitz magnitudes would
/// allow far more than the values there are).
fn may_vanish(z_lo: f64) -> bool {
    -z_lo > 80.0
}

/// Twice the largest |z·σ(z)| and |σ(z)·(1 + z·(1 − σ(z)))| for z ≤ −80 (at most 81·e^−80): the kernel's and
/// the exact value of the sigmoid factor where it may vanish, both.
const VANISH: f64 = 2.0 * 81.0 * 1.8048513878454153e-35;

/// The sigmoid factor's magnitude where its value may vanish, for the clamped variant's glu = z·σ(z)/α.
fn vanish_glu(act_: Activation) -> f64 {
    match act_ {
        Activation::Swiglu => VANISH,
        Activation::SwigluClamped { alpha, .. } => VANISH / alpha.abs().min(1.0),
    }
}

/// The exact `a` at exact inputs `g`, `u`, and the bound on a kernel's `a` evaluated in f32 from them and
/// stored in bf16 (its rounding, 2^-8 relative, plus half bf16's smallest subnormal): what a GPU check that
/// recomputes A from the kernel's own stored H allows.
pub fn forward_stored_bf16(act_: Activation, g: f64, u: f64) -> (f64, f64) {
    let exact = act::forward(act_, g, u);
    let (_, eval) = forward(act_, g, 0.0, u, 0.0);
    (exact, stored_bf16(exact, eval))
}

/// The exact `(dg, du)` at exact inputs `g`, `u`, `da`, and the bounds on a kernel's, evaluated in f32 from
/// `g`, `u` and a `da` within `bda` of the exact one, and stored in bf16: what a GPU check that recomputes the
/// SwiGLU backward from the kernel's own stored H allows (`bda` carries the kernel's own dA error, 0 where
/// the check reads the kernel's stored dA).
pub fn backward_stored_bf16(act_: Activation, g: f64, u: f64, da: f64, bda: f64) -> ((f64, f64), (f64, f64)) {
    let (eg, eu) = act::backward(act_, g, u, da);
    let ((_, bg), (_, bu)) = backward(act_, g, 0.0, u, 0.0, da, bda);
    ((eg, stored_bf16(eg, bg)), (eu, stored_bf16(eu, bu)))
}

/// A value's bound `b` (before storage) grown by its bf16 rounding: 2^-8 of its magnitude (at most
/// |exact| + b), plus half bf16's smallest subnormal.
fn stored_bf16(exact: f64, b: f64) -> f64 {
    const UBF: f64 = 1.0 / 256.0;
    b + UBF * (exact.abs() + b) + 2f64.powi(-134)
}

/// Emulated `a` (before storage) and its bound (before storage), from `g`, `u` with bounds.
pub fn forward(act_: Activation, g: f64, bg: f64, u: f64, bu: f64) -> (f64, f64) {
    forward_n(act_, g, bg, u, bu, 1.0)
}

/// [`forward`] for deviations from the emulator (`bg`, `bu` are deviation bounds): both the kernel and the
/// emulator evaluate in f32, so the evaluation term counts twice.
pub fn forward_dev(act_: Activation, g: f64, dg: f64, u: f64, du: f64) -> f64 {
    forward_n(act_, g, dg, u, du, 2.0).1
}

fn forward_n(act_: Activation, g: f64, bg: f64, u: f64, bu: f64, evals: f64) -> (f64, f64) {
    let v = act::forward(act_, g, u) as f32 as f64;
    let mu = u.abs() + bu;
    let vanish = may_vanish(arg_range(act_, g, bg).0);
    let bg = bg + arg_error(act_, g, bg);
    let factors = match act_ {
        Activation::Swiglu => [(act::silu(g).abs() + L1 * bg, L1 * bg), (mu, bu)],
        Activation::SwigluClamped { alpha, limit } => {
            let gc = g.min(limit);
            let glu = (gc * act::sigmoid(alpha * gc)).abs();
            [(glu + L1 * bg, L1 * bg), up_factor(u, bu, limit)]
        }
    };
    let vanished = if vanish { vanish_glu(act_) * prod_mag(&factors[1..]) } else { 0.0 };
    let b = product_bound(&factors) + evals * EVAL_FWD * prod_mag(&factors) + evals * 4.0 * 2f64.powi(-149) + vanished;
    (v, b)
}

/// The clamped variant's up factor uc + 1 (uc = u clamped to ±limit) as `(magnitude, error)` for a kernel's u
/// within `bu` of `u`: the clamp is 1-Lipschitz, so the kernel's factor is within `bu` of |uc + 1|, and it is
/// at most limit + 1. (Session 34: the magnitude was min(|u| + bu, limit) + 1, up to 1000x the factor for u
/// near −1, which loosened dg's bound there by as much.)
fn up_factor(u: f64, bu: f64, limit: f64) -> (f64, f64) {
    (((u.clamp(-limit, limit) + 1.0).abs() + bu).min(limit + 1.0), bu)
}

/// Whether the kernel's and the exact input may lie on different sides of a clamp at `limit` (the kernel
/// is within `2b` of the emulated value).
fn straddles(x: f64, b: f64, limit: f64) -> bool {
    (x - 2.0 * b <= limit) != (x + 2.0 * b <= limit)
}

/// Emulated `(dg, du)` (before storage) and their bounds.
pub fn backward(act_: Activation, g: f64, bg: f64, u: f64, bu: f64, da: f64, bda: f64) -> ((f64, f64), (f64, f64)) {
    backward_n(act_, g, bg, u, bu, da, bda, 1.0)
}

/// [`backward`] for deviations from the emulator: the deviation bounds of `(dg, du)`.
pub fn backward_dev(act_: Activation, g: f64, dg: f64, u: f64, du: f64, da: f64, dda: f64) -> (f64, f64) {
    let ((_, a), (_, b)) = backward_n(act_, g, dg, u, du, da, dda, 2.0);
    (a, b)
}

#[allow(clippy::too_many_arguments)]
fn backward_n(act_: Activation, g: f64, bg: f64, u: f64, bu: f64, da: f64, bda: f64, evals: f64) -> ((f64, f64), (f64, f64)) {
    let (dg, du) = act::backward(act_, g, u, da);
    let (dg, du) = (dg as f32 as f64, du as f32 as f64);
    let d = (da.abs() + bda, bda);
    let mu = u.abs() + bu;
    // The sigmoid factor s·(1 + z·(1 − s)) as f32 forms it: s errs by ≤ 7 u relative (exp's 2 ulp, the
    // sum's and the reciprocal's 1 ulp), which |∂/∂s| = |1 + z − 2zs| ≤ 1 + |z| amplifies; its five roundings
    // (1 − s, α·gc, the product, the sum, the last product) add ≤ (2 + 5|z|)·u·s: so ≤ (9 + 12|z|)·u·s,
    // absolute. Relative to the factor it is unbounded where the factor crosses zero (z ≈ −1.28) and grows
    // with |z| where s → 1, so the 32 u allowance alone did not cover it (session 33,
    // `reference/tests/act_f32_eval.rs`).
    let (z_lo, z_hi) = arg_range(act_, g, bg);
    let vanish = may_vanish(z_lo);
    let z_max = z_lo.abs().max(z_hi.abs());
    let s_eval = (9.0 + 12.0 * z_max) * U32 * act::sigmoid(z_hi) * evals;
    let straddle_bg = bg;
    let bg = bg + arg_error(act_, g, bg);
    let (fg, fu): (Vec<(f64, f64)>, Vec<(f64, f64)>) = match act_ {
        Activation::Swiglu => (
            vec![d, (mu, bu), (act::silu_grad(g).abs() + L2 * bg + s_eval, L2 * bg + s_eval)],
            vec![d, (act::silu(g).abs() + L1 * bg, L1 * bg)],
        ),
        Activation::SwigluClamped { alpha, limit } => {
            let gc = g.min(limit);
            let s = act::sigmoid(alpha * gc);
            let glu = (gc * s).abs();
            let dglu = (s * (1.0 + alpha * gc * (1.0 - s))).abs();
            // The clamps' derivatives: 1 inside, 0 outside; uncertain (0 or 1) near the limit.
            let ind = |inside: bool, unsure: bool| if unsure { (1.0, 1.0) } else { (if inside { 1.0 } else { 0.0 }, 0.0) };
            let ig = ind(g <= limit, straddles(g, straddle_bg, limit));
            let iu = ind(u.abs() <= limit, straddles(u.abs(), bu, limit));
            (
                vec![ig, d, up_factor(u, bu, limit), (dglu + L2 * alpha * bg + s_eval, L2 * alpha * bg + s_eval)],
                vec![iu, d, (glu + L1 * bg, L1 * bg)],
            )
        }
    };
    // (the sigmoid factor is the last of each list; where it may vanish, the others times its small magnitude)
    let bound = |f: &[(f64, f64)], small: f64| {
        let vanished = if vanish { small * prod_mag(&f[..f.len() - 1]) } else { 0.0 };
        product_bound(f) + evals * (EVAL_BWD * prod_mag(f) + 8.0 * 2f64.powi(-149)) + vanished
    };
    ((dg, bound(&fg, VANISH)), (du, bound(&fu, vanish_glu(act_))))
}
