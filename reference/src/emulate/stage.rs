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
//! except for blockwise FP8 (a promoting tensor-core model fed codes), whose truncation is bounded
//! instruction by instruction from the model's own magnitudes ([`Truncation`]).
//!
//! and storing the f32 accumulator as bf16 adds `u_s·(|acc| + …) + η_s`. The two sums are two plain f64
//! GEMMs of non-negative matrices, made upper bounds by their own error factor.

use ndarray::{Array2, ArrayView2, ArrayViewMut2, Zip};

use crate::accum::{self, Model, TensorCore};
use crate::formats::Format;
use crate::quant::{self, QuantTensor};
use crate::recipe::{GemmRecipe, Storage};

use super::operand::OperandPlan;
use super::products::{abs_factor, abs_gemm_into, row_tiles, Operand, Products};
use super::EmulateError;

/// Relative slack for the oracle's own f64 roundings (each exact stage rounds once to f64; the bound is
/// checked against those f64 values, not the real numbers).
pub const ORACLE_SLACK: f64 = 1.0 / (1u64 << 40) as f64;

const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// The accumulation model of a recipe's name; `blackwell` is the tcgen05 model (25 bits, f32 out, no
/// promotion: MMA-Sim, not checked on hardware here).
pub fn parse_model(name: &str) -> Result<Model, EmulateError> {
    if name == "blackwell" {
        return Ok(Model::TensorCore(TensorCore::BLACKWELL_FP8));
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
///   (A GEMM stage fed blockwise-FP8 codes uses the much tighter per-instruction [`Truncation`] instead.)
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
    let mut c = Array2::<f64>::zeros((a.nrows(), b.nrows()));
    abs_gemm_into(a, b, c.view_mut());
    let factor = abs_factor(a.ncols(), down);
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
    /// the fed operands, so fed the emulator's operands the kernel gives its bits; fed other operands, it may
    /// still round or truncate differently, and the deviation keeps those terms.
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
    let dim = (a.nrows(), b.nrows());
    let (mut v, mut bound) = (Array2::zeros(dim), Array2::zeros(dim));
    let mut dev = (ad.is_some() || bd.is_some()).then(|| Array2::zeros(dim));
    let out = StageOut { v: v.view_mut(), b: bound.view_mut(), d: dev.as_mut().map(|d| d.view_mut()) };
    let Fed { qa, qb } = gemm_stage_into(plan, StageIn { v: a, b: ab, d: ad }, StageIn { v: b, b: bb, d: bd }, st, out);
    GemmOut { out: Tracked { v, b: bound }, dev, qa, qb }
}

pub use crate::accum::BoundElem;

/// Where [`gemm_stage_into`] writes, each `[M, N]`: the stored values, their bounds, and (written only
/// when the stage has input deviations) the deviation bounds.
pub struct StageOut<'a, B> {
    pub v: ArrayViewMut2<'a, f64>,
    pub b: ArrayViewMut2<'a, B>,
    pub d: Option<ArrayViewMut2<'a, B>>,
}

/// An operand of [`gemm_stage_into`]: emulated value, bound, and deviation bound (`None` = 0).
pub struct StageIn<'a> {
    pub v: ArrayView2<'a, f64>,
    pub b: ArrayView2<'a, f64>,
    pub d: Option<ArrayView2<'a, f64>>,
}

/// The quantised operands a stage fed (for `q.<name>` outputs).
pub struct Fed {
    pub qa: Option<QuantTensor>,
    pub qb: Option<QuantTensor>,
}

/// One operand's arrays for the bound GEMMs ([`products`]): `m ≥ |exact|`, `t = m + E` (E: the error of
/// what is fed) and, for deviations, `f = |fed value|` and `f1 = f + D` (D: its deviation). `None` where
/// the array would equal another bit for bit (`t`, `f`: equal to `m`; `f1`: to `f`), so that neither
/// the array nor a GEMM of it is made twice.
struct BoundOperand {
    m: Array2<f64>,
    t: Option<Array2<f64>>,
    f: Option<Array2<f64>>,
    f1: Option<Array2<f64>>,
}

impl BoundOperand {
    /// The operand's bound arrays from its emulated value `v`, bound `e` and (for deviations) deviation
    /// `d`, quantised as `p` (to `q`). Operands are 3M elements per expert for weights, so no array is
    /// made that is not needed.
    fn new(v: ArrayView2<f64>, e: ArrayView2<f64>, d: Option<ArrayView2<f64>>, p: &Option<OperandPlan>, q: &Option<QuantTensor>) -> Self {
        // An exactly-zero error adds nothing (m ≥ 0, and m + 0 = m bit for bit).
        let (m, t) = match p {
            Some(p) => {
                let (m, t) = p.fed_magnitudes(v, e, 2.0);
                (m, Some(t))
            }
            None => {
                let m = Zip::from(v).and(e).map_collect(|&v, &e| v.abs() + e);
                let t = (!all_zero(&e)).then(|| &m + &e);
                (m, t)
            }
        };
        let (f, f1) = match (d, p, q) {
            (None, ..) => (None, None),
            (Some(d), Some(p), Some(q)) => {
                let f = q.dequantize_abs();
                // No deviation in, none out (a weight read as stored): the fed values are the same
                // codes and scales ([`OperandPlan::fed_deviation`] gives zeros, unless a scale is NaN).
                let unmoved = all_zero(&d) && q.scale.iter().all(|s| !s.is_nan());
                let fd = (!unmoved).then(|| p.fed_deviation(v, d, q));
                // f + fd written over fd (same operands, same order: the bits of `&f + &fd`).
                let f1 = fd.filter(|fd| !all_zero(&fd.view())).map(|mut fd| {
                    fd.zip_mut_with(&f, |d, &f| *d = f + *d);
                    fd
                });
                (Some(f), f1)
            }
            (Some(d), ..) => {
                // |v| equals m when the bound is zero.
                let f = (!all_zero(&e)).then(|| v.mapv(f64::abs));
                let f1 = (!all_zero(&d)).then(|| f.as_ref().unwrap_or(&m) + &d);
                (f, f1)
            }
        };
        BoundOperand { m, t, f, f1 }
    }

