#!/usr/bin/env bash
# Stage only what kernels/tools/device_call.sh and the session scripts need into .gpu/ (git-ignored): the
# moe-oracle binary, the gpu_fast, gpu_layer, layer_api, cli_gpu and cli_gpu_fast test binaries, the PyTorch baseline scripts (and kernels/tools/torch_moe_heated.py beside them), and
# the gpu_fast fuzz target (built here when cargo-fuzz is installed).
# ../shared/tools/gpu-pack stages every test binary (~84 MB), more than the 64 MiB a device call may carry
# with the working tree; this stays near 30 MB. Run from the repository root:
#   bash kernels/tools/stage_gpu.sh
# The CUDA sources are embedded in the binaries: stage again after any change to kernels/cuda.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qxF '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu && mkdir -p .gpu/bin .gpu/bench
cargo build --release --bin moe-oracle
cp target/release/moe-oracle .gpu/bin/
for t in gpu_fast gpu_layer layer_api; do
    exe=$(cargo test --release -p moe-kernels --test $t --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["kind"] == ["test"]][-1])')
    cp "$exe" .gpu/bin/$t
done
# The command-line GPU tests of the root crate (run there with MOE_ORACLE_BIN=.gpu/bin/moe-oracle: the path
# cargo bakes in is this machine's). Only the test target's executable: when the moe-oracle binary is rebuilt
# for the test, cargo reports it too, and last (session 38 staged it as .gpu/bin/cli_gpu).
for t in cli_gpu cli_gpu_fast; do
    exe=$(cargo test --release --test $t --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["kind"] == ["test"]][-1])')
    cp "$exe" .gpu/bin/$t
done
cp ../shared/bench/*.py kernels/tools/torch_moe_heated.py .gpu/bench/
# The gpu_fast fuzz target, built here when cargo-fuzz is installed, with the oracle and moe_kernels left
# without coverage counters (fuzz/tools/rustc_check_uninstrumented.sh says why), in a target directory of its
# own so that no build with counters is mixed in.
if cargo +nightly fuzz --version > /dev/null 2>&1; then
    RUSTC_WRAPPER=$PWD/fuzz/tools/rustc_check_uninstrumented.sh cargo +nightly fuzz build gpu_fast --release \
        --target-dir $PWD/fuzz/target-gpu-fast
    mkdir -p .gpu/fuzz && cp fuzz/target-gpu-fast/x86_64-unknown-linux-gnu/release/gpu_fast .gpu/fuzz/
else
    echo "cargo-fuzz is not installed (cargo install cargo-fuzz): the gpu_fast fuzz target is not staged"
fi
for f in .gpu/bin/* .gpu/fuzz/*; do [ -f "$f" ] && strip --strip-debug "$f"; done
du -sh .gpu
