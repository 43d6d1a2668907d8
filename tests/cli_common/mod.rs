//! What every command-line test runs the binary with (each test file is its own crate: `mod cli_common;`).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_moe-oracle");

/// Run `moe-oracle ARGS...` to completion.
pub fn oracle(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run moe-oracle")
}

/// A test path as a command-line argument.
pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
