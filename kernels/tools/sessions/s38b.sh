#!/usr/bin/env bash
# Session 38, second call (after `bash kernels/tools/stage_gpu.sh`; carry [".gpu"]): the command-line GPU tests
# with the cli tests' own executables (s38a ran the moe-oracle binary in cli_gpu's place), then on an H200 the
# burst and heated rounds of both presets until UNTIL s (default 250); on an H100 the layer tests.
source kernels/tools/sessions/ab_lib.sh
session_start s38b
cli_gpu_tests
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
    *H200*) h200_burst ${UNTIL:-250} burst; baselines ${UNTIL:-250} heated ;;
    *) layer_tests .gpu/bin 100 ;;
esac
echo "total ${SECONDS}s"
