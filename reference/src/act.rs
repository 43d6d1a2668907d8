//! SwiGLU and its clamped gpt-oss variant, forward and backward, element by element in f64.
//!
//! Not exact (they contain exp): each is a short chain of correctly rounded f64 operations around one
//! `exp` (error < 1 ulp in Rust's libm), so each result is within a few ulps (relative) of the real value
//! of the formula at its f64 inputs. Deterministic: the same inputs give the same bits on every machine
//! that uses the same libm.

use crate::config::Activation;

/// Logistic sigmoid, without overflow for large |x|.
#[inline]
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `silu(g) = g * sigmoid(g)`.
#[inline]
pub fn silu(g: f64) -> f64 {
    g * sigmoid(g)
}

/// d silu / dg = σ(g) · (1 + g·(1 − σ(g))).
#[inline]
pub fn silu_grad(g: f64) -> f64 {
    let s = sigmoid(g);
    s * (1.0 + g * (1.0 - s))
}

/// The SwiGLU output `a` for gate pre-activation `g` and up pre-activation `u`.
#[inline]
pub fn forward(act: Activation, g: f64, u: f64) -> f64 {
    match act {
        Activation::Swiglu => silu(g) * u,
        Activation::SwigluClamped { alpha, limit } => {
            let gc = if g > limit { limit } else { g }; // NaN stays NaN
            let uc = u.clamp(-limit, limit);
            gc * sigmoid(alpha * gc) * (uc + 1.0)
        }
    }
}

/// `(dg, du)` from the gradient `da` at the output. The clamps pass gradient where the input lies inside
/// the closed interval, as PyTorch's `clamp` does.
#[inline]
pub fn backward(act: Activation, g: f64, u: f64, da: f64) -> (f64, f64) {
    match act {
        Activation::Swiglu => (da * u * silu_grad(g), da * silu(g)),
        Activation::SwigluClamped { alpha, limit } => {
            let gc = if g > limit { limit } else { g }; // NaN stays NaN
            let uc = u.clamp(-limit, limit);
            let s = sigmoid(alpha * gc);
            let glu = gc * s;
            let dglu = s * (1.0 + alpha * gc * (1.0 - s));
            let dg = if g > limit { 0.0 } else { da * (uc + 1.0) * dglu };
            let du = if u.abs() > limit { 0.0 } else { da * glu };
            (dg, du)
        }
    }
}
