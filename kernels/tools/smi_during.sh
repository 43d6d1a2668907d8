#!/usr/bin/env bash
# Run a command on the GPU machine while nvidia-smi samples the SM clock, power and the clock-limit reasons every
# 20 ms; print the command's output, then a summary of the busy samples (power above 300 W): SM clock min / median /
# max, power median / max, and how often the software power cap was active. Session 7 found the GEMMs under
# `sw_power_cap` (NOTES.md, "Session 7"). Usage, e.g.:
#   bash kernels/tools/smi_during.sh .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 20 --check-tokens 0
Q=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown
log=$(mktemp)
nvidia-smi --query-gpu=$Q --format=csv,noheader -lms 20 > "$log" 2>&1 &
sp=$!
"$@"
rc=$?
kill $sp
python3 - "$log" <<'PY'
import collections, sys
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if "MHz" in l]
busy = [r for r in rows if float(r[2].split()[0]) > 300]
print(f"nvidia-smi: {len(rows)} samples, {len(busy)} above 300 W")
if busy:
    cl = sorted(int(r[0].split()[0]) for r in busy)
    pw = sorted(float(r[2].split()[0]) for r in busy)
    print(f"  SM MHz min/median/max {cl[0]}/{cl[len(cl)//2]}/{cl[-1]}; power W median/max {pw[len(pw)//2]}/{pw[-1]}; temperature {busy[-1][3]} C")
    print("  (sw_power_cap, hw_slowdown, sw_thermal, hw_power_brake):", collections.Counter(tuple(r[4:8]) for r in busy).most_common(3))
PY
rm -f "$log"
exit $rc
