//! One stage of the emulated pipeline: what a faithful kernel computes, and a sound bound on its distance
//! from the exact result.
//!
//! ## The bound of a contraction `c = Σ_k a_k·b_k`
//! Each operand arrives with an emulated value `v` and a bound `e` (|any faithful kernel's value − exact|
//! ≤ e), so `|exact| ≤ m = |v| + e`. The recipe feeds the tensor cores `â` with `|â − a| ≤ E_a` (the input
//! bound plus the quantisation bound of [`super::operand`]). Then, elementwise,
//!
//! `|Σ â·b̂ − Σ a·b| ≤ Σ (m_a + E_a)(m_b + E_b) − Σ m_a·m_b`       (operands)
//! `|acc − Σ â·b̂| ≤ κ(model, K)·Σ (m_a + E_a)(m_b + E_b)`       (accumulation, [`accumulation_coefficient`])
//!
//! and storing the f32 accumulator as bf16 adds `u_s·(|acc| + …) + η_s`. The two sums are two plain f64
//! GEMMs of non-negative matrices, made upper bounds by their own error factor.

use gemm::Parallelism;
use ndarray::{Array2, ArrayView2, CowArray, Ix2, Zip};

use crate::accum::{self, Model, TensorCore};
use crate::formats::Format;
use crate::quant::{self, QuantTensor};
use crate::recipe::{GemmRecipe, Storage};

use super::operand::{magnitude_bounds, OperandPlan};
use super::EmulateError;

/// Relative slack for the oracle's own f64 roundings (each exact stage rounds once to f64; the bound is
/// checked against those f64 values, not the real numbers).
pub const ORACLE_SLACK: f64 = 1.0 / (1u64 << 40) as f64;

const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// The accumulation model of a recipe's name; `blackwell` is the tcgen05 model (25 bits, f32 out, no
/// promotion: MMA-Sim, not checked on hardware here).
pub fn parse_model(name: &str) -> Result<Model, EmulateError> {
    if name == "blackwell" {
        return Ok(Model::TensorCore(TensorCore { k_inst: 32, n_bits: 25, out_frac_bits: 23, promote_every: None, operands: (Format::E4M3, Format::E4M3) }));
    }
    Model::parse(name).map_err(|_| EmulateError::Recipe(format!("unknown accumulation model '{name}'")))
}

fn gamma(n: usize) -> f64 {
    let nu = n as f64 * U32;
    nu / (1.0 - nu)
}

/// `κ`: |accumulated − exact sum of the fed products| ≤ κ·Σ|products| (plus underflow, see
/// [`underflow_term`]).
///
/// - exact: one rounding to f32, `2^-24`;
/// - f32 sequential (product rounded, then the add): `γ_{K+1}`; f32 FMA chain: `γ_K`;
/// - tensor core, per instruction of `k_inst` products and C: every term truncated below `2^(E−n)` where
///   `2^E ≤` the largest term's magnitude `≤ Σ|products|` (the alignment exponent `e(a)+e(b)` never
///   exceeds `log2|a·b|`), then the sum truncated to `f` fraction bits: at most `((k_inst+1)·2^-n + 2^-f)`
///   times the running magnitude per instruction. With promotion every `P`, a block's partial carries
///   `⌈P/k_inst⌉` instructions' worth, and the f32 scale product, multiply and add of each of the
///   `⌈K/P⌉` promotions add `2^-24` each. A final factor `(1 + κ)` covers errors feeding later magnitudes.
pub fn accumulation_coefficient(model: &Model, k: usize) -> f64 {
    let first = match model {
        Model::Exact => U32,
        Model::F32Sequential => gamma(k + 1),
        Model::F32Fma => gamma(k.max(1)),
        Model::TensorCore(tc) => {
            let per = (tc.k_inst as f64 + 1.0) * 2f64.powi(-(tc.n_bits as i32)) + 2f64.powi(-(tc.out_frac_bits as i32));
            match tc.promote_every {
                None => k.div_ceil(tc.k_inst).max(1) as f64 * per,
                Some(p) => p.div_ceil(tc.k_inst) as f64 * per + (k.div_ceil(p) as f64 + 2.0) * 2.0 * U32,
            }
        }
    };
    first * (1.0 + 2.0 * first)
}

