//! The committed golden set (`golden/`) against its manifest and the generator: every case is regenerated
//! through the library and must hash to the manifest's sha256, as must the committed file; the manifest
//! lists exactly the curated cases of `moe_oracle::golden::curated::CASES`.
//!
//! Regenerate the set (after a deliberate generator change, with `GENERATOR` bumped):
//!     cargo test --release --test golden_manifest -- --ignored regenerate_golden_set

use std::path::{Path, PathBuf};

use moe_oracle::golden::{self, curated};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn manifest() -> serde_json::Value {
    let text = std::fs::read_to_string(golden_dir().join("MANIFEST.json")).expect("golden/MANIFEST.json");
    serde_json::from_str(&text).expect("MANIFEST.json is JSON")
}

fn args_of(entry: &serde_json::Value) -> String {
    let a: Vec<&str> = entry["args"].as_array().expect("args").iter().map(|v| v.as_str().expect("string")).collect();
    a.join(" ")
}

#[test]
fn manifest_lists_the_curated_cases() {
    let m = manifest();
    assert_eq!(m["generator"], golden::GENERATOR, "the set was made by another generator version: regenerate it");
    let cases = m["cases"].as_array().expect("cases");
    let files: Vec<&str> = cases.iter().map(|c| c["file"].as_str().unwrap()).collect();
    let want: Vec<&str> = curated::CASES.iter().map(|e| e.file).collect();
    assert_eq!(files, want);
    // And nothing else lies in golden/ (a stale file would look curated).
    let mut present: Vec<String> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "MANIFEST.json")
        .collect();
    present.sort();
    let mut want_sorted: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want_sorted.sort();
    assert_eq!(present, want_sorted, "golden/ holds files the manifest does not list (or lacks some)");
    for (c, e) in cases.iter().zip(curated::CASES) {
        // The manifest's canonical arguments describe the same case as the curated entry's.
        let out = Path::new("unused.safetensors");
        let from_manifest = curated::parse_args(&args_of(c), out).expect("manifest args parse");
        let from_entry = curated::parse_args(e.args, out).expect("entry args parse");
        let cfg = from_entry.config().expect("valid");
        assert_eq!(from_manifest.canonical(&from_manifest.config().unwrap()), from_entry.canonical(&cfg), "{}", e.file);
        assert_eq!(c["seed"].as_u64(), Some(from_entry.seed));
        let cfg_json: serde_json::Value = serde_json::from_str(&moe_oracle::case::config_json(&{
            let mut c = cfg.clone();
            if from_entry.given_routing || from_entry.scenario == golden::Scenario::UnusedSlots {
                c.routing = None;
            }
            c
        }))
        .unwrap();
        assert_eq!(c["config"], cfg_json, "{}", e.file);
    }
}

#[test]
fn every_case_regenerates_to_its_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest();
    let mut total = 0u64;
    for c in m["cases"].as_array().expect("cases") {
        let file = c["file"].as_str().unwrap();
        let sha = c["sha256"].as_str().unwrap();
        let committed = std::fs::read(golden_dir().join(file)).unwrap_or_else(|e| panic!("golden/{file}: {e}"));
        total += committed.len() as u64;
        assert_eq!(curated::sha256_hex(&committed), sha, "committed golden/{file} differs from the manifest");
        let out = dir.path().join(file);
        let args = curated::parse_args(&args_of(c), &out).expect("args parse");
        golden::write_golden(&args).unwrap_or_else(|e| panic!("{file}: {e}"));
        let fresh = std::fs::read(&out).unwrap();
        assert_eq!(curated::sha256_hex(&fresh), sha, "regenerated {file} differs from the manifest");
    }
    // The set stays small enough to commit and to check in CI.
    assert!(total < 12 << 20, "golden set is {total} bytes");
}

#[test]
#[ignore = "writes golden/: run on purpose to regenerate the set"]
fn regenerate_golden_set() {
    let dir = golden_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let m = curated::regenerate(&dir).unwrap_or_else(|e| panic!("{e}"));
    for c in m["cases"].as_array().unwrap() {
        println!("{} {} bytes {}", c["sha256"].as_str().unwrap(), c["bytes"], c["file"].as_str().unwrap());
    }
}
