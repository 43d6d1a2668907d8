//! `check` under the FP8 recipes against an independent FP8 kernel model (numpy, `tests/independent_fp8/`,
//! written from `shared/docs/numerics.md` without reading the oracle's code; session 38's audit): faithful
//! kernels whose accumulation differs from the recipe's pass (no false alarm), kernels that scale blocks
//! another way fail fp8-block and pass the recipe naming their scale rule, and injected FP8 bugs fail.
//! `scenarios.py` holds the table and the expected exit statuses. Skips with a visible line when python3 or
//! numpy is missing; `REQUIRE_PYTHON=1` makes a skip a failure.

use std::process::Command;

mod cli_common;
use cli_common::bin;

#[test]
fn independent_fp8_kernels_get_the_expected_verdicts() {
    match Command::new("python3").args(["-c", "import numpy"]).output() {
        Ok(o) if o.status.success() => {}
        other => {
            let why = match other {
                Err(e) => format!("python3 not runnable ({e})"),
                Ok(o) => format!("python3 cannot import numpy ({})", String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("").trim()),
            };
            assert!(std::env::var_os("REQUIRE_PYTHON").is_none(), "REQUIRE_PYTHON is set but: {why}");
            moe_kernels::skip_notice(&format!("independent FP8 kernels: {why}; pip install numpy"));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/independent_fp8/scenarios.py");
    let o = Command::new("python3").args([script, &bin(), dir.path().to_str().unwrap()]).output().expect("run python3");
    let out = String::from_utf8_lossy(&o.stdout);
    println!("{out}");
    assert!(o.status.success(), "scenarios not as expected:\n{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("49 of 49 scenarios as expected"), "{out}");
}