    /// `(id, array)` of each role; equal ids mean equal values (id 0: `m`, 1: `t`, 2: `f`, 3: `f1`).
    fn m(&self) -> Operand<'_> {
        Operand { id: 0, v: self.m.view() }
    }
    fn t(&self) -> Operand<'_> {
        self.t.as_ref().map_or(self.m(), |t| Operand { id: 1, v: t.view() })
    }
    fn f(&self) -> Operand<'_> {
        self.f.as_ref().map_or(self.m(), |f| Operand { id: 2, v: f.view() })
    }
    fn f1(&self) -> Operand<'_> {
        self.f1.as_ref().map_or(self.f(), |f1| Operand { id: 3, v: f1.view() })
    }
    /// Whether the fed operand has no deviation.
    fn exact(&self) -> bool {
        self.f1.is_none()
    }

    /// Give the arrays (weight-sized per expert) to this thread's next stage ([`crate::scratch`]).
    fn recycle(self) {
        let BoundOperand { m, t, f, f1 } = self;
        [Some(m), t, f, f1].into_iter().flatten().for_each(crate::scratch::give_array);
    }
}

/// Whether every element is zero (a broadcast zero is checked by its one element).
fn all_zero(e: &ArrayView2<f64>) -> bool {
    is_zero_broadcast(e) || e.iter().all(|&x| x == 0.0)
}

/// How the deviation bound is formed ([`gemm_stage_into`]).
#[derive(Clone, Copy, PartialEq)]
enum DevMode {
    /// No deviations asked for.
    None,
    /// Exact fed operands and the same schedule: the same bits, deviation zero.
    Zero,
    /// Exact fed operands, another order: the accumulation of both.
    Orders,
    /// Operand deviations through the products, and the accumulation of both (with the same schedule too:
    /// other fed codes truncate differently).
    Full,
}

