//! Stage-by-stage check of the fast kernels against the exact oracle. Each stage the kernels store (H, A, o,
//! y, dH, A', dX rows, grad.x, the weight gradients, grad.topk_weights) is recomputed exactly
//! (`moe_reference::exact`) from the kernels' own stored inputs to that stage, and must lie within an a-priori
//! bound; dA_raw = dY·W2 (stored in bf16 by the default engines, rounded to bf16 in registers by the fused
//! ones, and not downloaded) is carried through the bounds of the stages that consume it (dH, through
//! dA = w·dA_raw, and the routing-weight gradient, bounded through its two-level sum).
//!
//! Bounds. A dot of K bf16 products accumulated in f32 errs by at most γ_K·Σ|a·b| (γ_K = K·u/(1 − K·u),
//! u = 2^-24). The tensor cores do not add in IEEE f32: per the model in `shared/docs/numerics.md` each
//! 16-product instruction truncates every term to 25 fraction bits below the largest term's exponent and the
//! sum toward zero to 23 bits, so per instruction the error is below (17·2^-25 + 2^-23)·(|C| + Σ|a·b|), about
//! 0.66·16·u per instruction's worth of terms: inside γ_K·Σ|a·b| for the whole chain. Storage in bf16 adds
//! one rounding (u_bf16 = 2^-8) of the value plus half its smallest subnormal. SwiGLU's forward is bounded by
//! `moe_reference::emulate::act_bound` (a few f32 operations around one `expf`, the clamped variant's
//! argument rounded in f32, the sigmoid vanishing where exp overflows: `reference/tests/act_f32_eval.rs`), and
//! so is its backward, with dA's own error (its dot, its bf16 rounding, the product w·dA_raw) carried through.

use moe_reference::config::Activation;
use moe_reference::emulate::act_bound;
use moe_reference::exact;

use super::{FastDims, FastTrace};

pub const U32: f64 = 1.0 / (1u64 << 24) as f64;
pub const UBF: f64 = 1.0 / 256.0;

/// A case on the host: bf16 inputs as raw bits, routing, the layer's shape.
pub struct HostCase<'a> {
    pub dims: FastDims,
    pub act: Activation,
    pub x: &'a [u16],
    pub w13: &'a [u16],
    pub w2: &'a [u16],
    pub dy: &'a [u16],
    pub ids: &'a [i32],
    pub weights: &'a [f32],
}

/// What to check: these tokens' rows and outputs, and either every weight-gradient entry or a sample of them.
pub struct Scope {
    pub tokens: Vec<usize>,
    pub wgrad_samples: Option<usize>,
    pub threads: usize,
}

impl Scope {
    /// `tokens` and `wgrad_samples` on every core of the machine (2 where that is unknown).
    pub fn on_all_cores(tokens: Vec<usize>, wgrad_samples: Option<usize>) -> Scope {
        Scope { tokens, wgrad_samples, threads: std::thread::available_parallelism().map_or(2, |n| n.get()) }
    }
}

/// Outcome: the worst error/bound ratio over all checked elements, and how many were checked.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    pub worst: f64,
    pub elements: usize,
}

fn bf(b: u16) -> f64 {
    half::bf16::from_bits(b).to_f64()
}

pub fn gamma(k: usize) -> f64 {
    let ku = k as f64 * U32;
    ku / (1.0 - ku)
}

/// `got` against the exact `Σ a·b`: γ_K·Σ|a·b| (f32 accumulation), underflow terms, then one rounding to the
/// storage (`storage` = its unit roundoff; 0 for f32 results). Returns error/bound.
fn dots(stage: &str, at: &dyn Fn() -> String, got: f64, pairs: &[(f64, f64)], storage: f64) -> Result<f64, String> {
    let exact = exact::dot_certified(pairs);
    let abs: f64 = pairs.iter().map(|(a, b)| (a * b).abs()).sum();
    let acc = gamma(pairs.len()) * abs * (1.0 + 1e-12) + (pairs.len() as f64 + 1.0) * 2f64.powi(-150);
    let underflow = if storage > 0.0 { 2f64.powi(-134) } else { 0.0 };
    let bound = acc + storage * (exact.abs() + acc) + underflow + f64::MIN_POSITIVE;
    within(stage, at, got, exact, bound)
}

/// `buf` holds `terms` (cleared first, its allocation kept).
fn fill(buf: &mut Vec<(f64, f64)>, terms: impl Iterator<Item = (f64, f64)>) {
    buf.clear();
    buf.extend(terms);
}

