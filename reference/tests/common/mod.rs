//! Shared helpers for the layer tests: a deterministic generator, case builders, an independent naive
//! forward of the layer (generic over f64 and a forward-mode dual number, written from
//! `shared/docs/golden-format.md` alone), and bitwise comparisons of everything the oracle returns.
#![allow(dead_code)]

use std::ops::{Add, Div, Mul, Neg, Sub};

use moe_reference::config::{Groups, Score};
use moe_reference::exact;
use moe_reference::layer::{self, Backward, Forward, LayerInputs, Options};
use moe_reference::{Activation, MoeConfig, Routing};
use ndarray::{Array, Array1, Array2, Array3, Dimension};

// ---------------------------------------------------------------------------------------------------
// Random data
// ---------------------------------------------------------------------------------------------------

/// xorshift* seeded through splitmix64, so any u64 seed (0 included) gives a good stream.
pub struct Gen(u64);
impl Gen {
    pub fn new(seed: u64) -> Gen {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Gen(z | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(1e-300), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    pub fn perm(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i + 1);
            p.swap(i, j);
        }
        p
    }
}

pub fn bf16_round(x: f64) -> f64 {
    let b = (x as f32).to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(r) as f64
}

/// How the tensor values are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Full 53-bit normals (several Ozaki slices).
    F64,
    /// bf16-valued (one slice).
    Bf16,
    /// Normals times 2^[-20, 20]: wide exponent range, Ozaki tails. Only for bitwise tests, since the
    /// naive f64 forward loses accuracy on such data.
    Wide,
}

pub fn draw(g: &mut Gen, kind: Kind, scale: f64) -> f64 {
    match kind {
        Kind::F64 => g.normal() * scale,
        Kind::Bf16 => bf16_round(g.normal() * scale),
        Kind::Wide => g.normal() * scale * 2f64.powi(g.below(41) as i32 - 20),
    }
}

/// Routing modes a generated case can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `topk_ids`/`topk_weights` given, with some `-1` slots.
    Given,
    Softmax {
        normalize: bool,
    },
    Sigmoid {
        normalize: bool,
        bias: bool,
        groups: bool,
    },
}

pub fn mode_of(sel: u8) -> Mode {
    match sel % 7 {
        0 | 1 => Mode::Given,
        2 => Mode::Softmax { normalize: false },
        3 => Mode::Softmax { normalize: true },
        4 => Mode::Sigmoid {
            normalize: true,
            bias: false,
            groups: false,
        },
        5 => Mode::Sigmoid {
            normalize: true,
            bias: true,
            groups: true,
        },
        _ => Mode::Sigmoid {
            normalize: false,
            bias: true,
            groups: false,
        },
    }
}

/// A generated case, from a flat tuple of shape parameters (clamped here so they shrink well).
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub t: usize,
    pub h: usize,
    pub i: usize,
    pub e: usize,
    pub k: usize,
    pub mode: Mode,
    pub clamped: bool,
    pub kind: Kind,
    /// Probability (in percent) of a `-1` slot when routing is given.
    pub minus_one_pct: u32,
    pub seed: u64,
}

impl Spec {
    /// `(t, h, i, e, k, mode, act, seed)`; e >= 1, k clamped into 1..=e.
    pub fn from_tuple(
        (t, h, i, e, k, mode, act, seed): (usize, usize, usize, usize, usize, u8, u8, u64),
        kind: Kind,
    ) -> Spec {
        let e = e.max(1);
        Spec {
            t,
            h: h.max(1),
            i: i.max(1),
            e,
            k: k.clamp(1, e),
            mode: mode_of(mode),
            clamped: act % 2 == 1,
            kind,
            minus_one_pct: 15,
            seed,
        }
    }
}

fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|d| n % d == 0).collect()
}