/// [`gemm_stage_with`] written into `out` (the caller's arrays: a weight gradient's per-expert slice,
/// or an expert's rows), one tile of output rows at a time ([`products`]): nothing output-sized is
/// allocated here besides the tensor-core model's own work.
pub fn gemm_stage_into<B: BoundElem>(plan: &GemmPlan, a: StageIn, b: StageIn, st: Storage, out: StageOut<B>) -> Fed {
    let (StageIn { v: a, b: ab, d: ad }, StageIn { v: b, b: bb, d: bd }) = (a, b);
    let StageOut { v: mut raw, b: mut bound, d: mut dev } = out;
    let (m, n, k) = (a.nrows(), b.nrows(), a.ncols());
    assert_eq!(raw.dim(), (m, n), "output shape");
    let qa = plan.a.as_ref().map(|p| quant::quantize(a, &p.spec));
    let qb = plan.b.as_ref().map(|p| quant::quantize(b, &p.spec));

    // What the tensor cores compute, into the output's values (rounded to storage at the end). A
    // tensor-core model is told the formats of what it is fed (they fix how a subnormal operand aligns):
    // the element format of an operand fed as codes, bf16 for values (stored bf16, or dequantised codes,
    // which bf16 holds exactly).
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
    // A promoting tensor-core GEMM fed codes is bounded instruction by instruction ([`Truncation`]): the
    // model then also writes each entry's Σ|instruction results| into the bounds, read back below.
    let fine = match (model, plan.promotes(), &qa, &qb) {
        (Model::TensorCore(tc), Some(kb), Some(_), Some(_)) => Truncation::new(&tc, kb, k),
        _ => None,
    };
    match plan.promotes() {
        Some(kb) => {
            let nkb = k.div_ceil(kb);
            let ones = |rows| Array2::from_elem((rows, nkb), 1.0);
            let (fa, sa) = match &qa { Some(q) => (q.q.view(), row_scales(q, a.nrows())), None => (a, ones(a.nrows())) };
            let (fb, sb) = match &qb { Some(q) => (q.q.view(), row_scales(q, b.nrows())), None => (b, ones(b.nrows())) };
            let scales = Some((sa.view(), sb.view(), kb));
            match (&model, &fine) {
                (Model::TensorCore(tc), Some(f)) if f.chained() => accum::gemm_nt_mag_into(tc, fa, fb, scales, raw.view_mut(), bound.view_mut()),
                _ => accum::gemm_nt_into(&model, fa, fb, scales, raw.view_mut()),
            }
        }
        None => {
            let da = qa.as_ref().map(|q| q.dequantize());
            let db = qb.as_ref().map(|q| q.dequantize());
            let fa = da.as_ref().map_or(a, |d| d.view());
            let fb = db.as_ref().map_or(b, |d| d.view());
            accum::gemm_nt_into(&model, fa, fb, None, raw.view_mut());
            // Weight-sized per expert: kept for the thread's next stage ([`crate::scratch`]).
            [da, db].into_iter().flatten().for_each(crate::scratch::give_array);
        }
    }

    // The bound: per entry, with s = Σ t_a·t_b and s0 = Σ m_a·m_b (as upper and lower bounds),
    // `(s − s0) + κ·s + underflow` (operands and accumulation); deviations alike from the fed operands.
    let zero = Array2::<f64>::zeros((1, 1));
    let zeros = |dim| zero.broadcast(dim).expect("a 1x1 array broadcasts");
    let want_dev = ad.is_some() || bd.is_some();
    let (ad, bd) = (want_dev.then(|| ad.unwrap_or_else(|| zeros(a.dim()))), want_dev.then(|| bd.unwrap_or_else(|| zeros(b.dim()))));
    let oa = BoundOperand::new(a, ab, ad, &plan.a, &qa);
    let ob = BoundOperand::new(b, bb, bd, &plan.b, &qb);
    let exact_inputs = oa.exact() && ob.exact();
    let mode = match (want_dev, exact_inputs, plan.same_schedule) {
        (false, ..) => DevMode::None,
        (true, true, true) => DevMode::Zero, // same fed operands, same schedule: the same bits
        (true, true, false) => DevMode::Orders,
        (true, false, _) => DevMode::Full,
    };
    let mut products = Products::default();
    let slot_s = products.add(oa.t(), ob.t());
    let slot_s0 = products.add(oa.m(), ob.m());
    let slot_d1 = matches!(mode, DevMode::Orders | DevMode::Full).then(|| products.add(oa.f1(), ob.f1()));
    let slot_d0 = (mode == DevMode::Full).then(|| products.add(oa.f(), ob.f()));
    let (up, down) = (abs_factor(k, false), abs_factor(k, true));
    // With the per-instruction bound, the coefficient of Σ|products| keeps only the promotions' f32 roundings.
    let coefficient = fine.as_ref().map_or_else(|| accumulation_coefficient(&plan.model, k), |f| f.promotion);
    let kappa = coefficient + ORACLE_SLACK;
    let under = underflow_term(k);
    // The accumulation terms of the deviation: the emulator's and the kernel's roundings or truncations differ
    // unless both accumulate the same fed operands in the same schedule (DevMode::Zero, where the deviation is
    // 0): a kernel that follows the schedule but is fed other codes truncates differently (not Lipschitz).
    let orders = 2.0 * coefficient;
    // Per-instruction maxima of the fed magnitudes' bounds, and their product (a GEMM over the instructions).
    let chunk_max = fine.as_ref().map(|f| (f.chunk_max(oa.t().v), f.chunk_max(ob.t().v)));
    // Few instructions (weight gradients over few rows): the product row by row below, B's maxima
    // transposed, instead of a GEMM whose output tile would cost more than its few multiply-adds.
    let inline_mt = fine.as_ref().is_some_and(|f| f.instructions <= INLINE_MT);
    let cb_t = chunk_max.as_ref().filter(|_| inline_mt).map(|(_, cb)| cb.t().as_standard_layout().into_owned());
    let slot_mt = chunk_max.as_ref().filter(|_| !inline_mt).map(|(ca, cb)| products.add(Operand { id: 4, v: ca.view() }, Operand { id: 4, v: cb.view() }));
    let tc_extra = match model {
        Model::TensorCore(tc) => {
            let (amax, bmax) = match &chunk_max {
                Some((ca, cb)) => (row_max(ca.view()), row_max(cb.view())),
                None => (row_max(oa.t().v), row_max(ob.t().v)),
            };
            let per = match &fine {
                Some(f) => f.instructions as f64 * f.alpha * f.rho * (1.0 + f.gamma),
                None => k.div_ceil(tc.k_inst) as f64 * (tc.k_inst as f64 + 1.0) * 2f64.powi(-(tc.n_bits as i32)) * (1.0 + 2.0 * kappa),
            };
            Some(TcExtra::new(per, fmt_a, fmt_b, (amax, bmax), fed_as_codes, (&qa, &qb)))
        }
        _ => None,
    };
    let (u, eta) = (st.unit_roundoff(), st.underflow());

    // Rows of the outputs are written as slices (every caller's arrays have contiguous rows; an empty
    // view may carry any strides).
    let contiguous = |s: &[isize]| m == 0 || n <= 1 || s[1] == 1;
    assert!(contiguous(raw.strides()) && contiguous(bound.strides()), "output rows contiguous");
    assert!(dev.as_ref().is_none_or(|d| contiguous(d.strides())), "output rows contiguous");
    let dev_extra = matches!(mode, DevMode::Orders | DevMode::Full);
    let (mut pre, mut dp) = (vec![0.0; n], vec![0.0; n]);
    let (mt_up, mag_up) = fine.as_ref().map_or((1.0, 1.0), |f| (abs_factor(f.instructions, false), f.magnitude_factor));
    let mut mt_buf = vec![0.0; if inline_mt { n } else { 0 }];
    // Per row of the per-instruction bound: R, Mt (as used) and the emulator's own truncation T_e.
    let (mut r_row, mut mt_keep, mut own_row) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for rows in row_tiles(m, n) {
        products.compute(rows.clone());
        let (ps, ps0) = (products.tile(slot_s), products.tile(slot_s0));
        let pd1 = slot_d1.map(|s| products.tile(s));
        let pd0 = slot_d0.map(|s| products.tile(s));
        let pmt = slot_mt.map(|s| products.tile(s));
        for (ti, i) in rows.enumerate() {
            if let (Some(f), Some((ca, _))) = (&fine, &chunk_max) {
                // One pass: the operands' part, the promotions, and the truncations of the emulator and
                // of any kernel ([`Truncation`]), from R (what the model wrote into this row of the
                // bounds; Σ|products| where every block is one instruction) and Mt (at most s, too).
                let mags = bound.row(i);
                let mt_row = match (&pmt, &cb_t) {
                    (Some(pmt), _) => row_slice(*pmt, ti),
                    (None, Some(cb_t)) => {
                        mt_buf.fill(0.0);
                        let cb_rows = cb_t.as_slice().expect("standard layout").chunks_exact(n.max(1));
                        for (&x, cb) in ca.row(i).iter().zip(cb_rows) {
                            for (o, &y) in mt_buf.iter_mut().zip(cb) {
                                *o += x * y;
                            }
                        }
                        &mt_buf[..]
                    }
                    _ => unreachable!("Mt is a product or computed here"),
                };
                let (s_row, s0_row) = (row_slice(ps, ti), row_slice(ps0, ti));
                // Branch-free loops over the row (each vectorises): R, then the bound (keeping Mt and
                // T_e for the deviation), then the deviation in the stage's mode.
                match mags.as_slice().filter(|_| f.chained()) {
                    Some(mags) => r_row.iter_mut().zip(mags).for_each(|(r, &g)| *r = g.to_f64() * mag_up),
                    None => r_row.iter_mut().zip(s_row).for_each(|(r, &s)| *r = s * up),
                }
                let row = pre.iter_mut().zip(mt_keep.iter_mut()).zip(own_row.iter_mut()).zip(r_row.iter());
                for ((((p, keep), o), &r), ((&s, &s0), &mt)) in row.zip(s_row.iter().zip(s0_row).zip(mt_row)) {
                    let (s, s0) = (s * up, s0 * down);
                    let mt = (mt * mt_up).min(s);
                    let own = f.own(r, mt);
                    let ops_s = (s - s0).max(0.0);
                    *p = ops_s + kappa * s + under + f.any(r, mt, own, 2.0 * ops_s);
                    (*keep, *o) = (mt, own);
                }
                let trunc = |j: usize, ops: f64| own_row[j] + f.any(r_row[j], mt_keep[j], own_row[j], ops);
                match (pd1.map(|p| row_slice(p, ti)), pd0.map(|p| row_slice(p, ti)), dev_extra) {
                    (Some(d1), Some(d0), true) => (0..n).for_each(|j| {
                        let s1 = d1[j] * up;
                        let ops = (s1 - d0[j] * down).max(0.0);
                        dp[j] = ops + orders * s1 + 2.0 * under + trunc(j, ops);
                    }),
                    (Some(d1), Some(d0), false) => (0..n).for_each(|j| {
                        let s1 = d1[j] * up;
                        let ops = (s1 - d0[j] * down).max(0.0);
                        dp[j] = ops + orders * s1 + 2.0 * under;
                    }),
                    (Some(d1), None, true) => (0..n).for_each(|j| dp[j] = orders * (d1[j] * up) + 2.0 * under + trunc(j, 0.0)),
                    (Some(d1), None, false) => (0..n).for_each(|j| dp[j] = orders * (d1[j] * up) + 2.0 * under),
                    _ => dp.fill(0.0),
                }
            } else {
                for ((p, &s), &s0) in pre.iter_mut().zip(row_slice(ps, ti)).zip(row_slice(ps0, ti)) {
                    let (s, s0) = (s * up, s0 * down);
                    *p = (s - s0).max(0.0) + kappa * s + under;
                }
                match (&pd1, &pd0) {
                    (Some(p1), Some(p0)) => {
                        for ((d, &s1), &s0) in dp.iter_mut().zip(row_slice(*p1, ti)).zip(row_slice(*p0, ti)) {
                            let s1 = s1 * up;
                            let ops = (s1 - s0 * down).max(0.0);
                            *d = ops + orders * s1 + 2.0 * under;
                        }
                    }
                    (Some(p1), None) => {
                        for (d, &s1) in dp.iter_mut().zip(row_slice(*p1, ti)) {
                            let s1 = s1 * up;
                            let ops = 0.0;
                            *d = ops + orders * s1 + 2.0 * under;
                        }
                    }
                    _ => dp.fill(0.0),
                }
            }
            if let Some(x) = &tc_extra {
                x.add(i, &mut pre, dev_extra.then_some(&mut dp[..]));
            }
            // Storage: the rounding grows the bound ([`store`]) and the deviation ([`store_dev`]).
            let mut v_row = raw.row_mut(i);
            let v_row = v_row.as_slice_mut().expect("contiguous row");
            let mut b_row = bound.row_mut(i);
            let b_row = b_row.as_slice_mut().expect("contiguous row");
            for ((b, &p), &r) in b_row.iter_mut().zip(&pre).zip(v_row.iter()) {
                *b = B::from_bound(p + u * (r.abs() + 2.0 * p) + eta);
            }
            if let Some(d) = dev.as_mut().filter(|_| mode != DevMode::None) {
                let mut d_row = d.row_mut(i);
                let d_row = d_row.as_slice_mut().expect("contiguous row");
                for ((o, &dp), &r) in d_row.iter_mut().zip(&dp).zip(v_row.iter()) {
                    let grown = dp + 2.0 * u * (r.abs() + dp) + 2.0 * eta;
                    *o = B::from_bound(if dp > 0.0 { grown } else { dp });
                }
            }
            st.round_all(v_row);
        }
    }
    products.recycle();
    oa.recycle();
    ob.recycle();
    Fed { qa, qb }
}