fn within(stage: &str, at: &dyn Fn() -> String, got: f64, exact: f64, bound: f64) -> Result<f64, String> {
    let err = (got - exact).abs();
    if err <= bound {
        Ok(err / bound)
    } else {
        Err(format!("{stage} {}: got {got:e}, exact {exact:e}, error {err:e} > bound {bound:e}", at()))
    }
}

/// The bound on a slot's routing-weight gradient Σ_q A_q·D_q as the kernels form it, D_q = dA_raw_q the dot
/// Σ_c dY_c·W2_cq accumulated in f32 over `hd` terms and rounded to bf16, then summed with A over the `id`
/// columns by a chain (or tree) of at most I + 16 f32 additions. `s2` = Σ_q |A_q|·Σ_c |dY_c·W2_cq|, `a_sum`
/// = Σ_q |A_q|. Each D_q errs by at most g1·Σ_c|dY_c·W2_cq| (g1: the dot's γ and the bf16 rounding, |D_q|
/// being at most that sum) plus bf16's underflow.
fn slot_grad_bound(s2: f64, a_sum: f64, hd: usize, id: usize) -> f64 {
    slot_grad_bound_given(gamma(hd) + UBF * (1.0 + gamma(hd)), s2, a_sum, hd, id)
}

/// [`slot_grad_bound`] with dA_raw's relative error `g1` given.
fn slot_grad_bound_given(g1: f64, s2: f64, a_sum: f64, hd: usize, id: usize) -> f64 {
    let gi = gamma(id + 16);
    (g1 * (1.0 + gi) + gi) * (1.0 + g1) * s2 * (1.0 + 1e-12) + (hd * id) as f64 * 2f64.powi(-149) + a_sum * 2f64.powi(-133)
}

