//! Stage replay: each stage of the pipeline recomputed from the candidate's OWN inputs to that stage, so
//! that an upstream error neither hides nor smears a downstream one.
//!
//! A stage's input comes from the candidate when it holds that tensor (its value as given, with the
//! recipe's storage rounding of it as bound: a fused kernel may have fed the next stage its accumulator
//! before rounding it for the file, e.g. SwiGLU from GEMM1's f32 results or grad.x from f32 dx_rows),
//! else from the recipe's emulation (emulated value, its bound, and the exact oracle's value as the
//! reference); case inputs are rounded to the recipe's input storage with their rounding as bound. The
//! stage's exact value is the exact oracle's operation (correctly rounded GEMM, SwiGLU, combine) on the
//! reference inputs; its bound is the emulator's bound of that one stage ([`moe_reference::emulate::stage`],
//! [`moe_reference::emulate::act_bound`]).

use moe_reference::accum::Model;
use moe_reference::emulate::{act_bound, through_emulation};
use moe_reference::emulate::stage::{self, accumulation_coefficient, dot_bound, gemm_stage, store, underflow_term, GemmPlan};
use moe_reference::exact::small_dot;
use moe_reference::gemm::{self, Engine};
use moe_reference::layer::named_tensor;
use moe_reference::recipe::Storage;
use moe_reference::{act, route};
use ndarray::{s, Array2, Array3, ArrayD, ArrayView2, Axis, Zip};

use crate::check::Context;
use crate::cli::CliError;

/// A tensor feeding a stage: the value a kernel used `v`, a bound `b` on its distance from the reference
/// `x` (0 when `v` is the candidate's own tensor, then `x = v`).
#[derive(Clone, Debug)]
pub struct Src {
    pub v: Array2<f64>,
    pub b: Array2<f64>,
    pub x: Array2<f64>,
    pub from_candidate: bool,
    /// `v` is exactly what the kernel read (a case input in its storage format, or the candidate's own
    /// tensor), not the emulation's stand-in for a tensor the candidate lacks: then a GEMM stage can be
    /// bounded through the emulation from the same operands, as `check` does.
    pub known: bool,
}

impl Src {
    /// A case input as the recipe reads it.
    pub fn input(x: &Array2<f64>, st: Storage) -> Src {
        let v = x.mapv(|e| st.round(e));
        let b = Zip::from(x).and(&v).map_collect(|&x, &v| (x - v).abs());
        Src { v, b, x: x.clone(), from_candidate: false, known: true }
    }

    fn rows(&self, r: std::ops::Range<usize>) -> (ArrayView2<'_, f64>, ArrayView2<'_, f64>, ArrayView2<'_, f64>) {
        (self.v.slice(s![r.clone(), ..]), self.b.slice(s![r.clone(), ..]), self.x.slice(s![r, ..]))
    }

    fn t(&self) -> Src {
        let t = |a: &Array2<f64>| a.t().as_standard_layout().into_owned();
        Src { v: t(&self.v), b: t(&self.b), x: t(&self.x), from_candidate: self.from_candidate, known: self.known }
    }
}

/// A 3-D case input (`w13`, `w2`) as the recipe reads it.
pub struct Src3 {
    pub v: Array3<f64>,
    pub b: Array3<f64>,
    pub x: Array3<f64>,
}

impl Src3 {
    pub fn input(x: &Array3<f64>, st: Storage) -> Src3 {
        let v = x.mapv(|e| st.round(e));
        let b = Zip::from(x).and(&v).map_collect(|&x, &v| (x - v).abs());
        Src3 { v, b, x: x.clone() }
    }

    /// Expert `e`'s matrix, transposed when `t`.
    pub fn expert(&self, e: usize, t: bool) -> Src {
        let get = |a: &Array3<f64>| {
            let m = a.index_axis(Axis(0), e);
            if t {
                m.t().as_standard_layout().into_owned()
            } else {
                m.to_owned()
            }
        };
        Src { v: get(&self.v), b: get(&self.b), x: get(&self.x), from_candidate: false, known: true }
    }
}