/// Build the layer inputs for a spec (always with `dy`).
pub fn build(spec: &Spec) -> LayerInputs {
    let mut g = Gen::new(spec.seed);
    let (t, h, i, e, k) = (spec.t, spec.h, spec.i, spec.e, spec.k);
    let kind = spec.kind;
    let activation = if spec.clamped {
        // A limit inside the bulk of |g|, |u| (~N(0,1)) so clamping happens on both sides.
        Activation::SwigluClamped {
            alpha: 1.702,
            limit: 0.3 + 1.5 * g.unit(),
        }
    } else {
        Activation::Swiglu
    };
    let scaling = [1.0, 2.5, 0.75, 16.0][g.below(4)];
    let routing = match spec.mode {
        Mode::Given => None,
        Mode::Softmax { normalize } => Some(Routing {
            score: Score::Softmax,
            normalize_topk: normalize,
            scaling,
            groups: None,
        }),
        Mode::Sigmoid {
            normalize, groups, ..
        } => {
            let groups = if groups {
                // A valid (n_group, topk_group), if any besides the trivial one.
                let mut opts = Vec::new();
                for ng in divisors(e) {
                    for tg in 1..=ng {
                        if tg * (e / ng) >= k && ng > 1 {
                            opts.push(Groups {
                                n_group: ng,
                                topk_group: tg,
                            });
                        }
                    }
                }
                if opts.is_empty() {
                    None
                } else {
                    Some(opts[g.below(opts.len())])
                }
            } else {
                None
            };
            Some(Routing {
                score: Score::Sigmoid,
                normalize_topk: normalize,
                scaling,
                groups,
            })
        }
    };
    let divs = divisors(e);
    let ep_ranks = divs[g.below(divs.len())];
    let cfg = MoeConfig {
        tokens: t,
        hidden: h,
        intermediate: i,
        experts: e,
        top_k: k,
        activation,
        routing,
        recipe: "fp32".into(),
        ep_ranks,
    };
    cfg.validate().expect("generated config is valid");
    let sh = 1.0 / (h as f64).sqrt();
    let si = 1.0 / (i as f64).sqrt();
    // x and the router keep moderate magnitudes for every kind (Wide goes into the weights, dy and the
    // combine weights), so logits stay in a range where scores neither saturate nor overflow.
    let xkind = if kind == Kind::Wide { Kind::F64 } else { kind };
    let x = Array2::from_shape_fn((t, h), |_| draw(&mut g, xkind, 1.0));
    let w13 = Array3::from_shape_fn((e, 2 * i, h), |_| draw(&mut g, kind, sh));
    let w2 = Array3::from_shape_fn((e, h, i), |_| draw(&mut g, kind, si));
    let dy = Array2::from_shape_fn((t, h), |_| draw(&mut g, kind, 1.0));
    let (mut topk_ids, mut topk_weights, mut router_weight, mut router_bias) =
        (None, None, None, None);
    match spec.mode {
        Mode::Given => {
            let mut ids = Array2::from_elem((t, k), -1i32);
            for tok in 0..t {
                let p = g.perm(e);
                for j in 0..k {
                    if g.below(100) as u32 >= spec.minus_one_pct {
                        ids[[tok, j]] = p[j] as i32;
                    }
                }
            }
            topk_ids = Some(ids);
            topk_weights = Some(Array2::from_shape_fn((t, k), |_| draw(&mut g, kind, 1.0)));
        }
        Mode::Softmax { .. } | Mode::Sigmoid { .. } => {
            router_weight = Some(Array2::from_shape_fn((e, h), |_| {
                draw(&mut g, xkind, 2.0 * sh)
            }));
            if let Mode::Sigmoid { bias: true, .. } = spec.mode {
                router_bias = Some(Array1::from_shape_fn(e, |_| draw(&mut g, xkind, 0.2)));
            }
        }
    }
    LayerInputs {
        cfg,
        x,
        w13,
        w2,
        topk_ids,
        topk_weights,
        router_weight,
        router_bias,
        dy: Some(dy),
    }
}

// ---------------------------------------------------------------------------------------------------
// Running the oracle
// ---------------------------------------------------------------------------------------------------

