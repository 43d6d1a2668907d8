//! The MoE layer as a composition of stages, forward and backward, recording every intermediate of the
//! case-file format.
//!
//! | stage | forward | backward |
//! |---|---|---|
//! | route | `logits = x·Rᵀ`, scores, top-k, weights ([`route`]) | `dlogits`, `grad.router.weight = dlogitsᵀ·x` |
//! | dispatch | rows in expert-major order ([`RowMap`]) | `grad.x = Σ_j dx_rows + dlogits·R` (one rounding) |
//! | GEMM1 | `h = x_rows·w13[e]ᵀ` | `dx_rows = dh·w13[e]`, `grad.w13[e] = dhᵀ·x_rows` |
//! | SwiGLU | `a = act(h)` ([`act`]) | `dh = act'(h)·da` |
//! | GEMM2 | `o = a·w2[e]ᵀ` | `da = do·w2[e]`, `grad.w2[e] = doᵀ·a` |
//! | combine | `y = Σ_j w·o` | `do = w·dy`, `grad.topk_weights = <dy, o>` |
//!
//! Every GEMM entry and reduction is exact-then-rounded ([`crate::gemm`], [`crate::exact`]); experts are
//! processed rank by rank (`ep_ranks`), in parallel, and none of that changes a bit of the result.

use ndarray::{s, Array1, Array2, Array3, ArrayView2, ArrayViewMut2, Axis};
use rayon::prelude::*;

use crate::act;
use crate::config::MoeConfig;
use crate::dispatch::{RankLayout, RowMap};
use crate::gemm::{self, Engine};
use crate::route::{self, Routed};

/// Everything a case can give the layer, as f64.
#[derive(Clone, Debug)]
pub struct LayerInputs {
    pub cfg: MoeConfig,
    /// [T, H]
    pub x: Array2<f64>,
    /// [E, 2I, H]: gate rows then up rows.
    pub w13: Array3<f64>,
    /// [E, H, I]
    pub w2: Array3<f64>,
    /// Given routing ([T, k], -1 = unused slot) ...
    pub topk_ids: Option<Array2<i32>>,
    pub topk_weights: Option<Array2<f64>>,
    /// ... or the router that computes it.
    pub router_weight: Option<Array2<f64>>,
    pub router_bias: Option<Array1<f64>>,
    /// Upstream gradient [T, H]; backward runs only when it is present.
    pub dy: Option<Array2<f64>>,
}

/// How to run the layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    pub engine: Engine,
}

/// Forward results and the intermediates backward needs.
#[derive(Clone, Debug)]
pub struct Forward {
    pub y: Array2<f64>,
    pub topk_ids: Array2<i32>,
    pub topk_weights: Array2<f64>,
    /// Router results, when the layer routed itself.
    pub routed: Option<Routed>,
    pub logits: Option<Array2<f64>>,
    pub rows: RowMap,
    pub ranks: RankLayout,
    /// `fwd.h` [M, 2I], `fwd.a` [M, I], `fwd.o` [M, H].
    pub h: Array2<f64>,
    pub a: Array2<f64>,
    pub o: Array2<f64>,
}

/// Gradients and backward intermediates.
#[derive(Clone, Debug)]
pub struct Backward {
    pub grad_x: Array2<f64>,
    pub grad_w13: Array3<f64>,
    pub grad_w2: Array3<f64>,
    pub grad_topk_weights: Array2<f64>,
    pub grad_router_weight: Option<Array2<f64>>,
    pub dlogits: Option<Array2<f64>>,
    /// `bwd.do` [M, H], `bwd.da` [M, I], `bwd.dh` [M, 2I], `bwd.dx_rows` [M, H].
    pub do_: Array2<f64>,
    pub da: Array2<f64>,
    pub dh: Array2<f64>,
    pub dx_rows: Array2<f64>,
}

