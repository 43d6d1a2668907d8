//! Stage-by-stage check of the fast kernels against the exact oracle. Each stage the kernels store (H, A, o,
//! y, dH, A', dX rows, grad.x, the weight gradients, grad.topk_weights) is recomputed exactly
//! (`moe_reference::exact`) from the kernels' own stored inputs to that stage, and must lie within an a-priori
//! bound; the one stage that is never stored, dA = w·(dY·W2), is carried through the bound of the stage that
//! consumes it (dH), and the routing-weight gradient is bounded through its two-level sum.
//!
//! Bounds. A dot of K bf16 products accumulated in f32 errs by at most γ_K·Σ|a·b| (γ_K = K·u/(1 − K·u),
//! u = 2^-24). The tensor cores do not add in IEEE f32: per the model in `shared/docs/numerics.md` each
//! 16-product instruction truncates every term to 25 fraction bits below the largest term's exponent and the
//! sum toward zero to 23 bits, so per instruction the error is below (17·2^-25 + 2^-23)·(|C| + Σ|a·b|), about
//! 0.66·16·u per instruction's worth of terms: inside γ_K·Σ|a·b| for the whole chain. Storage in bf16 adds
//! one rounding (u_bf16 = 2^-8) of the value plus half its smallest subnormal. SwiGLU and its backward are a
//! few f32 operations around one `expf` (32 u relative to the terms' magnitudes, as in `crate::check`).

use moe_reference::config::Activation;
use moe_reference::{act, exact};

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
    let exact = exact::dot(pairs.iter().copied());
    let abs: f64 = pairs.iter().map(|(a, b)| (a * b).abs()).sum();
    let acc = gamma(pairs.len()) * abs * (1.0 + 1e-12) + (pairs.len() as f64 + 1.0) * 2f64.powi(-150);
    let underflow = if storage > 0.0 { 2f64.powi(-134) } else { 0.0 };
    let bound = acc + storage * (exact.abs() + acc) + underflow + f64::MIN_POSITIVE;
    within(stage, at, got, exact, bound)
}