pub fn run(inp: &LayerInputs, opt: Options) -> (Forward, Backward) {
    let f = layer::forward(inp, opt);
    let b = layer::backward(inp, &f, inp.dy.as_ref().expect("case has dy").view(), opt);
    (f, b)
}

pub fn run_default(inp: &LayerInputs) -> (Forward, Backward) {
    run(inp, Options::default())
}

// ---------------------------------------------------------------------------------------------------
// Bitwise comparisons
// ---------------------------------------------------------------------------------------------------

#[track_caller]
pub fn same_bits<D: Dimension>(name: &str, a: &Array<f64, D>, b: &Array<f64, D>) {
    assert_eq!(a.shape(), b.shape(), "{name}: shapes differ");
    for ((idx, x), y) in a.indexed_iter().zip(b.iter()) {
        assert!(
            x.to_bits() == y.to_bits(),
            "{name}{idx:?}: {x:e} vs {y:e} (bits differ)"
        );
    }
}

#[track_caller]
pub fn same_opt<D: Dimension>(name: &str, a: &Option<Array<f64, D>>, b: &Option<Array<f64, D>>) {
    match (a, b) {
        (None, None) => {}
        (Some(a), Some(b)) => same_bits(name, a, b),
        _ => panic!("{name}: present on one side only"),
    }
}

/// Every output and intermediate of forward, bitwise (the rank layout too, when `with_ranks`).
#[track_caller]
pub fn same_forward(a: &Forward, b: &Forward, with_ranks: bool) {
    same_bits("y", &a.y, &b.y);
    assert_eq!(a.topk_ids, b.topk_ids, "topk_ids");
    same_bits("topk_weights", &a.topk_weights, &b.topk_weights);
    match (&a.routed, &b.routed) {
        (None, None) => {}
        (Some(x), Some(y)) => {
            same_bits("routed.scores", &x.scores, &y.scores);
            assert_eq!(x.topk_ids, y.topk_ids, "routed.topk_ids");
            same_bits("routed.topk_weights", &x.topk_weights, &y.topk_weights);
        }
        _ => panic!("routed present on one side only"),
    }
    same_opt("logits", &a.logits, &b.logits);
    assert_eq!(a.rows, b.rows, "row map");
    if with_ranks {
        assert_eq!(a.ranks, b.ranks, "rank layout");
    }
    same_bits("fwd.h", &a.h, &b.h);
    same_bits("fwd.a", &a.a, &b.a);
    same_bits("fwd.o", &a.o, &b.o);
}

/// Every gradient and backward intermediate, bitwise.
#[track_caller]
pub fn same_backward(a: &Backward, b: &Backward) {
    same_bits("grad.x", &a.grad_x, &b.grad_x);
    same_bits("grad.w13", &a.grad_w13, &b.grad_w13);
    same_bits("grad.w2", &a.grad_w2, &b.grad_w2);
    same_bits(
        "grad.topk_weights",
        &a.grad_topk_weights,
        &b.grad_topk_weights,
    );
    same_opt(
        "grad.router.weight",
        &a.grad_router_weight,
        &b.grad_router_weight,
    );
    same_opt("dlogits", &a.dlogits, &b.dlogits);
    same_bits("bwd.do", &a.do_, &b.do_);
    same_bits("bwd.da", &a.da, &b.da);
    same_bits("bwd.dh", &a.dh, &b.dh);
    same_bits("bwd.dx_rows", &a.dx_rows, &b.dx_rows);
}

// ---------------------------------------------------------------------------------------------------
// The naive layer, generic over the scalar
// ---------------------------------------------------------------------------------------------------

pub trait Scalar:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    fn cst(v: f64) -> Self;
    fn val(self) -> f64;
    fn exp(self) -> Self;
    /// `Σ a_i b_i`. f64 uses a compensated dot product (Ogita-Rump-Oishi Dot2), so the naive f64 forward
    /// is accurate to about one rounding of each result; duals use the plain loop.
    fn dot(a: &[Self], b: &[Self]) -> Self;
}

