//! Arbitrary bytes -> the case-file reader `moe-oracle run` uses (`case::parse_case`: safetensors framing,
//! metadata, `moe.config`, dtypes, shapes, expert ids, finiteness), and, when the bytes are UTF-8, the
//! `moe.config` parser on its own. Neither may panic, and every error must be a single line (the CLI prints
//! it as `error: <message>`).
//!
//!     cargo +nightly fuzz run case_reader -- -max_total_time=300
//!
//! The committed corpus (`fuzz/corpus/case_reader/`) is replayed by `tests/fuzz_corpus_case.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moe_oracle::case::{parse_case, parse_config, ReadOptions};

fn assert_one_line(what: &str, msg: &str) {
    assert!(!msg.is_empty(), "{what}: empty error message");
    assert!(!msg.contains('\n') && !msg.contains('\r'), "{what}: error message spans lines: {msg:?}");
}

fuzz_target!(|data: &[u8]| {
    for allow_nonfinite in [false, true] {
        if let Err(e) = parse_case(data, ReadOptions { allow_nonfinite }) {
            assert_one_line("parse_case", &e.to_string());
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        if let Err(e) = parse_config(s) {
            assert_one_line("parse_config", &e.to_string());
        }
    }
});
