//! A GEMM operand as a recipe feeds it to the tensor cores: its quantisation (from [`crate::quant`]) and
//! a sound per-element bound on how far the fed value may be from the exact one.
//!
//! The bound is a-priori: it holds for any kernel that follows the recipe, not only for the emulator,
//! because it uses only the exact value's magnitude bound `m ≥ |x|` and the bound `b` on the kernel's
//! input error, never the emulator's own rounding decisions. For an element of a block with dequant scale
//! `s` the fed value `q·s` differs from the kernel's input `x̃` (|x̃| ≤ m + b... the kernel's input) by at most
//!
//! `(u + 2^-21)·|x̃| + η·s + sat`
//!
//! where `u` is the element format's unit roundoff (E4M3 2^-4, E5M2 2^-3, E2M1 2^-2), `2^-21` covers the
//! f32 arithmetic of the scale and the scaled value (a reciprocal and a product, each within 2^-24), `η`
//! is half the format's smallest subnormal (the absolute error of rounding in the underflow range), and
//! `sat` is the saturation error of rules whose scale can leave the block maximum above the format's
//! largest value (MX FLOOR and EVEN: up to 12.5% of the element for E4M3). `s` is bounded above from the
//! block's largest possible `|x̃|` and, for `sat`, below from its smallest possible block maximum.

use ndarray::{Array2, ArrayView2, Zip};

use crate::formats::{Format, Overflow};
use crate::quant::{Block, MxRounding, QuantSpec, ScaleRule};
use crate::recipe::OperandQuant;

use super::EmulateError;

/// A parsed operand quantisation.
#[derive(Clone, Debug)]
pub struct OperandPlan {
    pub spec: QuantSpec,
    pub rule_name: String,
}

/// The element formats' numbers the bounds need: unit roundoff, half the smallest subnormal, the largest
/// finite value and the largest power of two not above it.
fn element_numbers(f: Format) -> Result<(f64, f64, f64, f64), EmulateError> {
    Ok(match f {
        Format::E4M3 => (2f64.powi(-4), 2f64.powi(-10), 448.0, 256.0),
        Format::E5M2 => (2f64.powi(-3), 2f64.powi(-17), 57344.0, 32768.0),
        Format::E2M1 => (2f64.powi(-2), 0.25, 6.0, 4.0),
        Format::Bf16 => (2f64.powi(-8), 2f64.powi(-134), 3.3895313892515355e38, 2f64.powi(127)),
        Format::F16 => (2f64.powi(-11), 2f64.powi(-25), 65504.0, 32768.0),
        Format::E8M0 => return Err(EmulateError::Recipe("UE8M0 is a scale format, not an element format".into())),
    })
}

impl OperandPlan {
    pub fn parse(q: &OperandQuant) -> Result<OperandPlan, EmulateError> {
        let bad = |what: &str, v: &str| EmulateError::Recipe(format!("unknown {what} '{v}'"));
        let format: Format = q.format.parse().map_err(|_| bad("element format", &q.format))?;
        element_numbers(format)?;
        let block = Block::parse(&q.block).map_err(|e| EmulateError::Recipe(format!("block '{}': {e}", q.block)))?;
        let rule = match q.scale.as_str() {
            "deepgemm" => ScaleRule::DeepGemm { pow2: false },
            "deepgemm-pow2" => ScaleRule::DeepGemm { pow2: true },
            "deepgemm-div" => ScaleRule::DeepGemmDiv,
            "deepgemm-max-over-amax" => ScaleRule::DeepGemmMaxOverAmax,
            "te" => ScaleRule::TransformerEngine { pow2: false },
            "te-pow2" => ScaleRule::TransformerEngine { pow2: true },
            "mx-floor" => ScaleRule::Mx(MxRounding::Floor),
            "mx-rceil" => ScaleRule::Mx(MxRounding::Rceil),
            "mx-ceil" => ScaleRule::Mx(MxRounding::Ceil),
            "mx-even" => ScaleRule::Mx(MxRounding::Even),
            other => return Err(bad("scale rule", other)),
        };
        Ok(OperandPlan { spec: QuantSpec { format, block, rule, overflow: Overflow::Saturate }, rule_name: q.scale.clone() })
    }

    /// Whether the rule's scales are powers of two (so `q·s` is exact and products can be formed from
    /// dequantised operands without changing a bit).
    pub fn pow2_scales(&self) -> bool {
        matches!(self.spec.rule, ScaleRule::Mx(_) | ScaleRule::DeepGemm { pow2: true } | ScaleRule::TransformerEngine { pow2: true })
    }

    /// Length of a block along the contraction (the last dimension), for promotion with scales.
    pub fn k_block(&self) -> usize {
        match self.spec.block {
            Block::Rows(n) => n,
            Block::Cols(_) => 1,
            Block::Tile(_, c) => c,
        }
    }