/// The storage a recipe gives an intermediate the candidate may hold (f64 for any other name).
fn stored_as(st: &moe_reference::recipe::StorageTable, name: &str) -> Storage {
    match name {
        "fwd.h" => st.h,
        "fwd.a" => st.a,
        "fwd.o" => st.o,
        "bwd.do" => st.do_,
        "bwd.da" => st.da,
        "bwd.dh" => st.dh,
        "bwd.dx_rows" => st.dx_rows,
        "grad.topk_weights" => st.grad_topk_weights,
        _ => Storage::F64,
    }
}

/// One replayed stage: the candidate's tensor, the exact value from the stage's inputs, the stage bound.
#[derive(Clone, Debug)]
pub struct Replayed {
    pub name: &'static str,
    pub got: ArrayD<f64>,
    pub exact: ArrayD<f64>,
    pub bound: ArrayD<f64>,
    /// The stage's intermediate inputs and whether each came from the candidate.
    pub inputs: Vec<(&'static str, bool)>,
    /// What the recipe's emulation computes from the same inputs (GEMM and SwiGLU stages), bit for bit
    /// what a kernel following the recipe's accumulation model exactly would store.
    pub emulated: Option<ArrayD<f64>>,
}

/// The recipe's GEMM plans, parsed once.
pub struct Plans {
    pub gemm1: GemmPlan,
    pub gemm2: GemmPlan,
    pub dgrad2: GemmPlan,
    pub wgrad2: GemmPlan,
    pub dgrad1: GemmPlan,
    pub wgrad1: GemmPlan,
    pub vector: Model,
}

impl Plans {
    pub fn parse(r: &moe_reference::recipe::Recipe) -> Result<Plans, CliError> {
        let e = |e: moe_reference::emulate::EmulateError| CliError::Recipe(e.to_string());
        Ok(Plans {
            gemm1: GemmPlan::parse("gemm1", &r.gemm1).map_err(e)?,
            gemm2: GemmPlan::parse("gemm2", &r.gemm2).map_err(e)?,
            dgrad2: GemmPlan::parse("dgrad2", &r.dgrad2).map_err(e)?,
            wgrad2: GemmPlan::parse("wgrad2", &r.wgrad2).map_err(e)?,
            dgrad1: GemmPlan::parse("dgrad1", &r.dgrad1).map_err(e)?,
            wgrad1: GemmPlan::parse("wgrad1", &r.wgrad1).map_err(e)?,
            vector: stage::parse_model(&r.vector_accumulate).map_err(e)?,
        })
    }
}

/// The replay machinery over one context.
pub struct Replay<'a> {
    pub ctx: &'a Context,
    pub plans: Plans,
    pub x: Src,
    pub x_rows: Src,
    pub w13: Src3,
    pub w2: Src3,
    pub dy: Option<Src>,
    pub weights: Src,
}

