//! The case reader on hostile bytes: every file of the committed fuzz corpus (`fuzz/corpus/case_reader/`,
//! from `cargo +nightly fuzz run case_reader`) goes through the same read+validate path `moe-oracle run`
//! uses and must give a case or a one-line error, never a panic; and a few malformed files make
//! `moe-oracle run` exit 2 with one `error:` line and no output (the cases not already in `cli_run.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use moe_oracle::case::{parse_case, parse_config, write_tensors, ReadOptions, TensorData};
use ndarray::{ArrayD, CowArray, IxDyn};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/case_reader");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

/// What the reader makes of `bytes`: Ok(()) or the error line; a panic fails the caller's test.
fn read(bytes: &[u8], allow_nonfinite: bool) -> Result<(), String> {
    match std::panic::catch_unwind(|| parse_case(bytes, ReadOptions { allow_nonfinite })) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => panic!("parse_case panicked"),
    }
}

fn assert_one_line(what: &str, msg: &str) {
    assert!(!msg.trim().is_empty(), "{what}: empty message");
    assert!(!msg.contains('\n') && !msg.contains('\r'), "{what}: message spans lines: {msg:?}");
}

#[test]
fn corpus_replays_without_panics_and_with_one_line_errors() {
    let files = corpus();
    assert!(files.len() >= 20, "corpus has only {} files", files.len());
    let (mut ok, mut err) = (0, 0);
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy();
        for allow in [false, true] {
            let r = std::panic::catch_unwind(|| read(&bytes, allow)).unwrap_or_else(|_| panic!("{name}: panic"));
            match r {
                Ok(()) => ok += 1,
                Err(m) => {
                    assert_one_line(&name, &m);
                    err += 1;
                }
            }
        }
        if let Ok(s) = std::str::from_utf8(&bytes) {
            let r = std::panic::catch_unwind(|| parse_config(s).err().map(|e| e.to_string()))
                .unwrap_or_else(|_| panic!("{name}: parse_config panicked"));
            if let Some(m) = r {
                assert_one_line(&name, &m);
            }
        }
    }
    // The corpus exercises both outcomes.
    assert!(ok > 0 && err > 0, "ok {ok}, errors {err}");
    println!("replayed {} corpus files: {ok} reads, {err} one-line errors", files.len());
}

/// Print each file of `$CASE_READER_CLASSIFY` with its outcome class (digits folded), to pick a small
/// corpus covering every distinct outcome:
///     CASE_READER_CLASSIFY=dir cargo test --release --test fuzz_corpus_case -- --ignored classify --nocapture
#[test]
#[ignore = "a tool for minimising the corpus"]
fn classify() {
    let Some(dir) = std::env::var_os("CASE_READER_CLASSIFY") else { return };
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let class = match read(&bytes, false) {
            Ok(()) => "ok".to_string(),
            Err(m) => {
                let folded: String = m.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect();
                folded.split("#").filter(|s| !s.is_empty()).collect::<Vec<_>>().join("#").chars().take(45).collect()
            }
        };
        let cfg_class = match std::str::from_utf8(&bytes).map(parse_config) {
            Ok(Ok(_)) => "config ok".to_string(),
            Ok(Err(e)) => e.to_string().chars().filter(|c| !c.is_ascii_digit()).take(45).collect(),
            Err(_) => String::new(),
        };
        println!("CLASS\t{class} | {cfg_class}\t{}\t{}", bytes.len(), path.display());
    }
}

// ---------------------------------------------------------------------------------------------------------
// Malformed files through `moe-oracle run`.
// ---------------------------------------------------------------------------------------------------------

fn meta(config: &str) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    m.insert("moe.format".to_string(), "1".to_string());
    m.insert("moe.config".to_string(), config.to_string());
    m
}

const CFG: &str = r#"{"tokens":2,"hidden":4,"intermediate":2,"experts":3,"top_k":2,"activation":"swiglu","routing":null,"recipe":"bf16","ep_ranks":1}"#;

fn f32s(shape: &[usize], v: f32) -> TensorData<'static> {
    TensorData::F32(CowArray::from(ArrayD::from_elem(IxDyn(shape), v)))
}

