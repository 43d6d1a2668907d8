//! The layer as a faithful kernel of a low-precision [`Recipe`] computes it, with a sound per-element error
//! bound on every output and intermediate.
//!
//! Stage by stage, mirroring [`crate::layer`]: inputs rounded to the recipe's input precision; per expert,
//! each GEMM's operands quantised as the recipe says ([`crate::quant`]) and accumulated under its model
//! ([`crate::accum`]); SwiGLU and its backward evaluated as f32 code does; every stored tensor rounded to
//! its storage precision. Each tensor is [`Tracked`]: the emulated value and a bound `b` such that
//! |value of any faithful kernel − exact oracle value| ≤ b, elementwise ([`stage`] derives it).
//!
//! Routing is the exact oracle's (ids and weights), the weights rounded to the recipe's weight storage, plus
//! [`route_bound`]'s allowance for a kernel that routes in f32 from the exact logits: the emulator does not
//! model a low-precision router (its GEMM), and a kernel whose top-k differs from the oracle's
//! (near-ties) must be checked with the routing given. `grad.topk_weights` is bounded for the row dot
//! `<dy, o>`; `grad.router.weight` and the router's part of `grad.x` through the routing Jacobian.

pub mod act_bound;
pub mod route_bound;
pub mod tightness;
pub mod operand;
pub mod products;
pub mod stage;

use ndarray::{s, Array2, Array3, ArrayD, ArrayView2, Axis, CowArray, Ix2, Ix3, Zip};
use rayon::prelude::*;

use crate::accum::{self, Model};
use crate::config::MoeConfig;
use crate::dispatch::RowMap;
use crate::layer::{route_inputs, timed, Backward, Lap, Forward, LayerInputs, Options};
use crate::quant::QuantTensor;
use crate::recipe::{Recipe, Storage};
use crate::route;

pub use stage::{accumulation_coefficient, GemmPlan, Tracked};
use stage::{dot_bound, dot_dev, gemm_stage_into, gemm_stage_with, store, store_dev, Fed, StageIn, StageOut};

/// A recipe that cannot be run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmulateError {
    #[error("recipe: {0}")]
    Recipe(String),
}

/// A quantised operand as the recipe fed it: element values and per-block dequant scales.
#[derive(Clone, Debug)]
pub struct Quantised {
    /// `q.<name>` in the case format (`q.x`, `q.w13`, `q.fwd.a`, ...).
    pub name: String,
    pub format: crate::formats::Format,
    /// Block shape in the tensor's own layout (`"1x128"`, `"128x128"`).
    pub block: String,
    pub q: ArrayD<f64>,
    pub scale: ArrayD<f64>,
}

/// Emulated results, in the oracle's structures, and the bound of every tensor by its case-format name.
pub struct Emulated {
    pub recipe: Recipe,
    pub fwd: Forward,
    pub bwd: Option<Backward>,
    /// Per tensor, the a-priori bound on |faithful kernel − exact|. Bounds are kept in f32, rounded up
    /// (sound, and at most 2^-23 relative looser): the weight gradients' bounds and deviations are 9.6 GB
    /// in f64 at qwen3-30b-a3b's shape, and fresh memory is what the emulator spends most time on.
    pub bounds: Vec<(String, ArrayD<f32>)>,
    /// Per tensor, a bound on |any faithful kernel's value − this emulation's value| (same names, f32
    /// rounded up).
    pub deviations: Vec<(String, ArrayD<f32>)>,
    pub quantised: Vec<Quantised>,
}

impl Emulated {
    pub fn bound(&self, name: &str) -> Option<&ArrayD<f32>> {
        self.bounds.iter().find(|(n, _)| n == name).map(|(_, b)| b)
    }

    pub fn deviation(&self, name: &str) -> Option<&ArrayD<f32>> {
        self.deviations.iter().find(|(n, _)| n == name).map(|(_, b)| b)
    }

    /// The tightest sound bound on |faithful kernel − exact| for tensor `name` when the exact values are
    /// known: elementwise the smaller of the a-priori bound and |emulated − exact| + the deviation bound
    /// (the triangle inequality through the emulation). `None` if the tensor was not emulated.
    pub fn check_bound(&self, name: &str, exact: ndarray::ArrayViewD<f64>) -> Option<ArrayD<f64>> {
        let b = self.bound(name)?;
        let v = crate::layer::named_tensor(&self.fwd, self.bwd.as_ref(), name)?;
        let mut out = b.mapv(f64::from);
        match self.deviation(name) {
            Some(d) if d.shape() == b.shape() && exact.shape() == b.shape() => {
                Zip::from(&mut out).and(&v).and(&exact).and(d).for_each(|o, &v, &x, &d| {
                    let through = through_emulation(v, x, f64::from(d));
                    if through < *o {
                        *o = through; // (not f64::min: a NaN bound stays NaN)
                    }
                });
                Some(out)
            }
            _ => Some(out),
        }
    }
}

/// The bound on |faithful kernel − exact| through the emulation, from the emulated value `v`, the exact
/// `x` and the deviation bound `d` (triangle inequality), made an upper bound of its own f64 evaluation.
#[inline]
pub fn through_emulation(v: f64, x: f64, d: f64) -> f64 {
    ((v - x).abs() + d) * (1.0 + 2f64.powi(-50)) + f64::MIN_POSITIVE
}