/// Absolute error from f32 underflow in a contraction of length `k` (each f32 operation in the subnormal
/// range may err by half of 2^-149).
pub fn underflow_term(k: usize) -> f64 {
    (k as f64 + 2.0) * 2f64.powi(-149)
}

/// `C = A·Bᵀ` in plain f64 for non-negative matrices, scaled up by its own worst rounding so that it is an
/// upper bound of the real product (or, with `down`, scaled down to a lower bound).
pub fn abs_gemm_nt(a: ArrayView2<f64>, b: ArrayView2<f64>, down: bool) -> Array2<f64> {
    let (m, k) = a.dim();
    let n = b.nrows();
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    let mut c = Array2::<f64>::zeros((m, n));
    if k > 0 && m > 0 && n > 0 {
        let par = if m * n * k > (1 << 22) && rayon::current_thread_index().is_none() { Parallelism::Rayon(0) } else { Parallelism::None };
        // SAFETY: standard-layout buffers of m·k, n·k and m·n elements with the strides given.
        unsafe {
            gemm::gemm(m, n, k, c.as_mut_ptr(), 1, n as isize, false, a.as_ptr(), 1, k as isize, b.as_ptr(), k as isize, 1, 0.0, 1.0, false, false, false, par);
        }
    }
    let f = (k as f64 + 2.0) * 2f64.powi(-52);
    let factor = if down { 1.0 - f } else { 1.0 + f };
    c.mapv_inplace(|v| v * factor);
    c
}

/// A parsed GEMM of a recipe.
#[derive(Clone, Debug)]
pub struct GemmPlan {
    pub name: &'static str,
    pub model: Model,
    pub a: Option<OperandPlan>,
    pub b: Option<OperandPlan>,
    /// The kernel is declared to follow the model's schedule exactly (same K order, instruction width and
    /// promotion interval, as DeepGEMM's unfused chain or cuBLAS do): the accumulation is then a function of
    /// the fed operands, and only operand deviations can make the kernel differ from the emulator.
    pub same_schedule: bool,
}

impl GemmPlan {
    pub fn parse(name: &'static str, g: &GemmRecipe) -> Result<GemmPlan, EmulateError> {
        let op = |q: &Option<crate::recipe::OperandQuant>| q.as_ref().map(OperandPlan::parse).transpose();
        let plan = GemmPlan { name, model: parse_model(&g.accumulate)?, a: op(&g.a)?, b: op(&g.b)?, same_schedule: false };
        if let (Model::TensorCore(TensorCore { promote_every: Some(p), .. }), true) = (&plan.model, plan.a.is_some() || plan.b.is_some()) {
            let kb: Vec<usize> = [&plan.a, &plan.b].iter().filter_map(|o| o.as_ref().map(|o| o.k_block())).collect();
            if kb.iter().any(|&k| k != *p) {
                return Err(EmulateError::Recipe(format!(
                    "{name}: promotion every {p} needs operand blocks of {p} along K (got {kb:?})"
                )));
            }
        }
        Ok(plan)
    }

    fn promotes(&self) -> Option<usize> {
        match self.model {
            Model::TensorCore(TensorCore { promote_every: Some(p), .. }) if self.a.is_some() || self.b.is_some() => Some(p),
            _ => None,
        }
    }
}

/// An emulated tensor and its bound.
#[derive(Clone, Debug)]
pub struct Tracked {
    pub v: Array2<f64>,
    pub b: Array2<f64>,
}

/// A GEMM stage's result, with the quantised operands the recipe fed (for `q.<name>` outputs).
pub struct GemmOut {
    pub out: Tracked,
    /// With [`gemm_stage_with`] and input deviations: the bound on |faithful kernel − emulator| (see
    /// [`store_dev`]).
    pub dev: Option<Array2<f64>>,
    pub qa: Option<QuantTensor>,
    pub qb: Option<QuantTensor>,
}

/// Per-row scales `[rows, ⌈K/kb⌉]` of a quantised operand (tiles expanded to their rows).
fn row_scales(q: &QuantTensor, rows: usize) -> Array2<f64> {
    match q.spec.block {
        quant::Block::Rows(_) => q.scale.clone(),
        quant::Block::Tile(p, _) => Array2::from_shape_fn((rows, q.scale.ncols()), |(r, j)| q.scale[[r / p, j]]),
        quant::Block::Cols(_) => unreachable!("rejected by GemmPlan::parse: no K block"),
    }
}

