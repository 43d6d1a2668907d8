//! `kernels/tools/ncu_inst_mix.py` (session 31): warp instructions executed per SASS opcode from Nsight
//! Compute's source page as CSV. The expected shares below are worked by hand from the CSV written here.
//! Bad input gives one `error:` line, status 2 and nothing on stdout.
//! Skips with a visible `SKIP` line when python3 is missing; `REQUIRE_PYTHON=1` makes that a failure.

mod support;

use std::path::Path;
use std::process::{Command, Output};

/// The script's output for a CSV with these contents; None (after a SKIP line) without python3.
fn run(csv: &str) -> Option<Output> {
    if !support::python3_runs("ncu_inst_mix.py") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sass.csv");
    std::fs::write(&path, csv).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/tools/ncu_inst_mix.py");
    Some(Command::new("python3").arg(script).arg(&path).arg("5").output().unwrap())
}

const HEADER: &str = "\"Address\",\"Source\",\"Warp Stall Sampling (All Samples)\",\"Instructions Executed\"\n";

#[test]
fn opcodes_are_summed_over_lines_and_predicates() {
    let csv = format!(
        "\"Kernel Name\",\"ours\"\n{HEADER}\
         \"0x10\",\"HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24\",\"5\",\"1,000\"\n\
         \"0x20\",\"@P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R16+URZ], R17\",\"9\",\"2,000\"\n\
         \"0x30\",\"@!P0 BRA 0x20\",\"1\",\"500\"\n\
         \"0x40\",\"SYNCS.ARRIVE.TRANS64 RZ, [R7], RZ\",\"1\",\"1,500\"\n\
         \"Kernel Name\",\"theirs\"\n{HEADER}\
         \"0x10\",\"UIADD3 UR16, UR16, 0x80, URZ\",\"0\",\"300\"\n\
         \"0x20\",\"HGMMA.64x64x16.F32.BF16 R24, gdesc[UR16], R24\",\"0\",\"100\"\n"
    );
    let Some(o) = run(&csv) else { return };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    // ours: 1000 + 2000 + 500 + 1500 = 5000; SYNCS 3500 (two lines, one predicated) = 70.0%, HGMMA 20.0%, BRA 10.0%
    assert!(out.contains("## ours: 5000 warp instructions executed, 4 SASS lines"), "{out}");
    for line in ["70.0%  SYNCS", "20.0%  HGMMA", "10.0%  BRA"] {
        assert!(out.contains(line), "no '{line}' in {out}");
    }
    // theirs: 400; UIADD3 75.0%, HGMMA 25.0%
    assert!(out.contains("## theirs: 400 warp instructions executed, 2 SASS lines"), "{out}");
    assert!(out.contains("75.0%  UIADD3") && out.contains("25.0%  HGMMA"), "{out}");
}

#[test]
fn a_file_without_kernels_is_one_error_line() {
    let Some(o) = run("not,a,source,page\n") else { return };
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: no kernel in "), "{err}");
}