/// The recipe's six GEMMs, parsed.
struct Plans {
    gemm1: GemmPlan,
    gemm2: GemmPlan,
    dgrad2: GemmPlan,
    wgrad2: GemmPlan,
    dgrad1: GemmPlan,
    wgrad1: GemmPlan,
    vector: Model,
}

impl Plans {
    fn parse(r: &Recipe, same_schedule: bool) -> Result<Plans, EmulateError> {
        let p = |name, g| GemmPlan::parse(name, g).map(|p| GemmPlan { same_schedule, ..p });
        Ok(Plans {
            gemm1: p("gemm1", &r.gemm1)?,
            gemm2: p("gemm2", &r.gemm2)?,
            dgrad2: p("dgrad2", &r.dgrad2)?,
            wgrad2: p("wgrad2", &r.wgrad2)?,
            dgrad1: p("dgrad1", &r.dgrad1)?,
            wgrad1: p("wgrad1", &r.wgrad1)?,
            vector: stage::parse_model(&r.vector_accumulate)?,
        })
    }
}

/// A tensor rounded to `st`, tracked with its exact rounding error.
fn read_as(x: &Array2<f64>, st: Storage) -> Tracked {
    let v = x.mapv(|e| st.round(e));
    let b = Zip::from(x).and(&v).map_collect(|&x, &v| (x - v).abs());
    Tracked { v, b }
}

/// A weight tensor rounded to `st`; its rounding errors only when any is non-zero (bf16 weights read as
/// bf16 have none, and the bounds of a 3 GB weight need not be a 3 GB array of zeros). Weights already in
/// their storage format, the usual case, are used in place: a rounded copy and its error array would
/// be another 9.6 GB at qwen3-30b-a3b's shape, more than the benchmark machine's memory allows.
fn read_as3(x: &Array3<f64>, st: Storage) -> (CowArray<'_, f64, Ix3>, Option<Array3<f64>>) {
    let unchanged = |e: &f64| st.round(*e).to_bits() == e.to_bits();
    let representable = match x.as_slice_memory_order() {
        Some(flat) => flat.par_iter().all(unchanged),
        None => x.iter().all(unchanged),
    };
    if representable {
        return (CowArray::from(x.view()), None);
    }
    let v = x.mapv(|e| st.round(e));
    let b = Zip::from(x).and(&v).map_collect(|&x, &v| (x - v).abs());
    let any = b.iter().any(|&e| e != 0.0);
    (CowArray::from(v), any.then_some(b))
}

/// A stage operand from its value, bound and deviation bound.
fn op<'a>(v: ArrayView2<'a, f64>, b: ArrayView2<'a, f64>, d: Option<ArrayView2<'a, f64>>) -> StageIn<'a> {
    StageIn { v, b, d }
}

/// Expert `e`'s slice of a weight's bounds (zeros, without storage, when the weight is exact).
fn bound_of<'a>(b: &'a Option<Array3<f64>>, zero: &'a Array2<f64>, e: usize, shape: (usize, usize)) -> ArrayView2<'a, f64> {
    match b {
        Some(b) => b.index_axis(Axis(0), e),
        None => zero.broadcast(shape).expect("a 1x1 array broadcasts"),
    }
}

/// The transpose of expert `e`'s slice of a weight's bounds (`shape` untransposed): a contiguous copy
/// when the weight has bounds, else the transposed zero broadcast (no weight-sized array of zeros).
fn bound_t<'a>(b: &'a Option<Array3<f64>>, zero: &'a Array2<f64>, e: usize, shape: (usize, usize)) -> CowArray<'a, f64, Ix2> {
    match b {
        Some(b) => CowArray::from(transposed(b.index_axis(Axis(0), e))),
        None => CowArray::from(zero.broadcast((shape.1, shape.0)).expect("a 1x1 array broadcasts")),
    }
}

/// The transpose of a weight slice or of an expert's rows, contiguous (a per-expert temporary, in this
/// thread's reused memory: give it back with [`crate::scratch::give_array`]).
fn transposed(x: ArrayView2<f64>) -> Array2<f64> {
    let mut t = crate::scratch::zeros2(x.ncols(), x.nrows());
    t.assign(&x.t());
    t
}

fn rows_of(t: &Tracked, r: std::ops::Range<usize>) -> (ArrayView2<'_, f64>, ArrayView2<'_, f64>) {
    (t.v.slice(s![r.clone(), ..]), t.b.slice(s![r, ..]))
}

/// Run `f` for every expert in parallel, each writing its own rows of the expert-major results (values,
/// bounds, deviations) in place; what each expert's stage fed, in expert order.
fn per_expert<F>(rows: &RowMap, width: usize, dev: bool, f: F) -> (Tracked, Array2<f64>, Vec<Fed>)
where
    F: Fn(usize, StageOut<f64>) -> Fed + Sync,
{
    let m = rows.rows();
    let mut v = crate::bigmem::zeros((m, width));
    let mut b = crate::bigmem::zeros((m, width));
    let mut d = crate::bigmem::zeros((m, width));
    let fed = {
        // Disjoint row blocks, one per expert (an expert's rows are contiguous, in expert order).
        let mut parts = Vec::with_capacity(rows.experts);
        let (mut v, mut b, mut d) = (v.view_mut(), b.view_mut(), d.view_mut());
        for e in 0..rows.experts {
            let len = rows.expert_rows(e).len();
            let ((hv, tv), (hb, tb), (hd, td)) = (v.split_at(Axis(0), len), b.split_at(Axis(0), len), d.split_at(Axis(0), len));
            parts.push((e, StageOut { v: hv, b: hb, d: dev.then_some(hd) }));
            (v, b, d) = (tv, tb, td);
        }
        parts.into_par_iter().map(|(e, out)| f(e, out)).collect()
    };
    (Tracked { v, b }, d, fed)
}

