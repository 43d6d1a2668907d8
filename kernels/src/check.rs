//! Stage-by-stage check of the simple bf16 kernels (bf16 storage, f32 accumulation) against the exact
//! oracle: every stage is recomputed exactly from the GPU's own inputs to that stage and must lie within an
//! a-priori bound of f32 accumulation (γ_K·Σ|a·b|) plus one bf16 rounding. Violations panic with the stage,
//! the element and the numbers, so tests and the fuzz target share one checker. (The project-wide
//! recipe-driven bounds and `moe-oracle check` will replace it.)

use moe_reference::config::{Activation, MoeConfig};
use moe_reference::exact;
use ndarray::{Array2, Array3};

use crate::{Gpu, Routing};

pub const U32: f64 = 1.0 / (1u64 << 24) as f64; // f32 unit roundoff
pub const UBF: f64 = 1.0 / 256.0; // bf16 unit roundoff (8-bit significand)

pub struct Gen(pub u64);
impl Gen {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn bf16(&mut self, scale: f64) -> f64 {
        let v = (self.unit() * 2.0 - 1.0) * scale * 1.7;
        half::bf16::from_f64(v).to_f64()
    }
}

pub fn gamma(k: usize) -> f64 {
    let ku = k as f64 * U32;
    ku / (1.0 - ku)
}

