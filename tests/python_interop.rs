//! Golden files read by Python's `safetensors` package (numpy backend) must show the same names, shapes,
//! dtypes, metadata and values as the Rust reader sees: kernel teams consume golden data with their own
//! library. Skips with a visible `SKIP` line when python3, safetensors or numpy is missing (bf16 files also
//! need `ml_dtypes`, which registers numpy's bfloat16); `REQUIRE_PYTHON=1` makes a skip a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use safetensors::{Dtype, SafeTensors};

/// Prints, as JSON: metadata, and per tensor dtype, shape and the first, last and largest-magnitude values,
/// each as the bits of its exact f64 value (a JSON integer: no decimal parsing on either side).
const SCRIPT: &str = r#"
import json, struct, sys
import numpy as np
if sys.argv[2] == "bf16":
    import ml_dtypes  # registers bfloat16 with numpy
from safetensors import safe_open
from safetensors.numpy import load_file
path = sys.argv[1]
with safe_open(path, framework="numpy") as f:
    meta = f.metadata()
out = {"metadata": meta, "tensors": {}}
for name, a in load_file(path).items():
    flat = a.reshape(-1)
    wide = flat.astype(np.float64) if flat.dtype.kind == "V" or str(flat.dtype) == "bfloat16" else flat
    picks = []
    if flat.size:
        big = int(np.argmax(np.abs(wide.astype(np.float64))))
        picks = [[i, struct.unpack("<Q", struct.pack("<d", float(wide[i])))[0]] for i in (0, flat.size - 1, big)]
    out["tensors"][name] = {"dtype": str(a.dtype), "shape": list(a.shape), "values": picks}
print(json.dumps(out))
"#;

fn skip(why: &str) {
    assert!(std::env::var_os("REQUIRE_PYTHON").is_none(), "REQUIRE_PYTHON is set but: {why}");
    moe_kernels::skip_notice(&format!("python interop: {why}"));
}

fn python_has(modules: &str) -> Result<(), String> {
    match Command::new("python3").args(["-c", &format!("import {modules}")]).output() {
        Err(e) => Err(format!("python3 not runnable ({e})")),
        Ok(o) if !o.status.success() => Err(format!(
            "python3 cannot import {modules} ({}); pip install safetensors numpy ml_dtypes",
            String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("").trim()
        )),
        Ok(_) => Ok(()),
    }
}

fn golden(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(file)
}

fn numpy_name(d: Dtype) -> &'static str {
    match d {
        Dtype::F64 => "float64",
        Dtype::F32 => "float32",
        Dtype::BF16 => "bfloat16",
        Dtype::F16 => "float16",
        Dtype::I32 => "int32",
        other => panic!("unexpected dtype {other:?} in a golden file"),
    }
}

/// Element `i` of a tensor as f64 (every stored dtype converts exactly).
fn value(t: &safetensors::tensor::TensorView<'_>, i: usize) -> f64 {
    let b = t.data();
    match t.dtype() {
        Dtype::F64 => f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap()),
        Dtype::F32 => f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()) as f64,
        Dtype::I32 => i32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap()) as f64,
        Dtype::BF16 => half::bf16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f64(),
        Dtype::F16 => half::f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f64(),
        other => panic!("unexpected dtype {other:?}"),
    }
}

fn compare(file: &str, mode: &str) {
    let path = golden(file);
    let o = Command::new("python3").args(["-c", SCRIPT, path.to_str().unwrap(), mode]).output().unwrap();
    assert!(o.status.success(), "{file}: python failed: {}", String::from_utf8_lossy(&o.stderr));
    let py: serde_json::Value = serde_json::from_slice(&o.stdout).expect("python printed JSON");

    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let case = moe_oracle::case::parse_case(&bytes, Default::default()).unwrap();
    // Metadata, including the config the Rust reader parsed.
    for (k, v) in &case.metadata {
        assert_eq!(py["metadata"][k].as_str(), Some(v.as_str()), "{file}: metadata {k}");
    }
    let cfg: serde_json::Value = serde_json::from_str(py["metadata"]["moe.config"].as_str().unwrap()).unwrap();
    assert_eq!(cfg["tokens"].as_u64(), Some(case.inputs.cfg.tokens as u64));
    assert_eq!(cfg["recipe"].as_str(), Some(case.inputs.cfg.recipe.as_str()));
    // Names, dtypes, shapes, values.
    let tensors = py["tensors"].as_object().unwrap();
    let mut py_names: Vec<&String> = tensors.keys().collect();
    py_names.sort();
    let mut names = st.names();
    names.sort();
    assert_eq!(py_names.iter().map(|s| s.as_str()).collect::<Vec<_>>(), names, "{file}: tensor names");
    for name in names {
        let t = st.tensor(name).unwrap();
        let p = &tensors[name];
        assert_eq!(p["dtype"].as_str(), Some(numpy_name(t.dtype())), "{file}: {name} dtype");
        let shape: Vec<usize> = p["shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(shape, t.shape(), "{file}: {name} shape");
        let picks = p["values"].as_array().unwrap();
        assert_eq!(picks.is_empty(), t.shape().iter().product::<usize>() == 0);
        for pick in picks {
            let i = pick[0].as_u64().unwrap() as usize;
            let v = f64::from_bits(pick[1].as_u64().unwrap());
            assert_eq!(
                v.to_bits(),
                value(&t, i).to_bits(),
                "{file}: {name}[{i}] python {v:e} vs rust {:e}",
                value(&t, i)
            );
        }
    }
    // The reader's view of an input agrees too (bf16/f32 widened exactly to f64).
    let x0 = case.inputs.x.iter().next().copied().unwrap();
    assert_eq!(tensors["x"]["values"][0][1].as_u64(), Some(x0.to_bits()), "{file}: x[0]");
}

#[test]
fn python_safetensors_reads_golden_files_like_rust() {
    if let Err(why) = python_has("safetensors, numpy") {
        return skip(&why);
    }
    compare("qwen3-235b-a22b_fp32_intermediates.safetensors", "plain");
    compare("qwen3-235b-a22b_tiny-magnitude_fp32.safetensors", "plain");
    match python_has("ml_dtypes") {
        Err(why) => skip(&format!("bf16 files: {why}")),
        Ok(()) => {
            compare("deepseek-v3_fp8-block.safetensors", "bf16");
            compare("qwen3-30b-a3b_unused-slots.safetensors", "bf16");
            compare("gpt-oss-120b_given-routing_intermediates.safetensors", "bf16");
        }
    }
}
