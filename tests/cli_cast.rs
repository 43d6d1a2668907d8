//! `moe-oracle cast`: float tensors rounded to a format and written as F32, other tensors and metadata copied,
//! `--saturate`, and bad input (exit 2, one `error:` line, no output file).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use half::bf16;
use moe_oracle::case::{write_tensors, TensorData};
use moe_reference::formats::{self, Format, Overflow};
use ndarray::{ArrayD, CowArray, IxDyn};
use safetensors::{Dtype, SafeTensors};

mod cli_common;
use cli_common::*;

const A: [f32; 6] = [1.0, 464.0, 465.0, -1000.0, 0.2, -3.3];
const B: [f32; 5] = [1.0625, 300.0, -0.0, f32::NAN, 1.0e-3];
const IDS: [i32; 3] = [7, -1, 3];
const BYTES: [u8; 5] = [1, 2, 3, 250, 255];

/// A file with an F32 tensor `a` [2, 3], a BF16 tensor `b` [5], an I32 tensor `ids` and a U8 tensor `flags`.
fn input(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("in.safetensors");
    let a = ArrayD::from_shape_vec(IxDyn(&[2, 3]), A.to_vec()).unwrap();
    let b = ArrayD::from_shape_vec(IxDyn(&[5]), B.iter().map(|&v| bf16::from_f32(v)).collect()).unwrap();
    let ids = ArrayD::from_shape_vec(IxDyn(&[3]), IDS.to_vec()).unwrap();
    let tensors = vec![
        ("a".to_string(), TensorData::F32(CowArray::from(a))),
        ("b".to_string(), TensorData::BF16(CowArray::from(b))),
        ("ids".to_string(), TensorData::I32(CowArray::from(ids))),
        ("flags".to_string(), TensorData::Raw { dtype: Dtype::U8, shape: vec![5], bytes: Cow::Borrowed(&BYTES) }),
    ];
    let mut meta = BTreeMap::new();
    meta.insert("note".to_string(), "kept as is".to_string());
    meta.insert("moe.format".to_string(), "1".to_string());
    write_tensors(&path, &meta, &tensors).unwrap();
    path
}

fn f32s(st: &SafeTensors, name: &str) -> Vec<f32> {
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), Dtype::F32, "{name}");
    t.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Cast `input` to `fmt` and check every tensor against `formats::quantize`; returns the values of `a` and `b`.
fn cast_and_check(dir: &Path, input: &Path, fmt: &str, saturate: bool) -> (Vec<f32>, Vec<f32>) {
    let out = dir.join(format!("out-{fmt}-{saturate}.safetensors"));
    let mut args = vec!["cast", p(input), "-o", p(&out), "--format", fmt];
    if saturate {
        args.push("--saturate");
    }
    let o = oracle(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains(fmt) && summary.contains("copied"), "{summary}");

    let bytes = std::fs::read(&out).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let m = meta.metadata().as_ref().unwrap();
    assert_eq!((m.len(), m["note"].as_str(), m["moe.format"].as_str()), (2, "kept as is", "1"), "metadata kept");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<&str> = st.names();
    names.sort();
    assert_eq!(names, ["a", "b", "flags", "ids"]);
    assert_eq!(st.tensor("a").unwrap().shape(), &[2, 3]);
    assert_eq!(st.tensor("b").unwrap().shape(), &[5]);
    let ids = st.tensor("ids").unwrap();
    assert_eq!((ids.dtype(), ids.shape()), (Dtype::I32, &[3][..]));
    let ids: Vec<i32> = ids.data().chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(ids, IDS);
    let flags = st.tensor("flags").unwrap();
    assert_eq!((flags.dtype(), flags.shape(), flags.data()), (Dtype::U8, &[5][..], &BYTES[..]));

    let f: Format = fmt.parse().unwrap();
    let ov = if saturate { Overflow::Saturate } else { Overflow::NonSaturating };
    let (a, b) = (f32s(&st, "a"), f32s(&st, "b"));
    for (x, y) in A.iter().zip(&a) {
        assert!(same(*y, formats::quantize(f, f64::from(*x), ov) as f32), "{fmt} a: {x} -> {y}");
    }
    for (x, y) in B.iter().zip(&b) {
        let x = bf16::from_f32(*x).to_f64();
        assert!(same(*y, formats::quantize(f, x, ov) as f32), "{fmt} b: {x} -> {y}");
    }
    (a, b)
}