/// Time a stage when `MOE_ORACLE_TIMING` is set (stderr), so a slow oracle run can be explained.
pub(crate) fn timed<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let mut lap = Lap::start();
    let out = f();
    lap.mark(name);
    out
}

/// [`timed`] for the stretches between a function's timed stages (the emulator's element-wise stages):
/// `mark(name)` prints the time since the last mark (or `restart`) when `MOE_ORACLE_TIMING` is set.
pub(crate) struct Lap(Option<(std::time::Instant, (f64, f64, i64))>);

impl Lap {
    pub(crate) fn start() -> Lap {
        Lap(std::env::var_os("MOE_ORACLE_TIMING").map(|_| (std::time::Instant::now(), cpu_times())))
    }

    /// Start the next stretch without printing (after a stage that printed its own time).
    pub(crate) fn restart(&mut self) {
        *self = Lap::start();
    }

    pub(crate) fn mark(&mut self, name: &str) {
        let Some((t, cpu0)) = self.0 else { return };
        let cpu1 = cpu_times();
        eprintln!(
            "[moe-oracle] {name:<22} {:8.3} s   (CPU user {:.2} s, system {:.2} s, page faults {})",
            t.elapsed().as_secs_f64(),
            cpu1.0 - cpu0.0,
            cpu1.1 - cpu0.1,
            cpu1.2 - cpu0.2
        );
        self.restart();
    }
}

/// Process CPU seconds in user and kernel mode, and minor page faults, for `MOE_ORACLE_TIMING` (system
/// time is where fresh memory's page faults show).
#[cfg(target_os = "linux")]
fn cpu_times() -> (f64, f64, i64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let sec = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (sec(u.ru_utime), sec(u.ru_stime), u.ru_minflt)
}

#[cfg(not(target_os = "linux"))]
fn cpu_times() -> (f64, f64, i64) {
    (0.0, 0.0, 0)
}

/// Run `f(e, rows_of_e)` for every expert, rank by rank, in parallel, each writing its block of rows of
/// an [M, width] array in expert-major order.
pub(crate) fn per_expert_rows<F>(rows: &RowMap, ranks: &RankLayout, width: usize, f: F) -> Array2<f64>
where
    F: Fn(usize, ArrayViewMut2<f64>) + Sync,
{
    let mut out = crate::bigmem::zeros((rows.rows(), width));
    let mut blocks = Vec::with_capacity(rows.experts);
    let mut rest = out.view_mut();
    for e in ranks.ranks.iter().flat_map(|r| r.experts.clone()) {
        let (block, tail) = rest.split_at(Axis(0), rows.expert_rows(e).len());
        blocks.push((e, block));
        rest = tail;
    }
    blocks.into_par_iter().for_each(|(e, block)| f(e, block));
    out
}

/// Run `f(e, grad_of_e)` for every expert in parallel, each writing its [p, q] slice of an [E, p, q] array.
pub(crate) fn per_expert_weights<F>(shape: (usize, usize, usize), f: F) -> Array3<f64>
where
    F: Fn(usize, ArrayViewMut2<f64>) + Sync,
{
    let mut out = crate::bigmem::zeros(shape);
    out.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each(|(e, g)| f(e, g));
    out
}

/// The routing of a case: given top-k, or computed by the router (`logits = x·Rᵀ` exact, then [`route`]).
/// Returns the router's results (when it ran), the logits, the ids and the combine weights.
pub(crate) fn route_inputs(inp: &LayerInputs, opt: Options) -> (Option<Routed>, Option<Array2<f64>>, Array2<i32>, Array2<f64>) {
    let cfg = &inp.cfg;
    match (&inp.topk_ids, &inp.topk_weights) {
        (Some(ids), Some(w)) => (None, None, ids.clone(), w.clone()),
        _ => {
            let r = cfg.routing.as_ref().expect("validated: routing config present when topk is not given");
            let rw = inp.router_weight.as_ref().expect("validated: router.weight present");
            let logits = gemm::matmul_nt_with(opt.engine, inp.x.view(), rw.view());
            let routed = route::forward(r, cfg.top_k, logits.view(), inp.router_bias.as_ref().map(|b| b.view()));
            let (ids, w) = (routed.topk_ids.clone(), routed.topk_weights.clone());
            (Some(routed), Some(logits), ids, w)
        }
    }
}

