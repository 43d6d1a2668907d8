//! `moe-oracle run CASE --recipe R [--accumulate MODEL] [--bounds] [--compare-exact]`: the layer as a
//! faithful kernel of a low-precision recipe computes it ([`moe_reference::emulate`]), written like a
//! candidate (F32 values, the format's names), with the quantised operands (`q.<name>`, `q.<name>.scale`,
//! metadata `q.<name>.block`) among the intermediates and, on request, every tensor's error bound
//! (`bound.<name>`, F64).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use moe_reference::emulate::{self, tightness::tightness, Emulated, Quantised};
use moe_reference::formats::{self, Format, Overflow};
use moe_reference::layer::{self, named_tensor};
use moe_reference::recipe::{Recipe, NAMED};
use moe_reference::{LayerInputs, Options};
use safetensors::Dtype;

use crate::case::{self, TensorData};
use crate::cli::{CliError, CommonArgs, RunSummary};

/// A named recipe, or a JSON file holding one (the shape `moe-oracle recipes --show NAME` prints).
pub fn load_recipe(spec: &str, accumulate: Option<&str>) -> Result<Recipe, CliError> {
    let r = match Recipe::named(spec) {
        Some(r) => r,
        None if spec.ends_with(".json") => {
            let text = std::fs::read_to_string(spec).map_err(|e| CliError::Recipe(format!("recipe file {spec}: {e}")))?;
            serde_json::from_str(&text).map_err(|e| CliError::Recipe(format!("recipe file {spec}: {e}")))?
        }
        None => return Err(CliError::Recipe(format!("unknown recipe '{spec}' (named: {}; or a .json file)", NAMED.join(", ")))),
    };
    Ok(match accumulate {
        Some(m) => r.with_accumulate(m),
        None => r,
    })
}

/// The payload and scale tensors of a quantised operand: E4M3/E5M2 payloads as their 8-bit codes, E2M1 as
/// F32 values (safetensors' packed F4 is not used); UE8M0 scales as `F8_E8M0` codes, others F32.
fn quantised_tensors(q: &Quantised) -> Vec<(String, TensorData<'static>)> {
    let shape = q.q.shape().to_vec();
    let payload = match q.format {
        Format::E4M3 | Format::E5M2 => {
            let dtype = if q.format == Format::E4M3 { Dtype::F8_E4M3 } else { Dtype::F8_E5M2 };
            let bytes: Vec<u8> = q.q.iter().map(|&v| formats::encode(q.format, v, Overflow::Saturate) as u8).collect();
            TensorData::Raw { dtype, shape, bytes: bytes.into() }
        }
        _ => TensorData::F32(q.q.mapv(|v| v as f32).into()),
    };
    let pow2 = q.scale.iter().all(|&s| s > 0.0 && s.log2().fract() == 0.0 && (-127.0..=127.0).contains(&s.log2()));
    let scale = if pow2 && q.format != Format::Bf16 && q.block.contains("x32") {
        let bytes: Vec<u8> = q.scale.iter().map(|&s| (s.log2() as i32 + 127) as u8).collect();
        TensorData::Raw { dtype: Dtype::F8_E8M0, shape: q.scale.shape().to_vec(), bytes: bytes.into() }
    } else {
        TensorData::F32(q.scale.mapv(|v| v as f32).into())
    };
    vec![(q.name.clone(), payload), (format!("{}.scale", q.name), scale)]
}