/// A case: routing with distinct experts per token, some -1 slots, optionally forced counts.
pub fn case(seed: u64, t: usize, h: usize, i: usize, e: usize, k: usize, act: Activation, unused: f64) -> (MoeConfig, Array2<f64>, Array3<f64>, Array3<f64>, Array2<i32>, Array2<f32>) {
    let mut g = Gen(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
    let cfg = MoeConfig { activation: act, recipe: "bf16".into(), ..MoeConfig::swiglu(t, h, i, e, k) };
    let x = Array2::from_shape_fn((t, h), |_| g.bf16(1.0));
    let w13 = Array3::from_shape_fn((e, 2 * i, h), |_| g.bf16(0.1));
    let w2 = Array3::from_shape_fn((e, h, i), |_| g.bf16(0.1));
    let mut ids = Array2::from_elem((t, k), -1i32);
    let mut w = Array2::zeros((t, k));
    for tok in 0..t {
        let mut chosen: Vec<i32> = Vec::new();
        for j in 0..k {
            if g.unit() < unused {
                continue;
            }
            let mut id = (g.next() % e as u64) as i32;
            while chosen.contains(&id) {
                id = (id + 1) % e as i32;
            }
            chosen.push(id);
            ids[[tok, j]] = id;
            w[[tok, j]] = g.unit() as f32;
        }
    }
    (cfg, x, w13, w2, ids, w)
}

/// Check `got` against the exact dot product `Σ a·b` with bound γ_K·Σ|a·b| (f32 accumulation) plus one
/// bf16 rounding of the result (stored as bf16); returns error/bound.
pub fn check_dots(stage: &str, got: f32, pairs: &[(f64, f64)]) -> f64 {
    check_dots_stored(stage, got, pairs, UBF)
}

/// The same with the storage's unit roundoff given (0 for results kept in f32).
pub fn check_dots_stored(stage: &str, got: f32, pairs: &[(f64, f64)], storage: f64) -> f64 {
    let exact = exact::dot_certified(pairs);
    let abs: f64 = pairs.iter().map(|(a, b)| (a * b).abs()).sum();
    // Relative terms, plus what underflow adds in absolute terms (found by the fuzz target): each f32
    // operation in the subnormal range may err by half of 2^-149, and bf16 storage by half of 2^-133.
    let acc = gamma(pairs.len()) * abs * (1.0 + 1e-12) + (pairs.len() as f64 + 1.0) * 2f64.powi(-150);
    let underflow = if storage > 0.0 { 2f64.powi(-134) } else { 0.0 };
    let bound = acc + storage * (exact.abs() + acc) + underflow + f64::MIN_POSITIVE;
    let err = (got as f64 - exact).abs();
    assert!(err <= bound, "{stage}: got {got:e}, exact {exact:e}, error {err:e} > bound {bound:e}");
    err / bound
}

pub fn check_case(gpu: &Gpu, cfg: &MoeConfig, x: &Array2<f64>, w13: &Array3<f64>, w2: &Array3<f64>, ids: &Array2<i32>, w: &Array2<f32>) -> f64 {
    let routing = Routing::Given { topk_ids: ids.clone(), topk_weights: w.clone() };
    let mut g = Gen(cfg.tokens as u64 * 31 + 7);
    let dy = Array2::from_shape_fn((cfg.tokens, cfg.hidden), |_| g.bf16(0.5));
    let out = gpu.forward(cfg, x, w13, w2, &routing, Some(&dy)).expect("gpu forward");
    let again = gpu.forward(cfg, x, w13, w2, &routing, Some(&dy)).expect("gpu forward");
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let (b1, b2) = (out.backward.as_ref().unwrap(), again.backward.as_ref().unwrap());
    assert!(same(out.y.as_slice().unwrap(), again.y.as_slice().unwrap()), "y is not bitwise deterministic");
    assert!(same(b1.grad_x.as_slice().unwrap(), b2.grad_x.as_slice().unwrap()), "grad.x is not bitwise deterministic");
    assert!(same(b1.grad_w13.as_slice().unwrap(), b2.grad_w13.as_slice().unwrap()), "grad.w13 is not deterministic");
    assert!(same(b1.grad_w2.as_slice().unwrap(), b2.grad_w2.as_slice().unwrap()), "grad.w2 is not deterministic");
    let (hd, id, k) = (cfg.hidden, cfg.intermediate, cfg.top_k);
    let rows = &out.rows;
    assert_eq!(*rows, moe_reference::dispatch::RowMap::build(ids.view(), cfg.experts), "GPU routing-to-rows differs from the reference's");
    let mut worst = 0.0f64;
    for e in 0..cfg.experts {
        for r in rows.expert_rows(e) {
            let t = rows.row_token[r];
            for n in 0..2 * id {
                let pairs: Vec<(f64, f64)> = (0..hd).map(|c| (x[[t, c]], w13[[e, n, c]])).collect();
                worst = worst.max(check_dots("fwd.h", out.h[[r, n]], &pairs));
            }
            for c in 0..id {
                let (gv, uv) = (out.h[[r, c]] as f64, out.h[[r, id + c]] as f64);
                // the f32 evaluation's bound at the stored (exact) inputs (the clamped argument's rounding, the
                // sigmoid vanishing where exp overflows), then A's bf16 rounding
                let (exact_a, bound) = moe_reference::emulate::act_bound::forward_stored_bf16(cfg.activation, gv, uv);
                let err = (out.a[[r, c]] as f64 - exact_a).abs();
                assert!(err <= bound, "fwd.a row {r} col {c}: got {}, exact {exact_a:e}", out.a[[r, c]]);
                worst = worst.max(err / bound);
            }
            for n in 0..hd {
                let pairs: Vec<(f64, f64)> = (0..id).map(|c| (out.a[[r, c]] as f64, w2[[e, n, c]])).collect();
                worst = worst.max(check_dots("fwd.o", out.o[[r, n]], &pairs));
            }
        }
    }
    for t in 0..cfg.tokens {
        for c in 0..hd {
            let pairs: Vec<(f64, f64)> = (0..k)
                .filter_map(|j| rows.slot_row[t * k + j].map(|r| (w[[t, j]] as f64, out.o[[r, c]] as f64)))
                .collect();
            worst = worst.max(check_dots("y", out.y[[t, c]], &pairs));
        }
    }
    worst.max(check_backward(cfg, x, w13, w2, w, &dy, &out))
}

/// Every backward stage, recomputed exactly from the GPU's own inputs to that stage.
pub fn check_backward(cfg: &MoeConfig, x: &Array2<f64>, w13: &Array3<f64>, w2: &Array3<f64>, w: &Array2<f32>, dy: &Array2<f64>, out: &crate::GpuForward) -> f64 {
    let b = out.backward.as_ref().expect("backward ran");
    let (hd, id, k, e_n) = (cfg.hidden, cfg.intermediate, cfg.top_k, cfg.experts);
    let rows = &out.rows;
    let mut worst = 0.0f64;
    for t in 0..cfg.tokens {
        for j in 0..k {
            match rows.slot_row[t * k + j] {
                Some(r) => {
                    let pairs: Vec<(f64, f64)> = (0..hd).map(|c| (dy[[t, c]], out.o[[r, c]] as f64)).collect();
                    worst = worst.max(check_dots_stored("grad.topk_weights", b.grad_topk_weights[[t, j]], &pairs, 0.0));
                }
                None => assert_eq!(b.grad_topk_weights[[t, j]], 0.0, "a -1 slot gets zero gradient"),
            }
        }
    }
    for e in 0..e_n {
        for r in rows.expert_rows(e) {
            let (t, j) = (rows.row_token[r], rows.row_slot[r]);
            for c in 0..hd {
                // one f32 product, then bf16 storage
                worst = worst.max(check_dots_stored("bwd.do", b.do_[[r, c]], &[(w[[t, j]] as f64, dy[[t, c]])], UBF + U32));
            }
            for n in 0..id {
                let pairs: Vec<(f64, f64)> = (0..hd).map(|c| (b.do_[[r, c]] as f64, w2[[e, c, n]])).collect();
                worst = worst.max(check_dots("bwd.da", b.da[[r, n]], &pairs));
            }
            for c in 0..id {
                let (gv, uv, dav) = (out.h[[r, c]] as f64, out.h[[r, id + c]] as f64, b.da[[r, c]] as f64);
                // f32 evaluation from the stored dA, then bf16 storage
                let ((dg, bg), (du, bu)) = moe_reference::emulate::act_bound::backward_stored_bf16(cfg.activation, gv, uv, dav, 0.0);
                for (stage, got, exact_v, bound) in [("bwd.dh gate", b.dh[[r, c]], dg, bg), ("bwd.dh up", b.dh[[r, id + c]], du, bu)] {
                    let err = (got as f64 - exact_v).abs();
                    assert!(err <= bound, "{stage} row {r} col {c}: got {got:e}, exact {exact_v:e}");
                    worst = worst.max(err / bound);
                }
            }
            for n in 0..hd {
                let pairs: Vec<(f64, f64)> = (0..2 * id).map(|c| (b.dh[[r, c]] as f64, w13[[e, c, n]])).collect();
                worst = worst.max(check_dots("bwd.dx_rows", b.dx_rows[[r, n]], &pairs));
            }
        }
        let er = rows.expert_rows(e);
        for p in 0..hd {
            for q in 0..id {
                let pairs: Vec<(f64, f64)> = er.clone().map(|r| (b.do_[[r, p]] as f64, out.a[[r, q]] as f64)).collect();
                worst = worst.max(check_dots_stored("grad.w2", b.grad_w2[[e, p, q]], &pairs, 0.0));
            }
        }
        for p in 0..2 * id {
            for q in 0..hd {
                let pairs: Vec<(f64, f64)> = er.clone().map(|r| (b.dh[[r, p]] as f64, x[[rows.row_token[r], q]])).collect();
                worst = worst.max(check_dots_stored("grad.w13", b.grad_w13[[e, p, q]], &pairs, 0.0));
            }
        }
        if er.is_empty() {
            assert!(b.grad_w13.index_axis(ndarray::Axis(0), e).iter().all(|&v| v.to_bits() == 0), "empty expert {e}: grad.w13 not exactly zero");
            assert!(b.grad_w2.index_axis(ndarray::Axis(0), e).iter().all(|&v| v.to_bits() == 0), "empty expert {e}: grad.w2 not exactly zero");
        }
    }
    for t in 0..cfg.tokens {
        for c in 0..hd {
            let pairs: Vec<(f64, f64)> = (0..k).filter_map(|j| rows.slot_row[t * k + j].map(|r| (b.dx_rows[[r, c]] as f64, 1.0))).collect();
            worst = worst.max(check_dots("grad.x", b.grad_x[[t, c]], &pairs));
        }
    }
    worst
}