/// Round an accumulator to storage and grow the bound by the storage rounding.
pub fn store(raw: Array2<f64>, pre: Array2<f64>, st: Storage) -> Tracked {
    let (u, eta) = (st.unit_roundoff(), st.underflow());
    let mut b = pre;
    Zip::from(&mut b).and(&raw).for_each(|b, &r| *b = *b + u * (r.abs() + 2.0 * *b) + eta);
    let mut v = raw; // rounded in place: no copy of a possibly weight-sized array
    v.mapv_inplace(|r| st.round(r));
    Tracked { v, b }
}

/// The deviation bound after storage: a kernel whose accumulator may differ from the emulator's by `pre`
/// stores a value that differs by at most `pre` plus one storage ulp (the two roundings may go to
/// neighbours); none when `pre` is zero (both round the same value).
pub fn store_dev(raw: &Array2<f64>, pre: Array2<f64>, st: Storage) -> Array2<f64> {
    let (u, eta) = (st.unit_roundoff(), st.underflow());
    let mut d = pre;
    Zip::from(&mut d).and(raw).for_each(|d, &r| {
        if *d > 0.0 {
            *d = *d + 2.0 * u * (r.abs() + *d) + 2.0 * eta;
        }
    });
    d
}

/// `C = A·Bᵀ` (operands `[M, K]`, `[N, K]`, each with its bound) as the recipe computes it, stored to `st`.
pub fn gemm_stage(plan: &GemmPlan, a: ArrayView2<f64>, ab: ArrayView2<f64>, b: ArrayView2<f64>, bb: ArrayView2<f64>, st: Storage) -> GemmOut {
    gemm_stage_with(plan, a, ab, None, b, bb, None, st)
}

