#!/usr/bin/env bash
# RUSTC_WRAPPER for the gpu_fast fuzz target's build: compiles the oracle (moe_reference) and the kernels'
# host crate (moe_kernels) without libFuzzer's coverage instrumentation, every other crate as cargo-fuzz asks.
# Why: the target's time is the exact check of every token and weight-gradient entry, spread over all cores,
# and coverage counters are shared by every thread: with them, two threads checked no faster than one
# (`check_time_at_the_fuzz_size` in kernels/src/fast/check.rs under cargo-fuzz's flags), so one input of the
# largest shape took 248 s on a 16-core host (s35a). Coverage of the check's loops guides nothing: what the
# target explores is the GPU kernels, which libFuzzer cannot see. AddressSanitizer stays on.
# Use: RUSTC_WRAPPER=$PWD/fuzz/tools/rustc_check_uninstrumented.sh cargo +nightly fuzz build gpu_fast --release
rustc=$1; shift
case " $* " in
    *" --crate-name moe_reference "* | *" --crate-name moe_kernels "*)
        args=()
        skip=0
        for a in "$@"; do
            if [ $skip = 1 ]; then
                skip=0
                case "$a" in passes=sancov-module | llvm-args=-sanitizer-coverage*) continue ;; *) args+=("-C" "$a"); continue ;; esac
            fi
            case "$a" in
                -C) skip=1 ;;
                -Cpasses=sancov-module | -Cllvm-args=-sanitizer-coverage*) ;;
                *) args+=("$a") ;;
            esac
        done
        exec "$rustc" "${args[@]}" ;;
    *) exec "$rustc" "$@" ;;
esac
