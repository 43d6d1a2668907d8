//! Replays the committed corpora of the fuzz targets `quant_scale` and `quant_accum`
//! (`fuzz/corpus/quant_*/`) through the same checks the targets run (`fuzz/fuzz_targets/quant_checks.rs`).
//! A corpus folder that is absent is skipped with a visible `SKIP` line.

use std::path::PathBuf;

mod skip;
#[path = "../../fuzz/fuzz_targets/quant_checks.rs"]
mod quant_checks;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        skip::notice(&format!("{target}: no corpus at {}", dir.display()));
        return;
    };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    files.sort();
    for f in &files {
        let data = std::fs::read(f).expect("readable corpus file");
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(r.is_ok(), "{target}: corpus file {} fails its check", f.display());
    }
    println!("{target}: {} corpus files replayed", files.len());
    // The committed corpus is not empty: an empty folder would make this test pass vacuously.
    assert!(!files.is_empty(), "{target}: corpus folder {} is empty", dir.display());
}

#[test]
fn quant_scale_corpus() {
    replay("quant_scale", quant_checks::check_scale);
}

#[test]
fn quant_accum_corpus() {
    replay("quant_accum", quant_checks::check_accum);
}

/// A few fixed inputs, so the checks run even where the corpus is absent.
#[test]
fn fixed_inputs() {
    for seed in 0u8..64 {
        let data: Vec<u8> = (0..600u32).map(|i| (i as u8).wrapping_mul(seed | 1).wrapping_add(seed)).collect();
        quant_checks::check_scale(&data);
        quant_checks::check_accum(&data);
    }
}
