#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.sm,power.draw --format=csv
Q=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown
for d in "" "WS_EXP_NO_TMA_ISSUE"; do
  echo "=== smi [$d] at ${SECONDS}s"
  nvidia-smi --query-gpu=$Q --format=csv,noheader -lms 20 > /tmp/smi.csv 2>&1 &
  SP=$!
  MOE_FAST_DEFINES="$d" timeout 100 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 40 --check-tokens 0 > /tmp/o.log 2>&1
  kill $SP
  grep -E "fast forward|^  " /tmp/o.log | cut -c1-60
  python3 - <<'PY'
rows=[l.strip().split(', ') for l in open('/tmp/smi.csv') if 'MHz' in l]
busy=[r for r in rows if float(r[2].split()[0])>300]
print(len(rows),'samples,',len(busy),'above 300 W')
import collections
for name,sel in (('busy',busy),):
    if not sel: continue
    cl=sorted(int(r[0].split()[0]) for r in sel); pw=sorted(float(r[2].split()[0]) for r in sel)
    print(name,'sm MHz min/med/max',cl[0],cl[len(cl)//2],cl[-1],' power W med/max',pw[len(pw)//2],pw[-1],' temp',sel[-1][3])
    print(' reasons (sw_power_cap, hw_slowdown, sw_thermal, hw_power_brake):',collections.Counter(tuple(r[4:8]) for r in sel).most_common(3))
PY
done
for d in "WS_EXP_CLOCKS" "WS_EXP_CLOCKS WS_EXP_NO_TMA_ISSUE"; do
  echo "=== [$d] at ${SECONDS}s"
  MOE_FAST_DEFINES="$d" timeout 100 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 3 --check-tokens 0 > /tmp/o.log 2>&1
  grep -E "fast forward|^  [gdw]" /tmp/o.log
  grep -E "wsspan|wsclk" /tmp/o.log | tail -30 | grep -E "wsspan|blk 0 wg 0"
done
echo total ${SECONDS}s
