//! Shared by the integration tests that run outside programs: the stand-in NVML library (`nvml_stub.c`
//! beside this file) for the tests of the energy readers (`kernels/src/energy.rs`,
//! `kernels/tools/torch_moe_heated.py`), built with the system C compiler, and the check that python3 runs
//! for the tests of the Python tools.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The stub's one device.
pub const STUB_UUID: &str = "GPU-12345678-9abc-def0-0123-456789abcdef";

/// Build the stub into `dir` as `libnvidia-ml.so.1` (the name the readers load). None, after a visible SKIP
/// line, when no C compiler runs; `REQUIRE_CC=1` makes that a failure.
pub fn build_nvml_stub(dir: &Path, test: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/nvml_stub.c");
    let lib = dir.join("libnvidia-ml.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).args(["-shared", "-fPIC", "-O1", "-o"]).arg(&lib).arg(&src).output() {
        Ok(o) if o.status.success() => Some(lib),
        Ok(o) => panic!("{cc} failed on {}: {}", src.display(), String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            assert!(std::env::var_os("REQUIRE_CC").is_none(), "REQUIRE_CC is set but {cc} is not runnable: {e}");
            moe_kernels::skip_notice(&format!("{test}: no C compiler ({cc}: {e}) for the NVML stub"));
            None
        }
    }
}

/// Whether python3 runs. If not: a visible SKIP line naming `what` (the tool under test) and false;
/// `REQUIRE_PYTHON=1` makes that a failure.
pub fn python3_runs(what: &str) -> bool {
    match Command::new("python3").arg("--version").output() {
        Ok(_) => true,
        Err(e) => {
            assert!(std::env::var_os("REQUIRE_PYTHON").is_none(), "REQUIRE_PYTHON is set but python3 is not runnable: {e}");
            moe_kernels::skip_notice(&format!("{what}: python3 not runnable ({e})"));
            false
        }
    }
}