/// F64 tensors whose values are f32 numbers (the emulator's results) written as F32.
fn as_f32(t: TensorData<'_>) -> TensorData<'static> {
    match t {
        TensorData::F64(a) => TensorData::F32(a.mapv(|v| v as f32).into()),
        TensorData::I32(a) => TensorData::I32(a.into_owned().into()),
        other => match other {
            TensorData::F32(a) => TensorData::F32(a.into_owned().into()),
            _ => unreachable!("output_tensors makes F64 and I32 tensors only"),
        },
    }
}

/// Run the emulated recipe and write its outputs; with `compare_exact`, also run the exact oracle and
/// print per tensor how the result sits in its bound.
pub fn execute(
    inputs: &LayerInputs,
    config_json: &str,
    out: &Path,
    common: &CommonArgs,
    recipe: &Recipe,
    write_bounds: bool,
    compare_exact: bool,
) -> Result<RunSummary, CliError> {
    let opt = Options { engine: common.engine.into() };
    let say = |m: String| {
        if !common.quiet {
            let _ = writeln!(std::io::stderr(), "moe-oracle: {m}");
        }
    };
    let t = Instant::now();
    // No deviation bounds: they serve `check` only (with the exact values), and cost time and memory.
    let opts = emulate::EmulateOptions { keep_quantised: common.intermediates, same_schedule: false, deviations: false };
    let em: Emulated = emulate::run_opts(inputs, recipe, opt, opts).map_err(|e| CliError::Recipe(e.to_string()))?;
    let emulate_ms = t.elapsed().as_secs_f64() * 1e3;
    say(format!("recipe {}: emulated forward{} in {emulate_ms:.1} ms", recipe.name, if em.bwd.is_some() { " and backward" } else { "" }));

    let mut tensors: Vec<(String, TensorData<'static>)> = case::output_tensors(&em.fwd, em.bwd.as_ref(), common.intermediates)
        .map_err(|e| CliError::Write { path: out.to_path_buf(), source: e })?
        .into_iter()
        .filter(|(n, _)| !matches!(n.as_str(), "fwd.logits" | "fwd.scores" | "bwd.dlogits"))
        .map(|(n, t)| (n, as_f32(t)))
        .collect();
    let mut meta = BTreeMap::new();
    meta.insert("moe.recipe".to_string(), serde_json::to_string(recipe).expect("a recipe serialises"));
    meta.insert("moe.emulated".to_string(), "true".to_string());
    if common.intermediates {
        for q in &em.quantised {
            meta.insert(format!("{}.block", q.name), q.block.clone());
            tensors.extend(quantised_tensors(q));
        }
    }
    if write_bounds {
        for (name, b) in &em.bounds {
            if common.intermediates || !name.starts_with("fwd.") && !name.starts_with("bwd.") {
                tensors.push((format!("bound.{name}"), TensorData::F64(b.mapv(f64::from).into())));
            }
        }
    }
    case::write_outputs_meta(out, config_json, &meta, &tensors).map_err(|e| CliError::Write { path: out.to_path_buf(), source: e })?;

    if compare_exact {
        let t = Instant::now();
        let fwd = layer::forward(inputs, opt);
        let bwd = inputs.dy.as_ref().map(|dy| layer::backward(inputs, &fwd, dy.view(), opt));
        say(format!("exact oracle in {:.1} ms", t.elapsed().as_secs_f64() * 1e3));
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "recipe {} against the exact oracle: |emulated - exact| / bound per tensor", recipe.name);
        let _ = writeln!(o, "  {:<20} {:>10} {:>10} {:>10} {:>8} {:>10}", "tensor", "median", "p99", "max", "viol.", "elements");
        for (name, b) in &em.bounds {
            let (Some(g), Some(x)) = (named_tensor(&em.fwd, em.bwd.as_ref(), name), named_tensor(&fwd, bwd.as_ref(), name)) else {
                continue;
            };
            let s = tightness(name, g, x, b.mapv(f64::from).view());
            let _ = writeln!(o, "  {:<20} {:>10.3e} {:>10.3e} {:>10.3e} {:>8} {:>10}", name, s.median, s.p99, s.max, s.violations, s.elements);
        }
    }
    let y_norm = em.fwd.y.iter().map(|v| v * v).sum::<f64>().sqrt();
    Ok(RunSummary {
        tensors: tensors.iter().map(|(n, t)| (n.clone(), t.shape().to_vec())).collect(),
        y_norm,
        rows: em.fwd.rows.rows(),
        forward_ms: emulate_ms,
        backward_ms: None,
        together: em.bwd.is_some(),
    })
}

/// `moe-oracle recipes [--show NAME]`: list the named recipes, or print one as JSON (the shape a
/// `--recipe FILE.json` takes).
pub fn recipes(show: Option<&str>) -> Result<(), CliError> {
    let mut o = std::io::stdout().lock();
    match show {
        Some(n) => {
            let r = load_recipe(n, None)?;
            let _ = writeln!(o, "{}", serde_json::to_string_pretty(&r).expect("a recipe serialises"));
        }
        None => {
            for n in NAMED {
                let r = Recipe::named(n).expect("named");
                let g = |q: &Option<moe_reference::recipe::OperandQuant>| {
                    q.as_ref().map_or("as stored".to_string(), |q| format!("{} {} {}", q.format, q.block, q.scale))
                };
                let _ = writeln!(
                    o,
                    "{n:<13} inputs {:<5} gemm1 [{} | {}] {}, dgrad [{} | {}], wgrad [{} | {}]",
                    r.storage.inputs.name(),
                    g(&r.gemm1.a),
                    g(&r.gemm1.b),
                    r.gemm1.accumulate,
                    g(&r.dgrad1.a),
                    g(&r.dgrad1.b),
                    g(&r.wgrad1.a),
                    g(&r.wgrad1.b)
                );
            }
        }
    }
    Ok(())
}