    /// Block coordinates of element (r, c).
    fn block_of(&self, r: usize, c: usize) -> (usize, usize) {
        match self.spec.block {
            Block::Rows(n) => (r, c / n),
            Block::Cols(n) => (r / n, c),
            Block::Tile(p, q) => (r / p, c / q),
        }
    }

    /// Upper bound on the dequant scale a block with largest magnitude `amax` can get.
    fn scale_hi(&self, amax: f64) -> f64 {
        let (_, _, maxf, maxp2) = element_numbers(self.spec.format).expect("checked in parse");
        let slack = 1.0 + 2f64.powi(-20);
        match self.spec.rule {
            // sf = max(amax, 1e-4)/448 in f32 (pow2: rounded up to a power of two, at most twice).
            ScaleRule::DeepGemm { pow2 } => amax.max(1e-4) / maxf * slack * if pow2 { 2.0 } else { 1.0 },
            ScaleRule::DeepGemmDiv | ScaleRule::DeepGemmMaxOverAmax => amax.max(1e-4) / maxf * slack,
            // 1/s with s = maxf/amax (pow2: rounded down, so 1/s at most doubles); amax so small that the
            // multiplier overflows gives s = 1.
            ScaleRule::TransformerEngine { pow2 } => {
                let s = amax / maxf * slack * if pow2 { 2.0 } else { 1.0 };
                if amax < maxf * 2f64.powi(-126) {
                    s.max(1.0)
                } else {
                    s
                }
            }
            // Every MX rule gives 2^e with 2^e ≤ 2·amax/maxp2 (FLOOR: amax/maxp2; CEIL, EVEN, RCEIL: at
            // most one binade more); an all-zero block gets 2^-127.
            ScaleRule::Mx(_) => (2.0 * amax / maxp2 * slack).max(2f64.powi(-127)),
        }
    }

    /// Lower bound on the scale for a block whose largest magnitude is at least `amax_lo` (for the
    /// saturation term; only rules that can saturate need it).
    fn can_saturate(&self) -> bool {
        matches!(self.spec.rule, ScaleRule::Mx(MxRounding::Floor) | ScaleRule::Mx(MxRounding::Even))
    }

    fn scale_lo(&self, amax_lo: f64) -> f64 {
        let (_, _, _, maxp2) = element_numbers(self.spec.format).expect("checked in parse");
        amax_lo / (2.0 * maxp2) * (1.0 - 2f64.powi(-20))
    }

    /// Per element, a bound on |fed value − kernel input| for a kernel input `x̃` known only through
    /// `hi ≥ |x̃|` and `lo ≤ |x̃|` (elementwise).
    pub fn fed_error(&self, hi: ArrayView2<f64>, lo: ArrayView2<f64>) -> Array2<f64> {
        let (u, eta, maxf, _) = element_numbers(self.spec.format).expect("checked in parse");
        let (rows, cols) = hi.dim();
        let (gr, gc) = self.spec.block.grid(rows, cols);
        let mut amax_hi = Array2::<f64>::zeros((gr, gc));
        let mut amax_lo = Array2::<f64>::zeros((gr, gc));
        for r in 0..rows {
            for c in 0..cols {
                let b = self.block_of(r, c);
                amax_hi[b] = f64::max(amax_hi[b], hi[[r, c]]);
                amax_lo[b] = f64::max(amax_lo[b], lo[[r, c]]);
            }
        }
        let s_hi = amax_hi.mapv(|a| self.scale_hi(a));
        let s_lo = amax_lo.mapv(|a| self.scale_lo(a));
        let sat = self.can_saturate();
        Array2::from_shape_fn((rows, cols), |(r, c)| {
            let b = self.block_of(r, c);
            element_fed_error(hi[[r, c]], s_hi[b], s_lo[b], (u, eta, maxf), sat)
        })
    }
}

/// 2^-21 (a literal: `powi` in the per-element loop stayed a library call).
const TWO_POW_M21: f64 = 1.0 / 2_097_152.0;

/// The fed error of one element of magnitude at most `x` in a block whose scale is at most `s_hi` and at
/// least `s_lo`: `u·x` and `η·s_hi` (rounding, normal and subnormal), plus what saturation can clip when
/// the rule can saturate. `(u, eta, maxf)` are the element format's numbers.
#[inline(always)]
fn element_fed_error(x: f64, s_hi: f64, s_lo: f64, (u, eta, maxf): (f64, f64, f64), sat: bool) -> f64 {
    if x == 0.0 {
        return 0.0; // zero quantises to zero under every rule
    }
    let mut e = (u + TWO_POW_M21) * x + eta * s_hi;
    if sat {
        e += (x - maxf * s_lo).max(0.0);
    }
    e
}