/// A GEMM stage replayed from its operands: the emulation and the stage bound. The bound is the a-priori
/// one; when the kernel's operands are known exactly (`known`), also at most |emulated − exact| plus the
/// bound on |faithful kernel − emulator| from the same operands (zero operand deviation: only summation
/// order, none under `--same-schedule`, and storage rounding), the bound `check` uses.
/// An operand from the candidate (`a_dev`, `b_dev`) may differ from what the kernel fed the GEMM by its
/// storage rounding (its `b`), which then is its deviation; case inputs are read exactly (deviation 0).
#[allow(clippy::too_many_arguments)]
fn gemm_bounded(
    plan: &GemmPlan,
    a: ArrayView2<f64>,
    ab: ArrayView2<f64>,
    a_dev: bool,
    b: ArrayView2<f64>,
    bb: ArrayView2<f64>,
    b_dev: bool,
    st: Storage,
    known: bool,
    exact: &Array2<f64>,
) -> (stage::Tracked, Array2<f64>) {
    if !known {
        let out = gemm_stage(plan, a, ab, b, bb, st).out;
        let bound = out.b.clone();
        return (out, bound);
    }
    // Zero deviations as broadcasts (the stage then makes no zero arrays of operand size).
    let zero = Array2::<f64>::zeros((1, 1));
    let zeros = |dim| zero.broadcast(dim).expect("a 1x1 array broadcasts");
    let ad = if a_dev { ab } else { zeros(a.dim()) };
    let bd = if b_dev { bb } else { zeros(b.dim()) };
    let res = stage::gemm_stage_with(plan, a, ab, Some(ad), b, bb, Some(bd), st);
    let dev = res.dev.expect("deviations were requested");
    let out = res.out;
    let mut bound = out.b.clone();
    Zip::from(&mut bound).and(&out.v).and(exact).and(&dev).for_each(|o, &v, &x, &d| {
        let through = through_emulation(v, x, d);
        if through < *o {
            *o = through;
        }
    });
    (out, bound)
}