impl Scalar for f64 {
    fn cst(v: f64) -> f64 {
        v
    }
    fn val(self) -> f64 {
        self
    }
    fn exp(self) -> f64 {
        f64::exp(self)
    }
    fn dot(a: &[f64], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        let (mut s, mut c) = (0.0f64, 0.0f64);
        for (&x, &y) in a.iter().zip(b) {
            let p = x * y;
            let pe = x.mul_add(y, -p);
            let t = s + p;
            let bp = t - s;
            let te = (s - (t - bp)) + (p - bp);
            s = t;
            c += te + pe;
        }
        s + c
    }
}

/// Forward-mode dual number: value and derivative along one direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dual {
    pub v: f64,
    pub d: f64,
}
impl Add for Dual {
    type Output = Dual;
    fn add(self, o: Dual) -> Dual {
        Dual {
            v: self.v + o.v,
            d: self.d + o.d,
        }
    }
}
impl Sub for Dual {
    type Output = Dual;
    fn sub(self, o: Dual) -> Dual {
        Dual {
            v: self.v - o.v,
            d: self.d - o.d,
        }
    }
}
impl Mul for Dual {
    type Output = Dual;
    fn mul(self, o: Dual) -> Dual {
        Dual {
            v: self.v * o.v,
            d: self.d * o.v + self.v * o.d,
        }
    }
}
impl Div for Dual {
    type Output = Dual;
    fn div(self, o: Dual) -> Dual {
        Dual {
            v: self.v / o.v,
            d: (self.d * o.v - self.v * o.d) / (o.v * o.v),
        }
    }
}
impl Neg for Dual {
    type Output = Dual;
    fn neg(self) -> Dual {
        Dual {
            v: -self.v,
            d: -self.d,
        }
    }
}
impl Scalar for Dual {
    fn cst(v: f64) -> Dual {
        Dual { v, d: 0.0 }
    }
    fn val(self) -> f64 {
        self.v
    }
    fn exp(self) -> Dual {
        let e = self.v.exp();
        Dual {
            v: e,
            d: self.d * e,
        }
    }
    fn dot(a: &[Dual], b: &[Dual]) -> Dual {
        assert_eq!(a.len(), b.len());
        let mut acc = Dual::cst(0.0);
        for (&x, &y) in a.iter().zip(b) {
            acc = acc + x * y;
        }
        acc
    }
}

/// The naive layer's inputs, flat and row-major, in scalar `S`.
pub struct NaiveIn<S> {
    pub cfg: MoeConfig,
    pub x: Vec<S>,
    pub w13: Vec<S>,
    pub w2: Vec<S>,
    pub topk_ids: Option<Vec<i32>>,
    pub topk_weights: Option<Vec<S>>,
    pub router_weight: Option<Vec<S>>,
    pub router_bias: Option<Vec<f64>>,
}

pub struct NaiveOut<S> {
    /// [T, H]
    pub y: Vec<S>,
    /// [T, k] as used (given or selected).
    pub ids: Vec<i32>,
    pub weights: Vec<S>,
    /// Smallest gap between selection scores that decides the selection or its order (groups too);
    /// +inf without routing.
    pub sel_margin: f64,
    /// Smallest distance of any g from `limit` and any u from `±limit`; +inf for plain SwiGLU.
    pub clamp_margin: f64,
    /// Per y entry: `Σ_j |w| Σ_i |w2| |a|`, the scale of its rounding errors.
    pub mag: Vec<f64>,
}

