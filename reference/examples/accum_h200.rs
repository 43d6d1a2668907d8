//! Compares `accum::gemm_nt` with GEMMs run on an H200 by `accum_h200.py` (cuBLAS bf16 with f32 output,
//! `torch._scaled_mm` E4M3 with and without fast accumulation), element by element.
//!
//! `cargo run --release -p moe-reference --example accum_h200 -- DIR` where DIR holds the script's
//! `<name>.<rows>x<cols>.f32` files. Prints, per GEMM and model, how many entries agree bit for bit.

use std::path::{Path, PathBuf};

use moe_reference::accum::{gemm_nt, Model};
use ndarray::Array2;

/// The `rows x cols` f32 file named `name.*.f32` in `dir`, as f64.
fn load(dir: &Path, name: &str) -> Option<Array2<f64>> {
    let entry = std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok()).find(|e| {
        let f = e.file_name().to_string_lossy().to_string();
        f.starts_with(&format!("{name}.")) && f.ends_with(".f32")
    })?;
    let fname = entry.file_name().to_string_lossy().to_string();
    let dims = fname.strip_prefix(&format!("{name}."))?.strip_suffix(".f32")?;
    let (r, c) = dims.split_once('x')?;
    let (r, c): (usize, usize) = (r.parse().ok()?, c.parse().ok()?);
    let bytes = std::fs::read(entry.path()).ok()?;
    if bytes.len() != r * c * 4 {
        return None;
    }
    let v: Vec<f64> = bytes.chunks_exact(4).map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect();
    Array2::from_shape_vec((r, c), v).ok()
}

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "out/h200".to_string()));
    for tag in ["k256", "k2048"] {
        let cases = [
            ("bf16", format!("c_bf16_{tag}"), ["hopper", "exact", "f32"]),
            ("e4m3", format!("c_fp8_{tag}"), ["hopper-fp8", "hopper-fp8-fast", "exact"]),
            ("e4m3", format!("c_fp8_fast_{tag}"), ["hopper-fp8-fast", "hopper-fp8", "exact"]),
        ];
        for (fmt, cname, models) in cases {
            let (Some(a), Some(b), Some(c)) =
                (load(&dir, &format!("a_{fmt}_{tag}")), load(&dir, &format!("b_{fmt}_{tag}")), load(&dir, &cname))
            else {
                println!("{cname}: missing files in {}", dir.display());
                continue;
            };
            for name in models {
                let model = Model::parse(name).expect("known model");
                let e = gemm_nt(&model, a.view(), b.view(), None);
                let same = e.iter().zip(c.iter()).filter(|(x, y)| x.to_bits() == y.to_bits()).count();
                let worst = e.iter().zip(c.iter()).map(|(x, y)| (x - y).abs() / y.abs().max(1e-30)).fold(0.0, f64::max);
                println!("{cname:18} vs {name:16}: {same:5} / {} bit-identical (max rel. diff {worst:.2e})", c.len());
            }
        }
    }
}
