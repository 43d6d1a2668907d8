#!/usr/bin/env bash
# Stage a second build, of another commit or branch, beside the one stage_gpu.sh put into .gpu/, so that one
# device call can run both (e.g. a branch's kernels against main's, back to back on the same GPU):
#   bash kernels/tools/stage_gpu.sh                  # this checkout -> .gpu/bin
#   bash kernels/tools/stage_ref.sh s15-fused-dA     # the branch  -> .gpu/s15-fused-dA/bin
# It builds REF in a temporary git worktree into target/ref (its own target directory: sharing target/ makes
# the two builds overwrite each other's workspace artifacts, which have the same names and hashes, and cargo
# then calls the checkout's stale copy fresh; the first run compiles the dependencies, a few minutes) and
# copies moe-oracle and the gpu_fast, gpu_layer and layer_api test binaries. Run after stage_gpu.sh (which
# empties .gpu/).
set -euo pipefail
ref=${1:?usage: stage_ref.sh REF [NAME]}
name=${2:-$ref}
root=$(git rev-parse --show-toplevel)
cd "$root"
git rev-parse --verify -q "$ref^{commit}" > /dev/null || { echo "error: $ref is not a commit or branch" >&2; exit 2; }
[ -d .gpu/bin ] || { echo "error: run kernels/tools/stage_gpu.sh first (.gpu/bin is missing)" >&2; exit 2; }
wt=$(mktemp -d)/src
git worktree add -q --detach "$wt" "$ref"
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
export CARGO_TARGET_DIR="$root/target/ref"
dst="$root/.gpu/$name/bin"
rm -rf "$root/.gpu/$name" && mkdir -p "$dst"
(cd "$wt" && cargo build --release --bin moe-oracle && cp "$CARGO_TARGET_DIR/release/moe-oracle" "$dst/")
for t in gpu_fast gpu_layer layer_api; do
    exe=$(cd "$wt" && cargo test --release -p moe-kernels --test $t --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
    cp "$exe" "$dst/$t"
done
for f in "$dst"/*; do strip --strip-debug "$f"; done
du -sh "$root/.gpu"