/// Check the trace of one forward + backward. Err holds the first violation, with stage and element.
pub fn check(c: &HostCase, tr: &FastTrace, scope: &Scope) -> Result<Report, String> {
    let FastDims { tokens: t_n, hidden: hd, inter: id, experts: e_n, top_k: kk } = c.dims;
    // the routing: rows in the reference's expert-major order
    let ids = ndarray::ArrayView2::from_shape((t_n, kk), c.ids).map_err(|e| e.to_string())?;
    let map = moe_reference::dispatch::RowMap::build(ids, e_n);
    let m = map.rows();
    let as_i32 = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
    if tr.row_token != as_i32(&map.row_token) || tr.row_slot != as_i32(&map.row_slot) || tr.offsets != as_i32(&map.expert_offsets) {
        return Err("routing to rows differs from the reference's (row_token, row_slot or expert offsets)".into());
    }
    let slot_row: Vec<i32> = map.slot_row.iter().map(|r| r.map_or(-1, |r| r as i32)).collect();
    if tr.slot_row != slot_row {
        return Err("slot_row differs from the reference's".into());
    }
    let row_expert: Vec<usize> = (0..m).map(|r| map.expert_offsets.partition_point(|&o| o <= r) - 1).collect();
    let x = |t: usize, c_: usize| bf(c.x[t * hd + c_]);
    let dy = |t: usize, c_: usize| bf(c.dy[t * hd + c_]);
    let w13 = |e: usize, n: usize, c_: usize| bf(c.w13[(e * 2 * id + n) * hd + c_]);
    let w2 = |e: usize, n: usize, q: usize| bf(c.w2[(e * hd + n) * id + q]);

    // per token: its rows' stages, then y and grad.x. `buf` and `ds_pairs` are the thread's scratch for the
    // dots' terms (one allocation a thread, not one a dot: under the fuzz target's AddressSanitizer the
    // allocator's locks kept the threads from scaling).
    let token_check = |t: usize, buf: &mut Vec<(f64, f64)>, ds_pairs: &mut Vec<(f64, f64)>| -> Result<(f64, usize), String> {
        let mut worst = 0.0f64;
        let mut count = 0usize;
        for j in 0..kk {
            let Some(r) = map.slot_row[t * kk + j] else {
                if tr.grad_topk_weights[t * kk + j].to_bits() != 0 {
                    return Err(format!("grad.topk_weights[{t}, {j}]: a -1 slot must get +0, got {}", tr.grad_topk_weights[t * kk + j]));
                }
                continue;
            };
            let e = row_expert[r];
            let w = c.weights[t * kk + j] as f64;
            let h = |n: usize| bf(tr.h[r * 2 * id + n]);
            let a = |q: usize| bf(tr.a[r * id + q]);
            for n in 0..2 * id {
                fill(buf, (0..hd).map(|k| (x(t, k), w13(e, n, k))));
                worst = worst.max(dots("fwd.h", &|| format!("row {r} col {n}"), h(n), buf, UBF)?);
            }
            for q in 0..id {
                let (exact_a, bound) = act_bound::forward_stored_bf16(c.act, h(q), h(id + q));
                worst = worst.max(within("fwd.a", &|| format!("row {r} col {q}"), a(q), exact_a, bound)?);
                let got_aw = bf(tr.aw[r * id + q]);
                worst = worst.max(dots("bwd.a_weighted (w·A)", &|| format!("row {r} col {q}"), got_aw, &[(w, a(q))], UBF + U32)?);
            }
            for n in 0..hd {
                fill(buf, (0..id).map(|q| (a(q), w2(e, n, q))));
                worst = worst.max(dots("fwd.o", &|| format!("row {r} col {n}"), bf(tr.o[r * hd + n]), buf, UBF)?);
            }
            // dH through dA = w·dA_raw, dA_raw = dY·W2: exact D_q, its f32/tensor-core error and its bf16
            // rounding (d_err), w·dA_raw in f32, then the SwiGLU backward (linear in dA) and bf16 storage.
            // The same products dY_c·W2_cq, times A_q, are the slot gradient's terms (`ds_pairs`, below).
            let (mut s2, mut a_sum) = (0.0f64, 0.0f64);
            ds_pairs.clear();
            for q in 0..id {
                fill(buf, (0..hd).map(|k| (dy(t, k), w2(e, k, q))));
                let pairs = &buf[..];
                let dq = exact::dot_certified(pairs);
                let pq: f64 = pairs.iter().map(|(p, v)| (p * v).abs()).sum();
                s2 += a(q).abs() * pq;
                a_sum += a(q).abs();
                ds_pairs.extend(pairs.iter().map(|&(p, v)| (p * v, a(q))));
                let acc_err = gamma(hd) * pq * (1.0 + 1e-12) + (hd as f64 + 1.0) * 2f64.powi(-150);
                let d_err = acc_err + UBF * (dq.abs() + acc_err) + 2f64.powi(-134);
                let delta = w.abs() * d_err + U32 * w.abs() * (dq.abs() + d_err) + 2f64.powi(-149);
                let ((dg, bg), (du, bu)) = act_bound::backward_stored_bf16(c.act, h(q), h(id + q), w * dq, delta);
                for (stage, got, exact_v, bound) in [("bwd.dh gate", bf(tr.dh[r * 2 * id + q]), dg, bg), ("bwd.dh up", bf(tr.dh[r * 2 * id + id + q]), du, bu)] {
                    worst = worst.max(within(stage, &|| format!("row {r} col {q}"), got, exact_v, bound)?);
                }
            }
            // grad.topk_weights = <dY, o> with o = A·W2ᵀ exactly: Σ_q A_q·Σ_c dY_c·W2_cq, bounded as the
            // kernel computes it (`slot_grad_bound`)
            {
                let exact_ds = exact::dot_certified(ds_pairs);
                let bound = slot_grad_bound(s2, a_sum, hd, id);
                let got = tr.grad_topk_weights[t * kk + j] as f64;
                worst = worst.max(within("grad.topk_weights", &|| format!("[{t}, {j}]"), got, exact_ds, bound)?);
            }
            for n in 0..hd {
                fill(buf, (0..2 * id).map(|k| (bf(tr.dh[r * 2 * id + k]), w13(e, k, n))));
                worst = worst.max(dots("bwd.dx_rows", &|| format!("row {r} col {n}"), bf(tr.dx_rows[r * hd + n]), buf, UBF)?);
            }
            count += 2 * id * 3 + hd * 2 + 1;
        }
        let rows: Vec<(usize, usize)> = (0..kk).filter_map(|j| map.slot_row[t * kk + j].map(|r| (j, r))).collect();
        for n in 0..hd {
            fill(buf, rows.iter().map(|&(j, r)| (c.weights[t * kk + j] as f64, bf(tr.o[r * hd + n]))));
            worst = worst.max(dots("y", &|| format!("[{t}, {n}]"), bf(tr.y[t * hd + n]), buf, UBF)?);
            fill(buf, rows.iter().map(|&(_, r)| (bf(tr.dx_rows[r * hd + n]), 1.0)));
            worst = worst.max(dots("grad.x", &|| format!("[{t}, {n}]"), bf(tr.grad_x[t * hd + n]), buf, UBF)?);
            count += 2;
        }
        Ok((worst, count))
    };

    // weight gradients: every entry, or a deterministic sample (plus every entry of each empty expert)
    let wgrad_entries: Vec<(bool, usize, usize, usize)> = match scope.wgrad_samples {
        None => (0..e_n)
            .flat_map(|e| (0..2 * id).flat_map(move |p| (0..hd).map(move |q| (true, e, p, q))))
            .chain((0..e_n).flat_map(|e| (0..hd).flat_map(move |p| (0..id).map(move |q| (false, e, p, q)))))
            .collect(),
        Some(n) => {
            let mut g = 0x2545F4914F6CDD1Du64;
            let mut next = move |b: usize| {
                g ^= g << 13;
                g ^= g >> 7;
                g ^= g << 17;
                (g % b as u64) as usize
            };
            (0..2 * n)
                .map(|i| {
                    let e = next(e_n);
                    if i % 2 == 0 { (true, e, next(2 * id), next(hd)) } else { (false, e, next(hd), next(id)) }
                })
                .collect()
        }
    };
    for e in 0..e_n {
        if map.expert_rows(e).is_empty() {
            let z13 = tr.grad_w13[e * 2 * id * hd..(e + 1) * 2 * id * hd].iter().all(|&b| b == 0);
            let z2 = tr.grad_w2[e * hd * id..(e + 1) * hd * id].iter().all(|&b| b == 0);
            if !z13 || !z2 {
                return Err(format!("expert {e} has no rows but its weight gradients are not exactly +0"));
            }
        }
    }
    let wgrad_check = |&(is13, e, p, q): &(bool, usize, usize, usize), buf: &mut Vec<(f64, f64)>| -> Result<f64, String> {
        let rows = map.expert_rows(e);
        if is13 {
            fill(buf, rows.map(|r| (bf(tr.dh[r * 2 * id + p]), x(map.row_token[r], q))));
            dots("grad.w13", &|| format!("[{e}, {p}, {q}]"), bf(tr.grad_w13[(e * 2 * id + p) * hd + q]), buf, UBF)
        } else {
            fill(buf, rows.map(|r| (dy(map.row_token[r], p), bf(tr.aw[r * id + q]))));
            dots("grad.w2", &|| format!("[{e}, {p}, {q}]"), bf(tr.grad_w2[(e * hd + p) * id + q]), buf, UBF)
        }
    };

    // spread the work over threads; each returns its worst ratio and count
    let threads = scope.threads.max(1);
    let results: Vec<Result<(f64, usize), String>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for w in 0..threads {
            let tokens: Vec<usize> = scope.tokens.iter().copied().skip(w).step_by(threads).collect();
            let entries: Vec<_> = wgrad_entries.iter().copied().skip(w).step_by(threads).collect();
            let token_check = &token_check;
            let wgrad_check = &wgrad_check;
            handles.push(s.spawn(move || -> Result<(f64, usize), String> {
                let mut worst = 0.0f64;
                let mut count = 0;
                let (mut buf, mut ds_pairs) = (Vec::new(), Vec::new());
                for t in tokens {
                    let (wv, n) = token_check(t, &mut buf, &mut ds_pairs)?;
                    worst = worst.max(wv);
                    count += n;
                }
                for en in &entries {
                    worst = worst.max(wgrad_check(en, &mut buf)?);
                    count += 1;
                }
                Ok((worst, count))
            }));
        }
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("checker thread panicked".into()))).collect()
    });
    let mut report = Report { worst: 0.0, elements: 0 };
    for r in results {
        let (w, n) = r?;
        report.worst = report.worst.max(w);
        report.elements += n;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    //! The checker must pass a trace that is each stage's exact value rounded once to its storage, and must
    //! fail when any one stage is off by a few units in its last place. Runs without a GPU.
    use super::*;
    use moe_reference::act;
    use moe_reference::dispatch::RowMap;

    fn b(v: f64) -> u16 {
        half::bf16::from_f64(v).to_bits()
    }

    /// (case inputs as bits, routing, and a trace built from exact values, each rounded once)
    #[allow(clippy::type_complexity)]
    fn exact_trace() -> (FastDims, Vec<u16>, Vec<u16>, Vec<u16>, Vec<u16>, Vec<i32>, Vec<f32>, FastTrace) {
        let (t_n, hd, id, e_n, kk) = (6, 16, 8, 4, 2);
        let (_cfg, x, w13, w2, mut ids, w) = crate::check::case(3, t_n, hd, id, e_n, kk, Activation::Swiglu, 0.0);
        ids[[1, 1]] = -1; // one unused slot
        // leave expert 3 without rows
        for v in ids.iter_mut() {
            if *v == 3 {
                *v = -1;
            }
        }
        exact_trace_of((t_n, hd, id, e_n, kk), x, w13, w2, ids, w)
    }

    /// The trace of exact values, each rounded once to its storage, for the given inputs and routing.
    #[allow(clippy::type_complexity)]
    fn exact_trace_of(
        (t_n, hd, id, e_n, kk): (usize, usize, usize, usize, usize),
        x: ndarray::Array2<f64>,
        w13: ndarray::Array3<f64>,
        w2: ndarray::Array3<f64>,
        ids: ndarray::Array2<i32>,
        w: ndarray::Array2<f32>,
    ) -> (FastDims, Vec<u16>, Vec<u16>, Vec<u16>, Vec<u16>, Vec<i32>, Vec<f32>, FastTrace) {
        let mut g = crate::check::Gen(99);
        let dy: Vec<f64> = (0..t_n * hd).map(|_| g.bf16(0.5)).collect();
        let map = RowMap::build(ids.view(), e_n);
        let m = map.rows();
        let row_expert: Vec<usize> = (0..m).map(|r| map.expert_offsets.partition_point(|&o| o <= r) - 1).collect();
        let bf = |u: u16| half::bf16::from_bits(u).to_f64();
        let (mut h, mut a, mut o, mut dh, mut aw, mut dxr) = (vec![0u16; m * 2 * id], vec![0u16; m * id], vec![0u16; m * hd], vec![0u16; m * 2 * id], vec![0u16; m * id], vec![0u16; m * hd]);
        let mut ds = vec![0f32; t_n * kk];
        for r in 0..m {
            let (e, t, j) = (row_expert[r], map.row_token[r], map.row_slot[r]);
            let wt = w[[t, j]] as f64;
            for n in 0..2 * id {
                h[r * 2 * id + n] = b(exact::dot((0..hd).map(|c| (x[[t, c]], w13[[e, n, c]]))));
            }
            // dA_raw rounded to bf16, as the kernels keep it
            let da_raw: Vec<f64> = (0..id).map(|q| bf(b(exact::dot((0..hd).map(|c| (dy[t * hd + c], w2[[e, c, q]])))))).collect();
            for q in 0..id {
                let (gv, uv) = (bf(h[r * 2 * id + q]), bf(h[r * 2 * id + id + q]));
                a[r * id + q] = b(act::forward(Activation::Swiglu, gv, uv));
                let dq = da_raw[q];
                let (dg, du) = act::backward(Activation::Swiglu, gv, uv, wt * dq);
                dh[r * 2 * id + q] = b(dg);
                dh[r * 2 * id + id + q] = b(du);
                aw[r * id + q] = b(wt * bf(a[r * id + q]));
            }
            for n in 0..hd {
                o[r * hd + n] = b(exact::dot((0..id).map(|q| (bf(a[r * id + q]), w2[[e, n, q]]))));
                dxr[r * hd + n] = b(exact::dot((0..2 * id).map(|c| (bf(dh[r * 2 * id + c]), w13[[e, c, n]]))));
            }
            ds[t * kk + j] = exact::dot((0..id).map(|q| (da_raw[q], bf(a[r * id + q])))) as f32;
        }
        let (mut y, mut gx) = (vec![0u16; t_n * hd], vec![0u16; t_n * hd]);
        for t in 0..t_n {
            let rows: Vec<(usize, usize)> = (0..kk).filter_map(|j| map.slot_row[t * kk + j].map(|r| (j, r))).collect();
            for n in 0..hd {
                y[t * hd + n] = b(exact::dot(rows.iter().map(|&(j, r)| (w[[t, j]] as f64, bf(o[r * hd + n])))));
                gx[t * hd + n] = b(exact::sum(rows.iter().map(|&(_, r)| bf(dxr[r * hd + n]))));
            }
        }
        let (mut gw13, mut gw2) = (vec![0u16; e_n * 2 * id * hd], vec![0u16; e_n * hd * id]);
        for e in 0..e_n {
            for p in 0..2 * id {
                for q in 0..hd {
                    gw13[(e * 2 * id + p) * hd + q] = b(exact::dot(map.expert_rows(e).map(|r| (bf(dh[r * 2 * id + p]), x[[map.row_token[r], q]]))));
                }
            }
            for p in 0..hd {
                for q in 0..id {
                    gw2[(e * hd + p) * id + q] = b(exact::dot(map.expert_rows(e).map(|r| (dy[map.row_token[r] * hd + p], bf(aw[r * id + q])))));
                }
            }
        }
        let i32s = |v: &[usize]| v.iter().map(|&u| u as i32).collect::<Vec<_>>();
        let trace = FastTrace {
            row_token: i32s(&map.row_token),
            row_slot: i32s(&map.row_slot),
            offsets: i32s(&map.expert_offsets),
            slot_row: map.slot_row.iter().map(|r| r.map_or(-1, |r| r as i32)).collect(),
            h,
            a,
            o,
            y,
            dh,
            aw,
            dx_rows: dxr,
            grad_x: gx,
            grad_w13: gw13,
            grad_w2: gw2,
            grad_topk_weights: ds,
        };
        let dims = FastDims { tokens: t_n, hidden: hd, inter: id, experts: e_n, top_k: kk };
        let bits = |v: &[f64]| v.iter().map(|&f| b(f)).collect::<Vec<_>>();
        (dims, bits(x.as_slice().unwrap()), bits(w13.as_slice().unwrap()), bits(w2.as_slice().unwrap()), bits(&dy), ids.iter().copied().collect(), w.iter().copied().collect(), trace)
    }

    #[test]
    fn exact_values_pass_and_each_corrupted_stage_fails() {
        let (dims, x, w13, w2, dy, ids, w, trace) = exact_trace();
        let case = HostCase { dims, act: Activation::Swiglu, x: &x, w13: &w13, w2: &w2, dy: &dy, ids: &ids, weights: &w };
        let scope = Scope { tokens: (0..dims.tokens).collect(), wgrad_samples: None, threads: 2 };
        let report = check(&case, &trace, &scope).expect("the exact trace passes");
        assert!(report.worst <= 1.0 && report.elements > 0);
        // a few ulps off in one element of each stage, or a wrong exact zero: each must be caught by name
        type Corrupt = fn(&mut FastTrace);
        let corruptions: [(&str, Corrupt); 11] = [
            ("fwd.h", |t| t.h[3] = t.h[3].wrapping_add(4)),
            ("fwd.a", |t| t.a[2] = t.a[2].wrapping_add(4)),
            ("fwd.o", |t| t.o[5] = t.o[5].wrapping_add(4)),
            ("bwd.dh", |t| t.dh[1] = t.dh[1].wrapping_add(4)),
            ("a_weighted", |t| t.aw[0] = t.aw[0].wrapping_add(4)),
            ("bwd.dx_rows", |t| t.dx_rows[7] = t.dx_rows[7].wrapping_add(4)),
            ("y", |t| t.y[9] = t.y[9].wrapping_add(4)),
            ("grad.x", |t| t.grad_x[4] = t.grad_x[4].wrapping_add(4)),
            ("grad.topk_weights", |t| {
                // 25% on the first used slot: its bound is relative to Σ|terms|, not to the value, and since
                // dA_raw is rounded to bf16 (session 17) about 2^-8 of that sum (5% passed after that)
                if let Some(v) = t.grad_topk_weights.iter_mut().find(|v| **v != 0.0) {
                    *v *= 1.25;
                }
            }),
            ("grad.w13", |t| t.grad_w13[17] = t.grad_w13[17].wrapping_add(4)),
            ("no rows", |t| {
                let n = t.grad_w2.len();
                t.grad_w2[n - 1] = 0x3f80; // expert 3 has no rows: its gradient must stay +0
            }),
        ];
        for (stage, corrupt) in corruptions {
            let mut bad = clone_trace(&trace);
            corrupt(&mut bad);
            match check(&case, &bad, &scope) {
                Ok(r) => panic!("a corrupted {stage} passed (worst {:.3})", r.worst),
                Err(msg) => assert!(msg.contains(stage), "corrupted {stage}, but the message names another stage: {msg}"),
            }
        }
        let mut bad = clone_trace(&trace);
        bad.row_token.swap(0, 1);
        assert!(check(&case, &bad, &scope).is_err(), "a wrong row order must fail");
    }

    /// How long the full check takes per token at the fuzz target's largest H, I, E and k (H 264, I 200, E 8,
    /// k 8), on one thread and on all cores: the fuzz target's inputs cost what this costs (times its
    /// instrumentation; `fuzz/fuzz_targets/gpu_fast.rs`). Timing only:
    /// `cargo test --release -p moe-kernels --lib -- --ignored --nocapture check_time_at_the_fuzz_size`.
    #[test]
    #[ignore]
    fn check_time_at_the_fuzz_size() {
        let dims = (40, 264, 200, 8, 8);
        let (_cfg, x, w13, w2, ids, w) = crate::check::case(5, dims.0, dims.1, dims.2, dims.3, dims.4, Activation::Swiglu, 0.0);
        let (dims, x, w13, w2, dy, ids, w, trace) = exact_trace_of(dims, x, w13, w2, ids, w);
        let case = HostCase { dims, act: Activation::Swiglu, x: &x, w13: &w13, w2: &w2, dy: &dy, ids: &ids, weights: &w };
        let all = Scope::on_all_cores((0..dims.tokens).collect(), None);
        let one = Scope { tokens: all.tokens.clone(), wgrad_samples: None, threads: 1 };
        for scope in [one, all] {
            let threads = scope.threads;
            let t0 = std::time::Instant::now();
            let report = check(&case, &trace, &scope).expect("the exact trace passes");
            let s = t0.elapsed().as_secs_f64();
            println!("{threads} thread(s): {:.3} s for {} tokens and every weight-gradient entry ({:.1} ms a token overall; {} elements, worst {:.3})", s, dims.tokens, s * 1e3 / dims.tokens as f64, report.elements, report.worst);
        }
    }

    /// `dots`' bound (γ_K·Σ|a·b| for the accumulation, then one rounding to the storage) holds for Hopper's
    /// bf16 tensor-core accumulation as `moe_reference::accum` models it (per 16-product instruction, every
    /// term truncated to 25 fraction bits below the largest, the sum truncated to f32: the module doc's
    /// argument), on random bf16 operands with wide exponents and cancellation, at the K of the layer's GEMMs.
    /// And it is not vacuous: a chain built to lose the most (one large first term, then terms just below
    /// the truncation) errs by more than 1/8 of it.
    #[test]
    fn the_dot_bound_covers_tensor_core_accumulation() {
        use moe_reference::accum::{dot, Model, TensorCore};
        let model = Model::TensorCore(TensorCore::HOPPER_BF16);
        let at = || String::new();
        let mut g = crate::check::Gen(0x5DEECE66D);
        let bf16 = |g: &mut crate::check::Gen| {
            let (sign, exp, mant) = (g.next() & 1, (g.next() % 25) as i32 - 20, (g.next() % 128) as f64);
            half::bf16::from_f64((1.0 + mant / 128.0) * 2f64.powi(exp) * if sign == 1 { -1.0 } else { 1.0 }).to_f64()
        };
        let mut worst = 0.0f64;
        for k in [1usize, 15, 16, 17, 100, 768, 2048, 3072] {
            for _ in 0..(24_576 / k).clamp(4, 200) {
                let a: Vec<f64> = (0..k).map(|_| bf16(&mut g)).collect();
                let b: Vec<f64> = (0..k).map(|_| bf16(&mut g)).collect();
                let pairs: Vec<(f64, f64)> = a.iter().copied().zip(b.iter().copied()).collect();
                let tc = dot(&model, &a, &b, None);
                worst = worst.max(dots("f32", &at, tc, &pairs, 0.0).unwrap_or_else(|e| panic!("K {k}: {e}")));
                let stored = half::bf16::from_f64(tc).to_f64();
                dots("bf16", &at, stored, &pairs, UBF).unwrap_or_else(|e| panic!("K {k}: {e}"));
            }
        }
        eprintln!("random operands: worst error/bound {worst:.3}");
        // 1, then 4095 products of 1.5·2^-25: each instruction keeps 2^-25 of each (25 fraction bits below
        // the running sum's exponent 0) and loses 2^-26, 2^-14 in all, against γ_4096 ≈ 2^-12
        let k = 4096;
        let a: Vec<f64> = (0..k).map(|i| if i == 0 { 1.0 } else { 1.5 * 2f64.powi(-12) }).collect();
        let b: Vec<f64> = (0..k).map(|i| if i == 0 { 1.0 } else { 2f64.powi(-13) }).collect();
        let pairs: Vec<(f64, f64)> = a.iter().copied().zip(b.iter().copied()).collect();
        let ratio = dots("f32", &at, dot(&model, &a, &b, None), &pairs, 0.0).expect("inside the bound");
        eprintln!("the truncating chain: error/bound {ratio:.3}");
        assert!(ratio > 0.125, "the truncating chain errs by only {ratio:.3} of the bound");
    }

    /// `slot_grad_bound` holds for the default engine's slot gradient as modelled here: dA_raw by the Hopper
    /// bf16 tensor-core model over H and rounded to bf16, then `fc_swiglu_bwd_rows`' sum (each of 32 lanes an
    /// fma chain over its columns 8·lane + 256·j + i in order, then a butterfly of xor-shuffles), on random
    /// operands with cancellation at the 30b shape's I and a shorter H, and with A signed so that dA_raw's
    /// rounding errors add up. That rounding is what the bound must carry: without its term those sums
    /// exceed it.
    #[test]
    fn the_slot_gradient_bound_covers_the_row_kernel() {
        use moe_reference::accum::{dot, Model, TensorCore};
        let model = Model::TensorCore(TensorCore::HOPPER_BF16);
        let (hd, id) = (256, 768);
        let mut g = crate::check::Gen(0xA5A5_1234);
        let (mut worst, mut worst_without) = (0.0f64, 0.0f64);
        for trial in 0..6 {
            let dy: Vec<f64> = (0..hd).map(|_| g.bf16(1.0)).collect();
            let w2: Vec<Vec<f64>> = (0..id).map(|_| (0..hd).map(|_| g.bf16(0.05)).collect()).collect(); // [q][c]
            let da: Vec<f32> = w2.iter().map(|col| half::bf16::from_f64(dot(&model, &dy, col, None)).to_f32()).collect();
            // even trials: A at random; odd ones: each A_q signed as dA_raw_q's error, so that the errors add up
            let a: Vec<f64> = (0..id)
                .map(|q| {
                    let v = g.bf16(if trial % 4 < 2 { 1.0 } else { 1e-3 });
                    if trial % 2 == 0 {
                        v
                    } else {
                        let err = da[q] as f64 - exact::dot(dy.iter().copied().zip(w2[q].iter().copied()));
                        v.abs() * err.signum()
                    }
                })
                .collect();
            let mut lanes = [0.0f32; 32];
            for (lane, acc) in lanes.iter_mut().enumerate() {
                for q0 in (8 * lane..id).step_by(256) {
                    for q in q0..q0 + 8 {
                        *acc = da[q].mul_add(a[q] as f32, *acc);
                    }
                }
            }
            for o in [16, 8, 4, 2, 1] {
                let prev = lanes;
                for (l, v) in lanes.iter_mut().enumerate() {
                    *v = prev[l] + prev[l ^ o];
                }
            }
            let got = lanes[0] as f64;
            let pairs: Vec<(f64, f64)> = (0..id).flat_map(|q| (0..hd).map(move |c| (q, c))).map(|(q, c)| (dy[c] * w2[q][c], a[q])).collect();
            let exact_ds = exact::dot(pairs.iter().copied());
            let s2: f64 = (0..id).map(|q| a[q].abs() * (0..hd).map(|c| (dy[c] * w2[q][c]).abs()).sum::<f64>()).sum();
            let a_sum: f64 = a.iter().map(|v| v.abs()).sum();
            let at = || format!("trial {trial}");
            worst = worst.max(within("slot", &at, got, exact_ds, slot_grad_bound(s2, a_sum, hd, id)).unwrap_or_else(|e| panic!("{e}")));
            let without = slot_grad_bound_given(0.0, s2, a_sum, hd, id);
            worst_without = worst_without.max((got - exact_ds).abs() / without);
        }
        eprintln!("slot gradient: worst error/bound {worst:.4}; without dA_raw's rounding {worst_without:.2}");
        assert!(worst_without > 1.0, "dA_raw's rounding is not visible to the test");
    }

    fn clone_trace(t: &FastTrace) -> FastTrace {
        FastTrace {
            row_token: t.row_token.clone(),
            row_slot: t.row_slot.clone(),
            offsets: t.offsets.clone(),
            slot_row: t.slot_row.clone(),
            h: t.h.clone(),
            a: t.a.clone(),
            o: t.o.clone(),
            y: t.y.clone(),
            dh: t.dh.clone(),
            aw: t.aw.clone(),
            dx_rows: t.dx_rows.clone(),
            grad_x: t.grad_x.clone(),
            grad_w13: t.grad_w13.clone(),
            grad_w2: t.grad_w2.clone(),
            grad_topk_weights: t.grad_topk_weights.clone(),
        }
    }
}