fn within(stage: &str, at: &dyn Fn() -> String, got: f64, exact: f64, bound: f64) -> Result<f64, String> {
    let err = (got - exact).abs();
    if err <= bound {
        Ok(err / bound)
    } else {
        Err(format!("{stage} {}: got {got:e}, exact {exact:e}, error {err:e} > bound {bound:e}", at()))
    }
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
    let alpha_max = match c.act {
        Activation::Swiglu => 1.0,
        Activation::SwigluClamped { alpha, .. } => alpha.max(1.0),
    };

    // per token: its rows' stages, then y and grad.x
    let token_check = |t: usize| -> Result<(f64, usize), String> {
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
                let pairs: Vec<(f64, f64)> = (0..hd).map(|k| (x(t, k), w13(e, n, k))).collect();
                worst = worst.max(dots("fwd.h", &|| format!("row {r} col {n}"), h(n), &pairs, UBF)?);
            }
            for q in 0..id {
                let exact_a = act::forward(c.act, h(q), h(id + q));
                let bound = (UBF + 16.0 * U32) * exact_a.abs() + 2f64.powi(-134);
                worst = worst.max(within("fwd.a", &|| format!("row {r} col {q}"), a(q), exact_a, bound)?);
                let got_aw = bf(tr.aw[r * id + q]);
                worst = worst.max(dots("bwd.a_weighted (w·A)", &|| format!("row {r} col {q}"), got_aw, &[(w, a(q))], UBF + U32)?);
            }
            for n in 0..hd {
                let pairs: Vec<(f64, f64)> = (0..id).map(|q| (a(q), w2(e, n, q))).collect();
                worst = worst.max(dots("fwd.o", &|| format!("row {r} col {n}"), bf(tr.o[r * hd + n]), &pairs, UBF)?);
            }
            // dH through the unstored dA = w·(dY·W2): exact D_q, its f32/tensor-core error, then the SwiGLU
            // backward (linear in dA) and bf16 storage.
            let mut s2 = 0.0f64;
            for q in 0..id {
                let pairs: Vec<(f64, f64)> = (0..hd).map(|k| (dy(t, k), w2(e, k, q))).collect();
                let dq = exact::dot(pairs.iter().copied());
                let pq: f64 = pairs.iter().map(|(p, v)| (p * v).abs()).sum();
                s2 += a(q).abs() * pq;
                let d_err = gamma(hd) * pq * (1.0 + 1e-12) + (hd as f64 + 1.0) * 2f64.powi(-150);
                let delta = w.abs() * d_err + U32 * w.abs() * (dq.abs() + d_err) + 2f64.powi(-149);
                let (gv, uv) = (h(q), h(id + q));
                let (gg, gu) = act::backward(c.act, gv, uv, 1.0);
                let (dg, du) = act::backward(c.act, gv, uv, w * dq);
                let da_mag = (w * dq).abs() + delta;
                let scale = da_mag * ((uv.abs() + 1.0) * (1.0 + alpha_max * gv.abs()) + gv.abs());
                for (stage, got, exact_v, gslope) in [("bwd.dh gate", bf(tr.dh[r * 2 * id + q]), dg, gg), ("bwd.dh up", bf(tr.dh[r * 2 * id + id + q]), du, gu)] {
                    let prop = gslope.abs() * delta;
                    let bound = prop + (UBF + 32.0 * U32) * (exact_v.abs() + prop) + 32.0 * U32 * scale * (1.0 + UBF) + 2f64.powi(-133);
                    worst = worst.max(within(stage, &|| format!("row {r} col {q}"), got, exact_v, bound)?);
                }
            }
            // grad.topk_weights = <dY, o> with o = A·W2ᵀ exactly: Σ_q A_q·Σ_c dY_c·W2_cq, as the kernel
            // computes it (f32 dots, then a chain of at most I + 16 f32 additions over the columns).
            {
                let pairs: Vec<(f64, f64)> = (0..id).flat_map(|q| (0..hd).map(move |k| (q, k))).map(|(q, k)| (dy(t, k) * w2(e, k, q), a(q))).collect();
                let exact_ds = exact::dot(pairs.iter().copied());
                let gi = gamma(id + 16);
                let bound = (gamma(hd) * (1.0 + gi) + gi) * (1.0 + gamma(hd)) * s2 * (1.0 + 1e-12) + (hd * id) as f64 * 2f64.powi(-149);
                let got = tr.grad_topk_weights[t * kk + j] as f64;
                worst = worst.max(within("grad.topk_weights", &|| format!("[{t}, {j}]"), got, exact_ds, bound)?);
            }
            for n in 0..hd {
                let pairs: Vec<(f64, f64)> = (0..2 * id).map(|k| (bf(tr.dh[r * 2 * id + k]), w13(e, k, n))).collect();
                worst = worst.max(dots("bwd.dx_rows", &|| format!("row {r} col {n}"), bf(tr.dx_rows[r * hd + n]), &pairs, UBF)?);
            }
            count += 2 * id * 3 + hd * 2 + 1;
        }
        for n in 0..hd {
            let rows: Vec<(usize, usize)> = (0..kk).filter_map(|j| map.slot_row[t * kk + j].map(|r| (j, r))).collect();
            let pairs: Vec<(f64, f64)> = rows.iter().map(|&(j, r)| (c.weights[t * kk + j] as f64, bf(tr.o[r * hd + n]))).collect();
            worst = worst.max(dots("y", &|| format!("[{t}, {n}]"), bf(tr.y[t * hd + n]), &pairs, UBF)?);
            let pairs: Vec<(f64, f64)> = rows.iter().map(|&(_, r)| (bf(tr.dx_rows[r * hd + n]), 1.0)).collect();
            worst = worst.max(dots("grad.x", &|| format!("[{t}, {n}]"), bf(tr.grad_x[t * hd + n]), &pairs, UBF)?);
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
    let wgrad_check = |&(is13, e, p, q): &(bool, usize, usize, usize)| -> Result<f64, String> {
        let rows = map.expert_rows(e);
        if is13 {
            let pairs: Vec<(f64, f64)> = rows.map(|r| (bf(tr.dh[r * 2 * id + p]), x(map.row_token[r], q))).collect();
            dots("grad.w13", &|| format!("[{e}, {p}, {q}]"), bf(tr.grad_w13[(e * 2 * id + p) * hd + q]), &pairs, UBF)
        } else {
            let pairs: Vec<(f64, f64)> = rows.map(|r| (dy(map.row_token[r], p), bf(tr.aw[r * id + q]))).collect();
            dots("grad.w2", &|| format!("[{e}, {p}, {q}]"), bf(tr.grad_w2[(e * hd + p) * id + q]), &pairs, UBF)
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
                for t in tokens {
                    let (wv, n) = token_check(t)?;
                    worst = worst.max(wv);
                    count += n;
                }
                for en in &entries {
                    worst = worst.max(wgrad_check(en)?);
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