#[test]
fn cast_rounds_floats_and_copies_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let inp = input(d.path());

    // E4M3, non-saturating (ml_dtypes): 464 is a tie that goes to 448, 465 and -1000 overflow to NaN.
    let (a, b) = cast_and_check(d.path(), &inp, "e4m3", false);
    assert_eq!((a[0], a[1], a[4], a[5]), (1.0, 448.0, 0.203125, -3.25));
    assert!(a[2].is_nan() && a[3].is_nan() && a[3].is_sign_negative());
    // bf16 1.0625 is a tie between 1 and 1.125 (even: 1); 300 -> 288; -0 stays -0; NaN stays NaN.
    assert_eq!((b[0], b[1], b[2].to_bits(), b[4]), (1.0, 288.0, (-0.0f32).to_bits(), 0.001953125));
    assert!(b[3].is_nan());

    // --saturate: overflow becomes ±448.
    let (a, _) = cast_and_check(d.path(), &inp, "e4m3", true);
    assert_eq!((a[1], a[2], a[3]), (448.0, 448.0, -448.0));

    // The other formats.
    let (a, _) = cast_and_check(d.path(), &inp, "e5m2", false);
    assert_eq!((a[1], a[2], a[3], a[4]), (448.0, 448.0, -1024.0, 0.1875));
    let (a, _) = cast_and_check(d.path(), &inp, "bf16", false);
    assert_eq!((a[0], a[4]), (1.0, 205.0 / 1024.0));
    let (a, _) = cast_and_check(d.path(), &inp, "f16", false);
    assert_eq!(a[4], 819.0 / 4096.0);
    // UE8M0: 1.5·2^e and up round up; negatives are NaN (saturating: the smallest value, 2^-127).
    let (a, b) = cast_and_check(d.path(), &inp, "e8m0", false);
    assert_eq!((a[0], a[1], a[4], b[1]), (1.0, 512.0, 0.25, 256.0));
    assert!(a[5].is_nan() && b[2].is_nan());
    let (a, _) = cast_and_check(d.path(), &inp, "e8m0", true);
    assert_eq!(a[5], 2f32.powi(-127));
    // E2M1: overflow saturates in both modes; NaN has no code (ml_dtypes: a zero of the opposite sign).
    let (a, b) = cast_and_check(d.path(), &inp, "e2m1", false);
    assert_eq!((a[1], a[3], a[5], b[1]), (6.0, -6.0, -3.0, 6.0));
    assert_eq!(b[3].to_bits(), if B[3].is_sign_negative() { 0 } else { (-0.0f32).to_bits() });
}

/// Status 2, exactly one `error:` line containing `frag`, and no output (nor temporary) file.
fn assert_fails(o: &Output, out: &Path, frag: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line, got {err:?}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(frag), "{err:?} lacks {frag:?}");
    assert!(!out.exists(), "output written despite the error");
    for f in std::fs::read_dir(out.parent().unwrap()).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "temporary file left behind: {name}");
    }
}

#[test]
fn cast_bad_input_exits_2() {
    let d = tempfile::tempdir().unwrap();
    let inp = input(d.path());
    let out = d.path().join("out.safetensors");
    let o = oracle(&["cast", p(&inp), "-o", p(&out), "--format", "e4m3fn"]);
    assert_fails(&o, &out, "e4m3fn");
    let o = oracle(&["cast", p(&inp), "-o", p(&out)]);
    assert_fails(&o, &out, "--format");
    let o = oracle(&["cast", p(&d.path().join("missing.safetensors")), "-o", p(&out), "--format", "bf16"]);
    assert_fails(&o, &out, "missing.safetensors");
    let junk = d.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a safetensors file").unwrap();
    let o = oracle(&["cast", p(&junk), "-o", p(&out), "--format", "bf16"]);
    assert_fails(&o, &out, "junk.safetensors");
    let bytes = std::fs::read(&inp).unwrap();
    std::fs::write(&junk, &bytes[..bytes.len() - 3]).unwrap();
    let o = oracle(&["cast", p(&junk), "-o", p(&out), "--format", "bf16"]);
    assert_fails(&o, &out, "truncated");
    let o = oracle(&["cast", p(&inp), "-o", p(&d.path().join("no/such/dir/out.safetensors")), "--format", "bf16"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("error: output"), "{}", stderr(&o));
}