/// Indices of the `n` largest `vals` among `eligible`, best first, ties to the lower index (repeated argmax
/// with a strict comparison), and the gap between the last chosen and the best one left out (+inf if none)
/// and the smallest gap between consecutive chosen ones.
fn pick(vals: &[f64], eligible: &[bool], n: usize) -> (Vec<usize>, f64, f64) {
    let mut taken = vec![false; vals.len()];
    let mut out = Vec::new();
    for _ in 0..n {
        let mut best: Option<usize> = None;
        for i in 0..vals.len() {
            if eligible[i] && !taken[i] && best.is_none_or(|b| vals[i] > vals[b]) {
                best = Some(i);
            }
        }
        let b = best.expect("enough eligible entries");
        taken[b] = true;
        out.push(b);
    }
    let mut cut = f64::INFINITY;
    for i in 0..vals.len() {
        if eligible[i] && !taken[i] {
            cut = cut.min(vals[out[n - 1]] - vals[i]);
        }
    }
    let mut order = f64::INFINITY;
    for w in out.windows(2) {
        order = order.min(vals[w[0]] - vals[w[1]]);
    }
    (out, cut, order)
}

pub fn naive_forward<S: Scalar>(inp: &NaiveIn<S>) -> NaiveOut<S> {
    let cfg = &inp.cfg;
    let (t_n, h_n, i_n, e_n, k) = (
        cfg.tokens,
        cfg.hidden,
        cfg.intermediate,
        cfg.experts,
        cfg.top_k,
    );
    let one = S::cst(1.0);
    let sigmoid = |z: S| one / (one + (-z).exp());
    let mut sel_margin = f64::INFINITY;
    let mut clamp_margin = f64::INFINITY;

    // Routing.
    let (ids, weights): (Vec<i32>, Vec<S>) = match (&inp.topk_ids, &inp.topk_weights) {
        (Some(ids), Some(w)) => (ids.clone(), w.clone()),
        _ => {
            let r = cfg.routing.as_ref().expect("routing");
            let rw = inp.router_weight.as_ref().expect("router.weight");
            let mut ids = vec![-1i32; t_n * k];
            let mut weights = vec![S::cst(0.0); t_n * k];
            for t in 0..t_n {
                let xt = &inp.x[t * h_n..(t + 1) * h_n];
                let logits: Vec<S> = (0..e_n)
                    .map(|e| S::dot(xt, &rw[e * h_n..(e + 1) * h_n]))
                    .collect();
                let scores: Vec<S> = match r.score {
                    Score::Softmax => {
                        let m = logits
                            .iter()
                            .map(|l| l.val())
                            .fold(f64::NEG_INFINITY, f64::max);
                        let ex: Vec<S> = logits.iter().map(|&l| (l - S::cst(m)).exp()).collect();
                        let total = S::dot(&ex, &vec![one; e_n]);
                        ex.iter().map(|&v| v / total).collect()
                    }
                    Score::Sigmoid => logits.iter().map(|&l| sigmoid(l)).collect(),
                };
                let sel: Vec<f64> = (0..e_n)
                    .map(|e| scores[e].val() + inp.router_bias.as_ref().map_or(0.0, |b| b[e]))
                    .collect();
                let mut eligible = vec![true; e_n];
                if let Some(gr) = r.groups {
                    let per = e_n / gr.n_group;
                    let gscore: Vec<f64> = (0..gr.n_group)
                        .map(|gi| {
                            let mut m: Vec<f64> = sel[gi * per..(gi + 1) * per].to_vec();
                            m.sort_by(|a, b| b.total_cmp(a));
                            m.iter().take(2).sum()
                        })
                        .collect();
                    let (keep, cut, _) = pick(&gscore, &vec![true; gr.n_group], gr.topk_group);
                    sel_margin = sel_margin.min(cut);
                    for (e, el) in eligible.iter_mut().enumerate() {
                        *el = keep.contains(&(e / per));
                    }
                }
                let (chosen, cut, order) = pick(&sel, &eligible, k);
                sel_margin = sel_margin.min(cut).min(order);
                let v: Vec<S> = chosen.iter().map(|&e| scores[e]).collect();
                let denom = if r.normalize_topk {
                    S::dot(&v, &vec![one; k])
                } else {
                    one
                };
                for j in 0..k {
                    ids[t * k + j] = chosen[j] as i32;
                    weights[t * k + j] = v[j] / denom * S::cst(r.scaling);
                }
            }
            (ids, weights)
        }
    };

    // Experts and combine.
    let mut y = vec![S::cst(0.0); t_n * h_n];
    let mut mag = vec![0.0f64; t_n * h_n];
    for t in 0..t_n {
        let xt = &inp.x[t * h_n..(t + 1) * h_n];
        let mut terms: Vec<Vec<(S, S)>> = vec![Vec::new(); h_n];
        for j in 0..k {
            let e = ids[t * k + j];
            if e < 0 {
                continue;
            }
            let e = e as usize;
            let w = weights[t * k + j];
            let w13e = &inp.w13[e * 2 * i_n * h_n..(e + 1) * 2 * i_n * h_n];
            let a: Vec<S> = (0..i_n)
                .map(|i| {
                    let g = S::dot(&w13e[i * h_n..(i + 1) * h_n], xt);
                    let u = S::dot(&w13e[(i_n + i) * h_n..(i_n + i + 1) * h_n], xt);
                    match cfg.activation {
                        Activation::Swiglu => g / (one + (-g).exp()) * u,
                        Activation::SwigluClamped { alpha, limit } => {
                            clamp_margin = clamp_margin
                                .min((g.val() - limit).abs())
                                .min((u.val() - limit).abs())
                                .min((u.val() + limit).abs());
                            let gc = if g.val() > limit { S::cst(limit) } else { g };
                            let uc = if u.val() > limit {
                                S::cst(limit)
                            } else if u.val() < -limit {
                                S::cst(-limit)
                            } else {
                                u
                            };
                            gc * sigmoid(S::cst(alpha) * gc) * (uc + one)
                        }
                    }
                })
                .collect();
            let w2e = &inp.w2[e * h_n * i_n..(e + 1) * h_n * i_n];
            for c in 0..h_n {
                let row = &w2e[c * i_n..(c + 1) * i_n];
                let o = S::dot(row, &a);
                terms[c].push((w, o));
                let m: f64 = row
                    .iter()
                    .zip(&a)
                    .map(|(p, q)| (p.val() * q.val()).abs())
                    .sum();
                mag[t * h_n + c] += w.val().abs() * m;
            }
        }
        for c in 0..h_n {
            let (l, r): (Vec<S>, Vec<S>) = terms[c].iter().copied().unzip();
            y[t * h_n + c] = S::dot(&l, &r);
        }
    }
    NaiveOut {
        y,
        ids,
        weights,
        sel_margin,
        clamp_margin,
        mag,
    }
}

