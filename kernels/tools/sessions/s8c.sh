#!/usr/bin/env bash
# Session 8, fourth call: WS_CLUSTER=2 with CTA-scope remote arrivals (now its default), with one release per
# warpgroup (WS_WG_RELEASE), and WS_WG_RELEASE alone, against the default; gpu_fast on the candidates.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
b() { timeout 60 .gpu/bin/moe-oracle bench-gpu --preset ${P:-qwen3-30b-a3b} --tokens 16384 --engines ws --reps 10 --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast forward|^  [gdws]|oracle|error" | grep -v "in clusters" | cut -c1-100; }
for r in 1 2; do
  for d in "" "WS_WG_RELEASE" "WS_CLUSTER=2" "WS_CLUSTER=2 WS_WG_RELEASE"; do echo "=== [$d] round $r"; MOE_FAST_DEFINES="$d" b; done
done
echo "=== 235b"; for d in "" "WS_CLUSTER=2 WS_WG_RELEASE"; do echo "=== 235b [$d]"; P=qwen3-235b-a22b MOE_FAST_DEFINES="$d" b; done
for d in "WS_WG_RELEASE" "WS_CLUSTER=2 WS_WG_RELEASE"; do
  [ $SECONDS -gt 330 ] && break
  s=$SECONDS; MOE_FAST_DEFINES="$d" timeout 90 .gpu/bin/gpu_fast --test-threads=1 > /tmp/gf.log 2>&1
  echo "== gpu_fast [$d] rc $? $((SECONDS - s)) s: $(grep 'test result' /tmp/gf.log)"; grep -E "panicked|FAILED" /tmp/gf.log | head -3
done
echo "total ${SECONDS}s"