/// [`gemm_stage`], and, when either operand's deviation bound is given (|faithful kernel's operand −
/// emulator's| elementwise; `None` = 0), the deviation bound of the result: the fed operands' deviations
/// ([`OperandPlan::fed_deviation`] for quantised ones) through the products, twice the accumulation
/// coefficient (the kernel's and the emulator's orders may differ), and [`store_dev`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_stage_with(
    plan: &GemmPlan,
    a: ArrayView2<f64>,
    ab: ArrayView2<f64>,
    ad: Option<ArrayView2<f64>>,
    b: ArrayView2<f64>,
    bb: ArrayView2<f64>,
    bd: Option<ArrayView2<f64>>,
    st: Storage,
) -> GemmOut {
    let k = a.ncols();
    let qa = plan.a.as_ref().map(|p| quant::quantize(a, &p.spec));
    let qb = plan.b.as_ref().map(|p| quant::quantize(b, &p.spec));

    // What the tensor cores compute. A tensor-core model is told the formats of what it is fed (they fix
    // how a subnormal operand aligns): the element format of an operand fed as codes, bf16 for values
    // (stored bf16, or dequantised codes, which bf16 holds exactly).
    let fed_as_codes = plan.promotes().is_some();
    let fmt_of = |q: &Option<QuantTensor>| match q {
        Some(q) if fed_as_codes => q.spec.format,
        _ => Format::Bf16,
    };
    let (fmt_a, fmt_b) = (fmt_of(&qa), fmt_of(&qb));
    let model = match plan.model {
        Model::TensorCore(tc) => Model::TensorCore(TensorCore { operands: (fmt_a, fmt_b), ..tc }),
        m => m,
    };
    let raw = match plan.promotes() {
        Some(kb) => {
            let nkb = k.div_ceil(kb);
            let ones = |rows| Array2::from_elem((rows, nkb), 1.0);
            let (fa, sa) = match &qa { Some(q) => (q.q.view(), row_scales(q, a.nrows())), None => (a, ones(a.nrows())) };
            let (fb, sb) = match &qb { Some(q) => (q.q.view(), row_scales(q, b.nrows())), None => (b, ones(b.nrows())) };
            accum::gemm_nt(&model, fa, fb, Some((sa.view(), sb.view(), kb)))
        }
        None => {
            let da = qa.as_ref().map(|q| q.dequantize());
            let db = qb.as_ref().map(|q| q.dequantize());
            let fa = da.as_ref().map_or(a, |d| d.view());
            let fb = db.as_ref().map_or(b, |d| d.view());
            accum::gemm_nt(&model, fa, fb, None)
        }
    };

    // The bound.
    // Per operand: `m` ≥ |exact| and the error `e` of what is fed (None: exactly zero, e.g. a weight read
    // in its own storage format, whose bound is a broadcast zero). Weight operands are 3M elements per
    // expert here, so no array is made that is not needed.
    let fed = |v: ArrayView2<f64>, e: ArrayView2<f64>, p: &Option<OperandPlan>| -> (Array2<f64>, Option<Array2<f64>>) {
        let m_exact = Zip::from(v).and(e).map_collect(|&v, &e| v.abs() + e);
        let err = match p {
            Some(p) => {
                let (hi, lo) = magnitude_bounds(v, e, 2.0);
                let mut err = p.fed_error(hi.view(), lo.view());
                err += &e;
                Some(err)
            }
            None if is_zero_broadcast(&e) => None,
            None => Some(e.to_owned()),
        };
        (m_exact, err)
    };
    let (ma, ea) = fed(a, ab, &plan.a);
    let (mb, eb) = fed(b, bb, &plan.b);
    let (ta, tb) = (plus(&ma, ea.as_ref()), plus(&mb, eb.as_ref()));
    let s = abs_gemm_nt(ta.view(), tb.view(), false);
    let mut p0 = abs_gemm_nt(ma.view(), mb.view(), true);
    let kappa = accumulation_coefficient(&plan.model, k) + ORACLE_SLACK;
    let under = underflow_term(k);
    // In place over p0 (a weight gradient's outputs are 3M entries per expert: no array more than needed).
    Zip::from(&mut p0).and(&s).for_each(|p, &s| *p = (s - *p).max(0.0) + kappa * s + under);
    drop(s);
    let mut pre = p0;
    let mut dev_pre = if ad.is_some() || bd.is_some() {
        let zero = Array2::<f64>::zeros((1, 1));
        let zeros = |dim| zero.broadcast(dim).expect("a 1x1 array broadcasts");
        let ad = ad.unwrap_or_else(|| zeros(a.dim()));
        let bd = bd.unwrap_or_else(|| zeros(b.dim()));
        // Fed magnitudes and their deviations (None: exactly zero).
        let fed = |v: ArrayView2<f64>, d: ArrayView2<f64>, p: &Option<OperandPlan>, q: &Option<QuantTensor>| match (p, q) {
            (Some(p), Some(q)) => (q.dequantize().mapv(f64::abs), Some(p.fed_deviation(v, d, q))),
            _ => (v.mapv(f64::abs), (!is_zero_broadcast(&d)).then(|| d.to_owned())),
        };
        let (fa, fda) = fed(a, ad, &plan.a, &qa);
        let (fb, fdb) = fed(b, bd, &plan.b, &qb);
        let exact_inputs = fda.iter().chain(fdb.iter()).all(|d| d.iter().all(|&x| x == 0.0));
        if exact_inputs && plan.same_schedule {
            // Same fed operands, same schedule: the same bits.
            Some(Array2::zeros((a.nrows(), b.nrows())))
        } else {
            let s1 = abs_gemm_nt(plus(&fa, fda.as_ref()).view(), plus(&fb, fdb.as_ref()).view(), false);
            let mut dp = abs_gemm_nt(fa.view(), fb.view(), true); // s0, overwritten in place
            let orders = if plan.same_schedule { 0.0 } else { 2.0 * accumulation_coefficient(&plan.model, k) };
            Zip::from(&mut dp).and(&s1).for_each(|d, &s1| {
                let ops = if exact_inputs { 0.0 } else { (s1 - *d).max(0.0) };
                *d = ops + orders * s1 + 2.0 * under
            });
            Some(dp)
        }
    } else {
        None
    };
    if let Model::TensorCore(tc) = model {
        // A subnormal operand aligns at its format's lowest normal exponent, so a product's alignment
        // exponent may exceed its magnitude: 2^E ≤ 2^(emin_a+1)·s_a·max|b| (and symmetrically), which the
        // truncation of every term of every instruction is relative to.
        let row_max = |m: &CowArray<f64, Ix2>| m.rows().into_iter().map(|r| r.iter().fold(0.0f64, |x, &y| x.max(y))).collect::<Vec<f64>>();
        let (amax, bmax) = (row_max(&ta), row_max(&tb));
        let scale_max = |q: &Option<QuantTensor>, rows: usize| -> Vec<f64> {
            match q {
                Some(q) if fed_as_codes => row_scales(q, rows).rows().into_iter().map(|r| 2.0 * r.iter().fold(0.0f64, |x, &y| x.max(y))).collect(),
                _ => vec![1.0; rows],
            }
        };
        let (sa, sb) = (scale_max(&qa, a.nrows()), scale_max(&qb, b.nrows()));
        let (ea_min, eb_min) = (2f64.powi(min_normal_exponent(fmt_a)), 2f64.powi(min_normal_exponent(fmt_b)));
        let per = k.div_ceil(tc.k_inst) as f64 * (tc.k_inst as f64 + 1.0) * 2f64.powi(-(tc.n_bits as i32)) * (1.0 + 2.0 * kappa);
        for ((m, n), p) in pre.indexed_iter_mut() {
            let extra = 2.0 * (ea_min * sa[m] * bmax[n] + eb_min * sb[n] * amax[m]) + ea_min * eb_min * sa[m] * sb[n];
            *p += per * extra;
            if let Some(dp) = dev_pre.as_mut().filter(|_| !plan.same_schedule) {
                dp[[m, n]] += 2.0 * per * extra;
            }
        }
    }
    let dev = dev_pre.map(|dp| store_dev(&raw, dp, st));
    GemmOut { out: store(raw, pre, st), dev, qa, qb }
}

