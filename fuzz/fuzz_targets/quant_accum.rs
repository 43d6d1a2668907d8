//! The tensor-core accumulation model: fast GEMM kernels (AVX-512 and portable builds) against the
//! big-integer definition, with and without blockwise scales: see `quant_checks.rs`.
//!
//!     cargo +nightly fuzz run quant_accum -- -max_total_time=180
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "quant_checks.rs"]
mod quant_checks;

fuzz_target!(|data: &[u8]| quant_checks::check_accum(data));