impl OperandPlan {
    /// `(m, t)` with `m = |v| + e` (≥ |exact|) and `t = m + (fed error + e)`: what a stage's bound needs of a
    /// quantised operand with emulated value `v` and bound `e`, the fed error being [`Self::fed_error`] of
    /// the magnitudes `|v| ± widen·e` ([`magnitude_bounds`]). The same operations as those calls, in two
    /// passes and without their operand-sized intermediates (weights are 3M elements per expert, and were
    /// ten such passes per stage).
    pub fn fed_magnitudes(&self, v: ArrayView2<f64>, e: ArrayView2<f64>, widen: f64) -> (Array2<f64>, Array2<f64>) {
        let (u, eta, maxf, _) = element_numbers(self.spec.format).expect("checked in parse");
        let (rows, cols) = v.dim();
        let (gr, gc) = self.spec.block.grid(rows, cols);
        let (br, bc) = self.spec.block.dims();
        let hi = |v: f64, e: f64| v.abs() + widen * e;
        let lo = |v: f64, e: f64| (v.abs() - widen * e).max(0.0);
        let mut amax_hi = Array2::<f64>::zeros((gr, gc));
        let mut amax_lo = Array2::<f64>::zeros((gr, gc));
        // Rows as slices (a weight's rows are contiguous; a bound may be a broadcast zero, copied per row),
        // so that the loops below vectorise: through the arrays' index they did not, and this function was
        // 5% of the emulator's time. Same operations in the same order.
        let (mut vbuf, mut ebuf) = (Vec::new(), Vec::new());
        for (r, (vr, er)) in v.rows().into_iter().zip(e.rows()).enumerate() {
            let (vr, er) = (row_slice(&vr, &mut vbuf), row_slice(&er, &mut ebuf));
            for j in 0..gc {
                let b = (r / br, j);
                let (mut mh, mut ml) = (amax_hi[b], amax_lo[b]);
                let cs = j * bc..((j + 1) * bc).min(cols);
                for (&v, &e) in vr[cs.clone()].iter().zip(&er[cs]) {
                    mh = f64::max(mh, hi(v, e));
                    ml = f64::max(ml, lo(v, e));
                }
                (amax_hi[b], amax_lo[b]) = (mh, ml);
            }
        }
        let s_hi = amax_hi.mapv(|a| self.scale_hi(a));
        let s_lo = amax_lo.mapv(|a| self.scale_lo(a));
        let sat = self.can_saturate();
        let (mut m, mut t) = (crate::scratch::zeros2(rows, cols), crate::scratch::zeros2(rows, cols));
        for (r, (((vr, er), mut mr), mut tr)) in v.rows().into_iter().zip(e.rows()).zip(m.rows_mut()).zip(t.rows_mut()).enumerate() {
            let (vr, er) = (row_slice(&vr, &mut vbuf), row_slice(&er, &mut ebuf));
            let (mr, tr) = (mr.as_slice_mut().expect("fresh array"), tr.as_slice_mut().expect("fresh array"));
            for j in 0..gc {
                let b = (r / br, j);
                let (sh, sl) = (s_hi[b], s_lo[b]);
                let cs = j * bc..((j + 1) * bc).min(cols);
                let outs = mr[cs.clone()].iter_mut().zip(tr[cs.clone()].iter_mut());
                for ((mo, to), (&v, &e)) in outs.zip(vr[cs.clone()].iter().zip(&er[cs])) {
                    let fed = element_fed_error(hi(v, e), sh, sl, (u, eta, maxf), sat);
                    let me = v.abs() + e;
                    *mo = me;
                    *to = me + (fed + e);
                }
            }
        }
        (m, t)
    }
}

/// A row as a slice: itself when contiguous, else copied into `buf`.
fn row_slice<'a>(row: &'a ndarray::ArrayView1<'a, f64>, buf: &'a mut Vec<f64>) -> &'a [f64] {
    match row.as_slice() {
        Some(s) => s,
        None => {
            buf.clear();
            buf.extend(row.iter());
            buf
        }
    }
}

/// `|v| + b` and `max(|v| − b, 0)`: bounds on the magnitude of the exact value from an emulated value `v`
/// with bound `b` — and, with the bound doubled, on any faithful kernel's value.
pub fn magnitude_bounds(v: ArrayView2<f64>, b: ArrayView2<f64>, widen: f64) -> (Array2<f64>, Array2<f64>) {
    let mut hi = Array2::zeros(v.dim());
    let mut lo = Array2::zeros(v.dim());
    Zip::from(&mut hi).and(&mut lo).and(v).and(b).for_each(|h, l, &v, &b| {
        *h = v.abs() + widen * b;
        *l = (v.abs() - widen * b).max(0.0);
    });
    (hi, lo)
}

