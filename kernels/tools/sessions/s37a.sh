#!/usr/bin/env bash
# Session 37 (after `bash kernels/tools/stage_gpu.sh`; carry [".gpu"]; END s, default 540): on an H200 the
# burst rounds of both presets, then the heated ones (no round starts after UNTIL s, default 300), as s36a.sh;
# then, on any card, the command-line GPU tests (`run --device cuda [--kernels fast]` candidates through
# `check`, which now also compares fwd.expert_offsets and refuses names outside the format), then the
# gpu_fast fuzz target for what is left (at least 60 s; short inputs padded from their own bytes since s36).
source kernels/tools/sessions/ab_lib.sh
session_start s37a
UNTIL=${UNTIL:-300}
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
    *H200*) h200_burst $UNTIL burst; baselines $UNTIL heated ;;
    *) echo "not an H200: no rounds" ;;
esac
for t in cli_gpu cli_gpu_fast; do
    MOE_ORACLE_BIN=.gpu/bin/moe-oracle REQUIRE_GPU=1 timeout 120 .gpu/bin/$t --test-threads=1 > $OUT/$t.log 2>&1
    echo "== $t rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/$t.log | cut -c1-300 | head -12
done
F=$((${END:-540} - SECONDS)); [ $F -lt 60 ] && F=60
fuzz_gpu_fast $F
echo "total ${SECONDS}s"
