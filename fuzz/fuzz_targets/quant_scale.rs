//! Block quantisation (every scale rule, E4M3 / E5M2 / E2M1 elements, 1xN, Nx1 and RxC blocks with
//! ragged edges) against an independent formulation: see `quant_checks.rs`.
//!
//!     cargo +nightly fuzz run quant_scale -- -max_total_time=180
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "quant_checks.rs"]
mod quant_checks;

fuzz_target!(|data: &[u8]| quant_checks::check_scale(data));