/// A broadcast view of zeros (how exact operands' bounds are passed): no storage behind it.
fn is_zero_broadcast(e: &ArrayView2<f64>) -> bool {
    e.strides().iter().all(|&s| s == 0) && e.iter().next().is_none_or(|&x| x == 0.0)
}

/// `m + e` elementwise, or `m` itself when `e` is exactly zero (None).
fn plus<'a>(m: &'a Array2<f64>, e: Option<&Array2<f64>>) -> CowArray<'a, f64, Ix2> {
    match e {
        Some(e) => CowArray::from(m + e),
        None => CowArray::from(m.view()),
    }
}

/// The exponent of the smallest normal value of an operand format (where its subnormals align).
fn min_normal_exponent(f: Format) -> i32 {
    match f {
        Format::E4M3 => -6,
        Format::E5M2 => -14,
        Format::E2M1 => 0,
        Format::F16 => -14,
        Format::Bf16 | Format::E8M0 => -126,
    }
}

/// Deviation bound of a short contraction `Σ_j a_j·b_j` computed by the kernel and the emulator from
/// operands within `d` of the emulator's (terms: emulator magnitude and deviation of each factor), each
/// accumulating with coefficient `kappa`.
#[inline]
pub fn dot_dev(terms: impl Iterator<Item = (f64, f64, f64, f64)>, kappa: f64, k: usize) -> f64 {
    let (mut ops, mut s) = (0.0, 0.0);
    for (ma, da, mb, db) in terms {
        ops += ma * db + da * mb + da * db;
        s += (ma + da) * (mb + db);
    }
    if ops == 0.0 && kappa == 0.0 {
        return 0.0; // same operands, same order: the same bits
    }
    let f = 1.0 + (k as f64 + 2.0) * 2f64.powi(-52);
    (ops + 2.0 * kappa * s) * f + 2.0 * underflow_term(k)
}

/// Bound of a short contraction `Σ_j a_j·b_j` from magnitude bounds `m` and error bounds `e` of its
/// terms, for an accumulation coefficient `kappa`: operands' part plus accumulation.
#[inline]
pub fn dot_bound(terms: impl Iterator<Item = (f64, f64, f64, f64)>, kappa: f64, k: usize) -> f64 {
    let (mut ops, mut s) = (0.0, 0.0);
    for (ma, ea, mb, eb) in terms {
        ops += ma * eb + ea * mb + ea * eb;
        s += (ma + ea) * (mb + eb);
    }
    let f = 1.0 + (k as f64 + 2.0) * 2f64.powi(-52);
    (ops + (kappa + ORACLE_SLACK) * s) * f + underflow_term(k)
}