/// A valid given-routing case [T=2, H=4, I=2, E=3, k=2], with `edit` applied to its tensor list.
fn write_case(path: &Path, config: &str, edit: impl FnOnce(&mut Vec<(String, TensorData<'static>)>)) {
    let ids = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![0, 2, 1, 0]).unwrap();
    let mut t: Vec<(String, TensorData<'static>)> = vec![
        ("x".into(), f32s(&[2, 4], 0.5)),
        ("w13".into(), f32s(&[3, 4, 4], 0.25)),
        ("w2".into(), f32s(&[3, 4, 2], 0.125)),
        ("topk_ids".into(), TensorData::I32(CowArray::from(ids))),
        ("topk_weights".into(), f32s(&[2, 2], 0.5)),
        ("dy".into(), f32s(&[2, 4], 1.0)),
    ];
    edit(&mut t);
    write_tensors(path, &meta(config), &t).unwrap();
}

fn set(t: &mut [(String, TensorData<'static>)], name: &str, v: TensorData<'static>) {
    t.iter_mut().find(|(n, _)| n == name).unwrap().1 = v;
}

#[test]
fn malformed_cases_make_run_exit_2_with_one_line_and_no_output() {
    let d = tempfile::tempdir().unwrap();
    let case_path = d.path().join("case.safetensors");
    let out = d.path().join("out.safetensors");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_moe-oracle"))
            .args(["run"])
            .arg(&case_path)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap()
    };
    let fails = |frag: &str| {
        let o = run();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{frag}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{frag}: {err:?}");
        assert!(lines[0].starts_with("error: ") && lines[0].contains(frag), "{err:?} lacks {frag:?}");
        assert!(!out.exists(), "{frag}: output written");
    };

    // The valid case runs (so each failure below is the edit's doing).
    write_case(&case_path, CFG, |_| {});
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(&out).unwrap();

    // Wrong dtype: x as I32, topk_ids as F32.
    write_case(&case_path, CFG, |t| set(t, "x", TensorData::I32(CowArray::from(ArrayD::from_elem(IxDyn(&[2, 4]), 1)))));
    fails("tensor `x`: unsupported dtype I32");
    write_case(&case_path, CFG, |t| set(t, "topk_ids", f32s(&[2, 2], 1.0)));
    fails("tensor `topk_ids`: unsupported dtype F32 (expected I32)");
    // Wrong shape.
    write_case(&case_path, CFG, |t| set(t, "w2", f32s(&[3, 2, 4], 0.1)));
    fails("tensor `w2`: wrong shape");
    // Repeated expert id in one token.
    write_case(&case_path, CFG, |t| {
        let ids = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![0, 2, 1, 1]).unwrap();
        set(t, "topk_ids", TensorData::I32(CowArray::from(ids)))
    });
    fails("token 1: expert id 1 repeated");
    // Negative id other than -1.
    write_case(&case_path, CFG, |t| {
        let ids = ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![0, -2, 1, 0]).unwrap();
        set(t, "topk_ids", TensorData::I32(CowArray::from(ids)))
    });
    fails("expert id -2 out of range");
    // Infinity in dy.
    write_case(&case_path, CFG, |t| set(t, "dy", f32s(&[2, 4], f32::INFINITY)));
    fails("tensor `dy`: non-finite value inf");
    // k > E in the config (the tensors agree with it).
    let k_gt_e = CFG.replace(r#""experts":3,"top_k":2"#, r#""experts":1,"top_k":2"#);
    write_case(&case_path, &k_gt_e, |t| {
        set(t, "w13", f32s(&[1, 4, 4], 0.25));
        set(t, "w2", f32s(&[1, 4, 2], 0.25));
    });
    fails("top_k 2 exceeds experts 1");
    // A recipe no one knows (`check` used to fail on it later without naming moe.config, `run` accepted it).
    write_case(&case_path, &CFG.replace(r#""recipe":"bf16""#, r#""recipe":"bogus""#), |_| {});
    fails("`moe.config` recipe \"bogus\" is not a known recipe");
    // A misspelt selection bias, which would be skipped silently.
    write_case(&case_path, CFG, |t| t.push(("router.bais".into(), f32s(&[3], 0.5))));
    fails("tensor `router.bais` is not part of the case format");
    // Config not JSON, and a missing config.
    write_case(&case_path, "{tokens: 2", |_| {});
    fails("`moe.config` is not a valid config");
    // A golden file cut in half.
    std::fs::write(&case_path, {
        let mut b =
            std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/qwen3-30b-a3b_t1.safetensors")).unwrap();
        b.truncate(b.len() / 2);
        b
    })
    .unwrap();
    fails("truncated file");
}
