//! The SwiGLU bounds of `emulate::act_bound` hold for a kernel that evaluates SwiGLU in f32 as the fast
//! kernels do (`swiglu_f`, `swiglu_b` in `kernels/cuda/fast/fast_gemm.cu`), for every bf16 gate value up to 2^64.
//!
//! The kernel is modelled operation by operation: every f32 operation correctly rounded, `expf` anywhere within
//! 2 ulp of the correctly rounded value (CUDA's documented bound), the reciprocal (`rcp.approx.f32`) within
//! 1 ulp (the PTX ISA's), and `1 + x·y` either rounded twice or contracted into one fma (NVRTC contracts by
//! default). The clamped variant's argument α·gc is an f32 product with α rounded to f32, so its exp sees an
//! argument off by up to 2 u relative: at |α·g| = 80 that alone moves the value by ~78 u, far past the 16 u
//! the bound allowed for the evaluation before session 33; and where exp overflows (argument above ~88.7)
//! the kernel's value is 0. Both must be inside the bound. The GPU checks' bound on the stored dH
//! (`backward_stored_bf16`: the kernel's own dA error carried through, then bf16 storage) is checked the same way.

use moe_reference::act;
use moe_reference::config::Activation;
use moe_reference::emulate::act_bound;

/// x moved by k ulps away from zero (k < 0: towards it), saturating at 0 and +-inf; 0 and inf stay.
fn ulps(x: f32, k: i32) -> f32 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let mag = (x.abs().to_bits() as i64 + k as i64).clamp(0, f32::INFINITY.to_bits() as i64) as u32;
    f32::from_bits(mag).copysign(x)
}

/// Every value the modelled `expf(x)` may return: the correctly rounded one and those within 2 ulp.
fn expf_values(x: f32) -> Vec<f32> {
    let e = (x as f64).exp() as f32;
    (-2..=2).map(|k| ulps(e, k)).collect()
}

/// Every value the modelled `rcp.approx.f32(d)` may return (d >= 1).
fn rcp_values(d: f32) -> Vec<f32> {
    let r = (1.0 / d as f64) as f32;
    (-1..=1).map(|k| ulps(r, k)).collect()
}

/// `1 + x·y`, rounded twice or contracted.
fn one_plus(x: f32, y: f32) -> [f32; 2] {
    [1.0 + x * y, x.mul_add(y, 1.0)]
}

struct Case {
    act: Activation,
    alpha: f32,
    limit: f32,
}

impl Case {
    fn clamped(&self) -> bool {
        matches!(self.act, Activation::SwigluClamped { .. })
    }
    /// The sigmoid's argument's negation as the kernel forms it, and the gate it multiplies.
    fn arg(&self, g: f32) -> (f32, f32) {
        if self.clamped() {
            let gc = g.min(self.limit);
            (-(self.alpha * gc), gc)
        } else {
            (-g, g)
        }
    }
}

/// The largest error of the modelled kernel over the bound, as error / bound (<= 1 passes), with where.
#[derive(Default)]
struct Worst {
    ratio: f64,
    at: String,
}

impl Worst {
    fn see(&mut self, got: f32, exact: f64, bound: f64, at: impl FnOnce() -> String) {
        let err = (got as f64 - exact).abs();
        let ratio = if err.is_nan() || (bound <= 0.0 && err > 0.0) { f64::INFINITY } else if bound > 0.0 { err / bound } else { 0.0 };
        if ratio > self.ratio {
            self.ratio = ratio;
            self.at = at();
        }
    }
}

/// Every bf16 gate value up to 2^64 in magnitude (beyond, the products near f32's overflow are outside the
/// model: the kernel's value overflows where the exact one may not).
fn bf16_gates() -> impl Iterator<Item = f32> {
    (0u32..=0xffff).map(|b| f32::from_bits(b << 16)).filter(|g| g.abs() <= 2f32.powi(64))
}

// (the large u and dA check that f32's underflow near subnormal products stays inside the absolute floors
// when later factors scale it up)
// (−1 and −0.984375: the clamped variant's factor u + 1 vanishes or nearly, so dg's bound must not lean on |u| + 1)
const UPS: [f32; 9] = [1.0, -0.375, 3.25, -6.5, 7.0, 9.5, 1048576.0, -1.0, -0.984375];
const DAS: [f32; 3] = [1.0, -0.8125, 1.0e9];