fn flat<D: Dimension>(a: &Array<f64, D>) -> Vec<f64> {
    a.iter().copied().collect()
}

/// The case as naive f64 inputs.
pub fn naive_f64(inp: &LayerInputs) -> NaiveIn<f64> {
    NaiveIn {
        cfg: inp.cfg.clone(),
        x: flat(&inp.x),
        w13: flat(&inp.w13),
        w2: flat(&inp.w2),
        topk_ids: inp.topk_ids.as_ref().map(|a| a.iter().copied().collect()),
        topk_weights: inp.topk_weights.as_ref().map(flat),
        router_weight: inp.router_weight.as_ref().map(flat),
        router_bias: inp.router_bias.as_ref().map(flat),
    }
}

/// A direction over every differentiable input: x, w13, w2, topk_weights (when given), router.weight
/// (when routing).
pub struct Direction {
    pub x: Array2<f64>,
    pub w13: Array3<f64>,
    pub w2: Array3<f64>,
    pub topk_weights: Option<Array2<f64>>,
    pub router_weight: Option<Array2<f64>>,
}

pub fn direction(inp: &LayerInputs, g: &mut Gen) -> Direction {
    let x = Array2::from_shape_fn(inp.x.dim(), |_| g.normal());
    let w13 = Array3::from_shape_fn(inp.w13.dim(), |_| g.normal());
    let w2 = Array3::from_shape_fn(inp.w2.dim(), |_| g.normal());
    let topk_weights = match (&inp.topk_ids, &inp.topk_weights) {
        (Some(_), Some(w)) => Some(Array2::from_shape_fn(w.dim(), |_| g.normal())),
        _ => None,
    };
    let router_weight = match (&inp.topk_ids, &inp.topk_weights, &inp.router_weight) {
        (Some(_), Some(_), _) => None,
        (_, _, Some(rw)) => Some(Array2::from_shape_fn(rw.dim(), |_| g.normal())),
        _ => None,
    };
    Direction {
        x,
        w13,
        w2,
        topk_weights,
        router_weight,
    }
}

