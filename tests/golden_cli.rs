//! `moe-oracle golden` on the command line: byte-identical files for the same arguments (and the same bytes
//! as the committed golden set), quiet stderr when piped, and bad arguments refused with one `error:` line,
//! status 2 and no file.

use std::path::Path;
use std::process::{Command, Output};

use moe_oracle::golden::curated;

mod cli_common;
use cli_common::*;

fn assert_fails(o: &Output, out: &Path, frag: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line, got {err:?}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(frag), "{err:?} lacks {frag:?}");
    assert!(!out.exists(), "file written despite the error");
    if let Some(dir) = out.parent().filter(|d| d.is_dir()) {
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0, "something left in {}", dir.display());
    }
}

#[test]
fn same_arguments_same_bytes_as_the_committed_case() {
    let d = tempfile::tempdir().unwrap();
    let entry = curated::CASES.iter().find(|e| e.file == "deepseek-v3_fp8-block.safetensors").unwrap();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/MANIFEST.json")).unwrap(),
    )
    .unwrap();
    let sha = manifest["cases"].as_array().unwrap().iter().find(|c| c["file"] == entry.file).unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let mut args: Vec<&str> = vec!["golden"];
    args.extend(entry.args.split_whitespace());
    for name in ["a.safetensors", "b.safetensors"] {
        let out = d.path().join(name);
        let mut a = args.clone();
        a.extend(["-o", p(&out)]);
        let o = oracle(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // Piped stderr: no progress lines.
        assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("--preset deepseek-v3"));
        assert_eq!(curated::sha256_hex(&std::fs::read(&out).unwrap()), sha, "{name}");
    }
    // The argument order does not matter; the seed does.
    let out = d.path().join("c.safetensors");
    let mut rev: Vec<&str> = vec!["golden", "-o", p(&out)];
    rev.extend(entry.args.split_whitespace().collect::<Vec<_>>().chunks(2).rev().flatten());
    assert!(oracle(&rev).status.success());
    assert_eq!(curated::sha256_hex(&std::fs::read(&out).unwrap()), sha);
    // Nor does the thread count (the oracle is exact).
    let mut a = args.clone();
    a.extend(["-o", p(&out)]);
    let o = Command::new(bin()).args(&a).env("RAYON_NUM_THREADS", "1").output().unwrap();
    assert!(o.status.success());
    assert_eq!(curated::sha256_hex(&std::fs::read(&out).unwrap()), sha, "one thread");
    let mut other = args.clone();
    other.extend(["--seed", "2", "-o", p(&out)]);
    assert!(oracle(&other).status.success());
    assert_ne!(curated::sha256_hex(&std::fs::read(&out).unwrap()), sha);
}

#[test]
fn golden_file_runs_through_moe_oracle_run() {
    // A golden file is a case: `run` reads it and reproduces its stored y bit for bit.
    let d = tempfile::tempdir().unwrap();
    let case = d.path().join("case.safetensors");
    let out = d.path().join("out.safetensors");
    let small = ["--hidden", "16", "--intermediate", "8", "--experts", "8", "--tokens", "12"];
    for extra in [&[][..], &["--given-routing"][..], &["--recipe", "fp32", "--scenario", "unused-slots"][..]] {
        let mut a = vec!["golden", "--preset", "gpt-oss-120b", "-o", p(&case)];
        a.extend(small);
        a.extend(extra);
        assert!(oracle(&a).status.success());
        let o = oracle(&["run", p(&case), "-o", p(&out), "-q"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (g, r) = (std::fs::read(&case).unwrap(), std::fs::read(&out).unwrap());
        let (g, r) =
            (safetensors::SafeTensors::deserialize(&g).unwrap(), safetensors::SafeTensors::deserialize(&r).unwrap());
        for name in ["y", "grad.x", "grad.w13", "grad.w2", "grad.topk_weights"] {
            assert_eq!(g.tensor(name).unwrap().data(), r.tensor(name).unwrap().data(), "{extra:?}: {name}");
        }
    }
}

#[test]
fn bad_arguments_exit_2_with_one_line_and_no_file() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("empty");
    std::fs::create_dir(&dir).unwrap();
    let out = dir.join("g.safetensors");
    let o = p(&out);
    let small = ["--hidden", "16", "--intermediate", "8"];
    let run = |extra: &[&str]| {
        let mut a = vec!["golden", "-o", o];
        a.extend(extra);
        oracle(&a)
    };
    assert_fails(&run(&["--preset", "mixtral-8x7b", "--top-k", "9"]), &out, "top_k 9 exceeds experts 8");
    assert_fails(&run(&["--preset", "mixtral-8x7b", "--hidden", "0"]), &out, "hidden must be at least 1");
    assert_fails(&run(&["--preset", "olmoe-1b-7b", "--experts", "12", "--ep-ranks", "5"]), &out, "ep_ranks 5");
    assert_fails(&run(&["--preset", "deepseek-v3", "--experts", "12"]), &out, "n_group 8 must divide experts 12");
    // Full-size presets exceed the default memory limit: refused before anything is allocated.
    assert_fails(&run(&["--preset", "deepseek-v3"]), &out, "GiB (estimate), more than --max-memory-gib 8");
    assert_fails(&run(&["--preset", "qwen3-30b-a3b", "--tokens", "99999999999999"]), &out, "--max-memory-gib");
    let mut a = vec!["--preset", "mixtral-8x7b", "--scenario", "zero-channel-128"];
    a.extend(small);
    assert_fails(&run(&a), &out, "needs --tokens >= 128");
    let mut a = vec!["--preset", "mixtral-8x7b", "--top-k", "5", "--scenario", "empty-experts"];
    a.extend(small);
    assert_fails(&run(&a), &out, "needs top-k <= experts/2");
    assert_fails(&run(&["--preset", "mixtral-8x7b", "--recipe", "fp4"]), &out, "fp4");
    assert_fails(&run(&["--preset", "llama"]), &out, "llama");
    let nowhere = d.path().join("no-dir").join("g.safetensors");
    assert_fails(&oracle(&["golden", "--preset", "mixtral-8x7b", "-o", p(&nowhere)]), &nowhere, "does not exist");
}

#[test]
fn help_documents_presets_scenarios_and_the_shared_expert() {
    let o = oracle(&["golden", "--help"]);
    assert!(o.status.success());
    let h = String::from_utf8_lossy(&o.stdout);
    for word in [
        "qwen3-235b-a22b",
        "gpt-oss-120b",
        "zero-channel-128",
        "unused-slots",
        "router-ties",
        "fp8-block-te",
        "shared expert",
        "--given-routing",
        "--max-memory-gib",
    ] {
        assert!(h.contains(word), "help lacks {word}");
    }
}