/// Row `i` of a standard-layout buffer, as a slice that lives as long as the buffer.
fn row_slice(p: ArrayView2<'_, f64>, i: usize) -> &'_ [f64] {
    p.index_axis_move(ndarray::Axis(0), i).to_slice().expect("standard layout buffer")
}

/// The truncation of a promoting tensor-core GEMM fed codes (blockwise FP8: [`crate::accum`]'s model with
/// `promote_every = P`, both operands quantised in blocks of P along K), bounded instruction by
/// instruction: much tighter than [`accumulation_coefficient`], which charges every instruction the
/// whole block's Σ|products|.
///
/// **Schedule.** A faithful kernel runs every K block as the model does: from C = 0, one instruction per
/// consecutive `k_inst` slice of the block, in K order (a K tile's order in the hardware). The order of
/// the blocks and the f32 sum of their scaled partials are free (split-K). Only formats whose nonzero
/// sums are all at least 2^-126 qualify ([`Self::new`]), so f32's range clamps C's exponent and the
/// result's last bit nowhere.
///
/// **One instruction**, in the block's code units: C plus products p_j, alignment exponent E, result S.
/// Each term is truncated toward zero below 2^(E−n), then the sum to f bits below its leading bit, which
/// S keeps: `|S − C − Σp_j| < (k_inst+1)·2^(E−n) + 2^-f·|S|`. And `2^E ≤ max(|C|, max_j
/// 2^(e(a_j)+e(b_j))) ≤ |C| + M + X`, M = max|a_j|·max|b_j| over the slice, X the subnormal excess
/// ([`TcExtra`]). Truncation toward zero never grows a magnitude, so `|S| ≤ |C| + Σ|p_j|`.
///
/// **One block** of n instructions (each quantity times the block's sa·sb): with α = (k_inst+1)·2^-n,
/// β = 2^-f, the i-th instruction errs by `e_i ≤ α(|C_i| + M_i + X_i) + β|S_i|`, C_1 = 0, C_{i+1} = S_i,
/// and the block by T = Σe_i (|S_i − P_i| ≤ Σ_{i'≤i} e_i' for the exact prefix sums P_i).
/// - The emulator knows its own results: R = Σ_i|S_i| ([`accum::gemm_nt_mag_into`]) ≥ Σ_i|C_i|, so
///   `T_e ≤ (α+β)·R + α·Σ(M_i + X_i)` ([`Self::own`]; β·R where every block is one instruction).
/// - Another kernel's products differ from the emulator's by Δ = Σ_j|p_j − p_j^e| (block), so its C_i
///   and S_i differ from the emulator's by at most Δ + T + T_e; over its n−1 nonzero C's and n S's,
///   `T ≤ (α+β)R + γ(Δ + T + T_e) + α·Σ(M_i + X_i)` with γ = (n−1)α + nβ, i.e. with ρ = 1/(1−γ),
///   `T ≤ ρ·[(α+β)R + γ(Δ + T_e) + α·Σ(M_i + X_i)]` ([`Self::any`]).
///
/// Every term is linear, so the same holds summed over the blocks with R, Δ and ΣM of the whole K. Any
/// faithful kernel's fed magnitudes are at most `t` ([`BoundOperand`]), so ΣM ≤ Mt = Σ_slices
/// max(t_a)·max(t_b), a product with inner dimension K/k_inst ([`Self::chunk_max`]), and ΣM ≤ s =
/// Σ t_a·t_b (the smaller is taken; where no block chains two instructions, R ≤ s as well). The X terms
/// are [`TcExtra`]'s, its factor `instructions·α·ρ(1+γ)` covering both kernels'. The f32 promotions
/// (scale product, FMA, or a split-K sum) add `promotion·Σ s·|S_block| ≤ promotion·Σ|p|`. Hence, with
/// s − s0 the operands' part (each kernel's products within it of the exact ones, so Δ ≤ 2(s − s0)):
/// a-priori `T(Δ = 2(s − s0)) + promotion·s`; deviation `T_e + T(Δ = ops) + 2·promotion·s1`.
#[derive(Clone, Copy, Debug)]
struct Truncation {
    k_inst: usize,
    block: usize,
    /// R's coefficient: α + β, or β where no block chains instructions (no C).
    r_coef: f64,
    alpha: f64,
    gamma: f64,
    rho: f64,
    /// The f32 promotions' coefficient of Σ|products|: `(⌈K/P⌉ + 2)·2·2^-24`.
    promotion: f64,
    /// Instructions over the whole K.
    instructions: usize,
    /// K blocks.
    blocks: usize,
    /// Makes the model's f64 sum R an upper bound of the real one.
    magnitude_factor: f64,
}

/// Up to this many instructions along K, the stage forms Mt row by row rather than as a GEMM.
const INLINE_MT: usize = 8;

/// Slack for the f64 evaluation of [`Truncation`]'s few non-negative terms.
const EVAL: f64 = 1.0 + 1.0 / (1u64 << 45) as f64;

impl Truncation {
    /// The bound of `tc` (operand formats set) promoting every `block` over K = `k`, where it applies.
    fn new(tc: &TensorCore, block: usize, k: usize) -> Option<Truncation> {
        let (emin_a, emin_b) = (tc.operands.0.spec().min_exponent(), tc.operands.1.spec().min_exponent());
        let normal = emin_a + emin_b - tc.n_bits as i32 >= -126 && tc.out_frac_bits <= 23;
        // Instructions per block (the longest block).
        let n = block.min(k).div_ceil(tc.k_inst.max(1)).max(1) as f64;
        let (alpha, beta) = ((tc.k_inst as f64 + 1.0) * 2f64.powi(-(tc.n_bits as i32)), 2f64.powi(-(tc.out_frac_bits as i32)));
        let gamma = (n - 1.0) * alpha + n * beta;
        if !normal || tc.promote_every != Some(block) || gamma > 0.5 || tc.k_inst == 0 {
            return None;
        }
        let blocks = k.div_ceil(block);
        let instructions = (0..blocks).map(|b| (k - b * block).min(block).div_ceil(tc.k_inst)).sum::<usize>();
        // Σ|C_i| ≤ R; where no block chains two instructions every C is zero.
        let r_coef = if instructions > blocks { alpha + beta } else { beta };
        Some(Truncation {
            r_coef,
            k_inst: tc.k_inst,
            block,
            alpha,
            gamma,
            rho: EVAL / (1.0 - gamma),
            promotion: (blocks as f64 + 2.0) * 2.0 * U32,
            instructions,
            blocks,
            magnitude_factor: 1.0 + (instructions + 2 * blocks + 2) as f64 * 2f64.powi(-52),
        })
    }

    /// `T_e`, the emulator's own truncations, from its magnitudes `r` and the maxima's product `mt`.
    #[inline(always)]
    fn own(&self, r: f64, mt: f64) -> f64 {
        (self.r_coef * r + self.alpha * mt) * EVAL
    }

    /// `T`, any faithful kernel's truncations, its products within `delta` (Σ|p − p_e|) of the emulator's
    /// (`own` = [`Self::own`]`(r, mt)`).
    #[inline(always)]
    fn any(&self, r: f64, mt: f64, own: f64, delta: f64) -> f64 {
        self.rho * (self.r_coef * r + self.gamma * (delta + own) + self.alpha * mt)
    }

    /// Whether some block chains instructions. Where none does, R ≤ Σ|products| (each block's one result
    /// is at most its Σ|p|): the model need not count its magnitudes.
    fn chained(&self) -> bool {
        self.instructions > self.blocks
    }

    /// `[rows, instructions]`: the largest element of every row's instruction slices (the blocks of
    /// `block` along K, each cut into slices of `k_inst`).
    fn chunk_max(&self, t: ArrayView2<f64>) -> Array2<f64> {
        let (rows, k) = t.dim();
        let mut out = Array2::<f64>::zeros((rows, self.instructions));
        for (row, mut o) in t.rows().into_iter().zip(out.rows_mut()) {
            let mut c = 0;
            for b0 in (0..k).step_by(self.block) {
                let b1 = (b0 + self.block).min(k);
                for s0 in (b0..b1).step_by(self.k_inst) {
                    let s1 = (s0 + self.k_inst).min(b1);
                    o[c] = row.slice(ndarray::s![s0..s1]).iter().fold(0.0f64, |x, &y| x.max(y));
                    c += 1;
                }
            }
        }
        out
    }
}

/// The tensor-core model's extra truncation term. A subnormal operand aligns at its format's lowest
/// normal exponent, so a product's alignment exponent may exceed its magnitude: 2^E ≤
/// 2^(emin_a+1)·s_a·max|b| (and symmetrically), which the truncation of every term of every instruction
/// is relative to.
struct TcExtra {
    per: f64,
    ea_min: f64,
    eb_min: f64,
    amax: Vec<f64>,
    bmax: Vec<f64>,
    sa: Vec<f64>,
    sb: Vec<f64>,
}

impl TcExtra {
    /// `per` multiplies the excess (instructions times the truncation per unit of 2^E); `amax`, `bmax`:
    /// the largest fed magnitude bound of each row of A and B.
    fn new(per: f64, fmt_a: Format, fmt_b: Format, (amax, bmax): (Vec<f64>, Vec<f64>), fed_as_codes: bool, (qa, qb): (&Option<QuantTensor>, &Option<QuantTensor>)) -> Self {
        let scale_max = |q: &Option<QuantTensor>, rows: usize| -> Vec<f64> {
            match q {
                Some(q) if fed_as_codes => row_scales(q, rows).rows().into_iter().map(|r| 2.0 * r.iter().fold(0.0f64, |x, &y| x.max(y))).collect(),
                _ => vec![1.0; rows],
            }
        };
        let (ra, rb) = (amax.len(), bmax.len());
        TcExtra {
            per,
            ea_min: 2f64.powi(min_normal_exponent(fmt_a)),
            eb_min: 2f64.powi(min_normal_exponent(fmt_b)),
            amax,
            bmax,
            sa: scale_max(qa, ra),
            sb: scale_max(qb, rb),
        }
    }

    /// Add the term to row `m`'s bounds `pre` (and twice it to the deviations `dp`, when given).
    fn add(&self, m: usize, pre: &mut [f64], mut dp: Option<&mut [f64]>) {
        // `2(ea·sa[m]·bmax[n] + eb·sb[n]·amax[m]) + ea·eb·sa[m]·sb[n]`, evaluated left to right as ever
        // (the row's factors hoisted: the same operations in the same order).
        let (row_a, row_ab) = (self.ea_min * self.sa[m], self.ea_min * self.eb_min * self.sa[m]);
        let amax = self.amax[m];
        let extra = |n: usize| 2.0 * (row_a * self.bmax[n] + self.eb_min * self.sb[n] * amax) + row_ab * self.sb[n];
        match dp.as_deref_mut() {
            Some(dp) => {
                for (n, (p, d)) in pre.iter_mut().zip(dp.iter_mut()).enumerate() {
                    let extra = extra(n);
                    *p += self.per * extra;
                    *d += 2.0 * self.per * extra;
                }
            }
            None => {
                for (n, p) in pre.iter_mut().enumerate() {
                    *p += self.per * extra(n);
                }
            }
        }
    }
}

/// The largest element of every row (0 for an empty row).
fn row_max(m: ArrayView2<f64>) -> Vec<f64> {
    m.rows().into_iter().map(|r| r.iter().fold(0.0f64, |x, &y| x.max(y))).collect()
}

/// A broadcast view of zeros (how exact operands' bounds are passed): no storage behind it.
fn is_zero_broadcast(e: &ArrayView2<f64>) -> bool {
    e.strides().iter().all(|&s| s == 0) && e.iter().next().is_none_or(|&x| x == 0.0)
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

#[cfg(test)]
mod tests {
    //! [`Truncation`] against the tensor-core model's definition ([`crate::accum::slow`]): its bounds hold
    //! on inputs built to make the truncation as large as the model allows, and are within a small factor
    //! of it there (so a bound too small fails here).

    use super::*;
    use crate::accum::slow;
    use crate::formats::{quantize, Overflow};
    use crate::test_rng::XorShift;

    const FP8: TensorCore = TensorCore::HOPPER_FP8;
    const P: usize = 128;

    /// One dot product of E4M3 codes with per-block scales under the model: `(|value − exact|, R, Mt,
    /// Σ|products|)`, the fed magnitudes' maxima taken over `t_a`, `t_b` (value units).
    fn measure(a: &[f64], b: &[f64], sa: &[f64], sb: &[f64], t_a: &[f64], t_b: &[f64]) -> (f64, f64, f64, f64) {
        let tr = Truncation::new(&FP8, P, a.len()).expect("applies to blockwise FP8");
        let (v, r) = slow::dot_magnitudes(&FP8, a, b, Some((sa, sb, P)));
        let (av, bv): (Vec<f64>, Vec<f64>) = (0..a.len()).map(|j| (a[j] * sa[j / P], b[j] * sb[j / P])).unzip();
        let err = crate::exact::dot_plus(av.iter().copied().zip(bv.iter().copied()), [-v]).abs();
        let ca = tr.chunk_max(ArrayView2::from_shape((1, a.len()), t_a).unwrap());
        let cb = tr.chunk_max(ArrayView2::from_shape((1, b.len()), t_b).unwrap());
        let mt = ca.iter().zip(cb.iter()).map(|(x, y)| x * y).sum::<f64>() * abs_factor(tr.instructions, false);
        let abs = av.iter().zip(&bv).map(|(x, y)| (x * y).abs()).sum::<f64>() * abs_factor(a.len(), false);
        (err, r * tr.magnitude_factor, mt, abs)
    }

    fn abs_values(x: &[f64], s: &[f64]) -> Vec<f64> {
        x.iter().enumerate().map(|(j, v)| (v * s[j / P]).abs()).collect()
    }

    /// The emulator's own bound `T_e` (plus the promotions) for codes `a`, `b`: `(error, bound)`.
    fn own(a: &[f64], b: &[f64], sa: &[f64], sb: &[f64]) -> (f64, f64) {
        let tr = Truncation::new(&FP8, P, a.len()).unwrap();
        let (err, r, mt, abs) = measure(a, b, sa, sb, &abs_values(a, sa), &abs_values(b, sb));
        (err, tr.own(r, mt) + tr.promotion * abs)
    }

    /// Per block: instruction 1 sums sixteen 256·256 = 2^16 into C = 2^20 (exact); instructions 2-4 each
    /// add 32 products 14·9 = 126 (alignment 3 + 3 = 6), all below the unit 2^(20-13) = 128 of E = e(C)
    /// = 20, so each is truncated to nothing: 32·126 lost per instruction, against a bound of
    /// (α+β)·Σ|S_i| + α·Mt ≈ 34·2^-13·4·2^20 + … per block: the C term is what covers it.
    #[test]
    fn c_dominant_truncation_is_covered_tightly() {
        for (blocks, scale_a, scale_b) in [(1, 1.0, 1.0), (3, 0.75, 1.5), (2, 2f64.powi(-20), 3.0)] {
            let k = blocks * P;
            let (mut a, mut b) = (vec![0.0; k], vec![0.0; k]);
            for blk in 0..blocks {
                for j in 0..16 {
                    (a[blk * P + j], b[blk * P + j]) = (256.0, 256.0);
                }
                for j in 32..P {
                    (a[blk * P + j], b[blk * P + j]) = (14.0, 9.0);
                }
            }
            let (sa, sb) = (vec![scale_a as f32 as f64; blocks], vec![scale_b as f32 as f64; blocks]);
            let (err, bound) = own(&a, &b, &sa, &sb);
            let want = (blocks * 96 * 126) as f64 * sa[0] * sb[0];
            assert!((err - want).abs() <= want * 1e-6, "the model drops every small product: {err:e} vs {want:e}");
            assert!(err <= bound, "blocks {blocks}: error {err:e} above the bound {bound:e}");
            assert!(err >= 0.6 * bound, "blocks {blocks}: the bound {bound:e} is loose here (error {err:e})");
        }
    }

    /// A random code of E4M3 with exponent in `lo..=hi` and the given sign (no subnormals: their excess
    /// is [`TcExtra`]'s).
    fn code(g: &mut XorShift, lo: i32, hi: i32, neg: bool) -> f64 {
        let r = g.next_u64();
        let e = lo + (r % (hi - lo + 1) as u64) as i32;
        let m = 1.0 + ((r >> 16) % 8) as f64 / 8.0;
        let v = quantize(Format::E4M3, m * 2f64.powi(e), Overflow::Saturate);
        if neg {
            -v
        } else {
            v
        }
    }

    /// Same-sign terms, one dominant product per instruction and the others just below the unit 2^(E-13)
    /// of the instruction's alignment (E from C, larger than the terms, after the first instruction):
    /// the model drops nearly a unit per term, as much as it can; the bound holds, and over the family
    /// it is reached within a factor 3 (it charges the dominant term and C both, where the alignment is
    /// the larger of them, and |C| up to twice 2^E).
    #[test]
    fn one_dominant_term_per_instruction_is_covered() {
        let mut g = XorShift(0x9E3779B97F4A7C15);
        let e_of = |x: f64| x.abs().log2().floor() as i32;
        let mut worst = 0.0f64;
        for trial in 0..300 {
            let blocks = 1 + trial % 3;
            let k = blocks * P - (trial % 5) * 7; // a short last block too
            let neg = trial % 2 == 1;
            let (mut a, mut b) = (vec![0.0; k], vec![0.0; k]);
            // The block's exact running sum (the model's C is within its truncation of it, and on these
            // inputs in the same binade) sets E.
            let mut c = 0.0f64;
            for i0 in (0..k).step_by(FP8.k_inst) {
                if i0 % P == 0 {
                    c = 0.0;
                }
                let (x, y) = (code(&mut g, 5, 8, neg), code(&mut g, 5, 8, false));
                (a[i0], b[i0]) = (x, y);
                let e = if c == 0.0 { e_of(x) + e_of(y) } else { (e_of(x) + e_of(y)).max(e_of(c)) };
                c += x * y;
                // Products aligned at E - 15 with significands 1.75-1.875 squared: 0.77-0.88 of 2^(E-13).
                let (ea, eb) = ((e - 15).div_euclid(2), e - 15 - (e - 15).div_euclid(2));
                for j in i0 + 1..(i0 + FP8.k_inst).min(k) {
                    let sig = |g: &mut XorShift| if g.next_u64() & 1 == 0 { 1.75 } else { 1.875 };
                    let (x, y) = (sig(&mut g) * 2f64.powi(ea), sig(&mut g) * 2f64.powi(eb));
                    (a[j], b[j]) = (if neg { -x } else { x }, y);
                    c += a[j] * y;
                }
            }
            let sa: Vec<f64> = (0..blocks).map(|_| (0.5 + (g.next_u64() % 1000) as f64 / 999.0) as f32 as f64).collect();
            let sb: Vec<f64> = (0..blocks).map(|_| (0.5 + (g.next_u64() % 1000) as f64 / 999.0) as f32 as f64).collect();
            let (err, bound) = own(&a, &b, &sa, &sb);
            assert!(err <= bound, "trial {trial}: error {err:e} above the bound {bound:e}");
            worst = worst.max(err / bound);
        }
        assert!(worst >= 0.33, "the bound is never approached: worst error/bound {worst}");
    }

    /// Another faithful kernel, fed codes that differ from the emulator's (some moved a step, scales
    /// moved), within [`Truncation::any`] of its own exact sum, computed from the emulator's magnitudes
    /// and Δ = Σ|p − p_e|.
    #[test]
    fn another_kernel_is_covered_by_the_emulators_magnitudes() {
        let mut g = XorShift(0x2545F4914F6CDD1D);
        for trial in 0..300 {
            let blocks = 1 + trial % 3;
            let k = blocks * P;
            let neg = trial % 3 == 0;
            let (mut a, mut b) = (vec![0.0; k], vec![0.0; k]);
            for j in 0..k {
                let big = j % 16 == 0;
                let (lo, hi) = if big { (4, 8) } else { (-6, 2) };
                (a[j], b[j]) = (code(&mut g, lo, hi, neg && j % 5 != 0), code(&mut g, lo, hi, false));
            }
            let sa: Vec<f64> = (0..blocks).map(|_| (1.0 + (g.next_u64() % 100) as f64 / 50.0) as f32 as f64).collect();
            let sb = vec![1.0; blocks];
            // The kernel: every 7th code of A one step up, its scales 1% up.
            let a2: Vec<f64> = a.iter().enumerate().map(|(j, &v)| if j % 7 == trial % 7 { quantize(Format::E4M3, v * 1.2, Overflow::Saturate) } else { v }).collect();
            let sa2: Vec<f64> = sa.iter().map(|s| (s * 1.01) as f32 as f64).collect();
            let tr = Truncation::new(&FP8, P, k).unwrap();
            // Fed magnitudes' bounds covering both kernels.
            let t_a: Vec<f64> = abs_values(&a, &sa).iter().zip(abs_values(&a2, &sa2)).map(|(x, y)| x.max(y)).collect();
            let t_b = abs_values(&b, &sb);
            let (_, r_e, mt, _) = measure(&a, &b, &sa, &sb, &t_a, &t_b);
            let (err2, _, _, abs2) = measure(&a2, &b, &sa2, &sb, &t_a, &t_b);
            let delta: f64 = (0..k).map(|j| (a2[j] * sa2[j / P] * b[j] - a[j] * sa[j / P] * b[j]).abs()).sum::<f64>() * abs_factor(k, false);
            let bound = tr.any(r_e, mt, tr.own(r_e, mt), delta) + tr.promotion * abs2;
            assert!(err2 <= bound, "trial {trial}: the other kernel's error {err2:e} above {bound:e}");
        }
    }

    /// The bound is taken only where its premises hold.
    #[test]
    fn applies_to_promoting_small_formats_only() {
        assert!(Truncation::new(&FP8, 128, 1000).is_some());
        let bf16 = TensorCore { promote_every: Some(128), ..TensorCore::HOPPER_BF16 };
        assert!(Truncation::new(&bf16, 128, 1000).is_none(), "bf16 sums can be f32-subnormal");
        assert!(Truncation::new(&FP8, 64, 1000).is_none(), "promotion and blocks differ");
        let t = Truncation::new(&FP8, 128, 300).unwrap();
        assert_eq!(t.instructions, 4 + 4 + 2);
    }
}