/// Grid spacing of an element format at magnitude `v` (on its own scale, before the block scale).
fn spacing(f: Format, v: f64) -> f64 {
    let (emin, mbits) = match f {
        Format::E4M3 => (-6, 3),
        Format::E5M2 => (-14, 2),
        Format::E2M1 => (0, 1),
        Format::Bf16 => (-126, 7),
        Format::F16 => (-14, 10),
        Format::E8M0 => (-127, 0),
    };
    let e = if v > 0.0 { (v.log2().floor() as i32).max(emin) } else { emin };
    2f64.powi(e - mbits)
}

impl OperandPlan {
    /// Per element, a bound on |what a faithful kernel feeds − what the emulator fed (`q`)| when the
    /// kernel's input differs from the emulator's `v` by at most `d` (elementwise).
    ///
    /// The block scale is recomputed at the ends of the block maximum's possible range; where it may change
    /// by more than 2^-10 (a power-of-two scale crossing a binade) the block falls back to the a-priori
    /// [`Self::fed_error`]. Otherwise an element keeps its code unless its scaled value can leave its
    /// rounding cell (half the smaller neighbouring spacing around the code, less the distance already
    /// taken), and the fed value moves by the scale's change (and, when the code can change, by the
    /// scaled move plus one spacing).
    pub fn fed_deviation(&self, v: ArrayView2<f64>, d: ArrayView2<f64>, q: &crate::quant::QuantTensor) -> Array2<f64> {
        let (rows, cols) = v.dim();
        let (gr, gc) = self.spec.block.grid(rows, cols);
        let mut amax = Array2::<f64>::zeros((gr, gc));
        let mut dmax = Array2::<f64>::zeros((gr, gc));
        for r in 0..rows {
            for c in 0..cols {
                let b = self.block_of(r, c);
                amax[b] = f64::max(amax[b], v[[r, c]].abs());
                dmax[b] = f64::max(dmax[b], d[[r, c]]);
            }
        }
        let fmt = self.spec.format;
        // (scale low, scale high, fallback) per block.
        let scales = Array2::from_shape_fn((gr, gc), |b| {
            let (a, dm) = (amax[b], dmax[b]);
            if dm == 0.0 {
                let s = q.scale[b];
                return (s, s, false);
            }
            let at = |x: f64| self.spec.rule.block_scale(x.max(0.0) as f32, fmt).scale as f64;
            let (lo, hi) = (at(a - dm), at(a + dm));
            let (lo, hi) = (lo.min(hi).min(q.scale[b]), hi.max(lo).max(q.scale[b]));
            // A power-of-two scale that may jump a binade moves every code: fall back. Small moves of an f32
            // scale (DeepGEMM, TransformerEngine without pow2) are carried element by element below.
            let fallback = !(lo > 0.0 && hi.is_finite()) || hi > lo * 1.25;
            (lo, hi, fallback)
        });
        // The a-priori fallback only when some block needs it (the magnitude arrays are weight-sized).
        let apriori = scales.iter().any(|s| s.2).then(|| {
            let (hi_m, lo_m) = magnitude_bounds(v, d, 1.0);
            self.fed_error(hi_m.view(), lo_m.view()) + &d
        });
        let element = |(r, c): (usize, usize)| {
            let b = self.block_of(r, c);
            let (s_lo, s_hi, fallback) = scales[b];
            if fallback {
                return apriori.as_ref().expect("made when any block falls back")[[r, c]];
            }
            let (x, dx, qe) = (v[[r, c]], d[[r, c]], q.q[[r, c]]);
            let se = q.scale[b];
            let scale_move = qe.abs() * (s_hi - s_lo);
            if dx == 0.0 && s_hi == s_lo {
                return 0.0;
            }
            // The scaled value's move, and the room left in the code's rounding cell.
            let y = x / se;
            let dy = dx / s_lo + x.abs() * (1.0 / s_lo - 1.0 / s_hi) + 2f64.powi(-22) * y.abs();
            let half = 0.5 * spacing(fmt, qe.abs() * (1.0 - 2f64.powi(-6)));
            let room = half - (y - qe).abs() - 2f64.powi(-22) * y.abs();
            if dy < room {
                scale_move
            } else {
                (dy + spacing(fmt, y.abs() + dy)) * s_hi + scale_move
            }
        };
        // Operand-sized per expert: in this thread's reused memory ([`crate::scratch`]).
        let mut out = crate::scratch::zeros2(rows, cols);
        Zip::indexed(&mut out).for_each(|rc, o| *o = element(rc));
        out
    }
}