fn cases() -> [Case; 2] {
    // gpt-oss's clamped SwiGLU: α = 1.702, limit 7 (the kernel gets both as f32)
    let (alpha, limit) = (1.702f64, 7.0f64);
    [
        Case { act: Activation::Swiglu, alpha: 1.0, limit: f32::INFINITY },
        Case { act: Activation::SwigluClamped { alpha, limit }, alpha: alpha as f32, limit: limit as f32 },
    ]
}

#[test]
fn forward_bound_covers_an_f32_kernel_for_every_bf16_gate() {
    for c in cases() {
        let mut worst = Worst::default();
        for g in bf16_gates() {
            let (x, gc) = c.arg(g);
            for e in expf_values(x) {
                let den = 1.0 + e;
                for r in rcp_values(den) {
                    let q = gc * r; // swiglu_quot
                    for u in UPS {
                        let got = if c.clamped() { q * (u.clamp(-c.limit, c.limit) + 1.0) } else { q * u };
                        let (_, bound) = act_bound::forward(c.act, g as f64, 0.0, u as f64, 0.0);
                        let exact = act::forward(c.act, g as f64, u as f64);
                        worst.see(got, exact, bound, || format!("g {g:e} u {u} exp {e:e} rcp {r:e}: {got:e} against {exact:e}, bound {bound:e}"));
                    }
                }
            }
        }
        eprintln!("{:?} forward: worst error/bound {:.3} at {}", c.act, worst.ratio, worst.at);
        assert!(worst.ratio <= 1.0, "{:?}: the forward's f32 evaluation exceeds its bound by {:.2}x at {}", c.act, worst.ratio, worst.at);
    }
}

/// Every `(dg, du)` the modelled kernel may return for `g`, `u` and the f32 `d` it multiplies by, each with
/// the exp and reciprocal it chose (for messages).
fn kernel_backwards(c: &Case, g: f32, u: f32, d: f32) -> Vec<(f32, f32, f32, f32)> {
    let (x, gc) = c.arg(g);
    let mut out = Vec::new();
    for e in expf_values(x) {
        for s in rcp_values(1.0 + e) {
            // dg's sigmoid-derivative factor, s·(1 + z·(1 − s)), either way of rounding its sum
            let z = if c.clamped() { c.alpha * gc } else { g };
            for t in one_plus(z, 1.0 - s) {
                let dglu = s * t;
                let (dg, du) = if c.clamped() {
                    let uc = u.clamp(-c.limit, c.limit);
                    (if g > c.limit { 0.0 } else { d * (uc + 1.0) * dglu }, if u.abs() > c.limit { 0.0 } else { d * (gc * s) })
                } else {
                    (d * u * dglu, d * (g * s))
                };
                out.push((dg, du, e, s));
            }
        }
    }
    out
}

#[test]
fn backward_bound_covers_an_f32_kernel_for_every_bf16_gate() {
    for c in cases() {
        let (mut worst_g, mut worst_u) = (Worst::default(), Worst::default());
        for g in bf16_gates() {
            for u in UPS {
                for d in DAS {
                    let ((_, bg), (_, bu)) = act_bound::backward(c.act, g as f64, 0.0, u as f64, 0.0, d as f64, 0.0);
                    let (eg, eu) = act::backward(c.act, g as f64, u as f64, d as f64);
                    for (dg, du, e, s) in kernel_backwards(&c, g, u, d) {
                        let at = || format!("g {g:e} u {u} d {d:e} exp {e:e} rcp {s:e}");
                        worst_g.see(dg, eg, bg, || format!("dg at {}: {dg:e} against {eg:e}, bound {bg:e}", at()));
                        worst_u.see(du, eu, bu, || format!("du at {}: {du:e} against {eu:e}, bound {bu:e}", at()));
                    }
                }
            }
        }
        for (w, what) in [(worst_g, "dg"), (worst_u, "du")] {
            eprintln!("{:?} backward {what}: worst error/bound {:.3} at {}", c.act, w.ratio, w.at);
            assert!(w.ratio <= 1.0, "{:?}: the backward's f32 {what} exceeds its bound by {:.2}x at {}", c.act, w.ratio, w.at);
        }
    }
}