/// `x` in f32, rounded up (x ≥ 0 or NaN): nearest, then one ulp up when that fell below. (Written as a
/// select, so that loops of it vectorise.)
#[inline]
pub fn up32(x: f64) -> f32 {
    let f = x as f32;
    let next = f32::from_bits(f.to_bits().wrapping_add(1));
    if (f as f64) < x {
        next
    } else {
        f
    }
}

/// A bound array in f32, rounded up.
fn up32_all<D: ndarray::Dimension>(x: &ndarray::Array<f64, D>) -> ArrayD<f32> {
    x.mapv(up32).into_dyn()
}

/// Per-expert weight-shaped results `[E, p, q]`, each expert's written in place by `f`: values, and
/// bounds and deviations in f32 rounded up.
fn per_expert_w<F>(e_n: usize, shape: (usize, usize), dev: bool, f: F) -> (Array3<f64>, Array3<f32>, Array3<f32>)
where
    F: Fn(usize, StageOut<f32>) + Sync,
{
    let mut v = crate::bigmem::zeros((e_n, shape.0, shape.1));
    let mut b = crate::bigmem::zeros((e_n, shape.0, shape.1));
    let mut d = crate::bigmem::zeros((e_n, shape.0, shape.1));
    v.axis_iter_mut(Axis(0))
        .into_par_iter()
        .zip(b.axis_iter_mut(Axis(0)))
        .zip(d.axis_iter_mut(Axis(0)))
        .enumerate()
        .for_each(|(e, ((v, b), d))| f(e, StageOut { v, b, d: dev.then_some(d) }));
    (v, b, d)
}

/// Stack per-expert quantised weight operands into `q.<name>` `[E, ...]`.
fn stack_weights(name: &str, outs: &[Fed]) -> Option<Quantised> {
    let qs: Vec<&QuantTensor> = outs.iter().filter_map(|o| o.qb.as_ref()).collect();
    if qs.len() != outs.len() || qs.is_empty() {
        return None;
    }
    let qv: Vec<_> = qs.iter().map(|q| q.q.view()).collect();
    let sv: Vec<_> = qs.iter().map(|q| q.scale.view()).collect();
    Some(Quantised {
        name: name.into(),
        format: qs[0].spec.format,
        block: qs[0].spec.block.to_string(),
        q: ndarray::stack(Axis(0), &qv).ok()?.into_dyn(),
        scale: ndarray::stack(Axis(0), &sv).ok()?.into_dyn(),
    })
}

/// The quantisation of a whole activation `[rows, K]` with row blocks (the same blocks each expert's
/// slice gets, as blocks never cross rows).
fn quantise_rows(name: &str, plan: &GemmPlan, x: &Array2<f64>) -> Option<Quantised> {
    let p = plan.a.as_ref()?;
    if !matches!(p.spec.block, crate::quant::Block::Rows(_)) {
        return None;
    }
    let q = crate::quant::quantize(x.view(), &p.spec);
    Some(Quantised { name: name.into(), format: p.spec.format, block: p.spec.block.to_string(), q: q.q.into_dyn(), scale: q.scale.into_dyn() })
}

/// Drop a stage's quantised operands unless they are kept for output.
fn keep_q(o: Fed, keep: bool) -> Fed {
    if keep {
        o
    } else {
        // The codes are weight-sized per expert: kept for the thread's next stage ([`crate::scratch`]).
        for q in [o.qa, o.qb].into_iter().flatten() {
            crate::scratch::give_array(q.q);
        }
        Fed { qa: None, qb: None }
    }
}

/// Emulate forward (and backward when `inp.dy` is present) under `recipe`, keeping the quantised
/// operands (`q.<name>`) for output and computing the deviation bounds ([`run_opts`] chooses).
pub fn run(inp: &LayerInputs, recipe: &Recipe, opt: Options) -> Result<Emulated, EmulateError> {
    run_opts(inp, recipe, opt, EmulateOptions { keep_quantised: true, same_schedule: false, deviations: true })
}

/// How to emulate.
#[derive(Clone, Copy, Debug, Default)]
pub struct EmulateOptions {
    /// Keep the quantised operands (`q.<name>`) for output (they are as large as the weights).
    pub keep_quantised: bool,
    /// Deviation bounds for kernels declared to follow the recipe's accumulation schedule exactly (K order,
    /// instruction width, promotion interval, the slot order of the short sums): such a kernel fed the same
    /// operands gives the same bits, so only operand deviations (and f32 evaluation of SwiGLU and the router)
    /// remain. Much tighter; a kernel with another order (split-K, atomics) fails it.
    pub same_schedule: bool,
    /// Compute the deviation bounds ([`Emulated::deviations`]: |any faithful kernel − this emulation|), which
    /// only `check` uses (with the exact values, [`Emulated::check_bound`]). Without them a run does less
    /// work and holds less memory (the weight gradients' deviations alone are 2.4 GB at qwen3-30b-a3b's
    /// shape), and [`Emulated::deviations`] is empty, so that [`Emulated::check_bound`] falls back to the
    /// a-priori bound.
    pub deviations: bool,
}

