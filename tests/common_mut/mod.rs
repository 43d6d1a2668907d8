//! Shared helpers of the check / diagnose / mutation tests: small cases, correct emulated candidates
//! (what a faithful kernel of the recipe computes, from `moe_reference::emulate`), candidate files, and
//! running check and diagnose in-process.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use moe_oracle::case::{self, FloatDtype, TensorData};
use moe_oracle::check::candidate::CHECKED;
use moe_oracle::check::{check, CheckReport, Context};
use moe_oracle::demo::random_inputs;
use moe_oracle::diagnose::{diagnose, Diagnosis};
use moe_reference::config::{MoeConfig, Routing, Score};
use moe_reference::emulate::{self, Emulated};
use moe_reference::layer::named_tensor;
use moe_reference::recipe::Recipe;
use moe_reference::{LayerInputs, Options};
use ndarray::{ArrayD, CowArray};

pub fn cfg(t: usize, h: usize, i: usize, e: usize, k: usize, recipe: &str) -> MoeConfig {
    MoeConfig { recipe: recipe.into(), ..MoeConfig::swiglu(t, h, i, e, k) }
}

pub fn softmax_routing() -> Option<Routing> {
    Some(Routing::softmax())
}

pub fn sigmoid_routing() -> Option<Routing> {
    Some(Routing { score: Score::Sigmoid, normalize_topk: true, scaling: 2.5, groups: None })
}

/// A correct emulated candidate: every checked tensor the recipe's emulation produced.
pub struct Base {
    pub inputs: LayerInputs,
    pub recipe: Recipe,
    pub em: Emulated,
    pub tensors: BTreeMap<String, ArrayD<f64>>,
}

pub fn emulate_with(inputs: &LayerInputs, recipe: &Recipe) -> Base {
    let em = emulate::run(inputs, recipe, Options::default()).expect("recipe runs");
    let mut tensors = BTreeMap::new();
    for name in CHECKED {
        if let Some(t) = named_tensor(&em.fwd, em.bwd.as_ref(), name) {
            tensors.insert(name.to_string(), t.to_owned());
        }
    }
    Base { inputs: inputs.clone(), recipe: recipe.clone(), em, tensors }
}

pub fn base(inputs: &LayerInputs) -> Base {
    let r = Recipe::named(&inputs.cfg.recipe).expect("named recipe");
    emulate_with(inputs, &r)
}

pub fn inputs(c: &MoeConfig, seed: u64) -> LayerInputs {
    random_inputs(c, seed)
}

/// Write a case (F64 inputs: the values are bf16 numbers, so nothing rounds).
pub fn write_case(dir: &Path, name: &str, inputs: &LayerInputs) -> PathBuf {
    let p = dir.join(format!("{name}.case.safetensors"));
    case::write_case(&p, inputs, FloatDtype::F64).expect("write case");
    p
}

/// Write a candidate: `tensors` as `dtype` (F32 holds every emulated value exactly); with `row_order`,
/// per-row tensors are written in that order of oracle rows, with `fwd.row_token`/`fwd.row_slot`.
pub fn write_candidate(
    dir: &Path,
    name: &str,
    c: &MoeConfig,
    tensors: &BTreeMap<String, ArrayD<f64>>,
    row_order: Option<(&[usize], &[usize], &[usize])>,
    dtype: FloatDtype,
) -> PathBuf {
    let p = dir.join(format!("{name}.cand.safetensors"));
    let mut out: Vec<(String, TensorData<'static>)> = Vec::new();
    for (n, a) in tensors {
        let a = match row_order {
            Some((order, _, _)) if n.starts_with("fwd.") || n.starts_with("bwd.") => a.select(ndarray::Axis(0), order),
            _ => a.clone(),
        };
        let t = match dtype {
            FloatDtype::F64 => TensorData::F64(CowArray::from(a)),
            FloatDtype::F32 => TensorData::F32(CowArray::from(a.mapv(|v| v as f32))),
            FloatDtype::BF16 => TensorData::BF16(CowArray::from(a.mapv(case::to_bf16))),
            FloatDtype::F16 => TensorData::F16(CowArray::from(a.mapv(case::to_f16))),
        };
        out.push((n.clone(), t));
    }
    if let Some((order, tok, slot)) = row_order {
        let pick = |v: &[usize]| ndarray::Array1::from_iter(order.iter().map(|&r| v[r] as i32));
        out.push(("fwd.row_token".into(), TensorData::i32_owned(pick(tok))));
        out.push(("fwd.row_slot".into(), TensorData::i32_owned(pick(slot))));
    }
    case::write_outputs(&p, &case::config_json(c), &out).expect("write candidate");
    p
}

pub struct Verdicts {
    pub check: CheckReport,
    pub diag: Diagnosis,
}

/// `check` and `diagnose` of a candidate, in-process.
pub fn judge(case: &Path, cand: &Path, recipe: Option<&str>) -> Verdicts {
    let ctx = Context::load(case, cand, recipe).unwrap_or_else(|e| panic!("load: {e}"));
    let check = check(&ctx);
    let (diag, _) = diagnose(&ctx).unwrap_or_else(|e| panic!("diagnose: {e}"));
    Verdicts { check, diag }
}