/// dA as a GPU check sees it: the kernel multiplies by an f32 `d` off the exact dA by up to a few bf16 units
/// (the dot's error and dA_raw's bf16 rounding, times the routing weight), and stores dg, du in bf16.
const DA_ERRORS: [f64; 3] = [0.0, 1.0 / 256.0, -3.0 / 512.0];

fn bf16_round(x: f32) -> f64 {
    half::bf16::from_f32(x).to_f64()
}

/// The bound both GPU checks apply to the stored dH (`backward_stored_bf16`), with the kernel's dA error
/// carried as `bda`, holds for the modelled kernel for every bf16 gate; and passing `bda` = 0 instead fails
/// (so the test sees the dA error).
#[test]
fn stored_backward_bound_covers_a_kernel_with_its_own_da_error() {
    for c in cases() {
        let (mut worst, mut worst_without) = (Worst::default(), Worst::default());
        for g in bf16_gates() {
            for u in UPS {
                for da in DAS {
                    for rel in DA_ERRORS {
                        let d = (da as f64 * (1.0 + rel)) as f32;
                        let bda = (d as f64 - da as f64).abs();
                        let ((eg, bg), (eu, bu)) = act_bound::backward_stored_bf16(c.act, g as f64, u as f64, da as f64, bda);
                        let ((_, bg0), (_, bu0)) = act_bound::backward_stored_bf16(c.act, g as f64, u as f64, da as f64, 0.0);
                        for (dg, du, e, s) in kernel_backwards(&c, g, u, d) {
                            let at = || format!("g {g:e} u {u} d {d:e} exp {e:e} rcp {s:e}");
                            let (sg, su) = (bf16_round(dg), bf16_round(du));
                            worst.see(sg as f32, eg, bg, || format!("dg at {}: {sg:e} against {eg:e}, bound {bg:e}", at()));
                            worst.see(su as f32, eu, bu, || format!("du at {}: {su:e} against {eu:e}, bound {bu:e}", at()));
                            worst_without.see(sg as f32, eg, bg0, String::new);
                            worst_without.see(su as f32, eu, bu0, String::new);
                        }
                    }
                }
            }
        }
        eprintln!("{:?} stored backward: worst error/bound {:.3} at {} (without dA's error: {:.1})", c.act, worst.ratio, worst.at, worst_without.ratio);
        assert!(worst.ratio <= 1.0, "{:?}: the stored dH exceeds its bound by {:.2}x at {}", c.act, worst.ratio, worst.at);
        assert!(worst_without.ratio > 1.0, "{:?}: dA's error is not visible to the test", c.act);
    }
}

#[test]
fn the_clamped_gate_gradient_bound_follows_u_plus_one() {
    // at u = −1 the clamped dg is 0 for any dA, so its bound must not grow with dA's error: before session 34
    // the factor's magnitude was |u| + 1 = 2, and a dA known to 2^-8 gave dg a bound of ~2^-8·|dA|·σ'
    let c = &cases()[1];
    for g in [-3.0, 0.5, 2.0] {
        let ((dg, bg), _) = act_bound::backward_stored_bf16(c.act, g, -1.0, 1.0, 1.0 / 256.0);
        assert_eq!(dg, 0.0);
        assert!(bg < 1e-30, "g {g}: dg's bound {bg:e} at u = -1");
    }
}

#[test]
fn the_model_reproduces_the_clamped_argument_error() {
    // the test above is only as good as its model: at g = -48.5 (α·g ≈ -82.5) the f32 argument's rounding
    // alone, with an exact exp and reciprocal, must move the value by more than 16 u (the old allowance)
    let c = &cases()[1];
    let g = -48.5f32;
    let (x, gc) = c.arg(g);
    let got = gc * (1.0 / (1.0 + (x as f64).exp() as f32)) * 2.0;
    let exact = act::forward(c.act, g as f64, 1.0);
    let rel = ((got as f64 - exact) / exact).abs() * (1u64 << 24) as f64;
    assert!(rel > 16.0, "relative error {rel} u");
}
