#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for d in "" "WS_EXP_NO_TMA_ISSUE"; do
  echo "=== [$d] at ${SECONDS}s"
  MOE_FAST_DEFINES="$d" MOE_FAST_LINEINFO=1 timeout 200 $NCU -k regex:'^ws_rows_bmn$' --launch-count 1 \
     --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats -f -o /tmp/prof \
     .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > /tmp/ncu.log 2>&1
  echo "ncu rc $?"; tail -3 /tmp/ncu.log
  $NCU -i /tmp/prof.ncu-rep --page details 2>&1 | grep -E "Duration|Throughput|Hit Rate|Stall|Issued|Eligible|Active Warps|Bandwidth|Busy" | head -40
  $NCU -i /tmp/prof.ncu-rep --page source --csv --print-source sass > /tmp/sass.csv 2>/dev/null
  python3 .gpu/tools/ncu_top_stalls.py /tmp/sass.csv 22
  $NCU -i /tmp/prof.ncu-rep --page raw --csv 2>/dev/null | python3 -c "
import csv,sys
r=list(csv.reader(sys.stdin)); h=r[0]; v=r[2] if len(r)>2 else r[1]
for k,x in zip(h,v):
  if 'smsp__pcsamp_warps_issue_stalled' in k and not k.endswith('not_issued'):
    try:
      if float(x.replace(',',''))>0: print(k,x)
    except: pass
" | sort -t' ' -k2 -n -r | head -20
done
echo total ${SECONDS}s