pub fn forward(inp: &LayerInputs, opt: Options) -> Forward {
    let cfg = &inp.cfg;
    let (hdim, idim) = (cfg.hidden, cfg.intermediate);
    let mm = |a: ArrayView2<f64>, b: ArrayView2<f64>, out: ArrayViewMut2<f64>| {
        gemm::matmul_nt_into(opt.engine, a, b, None, out)
    };

    let (routed, logits, topk_ids, topk_weights) = route_inputs(inp, opt);
    let rows = RowMap::build(topk_ids.view(), cfg.experts);
    let ranks = rows.ranks(cfg.ep_ranks);
    let x_rows = rows.gather(inp.x.view());

    let h = timed("fwd.h (GEMM1)", || {
        per_expert_rows(&rows, &ranks, 2 * idim, |e, out| {
            mm(x_rows.slice(s![rows.expert_rows(e), ..]), inp.w13.index_axis(Axis(0), e), out)
        })
    });
    let mut a = crate::bigmem::zeros((rows.rows(), idim));
    a.axis_iter_mut(Axis(0)).into_par_iter().zip(h.axis_iter(Axis(0))).for_each(|(mut ar, hr)| {
        for i in 0..idim {
            ar[i] = act::forward(cfg.activation, hr[i], hr[idim + i]);
        }
    });
    let o = timed("fwd.o (GEMM2)", || {
        per_expert_rows(&rows, &ranks, hdim, |e, out| {
            mm(a.slice(s![rows.expert_rows(e), ..]), inp.w2.index_axis(Axis(0), e), out)
        })
    });
    let y = timed("y (combine)", || rows.combine(o.view(), topk_weights.view()));
    Forward { y, topk_ids, topk_weights, routed, logits, rows, ranks, h, a, o }
}