impl<'a> Replay<'a> {
    pub fn new(ctx: &'a Context) -> Result<Replay<'a>, CliError> {
        let mut plans = Plans::parse(&ctx.recipe)?;
        for p in [&mut plans.gemm1, &mut plans.gemm2, &mut plans.dgrad2, &mut plans.wgrad2, &mut plans.dgrad1, &mut plans.wgrad1] {
            p.same_schedule = ctx.same_schedule;
        }
        let st = &ctx.recipe.storage;
        let inp = &ctx.case.inputs;
        let rows = &ctx.exact_fwd.rows;
        let x = Src::input(&inp.x, st.inputs);
        let x_rows = Src { v: rows.gather(x.v.view()), b: rows.gather(x.b.view()), x: rows.gather(x.x.view()), from_candidate: false, known: true };
        let mut weights = Src::input(&ctx.exact_fwd.topk_weights, st.weights);
        if ctx.exact_fwd.routed.is_some() {
            // As the emulator: a kernel that routes itself computes its weights in f32.
            weights.b = &weights.b + &weights.v.mapv(|w| 32.0 * 2f64.powi(-24) * w.abs());
            weights.known = false;
        }
        Ok(Replay {
            ctx,
            plans,
            x,
            x_rows,
            w13: Src3::input(&inp.w13, st.inputs),
            w2: Src3::input(&inp.w2, st.inputs),
            dy: inp.dy.as_ref().map(|d| Src::input(d, st.inputs)),
            weights,
        })
    }

    /// An intermediate feeding a stage: the candidate's when it has it, else the emulation's.
    pub fn src(&self, name: &str) -> Option<Src> {
        if let Some(c) = self.ctx.cand.get2(name) {
            let v = c.to_owned();
            let st = stored_as(&self.ctx.recipe.storage, name);
            let (u, eta) = (st.unit_roundoff(), st.underflow());
            let b = v.mapv(|v| u * v.abs() + eta);
            return Some(Src { b, x: v.clone(), v, from_candidate: true, known: true });
        }
        let em = &self.ctx.em;
        let v = named_tensor(&em.fwd, em.bwd.as_ref(), name)?.into_dimensionality().ok()?.to_owned();
        let b = em.bound(name)?.view().into_dimensionality().ok()?.mapv(f64::from);
        let x = self.ctx.exact(name)?.into_dimensionality().ok()?.to_owned();
        Some(Src { v, b, x, from_candidate: false, known: false })
    }

    fn kappa(&self, n: usize) -> f64 {
        accumulation_coefficient(&self.plans.vector, n)
    }

    /// Per-expert row GEMM `out_e = a_e · B_eᵀ`: (bound, exact) [M, width].
    fn rows_gemm(&self, plan: &GemmPlan, st: Storage, a: &Src, w: &Src3, transpose: bool, width: usize) -> (Array2<f64>, Array2<f64>, Array2<f64>) {
        let rows = &self.ctx.exact_fwd.rows;
        let m = rows.rows();
        let mut bound = Array2::zeros((m, width));
        let mut exact = Array2::zeros((m, width));
        let mut emulated = Array2::zeros((m, width));
        for e in 0..rows.experts {
            let r = rows.expert_rows(e);
            if r.is_empty() {
                continue;
            }
            let (av, ab, ax) = a.rows(r.clone());
            let b = w.expert(e, transpose);
            let x = gemm::matmul_nt(ax, b.x.view());
            let (out, bnd) = gemm_bounded(plan, av, ab, a.from_candidate, b.v.view(), b.b.view(), false, st, a.known, &x);
            bound.slice_mut(s![r.clone(), ..]).assign(&bnd);
            emulated.slice_mut(s![r.clone(), ..]).assign(&out.v);
            exact.slice_mut(s![r, ..]).assign(&x);
        }
        (bound, exact, emulated)
    }

    /// Per-expert weight gradient `g_e = Aᵀ_e · Bᵀ_e` over the expert's rows: (bound, exact) [E, p, q].
    fn weight_gemm(&self, plan: &GemmPlan, a: &Src, b: &Src, p: usize, q: usize) -> (Array3<f64>, Array3<f64>, Array3<f64>) {
        let rows = &self.ctx.exact_fwd.rows;
        let st = self.ctx.recipe.storage.grad_w;
        let e_n = rows.experts;
        let mut bound = Array3::zeros((e_n, p, q));
        let mut exact = Array3::zeros((e_n, p, q));
        let mut emulated = Array3::zeros((e_n, p, q));
        for e in 0..e_n {
            let r = rows.expert_rows(e);
            if r.is_empty() {
                // No rows: the exact gradient is zero, and so must the kernel's be (up to underflow).
                bound.index_axis_mut(Axis(0), e).fill(underflow_term(0) + st.underflow());
                continue;
            }
            let (av, ab, ax) = a.rows(r.clone());
            let (bv, bb, bx) = b.rows(r);
            let t = |x: ArrayView2<f64>| x.t().as_standard_layout().into_owned();
            let x = gemm::matmul_nt(ax.t(), bx.t());
            let (ta, tb) = (t(ab), t(bb));
            let (out, bnd) =
                gemm_bounded(plan, t(av).view(), ta.view(), a.from_candidate, t(bv).view(), tb.view(), b.from_candidate, st, a.known && b.known, &x);
            bound.index_axis_mut(Axis(0), e).assign(&bnd);
            emulated.index_axis_mut(Axis(0), e).assign(&out.v);
            exact.index_axis_mut(Axis(0), e).assign(&x);
        }
        (bound, exact, emulated)
    }

    /// The router's backward from `grad.topk_weights` (as the emulator bounds it): `dlogits` value and
    /// bound, and its exact reference; None when the case gives its routing.
    fn dlogits(&self, gtw: &Src) -> Option<(Src, Array2<f64>)> {
        let ctx = self.ctx;
        let (routed, rcfg, lg) = (ctx.exact_fwd.routed.as_ref()?, ctx.case.inputs.cfg.routing.as_ref()?, ctx.exact_fwd.logits.as_ref()?);
        let (t_n, k, e_n) = (ctx.case.inputs.cfg.tokens, ctx.case.inputs.cfg.top_k, ctx.case.inputs.cfg.experts);
        let dl_v = route::backward(rcfg, routed, lg.view(), gtw.v.view());
        let dl_x = route::backward(rcfg, routed, lg.view(), gtw.x.view());
        let mut dl_b = Array2::<f64>::zeros((t_n, e_n));
        let mut mag = Array2::<f64>::zeros((t_n, e_n));
        for j in 0..k {
            let mut onehot = Array2::zeros((t_n, k));
            onehot.column_mut(j).fill(1.0);
            let col = route::backward(rcfg, routed, lg.view(), onehot.view());
            for t in 0..t_n {
                let (g, gb) = (gtw.v[[t, j]], gtw.b[[t, j]]);
                for e in 0..e_n {
                    dl_b[[t, e]] += col[[t, e]].abs() * gb;
                    mag[[t, e]] += col[[t, e]].abs() * (g.abs() + gb);
                }
            }
        }
        let dl_b = dl_b * (1.0 + 1e-12) + mag * (64.0 * 2f64.powi(-24)) + 2f64.powi(-140);
        let dl = store(dl_v, dl_b, Storage::F32);
        Some((Src { v: dl.v, b: dl.b, x: dl_x.clone(), from_candidate: gtw.from_candidate, known: false }, dl_x))
    }

    fn f32_plan() -> GemmPlan {
        GemmPlan { name: "router", model: Model::F32Fma, a: None, b: None, same_schedule: false }
    }

    /// Replay one stage, when the candidate holds its output (and the case allows it).
    pub fn stage(&self, name: &'static str) -> Option<Replayed> {
        let ctx = self.ctx;
        let got = ctx.cand.get(name)?.clone();
        let cfg = &ctx.case.inputs.cfg;
        let st = &ctx.recipe.storage;
        let rows = &ctx.exact_fwd.rows;
        let (hd, id, k) = (cfg.hidden, cfg.intermediate, cfg.top_k);
        let m = rows.rows();
        let done_em = |exact: Array2<f64>, bound: Array2<f64>, inputs: Vec<(&'static str, bool)>, emulated: Option<Array2<f64>>| Replayed {
            name,
            got: got.clone(),
            exact: exact.into_dyn(),
            bound: bound.into_dyn(),
            inputs,
            emulated: emulated.map(|e| e.into_dyn()),
        };
        let done = |exact: Array2<f64>, bound: Array2<f64>, inputs: Vec<(&'static str, bool)>| done_em(exact, bound, inputs, None);
        let done3 = |exact: Array3<f64>, bound: Array3<f64>, inputs: Vec<(&'static str, bool)>, emulated: Array3<f64>| Replayed {
            name,
            got: got.clone(),
            exact: exact.into_dyn(),
            bound: bound.into_dyn(),
            inputs,
            emulated: Some(emulated.into_dyn()),
        };
        match name {
            "fwd.h" => {
                let (b, x, v) = self.rows_gemm(&self.plans.gemm1, st.h, &self.x_rows, &self.w13, false, 2 * id);
                Some(done_em(x, b, vec![], Some(v)))
            }
            "fwd.a" => {
                let h = self.src("fwd.h")?;
                let mut raw = Array2::zeros((m, id));
                let mut pre = Array2::zeros((m, id));
                let mut exact = Array2::zeros((m, id));
                for r in 0..m {
                    for c in 0..id {
                        let (v, b) = act_bound::forward(cfg.activation, h.v[[r, c]], h.b[[r, c]], h.v[[r, id + c]], h.b[[r, id + c]]);
                        raw[[r, c]] = v;
                        pre[[r, c]] = b;
                        exact[[r, c]] = act::forward(cfg.activation, h.x[[r, c]], h.x[[r, id + c]]);
                    }
                }
                let stored = store(raw, pre, st.a);
                Some(done_em(exact, stored.b, vec![("fwd.h", h.from_candidate)], Some(stored.v)))
            }
            "fwd.o" => {
                let a = self.src("fwd.a")?;
                let (b, x, v) = self.rows_gemm(&self.plans.gemm2, st.o, &a, &self.w2, false, hd);
                Some(done_em(x, b, vec![("fwd.a", a.from_candidate)], Some(v)))
            }
            "y" => {
                let o = self.src("fwd.o")?;
                let w = &self.weights;
                let mut exact = Array2::zeros((cfg.tokens, hd));
                let mut pre = Array2::zeros((cfg.tokens, hd));
                for t in 0..cfg.tokens {
                    let slots: Vec<(usize, usize)> = (0..k).filter_map(|j| rows.slot_row[t * k + j].map(|r| (j, r))).collect();
                    for c in 0..hd {
                        exact[[t, c]] = small_dot(slots.iter().map(|&(j, r)| (w.x[[t, j]], o.x[[r, c]])));
                        pre[[t, c]] = dot_bound(
                            slots.iter().map(|&(j, r)| (w.v[[t, j]].abs() + w.b[[t, j]], w.b[[t, j]], o.v[[r, c]].abs() + o.b[[r, c]], o.b[[r, c]])),
                            self.kappa(slots.len()),
                            slots.len(),
                        );
                    }
                }
                let bound = store(exact.clone(), pre, st.y).b;
                Some(done(exact, bound, vec![("fwd.o", o.from_candidate)]))
            }
            "bwd.do" | "bwd.dx_rows" | "bwd.da" | "bwd.dh" | "grad.topk_weights" | "grad.w2" | "grad.w13" | "grad.x" | "grad.router.weight"
                if self.dy.is_none() =>
            {
                None
            }
            "bwd.do" => {
                // Only case inputs feed it: the check's comparison is the stage's.
                let x = ctx.exact("bwd.do")?.into_dimensionality().ok()?.to_owned();
                let b = ctx.em.bound("bwd.do")?.view().into_dimensionality().ok()?.mapv(f64::from);
                Some(done(x, b, vec![]))
            }
            "bwd.da" => {
                let d = self.src("bwd.do")?;
                let (b, x, v) = self.rows_gemm(&self.plans.dgrad2, st.da, &d, &self.w2, true, id);
                Some(done_em(x, b, vec![("bwd.do", d.from_candidate)], Some(v)))
            }
            "bwd.dh" => {
                let h = self.src("fwd.h")?;
                let da = self.src("bwd.da")?;
                let mut raw = Array2::zeros((m, 2 * id));
                let mut pre = Array2::zeros((m, 2 * id));
                let mut exact = Array2::zeros((m, 2 * id));
                for r in 0..m {
                    for c in 0..id {
                        let ((dg, bg), (du, bu)) =
                            act_bound::backward(cfg.activation, h.v[[r, c]], h.b[[r, c]], h.v[[r, id + c]], h.b[[r, id + c]], da.v[[r, c]], da.b[[r, c]]);
                        raw[[r, c]] = dg;
                        pre[[r, c]] = bg;
                        raw[[r, id + c]] = du;
                        pre[[r, id + c]] = bu;
                        let (eg, eu) = act::backward(cfg.activation, h.x[[r, c]], h.x[[r, id + c]], da.x[[r, c]]);
                        exact[[r, c]] = eg;
                        exact[[r, id + c]] = eu;
                    }
                }
                let stored = store(raw, pre, st.dh);
                Some(done_em(exact, stored.b, vec![("fwd.h", h.from_candidate), ("bwd.da", da.from_candidate)], Some(stored.v)))
            }
            "bwd.dx_rows" => {
                let dh = self.src("bwd.dh")?;
                let (b, x, v) = self.rows_gemm(&self.plans.dgrad1, st.dx_rows, &dh, &self.w13, true, hd);
                Some(done_em(x, b, vec![("bwd.dh", dh.from_candidate)], Some(v)))
            }
            "grad.topk_weights" => {
                let dy = self.dy.as_ref()?;
                let o = self.src("fwd.o")?;
                let exact = rows.slot_dots(dy.x.view(), o.x.view());
                let mut pre = Array2::zeros((cfg.tokens, k));
                for t in 0..cfg.tokens {
                    for j in 0..k {
                        if let Some(r) = rows.slot_row[t * k + j] {
                            pre[[t, j]] = dot_bound(
                                (0..hd).map(|c| (dy.v[[t, c]].abs() + dy.b[[t, c]], dy.b[[t, c]], o.v[[r, c]].abs() + o.b[[r, c]], o.b[[r, c]])),
                                self.kappa(hd),
                                hd,
                            );
                        }
                    }
                }
                let bound = store(exact.clone(), pre, st.grad_topk_weights).b;
                Some(done(exact, bound, vec![("fwd.o", o.from_candidate)]))
            }
            "grad.w2" => {
                let d = self.src("bwd.do")?;
                let a = self.src("fwd.a")?;
                let (b, x, v) = self.weight_gemm(&self.plans.wgrad2, &d, &a, hd, id);
                Some(done3(x, b, vec![("bwd.do", d.from_candidate), ("fwd.a", a.from_candidate)], v))
            }
            "grad.w13" => {
                let dh = self.src("bwd.dh")?;
                let (b, x, v) = self.weight_gemm(&self.plans.wgrad1, &dh, &self.x_rows, 2 * id, hd);
                Some(done3(x, b, vec![("bwd.dh", dh.from_candidate)], v))
            }
            "grad.x" => {
                let dx = self.src("bwd.dx_rows")?;
                let gtw = self.src("grad.topk_weights")?;
                let router = self.dlogits(&gtw).map(|(dl, dl_x)| {
                    let rw = Src::input(ctx.case.inputs.router_weight.as_ref().expect("routed cases have a router"), st.inputs).t();
                    let rt = gemm_stage(&Self::f32_plan(), dl.v.view(), dl.b.view(), rw.v.view(), rw.b.view(), Storage::F32).out;
                    (rt, dl_x, rw.x)
                });
                let undispatch = |t: usize, c: usize, out: &mut Vec<(f64, f64)>| {
                    for j in 0..k {
                        if let Some(r) = rows.slot_row[t * k + j] {
                            out.push((dx.x[[r, c]], 1.0));
                        }
                    }
                };
                let exact = match &router {
                    Some((_, dl_x, rwt)) => gemm::matmul_nt_plus(Engine::default(), dl_x.view(), rwt.view(), Some(&undispatch)),
                    None => {
                        let empty = Array2::<f64>::zeros((cfg.tokens, 0));
                        let none = Array2::<f64>::zeros((hd, 0));
                        gemm::matmul_nt_plus(Engine::default(), empty.view(), none.view(), Some(&undispatch))
                    }
                };
                let mut pre = Array2::zeros((cfg.tokens, hd));
                for t in 0..cfg.tokens {
                    let rs: Vec<usize> = (0..k).filter_map(|j| rows.slot_row[t * k + j]).collect();
                    for c in 0..hd {
                        let mut terms: Vec<(f64, f64)> = rs.iter().map(|&r| (dx.v[[r, c]], dx.b[[r, c]])).collect();
                        if let Some((rt, _, _)) = &router {
                            terms.push((rt.v[[t, c]], rt.b[[t, c]]));
                        }
                        pre[[t, c]] = dot_bound(terms.iter().map(|&(v, b)| (v.abs() + b, b, 1.0, 0.0)), self.kappa(terms.len()), terms.len());
                    }
                }
                let bound = store(exact.clone(), pre, st.grad_x).b;
                let mut inputs = vec![("bwd.dx_rows", dx.from_candidate)];
                if router.is_some() {
                    inputs.push(("grad.topk_weights", gtw.from_candidate));
                }
                Some(done(exact, bound, inputs))
            }
            "grad.router.weight" => {
                let gtw = self.src("grad.topk_weights")?;
                let (dl, dl_x) = self.dlogits(&gtw)?;
                let xt = self.x.t();
                let dlt = dl.t();
                let out = gemm_stage(&Self::f32_plan(), dlt.v.view(), dlt.b.view(), xt.v.view(), xt.b.view(), st.grad_w).out;
                let exact = gemm::matmul_nt(dl_x.t(), self.x.x.t());
                Some(done_em(exact, out.b, vec![("grad.topk_weights", gtw.from_candidate)], Some(out.v)))
            }
            _ => None,
        }
    }
}
