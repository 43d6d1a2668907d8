//! What every command-line test runs the binary with (each test file is its own crate: `mod cli_common;`).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The binary: `MOE_ORACLE_BIN` when set (on the GPU machine, which has no checkout at the build's path:
/// `MOE_ORACLE_BIN=.gpu/bin/moe-oracle .gpu/bin/cli_gpu_fast`), else the one cargo built beside the test.
pub fn bin() -> String {
    std::env::var("MOE_ORACLE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_moe-oracle").to_string())
}

/// Run `moe-oracle ARGS...` to completion.
pub fn oracle(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("run moe-oracle")
}

/// A test path as a command-line argument.
pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