pub fn backward(inp: &LayerInputs, fwd: &Forward, dy: ArrayView2<f64>, opt: Options) -> Backward {
    let cfg = &inp.cfg;
    let (hdim, idim, e_n) = (cfg.hidden, cfg.intermediate, cfg.experts);
    let mm = |a: ArrayView2<f64>, b: ArrayView2<f64>, out: ArrayViewMut2<f64>| {
        gemm::matmul_nt_into(opt.engine, a, b, None, out)
    };
    let rows = &fwd.rows;
    let ranks = &fwd.ranks;

    let grad_topk_weights = timed("grad.topk_weights", || rows.slot_dots(dy, fwd.o.view()));
    let do_ = rows.dispatch_weighted(dy, fwd.topk_weights.view());

    // da = do · w2[e]  (w2[e] is [H, I]; contract over H)
    let da = timed("bwd.da (GEMM2 dgrad)", || {
        per_expert_rows(rows, ranks, idim, |e, out| {
            mm(do_.slice(s![rows.expert_rows(e), ..]), inp.w2.index_axis(Axis(0), e).t(), out)
        })
    });
    let mut dh = crate::bigmem::zeros((rows.rows(), 2 * idim));
    dh.axis_iter_mut(Axis(0))
        .into_par_iter()
        .zip(fwd.h.axis_iter(Axis(0)))
        .zip(da.axis_iter(Axis(0)))
        .for_each(|((mut d, hr), dar)| {
            for i in 0..idim {
                let (dg, du) = act::backward(cfg.activation, hr[i], hr[idim + i], dar[i]);
                d[i] = dg;
                d[idim + i] = du;
            }
        });
    // grad.w2[e] = do_eᵀ · a_e  (contract over the expert's rows)
    let grad_w2 = timed("grad.w2", || {
        per_expert_weights((e_n, hdim, idim), |e, out| {
            let r = rows.expert_rows(e);
            mm(do_.slice(s![r.clone(), ..]).t(), fwd.a.slice(s![r, ..]).t(), out)
        })
    });
    // dx_rows = dh · w13[e]  (w13[e] is [2I, H]; contract over 2I)
    let dx_rows = timed("bwd.dx_rows", || {
        per_expert_rows(rows, ranks, hdim, |e, out| {
            mm(dh.slice(s![rows.expert_rows(e), ..]), inp.w13.index_axis(Axis(0), e).t(), out)
        })
    });
    // grad.w13[e] = dh_eᵀ · x_rows_e
    let grad_w13 = timed("grad.w13", || {
        per_expert_weights((e_n, 2 * idim, hdim), |e, out| {
            let r = rows.expert_rows(e);
            let xt = Array2::from_shape_fn((hdim, r.len()), |(c, j)| inp.x[[rows.row_token[r.start + j], c]]);
            mm(dh.slice(s![r, ..]).t(), xt.view(), out)
        })
    });

    // grad.x = Σ_j dx_rows[row(t, j)]  (+ dlogits · R when the layer routed itself), one rounding.
    let k = cfg.top_k;
    let undispatch = |t: usize, c: usize, out: &mut Vec<(f64, f64)>| {
        for j in 0..k {
            if let Some(r) = rows.slot_row[t * k + j] {
                out.push((dx_rows[[r, c]], 1.0));
            }
        }
    };
    let (grad_x, dlogits, grad_router_weight) = match (&fwd.routed, &cfg.routing, &inp.router_weight) {
        (Some(routed), Some(rcfg), Some(rw)) => {
            let logits = fwd.logits.as_ref().expect("logits kept when the layer routed itself");
            let dl = route::backward(rcfg, routed, logits.view(), grad_topk_weights.view());
            let gx = timed("grad.x", || gemm::matmul_nt_plus(opt.engine, dl.view(), rw.t(), Some(&undispatch)));
            let grw = timed("grad.router.weight", || gemm::matmul_nt_with(opt.engine, dl.t(), inp.x.t()));
            (gx, Some(dl), Some(grw))
        }
        _ => {
            let empty = Array2::<f64>::zeros((cfg.tokens, 0));
            let none = Array2::<f64>::zeros((hdim, 0));
            let gx = gemm::matmul_nt_plus(opt.engine, empty.view(), none.view(), Some(&undispatch));
            (gx, None, None)
        }
    };

    Backward { grad_x, grad_w13, grad_w2, grad_topk_weights, grad_router_weight, dlogits, do_, da, dh, dx_rows }
}

/// An output or intermediate by its case-format name (`y`, `grad.x`, `fwd.h`, `bwd.dx_rows`, ...), or None
/// when the run did not produce it.
pub fn named_tensor<'a>(fwd: &'a Forward, bwd: Option<&'a Backward>, name: &str) -> Option<ndarray::ArrayViewD<'a, f64>> {
    let f = |a: &'a Array2<f64>| Some(a.view().into_dyn());
    match name {
        "y" => f(&fwd.y),
        "fwd.h" => f(&fwd.h),
        "fwd.a" => f(&fwd.a),
        "fwd.o" => f(&fwd.o),
        _ => {
            let b = bwd?;
            match name {
                "grad.x" => f(&b.grad_x),
                "grad.w13" => Some(b.grad_w13.view().into_dyn()),
                "grad.w2" => Some(b.grad_w2.view().into_dyn()),
                "grad.topk_weights" => f(&b.grad_topk_weights),
                "grad.router.weight" => b.grad_router_weight.as_ref().map(|a| a.view().into_dyn()),
                "bwd.do" => f(&b.do_),
                "bwd.da" => f(&b.da),
                "bwd.dh" => f(&b.dh),
                "bwd.dx_rows" => f(&b.dx_rows),
                _ => None,
            }
        }
    }
}