fn duals<D: Dimension>(v: &Array<f64, D>, d: Option<&Array<f64, D>>) -> Vec<Dual> {
    match d {
        Some(d) => v
            .iter()
            .zip(d.iter())
            .map(|(&v, &d)| Dual { v, d })
            .collect(),
        None => v.iter().map(|&v| Dual::cst(v)).collect(),
    }
}

/// The case as naive dual inputs seeded with direction `dir`.
pub fn naive_dual(inp: &LayerInputs, dir: &Direction) -> NaiveIn<Dual> {
    NaiveIn {
        cfg: inp.cfg.clone(),
        x: duals(&inp.x, Some(&dir.x)),
        w13: duals(&inp.w13, Some(&dir.w13)),
        w2: duals(&inp.w2, Some(&dir.w2)),
        topk_ids: inp.topk_ids.as_ref().map(|a| a.iter().copied().collect()),
        topk_weights: inp
            .topk_weights
            .as_ref()
            .map(|w| duals(w, dir.topk_weights.as_ref())),
        router_weight: inp
            .router_weight
            .as_ref()
            .map(|w| duals(w, dir.router_weight.as_ref())),
        router_bias: inp.router_bias.as_ref().map(flat),
    }
}

/// Distance from a tie (selection) or a clamp kink below which a case is not a fair test of the
/// naive-vs-oracle agreement (the two may legitimately round to different sides).
pub const KINK: f64 = 1e-9;

/// What [`check_against_naive`] found, for the caller's bookkeeping.
#[derive(Debug)]
pub enum Naive {
    Checked,
    /// Too close to a routing tie or a clamp kink.
    Skipped,
}