/// A stage operand's deviation bound, when deviations are computed at all (`None` tells the stage to
/// derive none: [`stage::gemm_stage_into`]).
fn dev_in(on: bool, d: ArrayView2<'_, f64>) -> Option<ArrayView2<'_, f64>> {
    on.then_some(d)
}

/// [`store_dev`] when deviations are computed; else `pre` as it is (zeros nobody reads: the run exposes no
/// deviations then, and untouched zeros cost no memory).
fn finish_dev(on: bool, raw: &Array2<f64>, pre: Array2<f64>, st: Storage) -> Array2<f64> {
    if on {
        store_dev(raw, pre, st)
    } else {
        pre
    }
}

/// [`run`] with every option.
pub fn run_opts(inp: &LayerInputs, recipe: &Recipe, opt: Options, opts: EmulateOptions) -> Result<Emulated, EmulateError> {
    let out = run_stages(inp, recipe, opt, opts);
    // The stages' reused temporaries ([`crate::scratch`]) are not kept past the run.
    crate::scratch::release();
    out
}

fn run_stages(inp: &LayerInputs, recipe: &Recipe, opt: Options, opts: EmulateOptions) -> Result<Emulated, EmulateError> {
    let mut lap = Lap::start();
    let keep_quantised = opts.keep_quantised;
    let dev = opts.deviations;
    let plans = Plans::parse(recipe, opts.same_schedule)?;
    let cfg: &MoeConfig = &inp.cfg;
    let st = &recipe.storage;
    let (hd, id, e_n, k) = (cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k);
    let vector_kappa = |n: usize| accumulation_coefficient(&plans.vector, n);
    // The short sums' order is part of the schedule (slot order, feature order).
    let dev_kappa = |n: usize| if opts.same_schedule { 0.0 } else { accumulation_coefficient(&plans.vector, n) };
    let mut bounds: Vec<(String, ArrayD<f32>)> = Vec::new();
    let mut quantised = Vec::new();

    // Routing: the exact oracle's.
    let (routed, logits, topk_ids, topk_weights) = route_inputs(inp, opt);
    let rows = RowMap::build(topk_ids.view(), e_n);
    let ranks = rows.ranks(cfg.ep_ranks);
    let w_in = read_as(&topk_weights, st.weights);
    // A kernel that routes itself computes its weights in f32 (`route_bound`: softmax or sigmoid,
    // renormalisation, scaling), on top of the storage rounding; that is also its weights' deviation from the
    // emulator's (none when the routing is given).
    let w_d = match (&logits, &cfg.routing) {
        (Some(l), Some(r)) => &route_bound::weight_allowance(r, l.view(), topk_ids.view()) * &w_in.v.mapv(f64::abs),
        _ => crate::bigmem::zeros(w_in.v.dim()),
    };
    let w_b = &w_in.b + &w_d;
    let mut deviations: Vec<(String, ArrayD<f32>)> = Vec::new();

    let x_in = read_as(&inp.x, st.inputs);
    let (w13_v, w13_b) = read_as3(&inp.w13, st.inputs);
    let (w2_v, w2_b) = read_as3(&inp.w2, st.inputs);
    let x_rows = Tracked { v: rows.gather(x_in.v.view()), b: rows.gather(x_in.b.view()) };
    let zero = Array2::<f64>::zeros((1, 1));

    lap.mark("emulate inputs");
    // GEMM1: h = x_rows · w13[e]ᵀ
    let (h, h_d, outs) = timed("emulate fwd.h", || {
        per_expert(&rows, 2 * id, dev, |e, out| {
            let (a, ab) = rows_of(&x_rows, rows.expert_rows(e));
            let none = zero.broadcast(a.dim()).expect("1x1 broadcasts");
            let fed = gemm_stage_into(&plans.gemm1, op(a, ab, dev_in(dev, none)), op(w13_v.index_axis(Axis(0), e), bound_of(&w13_b, &zero, e, (2 * id, hd)), None), st.h, out);
            keep_q(fed, keep_quantised)
        })
    });
    if keep_quantised {
        quantised.extend(quantise_rows("q.x", &plans.gemm1, &x_in.v));
    }
    quantised.extend(stack_weights("q.w13", &outs));
    drop(outs);

    lap.restart();
    // SwiGLU
    let m = rows.rows();
    let mut a = Tracked { v: crate::bigmem::zeros((m, id)), b: crate::bigmem::zeros((m, id)) };
    let mut a_dpre = crate::bigmem::zeros((m, id));
    a.v.axis_iter_mut(Axis(0))
        .into_par_iter()
        .zip(a.b.axis_iter_mut(Axis(0)))
        .zip(a_dpre.axis_iter_mut(Axis(0)))
        .enumerate()
        .for_each(|(r, ((mut av, mut ab), mut ad))| {
            for c in 0..id {
                let (g, u) = (h.v[[r, c]], h.v[[r, id + c]]);
                let (v, b) = act_bound::forward(cfg.activation, g, h.b[[r, c]], u, h.b[[r, id + c]]);
                av[c] = v;
                ab[c] = b;
                if dev {
                    ad[c] = act_bound::forward_dev(cfg.activation, g, h_d[[r, c]], u, h_d[[r, id + c]]);
                }
            }
        });
    let a_d = finish_dev(dev, &a.v, a_dpre, st.a);
    let a = store(a.v, a.b, st.a);

    lap.mark("emulate fwd.a (SwiGLU)");
    // GEMM2: o = a · w2[e]ᵀ
    let (o, o_d, outs) = timed("emulate fwd.o", || {
        per_expert(&rows, hd, dev, |e, out| {
            let r = rows.expert_rows(e);
            let (av, ab) = rows_of(&a, r.clone());
            let fed = gemm_stage_into(&plans.gemm2, op(av, ab, dev_in(dev, a_d.slice(s![r, ..]))), op(w2_v.index_axis(Axis(0), e), bound_of(&w2_b, &zero, e, (hd, id)), None), st.o, out);
            keep_q(fed, keep_quantised)
        })
    });
    if keep_quantised {
        quantised.extend(quantise_rows("q.fwd.a", &plans.gemm2, &a.v));
    }
    quantised.extend(stack_weights("q.w2", &outs));
    drop(outs);

    lap.restart();
    // Combine: y_t = Σ_j w_j·o_j, in slot order.
    let mut y_raw = crate::bigmem::zeros((cfg.tokens, hd));
    let mut y_pre = crate::bigmem::zeros((cfg.tokens, hd));
    let mut y_dpre = crate::bigmem::zeros((cfg.tokens, hd));
    y_raw.axis_iter_mut(Axis(0)).into_par_iter().zip(y_pre.axis_iter_mut(Axis(0))).zip(y_dpre.axis_iter_mut(Axis(0))).enumerate().for_each(|(t, ((mut yr, mut yb), mut yd))| {
        let slots: Vec<(usize, usize)> = (0..k).filter_map(|j| rows.slot_row[t * k + j].map(|r| (j, r))).collect();
        let wv: Vec<f64> = slots.iter().map(|&(j, _)| w_in.v[[t, j]]).collect();
        for c in 0..hd {
            let ov: Vec<f64> = slots.iter().map(|&(_, r)| o.v[[r, c]]).collect();
            yr[c] = accum::dot(&plans.vector, &wv, &ov, None);
            yb[c] = dot_bound(
                slots.iter().map(|&(j, r)| (w_in.v[[t, j]].abs() + w_b[[t, j]], w_b[[t, j]], o.v[[r, c]].abs() + o.b[[r, c]], o.b[[r, c]])),
                vector_kappa(slots.len()),
                slots.len(),
            );
            if dev {
                yd[c] = dot_dev(
                    slots.iter().map(|&(j, r)| (w_in.v[[t, j]].abs(), w_d[[t, j]], o.v[[r, c]].abs(), o_d[[r, c]])),
                    dev_kappa(slots.len()),
                    slots.len(),
                );
            }
        }
    });
    let y_d = finish_dev(dev, &y_raw, y_dpre, st.y);
    let y = store(y_raw, y_pre, st.y);

    lap.mark("emulate y (combine)");
    bounds.push(("y".into(), up32_all(&y.b)));
    bounds.push(("fwd.h".into(), up32_all(&h.b)));
    bounds.push(("fwd.a".into(), up32_all(&a.b)));
    bounds.push(("fwd.o".into(), up32_all(&o.b)));
    if dev {
        deviations.push(("y".into(), up32_all(&y_d)));
        deviations.push(("fwd.h".into(), up32_all(&h_d)));
        deviations.push(("fwd.a".into(), up32_all(&a_d)));
        deviations.push(("fwd.o".into(), up32_all(&o_d)));
    }

    let fwd = Forward {
        y: y.v,
        topk_ids,
        topk_weights: w_in.v.clone(),
        routed,
        logits,
        rows,
        ranks,
        // Moved, not copied (the backward reads them from `fwd`): copies would be 0.3 GB of fresh memory
        // at qwen3-30b-a3b's shape, and fresh memory is what the emulator spends most of its time on.
        h: h.v,
        a: a.v,
        o: o.v,
    };
    lap.mark("emulate fwd finish");
    let Some(dy) = inp.dy.as_ref() else {
        return Ok(Emulated { recipe: recipe.clone(), fwd, bwd: None, bounds, deviations, quantised });
    };
    let rows = &fwd.rows;
    let dy_in = read_as(dy, st.inputs);

    // grad.topk_weights[t, j] = <dy_t, o_row>
    let mut gtw = crate::bigmem::zeros((cfg.tokens, k));
    let mut gtw_b = crate::bigmem::zeros((cfg.tokens, k));
    let mut gtw_dpre = crate::bigmem::zeros((cfg.tokens, k));
    gtw.axis_iter_mut(Axis(0)).into_par_iter().zip(gtw_b.axis_iter_mut(Axis(0))).zip(gtw_dpre.axis_iter_mut(Axis(0))).enumerate().for_each(|(t, ((mut g, mut gb), mut gd))| {
        for j in 0..k {
            if let Some(r) = rows.slot_row[t * k + j] {
                g[j] = accum::dot(&plans.vector, dy_in.v.row(t).as_slice().unwrap(), fwd.o.row(r).as_slice().unwrap(), None);
                gb[j] = dot_bound(
                    (0..hd).map(|c| (dy_in.v[[t, c]].abs() + dy_in.b[[t, c]], dy_in.b[[t, c]], fwd.o[[r, c]].abs() + o.b[[r, c]], o.b[[r, c]])),
                    vector_kappa(hd),
                    hd,
                );
                if dev {
                    gd[j] = dot_dev((0..hd).map(|c| (dy_in.v[[t, c]].abs(), 0.0, fwd.o[[r, c]].abs(), o_d[[r, c]])), dev_kappa(hd), hd);
                }
            }
        }
    });
    let gtw_d = finish_dev(dev, &gtw, gtw_dpre, st.grad_topk_weights);
    let gtw = store(gtw, gtw_b, st.grad_topk_weights);

    lap.mark("emulate grad.topk_w");
    // bwd.do = w·dy per row (one f32 product).
    let mut do_raw = crate::bigmem::zeros((m, hd));
    let mut do_pre = crate::bigmem::zeros((m, hd));
    let mut do_dpre = crate::bigmem::zeros((m, hd));
    do_raw.axis_iter_mut(Axis(0)).into_par_iter().zip(do_pre.axis_iter_mut(Axis(0))).zip(do_dpre.axis_iter_mut(Axis(0))).enumerate().for_each(|(r, ((mut dr, mut db), mut dd))| {
        let (t, j) = (rows.row_token[r], rows.row_slot[r]);
        let (wv, wb, wd) = (w_in.v[[t, j]], w_b[[t, j]], w_d[[t, j]]);
        for c in 0..hd {
            dr[c] = (wv * dy_in.v[[t, c]]) as f32 as f64;
            db[c] = dot_bound(std::iter::once((wv.abs() + wb, wb, dy_in.v[[t, c]].abs() + dy_in.b[[t, c]], dy_in.b[[t, c]])), 2f64.powi(-24), 1);
            // Even with the same inputs a kernel may round w·dy once (to bf16) where the emulator rounds to
            // f32 first: the product's rounding counts for both.
            if dev {
                dd[c] = dot_dev(std::iter::once((wv.abs(), wd, dy_in.v[[t, c]].abs(), 0.0)), 2f64.powi(-24), 1);
            }
        }
    });
    let do_d = finish_dev(dev, &do_raw, do_dpre, st.do_);
    let do_ = store(do_raw, do_pre, st.do_);

    lap.mark("emulate bwd.do");
    // da = do · w2[e]
    let (da, da_d, _) = timed("emulate bwd.da", || {
        per_expert(rows, id, dev, |e, out| {
            let r = rows.expert_rows(e);
            let (dv, db) = rows_of(&do_, r.clone());
            let wt = transposed(w2_v.index_axis(Axis(0), e));
            let wtb = bound_t(&w2_b, &zero, e, (hd, id));
            let fed = gemm_stage_into(&plans.dgrad2, op(dv, db, dev_in(dev, do_d.slice(s![r, ..]))), op(wt.view(), wtb.view(), None), st.da, out);
            crate::scratch::give_array(wt);
            keep_q(fed, false)
        })
    });
    if keep_quantised {
        quantised.extend(quantise_rows("q.bwd.do", &plans.dgrad2, &do_.v));
    }

    lap.restart();
    // SwiGLU backward
    let mut dh_raw = crate::bigmem::zeros((m, 2 * id));
    let mut dh_pre = crate::bigmem::zeros((m, 2 * id));
    let mut dh_dpre = crate::bigmem::zeros((m, 2 * id));
    dh_raw.axis_iter_mut(Axis(0)).into_par_iter().zip(dh_pre.axis_iter_mut(Axis(0))).zip(dh_dpre.axis_iter_mut(Axis(0))).enumerate().for_each(|(r, ((mut dr, mut db), mut dd))| {
        for c in 0..id {
            let (g, u, dav) = (fwd.h[[r, c]], fwd.h[[r, id + c]], da.v[[r, c]]);
            let ((dg, bg), (du, bu)) = act_bound::backward(cfg.activation, g, h.b[[r, c]], u, h.b[[r, id + c]], dav, da.b[[r, c]]);
            dr[c] = dg;
            db[c] = bg;
            dr[id + c] = du;
            db[id + c] = bu;
            if dev {
                let (dgd, dud) = act_bound::backward_dev(cfg.activation, g, h_d[[r, c]], u, h_d[[r, id + c]], dav, da_d[[r, c]]);
                dd[c] = dgd;
                dd[id + c] = dud;
            }
        }
    });
    let dh_d = finish_dev(dev, &dh_raw, dh_dpre, st.dh);
    let dh = store(dh_raw, dh_pre, st.dh);

    lap.mark("emulate bwd.dh (SwiGLU)");
    // grad.w2[e] = do_eᵀ · a_e
    let (gw2, gw2_b, gw2_d) = timed("emulate grad.w2", || {
        per_expert_w(e_n, (hd, id), dev, |e, out| {
            let r = rows.expert_rows(e);
            let (dv, db) = rows_of(&do_, r.clone());
            let (av, ab) = (fwd.a.slice(s![r.clone(), ..]), a.b.slice(s![r.clone(), ..]));
            let t = [dv, db, av, ab].map(transposed);
            let d = dev.then(|| [do_d.slice(s![r.clone(), ..]), a_d.slice(s![r, ..])].map(transposed));
            let d_in = |i: usize| d.as_ref().map(|d| d[i].view());
            let fed = gemm_stage_into(&plans.wgrad2, op(t[0].view(), t[1].view(), d_in(0)), op(t[2].view(), t[3].view(), d_in(1)), st.grad_w, out);
            t.into_iter().chain(d.into_iter().flatten()).for_each(crate::scratch::give_array);
            keep_q(fed, false);
        })
    });

    lap.restart();
    // dx_rows = dh · w13[e]
    let (dx_rows, dx_d, _) = timed("emulate bwd.dx_rows", || {
        per_expert(rows, hd, dev, |e, out| {
            let r = rows.expert_rows(e);
            let (dv, db) = rows_of(&dh, r.clone());
            let wt = transposed(w13_v.index_axis(Axis(0), e));
            let wtb = bound_t(&w13_b, &zero, e, (2 * id, hd));
            let fed = gemm_stage_into(&plans.dgrad1, op(dv, db, dev_in(dev, dh_d.slice(s![r, ..]))), op(wt.view(), wtb.view(), None), st.dx_rows, out);
            crate::scratch::give_array(wt);
            keep_q(fed, false)
        })
    });
    if keep_quantised {
        quantised.extend(quantise_rows("q.bwd.dh", &plans.dgrad1, &dh.v));
    }

    lap.restart();
    // grad.w13[e] = dh_eᵀ · x_rows_e
    let (gw13, gw13_b, gw13_d) = timed("emulate grad.w13", || {
        per_expert_w(e_n, (2 * id, hd), dev, |e, out| {
            let r = rows.expert_rows(e);
            let (dv, db) = rows_of(&dh, r.clone());
            let (xv, xb) = rows_of(&x_rows, r.clone());
            let t = [dv, db, xv, xb].map(transposed);
            let d = dev.then(|| transposed(dh_d.slice(s![r, ..])));
            let fed = gemm_stage_into(&plans.wgrad1, op(t[0].view(), t[1].view(), d.as_ref().map(|d| d.view())), op(t[2].view(), t[3].view(), None), st.grad_w, out);
            t.into_iter().chain(d).for_each(crate::scratch::give_array);
            keep_q(fed, false);
        })
    });

    lap.restart();
    // Router: dlogits through the routing Jacobian, grad.router.weight = dlᵀ·x, grad.x's router term dl·R.
    let f32_plan = GemmPlan { name: "router", model: Model::F32Fma, a: None, b: None, same_schedule: opts.same_schedule };
    let (dlogits, router_term, grad_router_weight, grw_b, grw_d, rt_d) = match (&fwd.routed, &cfg.routing, &inp.router_weight, &fwd.logits) {
        (Some(routed), Some(rcfg), Some(rw), Some(lg)) => {
            let dl_exact = route::backward(rcfg, routed, lg.view(), gtw.v.view());
            // |J|·b and |J|·d: the Jacobian's columns from one-hot gradients, each computed once.
            let mut dl_b = Array2::<f64>::zeros(dl_exact.dim());
            let mut dl_d = Array2::<f64>::zeros(dl_exact.dim());
            for j in 0..k {
                let mut onehot = crate::bigmem::zeros((cfg.tokens, k));
                onehot.column_mut(j).fill(1.0);
                let col = route::backward(rcfg, routed, lg.view(), onehot.view());
                for t in 0..cfg.tokens {
                    for e in 0..e_n {
                        let j_abs = col[[t, e]].abs();
                        dl_b[[t, e]] += j_abs * gtw.b[[t, j]];
                        dl_d[[t, e]] += j_abs * gtw_d[[t, j]];
                    }
                }
            }
            // Evaluation in f32 by the kernel (and in f64 by the oracle): errors relative to the magnitudes
            // of the intermediate terms, which cancel in the result (an unchosen expert's gradient is 0 in
            // real numbers under renormalisation, but not in floating point).
            let gmag = Zip::from(&gtw.v).and(&gtw.b).map_collect(|&g, &b| g.abs() + b);
            let mag = route_bound::backward_magnitude(rcfg, routed, lg.view(), gmag.view());
            let dl_b = dl_b * (1.0 + 1e-12) + route_bound::logit_grad_allowance(rcfg, lg.view(), routed.topk_ids.view(), &mag, 1.0);
            // Deviation: the gradient's deviation through |J|, and both evaluations.
            let dl_d = dl_d * (1.0 + 1e-12) + route_bound::logit_grad_allowance(rcfg, lg.view(), routed.topk_ids.view(), &mag, 2.0);
            let dl_d = store_dev(&dl_exact, dl_d, Storage::F32);
            let dl = store(dl_exact, dl_b, Storage::F32);
            let rw_in = read_as(rw, st.inputs);
            let dlt_d = dl_d.t().as_standard_layout().into_owned();
            let grw = gemm_stage_with(
                &f32_plan,
                dl.v.t().as_standard_layout().view(),
                dl.b.t().as_standard_layout().view(),
                dev_in(dev, dlt_d.view()),
                x_in.v.t().as_standard_layout().view(),
                x_in.b.t().as_standard_layout().view(),
                None,
                st.grad_w,
            );
            let rwt_v = rw_in.v.t().as_standard_layout().into_owned();
            let rwt_b = rw_in.b.t().as_standard_layout().into_owned();
            let rt = gemm_stage_with(&f32_plan, dl.v.view(), dl.b.view(), dev_in(dev, dl_d.view()), rwt_v.view(), rwt_b.view(), None, Storage::F32);
            (Some(dl.v), Some(rt.out), Some(grw.out.v), Some(grw.out.b), grw.dev, rt.dev)
        }
        _ => (None, None, None, None, None, None),
    };

    lap.mark("emulate router");
    // grad.x = Σ_j dx_rows (+ router term), in slot order.
    let mut gx_raw = crate::bigmem::zeros((cfg.tokens, hd));
    let mut gx_pre = crate::bigmem::zeros((cfg.tokens, hd));
    let mut gx_dpre = crate::bigmem::zeros((cfg.tokens, hd));
    gx_raw.axis_iter_mut(Axis(0)).into_par_iter().zip(gx_pre.axis_iter_mut(Axis(0))).zip(gx_dpre.axis_iter_mut(Axis(0))).enumerate().for_each(|(t, ((mut gr, mut gb), mut gd))| {
        let rs: Vec<usize> = (0..k).filter_map(|j| rows.slot_row[t * k + j]).collect();
        for c in 0..hd {
            let mut terms: Vec<(f64, f64)> = rs.iter().map(|&r| (dx_rows.v[[r, c]], dx_rows.b[[r, c]])).collect();
            if let Some(rt) = &router_term {
                terms.push((rt.v[[t, c]], rt.b[[t, c]]));
            }
            let vals: Vec<f64> = terms.iter().map(|p| p.0).collect();
            let ones = vec![1.0; vals.len()];
            gr[c] = accum::dot(&plans.vector, &vals, &ones, None);
            gb[c] = dot_bound(terms.iter().map(|&(v, b)| (v.abs() + b, b, 1.0, 0.0)), vector_kappa(terms.len()), terms.len());
            if dev {
                let mut dterms: Vec<(f64, f64)> = rs.iter().map(|&r| (dx_rows.v[[r, c]], dx_d[[r, c]])).collect();
                if let (Some(rt), Some(rd)) = (&router_term, &rt_d) {
                    dterms.push((rt.v[[t, c]], rd[[t, c]]));
                }
                gd[c] = dot_dev(dterms.iter().map(|&(v, d)| (v.abs(), d, 1.0, 0.0)), dev_kappa(dterms.len()), dterms.len());
            }
        }
    });
    let gx_d = finish_dev(dev, &gx_raw, gx_dpre, st.grad_x);
    let grad_x = store(gx_raw, gx_pre, st.grad_x);

    lap.mark("emulate grad.x");
    bounds.push(("grad.x".into(), up32_all(&grad_x.b)));
    bounds.push(("grad.w13".into(), gw13_b.into_dyn()));
    bounds.push(("grad.w2".into(), gw2_b.into_dyn()));
    bounds.push(("grad.topk_weights".into(), up32_all(&gtw.b)));
    if let Some(b) = grw_b {
        bounds.push(("grad.router.weight".into(), up32_all(&b)));
    }
    bounds.push(("bwd.do".into(), up32_all(&do_.b)));
    bounds.push(("bwd.da".into(), up32_all(&da.b)));
    bounds.push(("bwd.dh".into(), up32_all(&dh.b)));
    bounds.push(("bwd.dx_rows".into(), up32_all(&dx_rows.b)));
    if dev {
        deviations.push(("grad.x".into(), up32_all(&gx_d)));
        deviations.push(("grad.w13".into(), gw13_d.into_dyn()));
        deviations.push(("grad.w2".into(), gw2_d.into_dyn()));
        deviations.push(("grad.topk_weights".into(), up32_all(&gtw_d)));
        if let Some(d) = grw_d {
            deviations.push(("grad.router.weight".into(), up32_all(&d)));
        }
        deviations.push(("bwd.do".into(), up32_all(&do_d)));
        deviations.push(("bwd.da".into(), up32_all(&da_d)));
        deviations.push(("bwd.dh".into(), up32_all(&dh_d)));
        deviations.push(("bwd.dx_rows".into(), up32_all(&dx_d)));
    }

    lap.mark("emulate bwd finish");
    let bwd = Backward {
        grad_x: grad_x.v,
        grad_w13: gw13,
        grad_w2: gw2,
        grad_topk_weights: gtw.v,
        grad_router_weight,
        dlogits,
        do_: do_.v,
        da: da.v,
        dh: dh.v,
        dx_rows: dx_rows.v,
    };
    Ok(Emulated { recipe: recipe.clone(), fwd, bwd: Some(bwd), bounds, deviations, quantised })
}
