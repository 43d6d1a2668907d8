//! A test's SKIP line for the reference crate's tests (`mod skip;`), kept apart from `common` so that a test
//! that only needs this does not compile the layer helpers.

/// Print a test's SKIP line where `cargo test` shows it: straight to the process's stderr (the harness captures
/// `println!`/`eprintln!` and shows them only for failing tests). The same as `moe_kernels::skip_notice`, which
/// this crate cannot depend on.
pub fn notice(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIP {line}");
}