/// The full check of the oracle against the naive layer: y within 1e-12 of the naive f64 forward
/// (relative to `|y| + Σ|w||w2||a|` and to the largest |y|), topk_ids equal to the naive selection, and
/// the directional derivative of `L = <dy, y>` along a random direction (naive duals) equal to
/// `Σ <grad, V>` from `layer::backward` within 1e-9 relative.
pub fn check_against_naive(inp: &LayerInputs, dir_seed: u64) -> Naive {
    let (fwd, bwd) = run_default(inp);
    let nf = naive_forward(&naive_f64(inp));
    if nf.sel_margin < KINK || nf.clamp_margin < KINK {
        return Naive::Skipped;
    }
    let cfg = &inp.cfg;
    let (t_n, h_n, k) = (cfg.tokens, cfg.hidden, cfg.top_k);

    // Forward: ids, weights, y.
    let ids: Vec<i32> = fwd.topk_ids.iter().copied().collect();
    assert_eq!(ids, nf.ids, "topk_ids: oracle vs naive selection");
    assert_eq!(fwd.y.dim(), (t_n, h_n));
    for (n, (&o, &w)) in fwd.topk_weights.iter().zip(nf.weights.iter()).enumerate() {
        assert!(
            (o - w).abs() <= 1e-13 * w.abs().max(1e-300),
            "topk_weights[{}, {}]: oracle {o:e} vs naive {w:e}",
            n / k,
            n % k
        );
    }
    let ymax = fwd.y.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for t in 0..t_n {
        for c in 0..h_n {
            let (o, nv) = (fwd.y[[t, c]], nf.y[t * h_n + c]);
            let tol = 1e-12 * (nv.abs() + nf.mag[t * h_n + c]) + 1e-13 * ymax;
            assert!(
                (o - nv).abs() <= tol,
                "y[{t}, {c}]: oracle {o:e} vs naive {nv:e} (tol {tol:e})"
            );
        }
    }

    // Backward: directional derivative.
    let mut g = Gen::new(dir_seed);
    let dir = direction(inp, &mut g);
    let nd = naive_forward(&naive_dual(inp, &dir));
    let dy = inp.dy.as_ref().expect("dy");
    let l: Vec<(f64, f64)> = dy.iter().zip(nd.y.iter()).map(|(&a, b)| (a, b.d)).collect();
    let dl_dual = exact::dot(l.iter().copied());
    let dl_dual_abs = exact::dot(l.iter().map(|&(a, b)| (a.abs(), b.abs())));

    let mut pairs: Vec<(f64, f64)> = Vec::new();
    pairs.extend(bwd.grad_x.iter().copied().zip(dir.x.iter().copied()));
    pairs.extend(bwd.grad_w13.iter().copied().zip(dir.w13.iter().copied()));
    pairs.extend(bwd.grad_w2.iter().copied().zip(dir.w2.iter().copied()));
    if let Some(v) = &dir.topk_weights {
        pairs.extend(bwd.grad_topk_weights.iter().copied().zip(v.iter().copied()));
    }
    match (&dir.router_weight, &bwd.grad_router_weight) {
        (Some(v), Some(gw)) => pairs.extend(gw.iter().copied().zip(v.iter().copied())),
        (None, None) => {}
        (v, gw) => panic!(
            "router gradient: direction {} vs oracle {}",
            v.is_some(),
            gw.is_some()
        ),
    }
    let dl_grad = exact::dot(pairs.iter().copied());
    let dl_grad_abs = exact::dot(pairs.iter().map(|&(a, b)| (a.abs(), b.abs())));
    let scale = dl_grad_abs.max(dl_dual_abs);
    let tol = 1e-9 * scale + 1e-300;
    assert!(
        (dl_dual - dl_grad).abs() <= tol,
        "directional derivative: duals {dl_dual:e} vs Σ<grad, V> {dl_grad:e} (diff {:e}, tol {tol:e})",
        (dl_dual - dl_grad).abs()
    );
    Naive::Checked
}

// ---------------------------------------------------------------------------------------------------
// Small constructors for the edge tests
// ---------------------------------------------------------------------------------------------------

/// Random data for `cfg` with the given routing (ids + weights).
pub fn given_case(cfg: MoeConfig, ids: Array2<i32>, seed: u64) -> LayerInputs {
    let mut g = Gen::new(seed);
    let (t, h, i, e, k) = (
        cfg.tokens,
        cfg.hidden,
        cfg.intermediate,
        cfg.experts,
        cfg.top_k,
    );
    assert_eq!(ids.dim(), (t, k));
    let sh = 1.0 / (h as f64).sqrt();
    let si = 1.0 / (i as f64).sqrt();
    let x = Array2::from_shape_fn((t, h), |_| g.normal());
    let w13 = Array3::from_shape_fn((e, 2 * i, h), |_| g.normal() * sh);
    let w2 = Array3::from_shape_fn((e, h, i), |_| g.normal() * si);
    let w = Array2::from_shape_fn((t, k), |_| 0.25 + g.unit());
    let dy = Array2::from_shape_fn((t, h), |_| g.normal());
    LayerInputs {
        cfg,
        x,
        w13,
        w2,
        topk_ids: Some(ids),
        topk_weights: Some(w),
        router_weight: None,
        router_bias: None,
        dy: Some(dy),
    }
}

/// Random data for `cfg` routed by `router_weight` (optional bias).
pub fn routed_case(
    cfg: MoeConfig,
    router_weight: Array2<f64>,
    bias: Option<Array1<f64>>,
    seed: u64,
) -> LayerInputs {
    let mut inp = given_case(
        cfg.clone(),
        Array2::from_elem((cfg.tokens, cfg.top_k), -1),
        seed,
    );
    inp.topk_ids = None;
    inp.topk_weights = None;
    inp.router_weight = Some(router_weight);
    inp.router_bias = bias;
    inp
}
