//! `emulate::route_bound`'s allowances hold for kernels that route in f32 from the same logits, forward (the
//! weights) and backward (the logits' gradient, as autograd forms it): softmax or
//! sigmoid scores, the top k renormalised or not, a scaling, sums sequential or as a tree, and (renormalised
//! softmax) either the full softmax divided by the chosen ones' sum or a softmax over the chosen logits alone.
//! `expf` is modelled as the correctly rounded value moved by a random 0-2 ulp, every other operation
//! correctly rounded. Logits are drawn at spreads up to 30, where the rounding of l − max alone moves a
//! weight by more than the 32 u the emulator allowed before session 33.

use moe_reference::config::{Routing, Score};
use moe_reference::emulate::route_bound;
use moe_reference::route;
use ndarray::{Array2, Zip};

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn normal(&mut self) -> f64 {
        let u1 = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let u2 = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

fn expf(x: f32, g: &mut XorShift) -> f32 {
    let e = (x as f64).exp() as f32;
    if e == 0.0 || !e.is_finite() {
        return e;
    }
    let k = (g.next() % 5) as i32 - 2;
    f32::from_bits((e.to_bits() as i32 + k).max(0) as u32) // (a subnormal moved below 0 is 0)
}

fn sum(v: &[f32], tree: bool) -> f32 {
    if !tree {
        return v.iter().fold(0.0f32, |a, &b| a + b);
    }
    let mut a = v.to_vec();
    while a.len() > 1 {
        a = a.chunks(2).map(|c| if c.len() == 2 { c[0] + c[1] } else { c[0] }).collect();
    }
    a.first().copied().unwrap_or(0.0)
}

/// The kernel's weights of the chosen experts `ids` (the oracle's choice) for one token.
fn kernel(cfg: &Routing, l: &[f32], ids: &[usize], tree: bool, topk_softmax: bool, g: &mut XorShift) -> Vec<f32> {
    let chosen: Vec<f32> = match cfg.score {
        Score::Sigmoid => ids.iter().map(|&e| 1.0 / (1.0 + expf(-l[e], g))).collect(),
        Score::Softmax => {
            let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if topk_softmax && cfg.normalize_topk {
                let e: Vec<f32> = ids.iter().map(|&i| expf(l[i] - max, g)).collect();
                let s = sum(&e, tree);
                return e.iter().map(|&v| v / s * cfg.scaling as f32).collect();
            }
            let e: Vec<f32> = l.iter().map(|&v| expf(v - max, g)).collect();
            let s = sum(&e, tree);
            ids.iter().map(|&i| e[i] / s).collect()
        }
    };
    let d = if cfg.normalize_topk { sum(&chosen, tree) } else { 1.0 };
    chosen.iter().map(|&v| if cfg.normalize_topk { v / d } else { v } * cfg.scaling as f32).collect()
}

/// Every routing to try, with its expert count and k: softmax and sigmoid, renormalised (scaling 1) or not
/// (scaling 2.5), at each of `sizes`, each at logit spreads 1, 3, 10 and 30.
fn routings(sizes: &[(usize, usize)]) -> Vec<(Routing, usize, usize, f64)> {
    let mut out = Vec::new();
    for score in [Score::Softmax, Score::Sigmoid] {
        for normalize_topk in [true, false] {
            for &(e_n, k) in sizes {
                let cfg = Routing { score, normalize_topk, scaling: if normalize_topk { 1.0 } else { 2.5 }, groups: None };
                for spread in [1.0, 3.0, 10.0, 30.0] {
                    out.push((cfg.clone(), e_n, k, spread));
                }
            }
        }
    }
    out
}

#[test]
fn f32_routing_kernels_stay_within_the_weight_allowance() {
    let mut g = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut worst = (0.0f64, String::new());
    let mut old_exceeded = 0usize;
    for (cfg, e_n, k, spread) in routings(&[(8, 2), (64, 8), (128, 8), (256, 8)]) {
        let (score, normalize_topk) = (cfg.score, cfg.normalize_topk);
        let t_n = 64;
        // f32 logits, so that the kernel and the oracle start from the same values
        let logits = Array2::from_shape_fn((t_n, e_n), |_| (g.normal() * spread) as f32 as f64);
        let routed = route::forward(&cfg, k, logits.view(), None);
        let allow = route_bound::weight_allowance(&cfg, logits.view(), routed.topk_ids.view());
        for t in 0..t_n {
            let l: Vec<f32> = logits.row(t).iter().map(|&v| v as f32).collect();
            let ids: Vec<usize> = routed.topk_ids.row(t).iter().map(|&i| i as usize).collect();
            for tree in [false, true] {
                for topk_softmax in [false, true] {
                    let w = kernel(&cfg, &l, &ids, tree, topk_softmax, &mut g);
                    for j in 0..k {
                        let exact = routed.topk_weights[[t, j]];
                        let err = (w[j] as f64 - exact).abs();
                        // (a weight of 0 exactly, from exp underflowing in f64, must come out 0)
                        let ratio = if err == 0.0 { 0.0 } else { err / (allow[[t, j]] * exact.abs()) };
                        if err > 32.0 / (1u64 << 24) as f64 * exact.abs() {
                            old_exceeded += 1;
                        }
                        assert!(!ratio.is_nan(), "NaN weight at {score:?} E {e_n} spread {spread}: {} against {exact:e}", w[j]);
                        if ratio > worst.0 {
                            worst = (ratio, format!("{score:?} renorm {normalize_topk} E {e_n} k {k} spread {spread} token {t} slot {j} tree {tree} topk-softmax {topk_softmax}: {} against {exact:e}, allowance {:.1} u", w[j], allow[[t, j]] * (1u64 << 24) as f64));
                        }
                    }
                }
            }
        }
    }
    eprintln!("worst error/allowance {:.3} at {}; {old_exceeded} weights beyond the old 32 u", worst.0, worst.1);
    assert!(worst.0 <= 1.0, "a kernel's weight exceeds its allowance by {:.2}x at {}", worst.0, worst.1);
    // the test is only worth something if the old allowance fails it
    assert!(old_exceeded > 0, "no weight beyond the old 32 u: the model or the spreads are too gentle");
}

/// The kernel's scores [E] for one token: a full f32 softmax (sequential sum) or sigmoids.
fn scores(cfg: &Routing, l: &[f32], g: &mut XorShift) -> Vec<f32> {
    match cfg.score {
        Score::Sigmoid => l.iter().map(|&v| 1.0 / (1.0 + expf(-v, g))).collect(),
        Score::Softmax => {
            let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = l.iter().map(|&v| expf(v - max, g)).collect();
            let s = sum(&e, false);
            e.iter().map(|&v| v / s).collect()
        }
    }
}

/// The kernel's gradient at the logits, as autograd forms it in f32: the renormalisation's
/// (dq_i − Σ q·dq)/S, softmax's p_e·(ds_e − Σ p·ds), the sigmoid's s·(1 − s) or σ(l)·σ(−l).
fn kernel_backward(cfg: &Routing, l: &[f32], ids: &[usize], gw: &[f32], two_factor: bool, g: &mut XorShift) -> Vec<f32> {
    let p = scores(cfg, l, g);
    let dq: Vec<f32> = gw.iter().map(|&v| v * cfg.scaling as f32).collect();
    let dv: Vec<f32> = if cfg.normalize_topk {
        let v: Vec<f32> = ids.iter().map(|&i| p[i]).collect();
        let s = sum(&v, false);
        let q: Vec<f32> = v.iter().map(|&x| x / s).collect();
        let inner = q.iter().zip(&dq).fold(0.0f32, |a, (&x, &d)| a + x * d);
        dq.iter().map(|&d| (d - inner) / s).collect()
    } else {
        dq
    };
    let mut ds = vec![0.0f32; l.len()];
    ids.iter().zip(&dv).for_each(|(&i, &d)| ds[i] = d);
    match cfg.score {
        Score::Sigmoid => (0..l.len())
            .map(|e| if two_factor { ds[e] * (p[e] * (1.0 / (1.0 + expf(l[e], g)))) } else { ds[e] * (p[e] * (1.0 - p[e])) })
            .collect(),
        Score::Softmax => {
            let inner = ids.iter().fold(0.0f32, |a, &f| a + p[f] * ds[f]);
            (0..l.len()).map(|e| p[e] * (ds[e] - inner)).collect()
        }
    }
}

#[test]
fn f32_routing_backward_stays_within_the_logit_gradient_allowance() {
    let mut g = XorShift(0xD1B5_4A32_D192_ED03);
    let mut worst = (0.0f64, String::new());
    let mut old_exceeded = 0usize;
    for (cfg, e_n, k, spread) in routings(&[(8, 2), (64, 8), (256, 8)]) {
        let (score, normalize_topk) = (cfg.score, cfg.normalize_topk);
        let t_n = 32;
        let logits = Array2::from_shape_fn((t_n, e_n), |_| (g.normal() * spread) as f32 as f64);
        let gw = Array2::from_shape_fn((t_n, k), |_| g.normal() as f32 as f64);
        let routed = route::forward(&cfg, k, logits.view(), None);
        let exact = route::backward(&cfg, &routed, logits.view(), gw.view());
        let mag = route_bound::backward_magnitude(&cfg, &routed, logits.view(), gw.mapv(f64::abs).view());
        let allow = route_bound::logit_grad_allowance(&cfg, logits.view(), routed.topk_ids.view(), &mag, 1.0);
        let old = Zip::from(&mag).map_collect(|&m| m * 64.0 / (1u64 << 24) as f64 + 2f64.powi(-140));
        for t in 0..t_n {
            let l: Vec<f32> = logits.row(t).iter().map(|&v| v as f32).collect();
            let ids: Vec<usize> = routed.topk_ids.row(t).iter().map(|&i| i as usize).collect();
            let gwt: Vec<f32> = gw.row(t).iter().map(|&v| v as f32).collect();
            for two_factor in [false, true] {
                let dl = kernel_backward(&cfg, &l, &ids, &gwt, two_factor, &mut g);
                for e in 0..e_n {
                    let err = (dl[e] as f64 - exact[[t, e]]).abs();
                    assert!(!err.is_nan(), "NaN gradient at {score:?} E {e_n} spread {spread}");
                    if err > old[[t, e]] {
                        old_exceeded += 1;
                    }
                    let ratio = if err == 0.0 { 0.0 } else { err / allow[[t, e]] };
                    if ratio > worst.0 {
                        worst = (ratio, format!("{score:?} renorm {normalize_topk} E {e_n} k {k} spread {spread} token {t} expert {e} two-factor {two_factor}: {} against {:e}, allowance {:e}", dl[e], exact[[t, e]], allow[[t, e]]));
                    }
                }
            }
        }
    }
    eprintln!("worst error/allowance {:.3} at {}; {old_exceeded} gradients beyond the old 64 u of the magnitude", worst.0, worst.1);
    assert!(worst.0 <= 1.0, "a kernel's logit gradient exceeds its allowance by {:.2}x at {}", worst.0, worst.1);
    assert!(old_exceeded > 0, "no gradient beyond the old allowance: the model or the spreads are too gentle");
}
