# Sourced by the session scripts (from s15a.sh on): `ab PRESET REPS LABEL "SETTINGS"` runs one interleaved A/B
# (`bench-gpu --ab`: A the environment's settings, B with SETTINGS) into $OUT/ab-LABEL.log and prints its
# summary; it skips when the script has run longer than AB_UNTIL seconds (default 430), to stay inside a call.
# AB_HEAT=MS heats first (`--heat-ms MS`: A runs that long back to back, then the interleaved rounds).
# `layer_tests BINDIR UNTIL` runs the layer_api and gpu_layer GPU tests of a staged build (e.g. .gpu/bin) into
# $OUT, each only if the script has run less than UNTIL seconds.
# `session_start NAME`: a session script's preamble, after sourcing this file: CUDA's libraries on the path,
# $OUT (the device's, or /tmp/NAME elsewhere) made, the card's name and the core count printed.
session_start() {
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
    OUT=${OUT:-/tmp/$1}; mkdir -p $OUT
    nvidia-smi --query-gpu=name --format=csv,noheader
    nproc
}
ab() { # preset reps label setting
    [ $SECONDS -gt ${AB_UNTIL:-430} ] && return
    local s=$SECONDS
    timeout 120 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --reps $2 --check-tokens 1 \
        --check-wgrad 16 --heat-ms ${AB_HEAT:-0} --ab "$4" > $OUT/ab-$3.log 2>&1
    echo "=== $1 [$4] rc $? $((SECONDS - s)) s"
    grep -E "^A/B|^B/A|^heat|^energy|gemm1|wgrad|dX_rows|dA|swiglu_bwd|gemm2|gather|^outputs|^oracle|rror" $OUT/ab-$3.log | cut -c1-150
}
# `fuzz_gpu_fast SECONDS` runs the gpu_fast fuzz target (.gpu/fuzz/gpu_fast, staged by stage_gpu.sh) that long,
# from the committed seeds (fuzz/corpus/gpu_fast) with full-length inputs (`-len_control=0`: otherwise libFuzzer
# keeps them at a few bytes for minutes, session 34), into $OUT/fuzz.log (crash and slow inputs, over 60 s,
# beside it), and prints a summary.
fuzz_gpu_fast() {
    mkdir -p /tmp/gpu_fast_corpus && cp fuzz/corpus/gpu_fast/* /tmp/gpu_fast_corpus/
    ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 timeout $1 .gpu/fuzz/gpu_fast -max_total_time=$(($1 - 25)) \
        -max_len=16 -len_control=0 -rss_limit_mb=8192 -report_slow_units=60 -artifact_prefix=$OUT/ /tmp/gpu_fast_corpus > $OUT/fuzz.log 2>&1
    echo "== fuzz gpu_fast rc $? for $1 s ($(ls /tmp/gpu_fast_corpus | wc -l) corpus units) at ${SECONDS}s"
    grep -E "INITED|^#[0-9]+.*(DONE|pulse)|panicked|SUMMARY|crash-|Slowest unit" $OUT/fuzz.log | tail -8
    # what the inputs covered (the target prints each input's case): engines, and T past one row tile
    grep '^case ' $OUT/fuzz.log | grep -o 'engine [a-z-]*' | sort | uniq -c | tr '\n' ' '; echo
    echo "cases $(grep -c '^case ' $OUT/fuzz.log), T > 128 in $(grep '^case ' $OUT/fuzz.log | grep -cE 'T=(129|1[3-9][0-9]|2[0-9][0-9])'), E = 8 in $(grep -c '^case .* E=8 ' $OUT/fuzz.log)"
}
# `gpu_fast_all` runs every gpu_fast test (REQUIRE_GPU=1; 118-184 s in sessions 21-23) into $OUT/gpu_fast.log and prints a summary.
gpu_fast_all() {
    REQUIRE_GPU=1 timeout 260 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
    echo "== gpu_fast (all) rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
}
# `sanitize_ws TOOL [TIMEOUT] [CASES] [OPTION...]` runs compute-sanitizer TOOL (with OPTIONs) on the ws engine's edge shapes (gpu_fast's
# edge-shape test; CASES as MOE_FAST_CASES, empty for all; default RACE_CASES, then 10,11,12,14: odd shapes,
# several row, column and k tiles, dA_raw's side tiles) into $OUT/cs-TOOL.log, TIMEOUT seconds at most
# (default 120), and prints its summary, its first reports, and whether it ran out of time without a verdict.
sanitize_ws() { # tool [timeout] [cases] [option...]
    local cases=${3-${RACE_CASES:-10,11,12,14}}
    MOE_FAST_CASES=$cases MOE_FAST_ENGINES=ws timeout ${2:-120} /usr/local/cuda/bin/compute-sanitizer --tool $1 --error-exitcode 9 "${@:4}" \
        .gpu/bin/gpu_fast --test-threads=1 --nocapture fast_layer_matches_the_oracle_on_edge_shapes > $OUT/cs-$1.log 2>&1
    local rc=$?
    echo "== $1 (ws engine, edge cases ${cases:-all}) rc $rc at ${SECONDS}s"; grep -E "SUMMARY|Race reported|case seed|test result" $OUT/cs-$1.log | head -8
    grep -m3 -E "^========= (Barrier|Uninitialized|Invalid|Error)" $OUT/cs-$1.log | cut -c1-200
    [ $rc -eq 124 ] && echo "   $1 TIMED OUT: no verdict (only the cases listed above finished)"
    return 0
}
# `race_runs LABEL DEFINES RUNS LIMIT` runs racecheck on edge case 10 up to RUNS times with MOE_FAST_DEFINES=DEFINES,
# LIMIT seconds each (20 more for the first, which compiles the kernels), no run started past 380 s; the launches
# are traced and drained (MOE_FAST_TRACE_LAUNCHES=1), so a run without a verdict names the kernel it stalled in.
# Logs in $OUT/race-LABEL-N.log; prints each run's time and the count of stalled runs.
race_runs() { # label defines runs limit
    local stalls=0 runs=0
    for r in $(seq 1 $3); do
        [ $SECONDS -gt 380 ] && break
        local lim=$4; [ $r -eq 1 ] && lim=$(($4 + 20))  # the first run compiles the kernels
        echo "-- racecheck case 10, $1-$r (limit ${lim}s)"
        local t0=$SECONDS
        MOE_FAST_TRACE_LAUNCHES=1 MOE_FAST_DEFINES="$2" sanitize_ws racecheck $lim 10 | grep -E "^==|SUMMARY|TIMED|worst"
        echo "   ran $((SECONDS - t0)) s"
        cp $OUT/cs-racecheck.log "$OUT/race-$1-$r.log"; runs=$((runs + 1))
        if ! grep -q "RACECHECK SUMMARY" "$OUT/race-$1-$r.log"; then
            stalls=$((stalls + 1))
            echo "   launches $(grep -c 'fast layer: launch' "$OUT/race-$1-$r.log"), done $(grep -c 'fast layer: done' "$OUT/race-$1-$r.log"): $(grep 'fast layer: ' "$OUT/race-$1-$r.log" | tail -1)"
        fi
    done
    echo "== $1: $stalls stalled of $runs runs at ${SECONDS}s"
}
# memcheck on every edge shape (150 s); racecheck on RACE_CASES (all 14 ran 102 s in session 20 and past 300 s
# since, two ran 24 s in session 21; 300 s)
memcheck_ws() { sanitize_ws memcheck 150 ""; }
racecheck_ws() { sanitize_ws racecheck 300; }
layer_tests() { # bindir until
    for t in layer_api gpu_layer; do
        [ $SECONDS -gt $2 ] && return
        REQUIRE_GPU=1 timeout 40 $1/$t --test-threads=1 > $OUT/$t.log 2>&1
        echo "== $1/$t rc $? at ${SECONDS}s"; grep -E "test result|panicked" $OUT/$t.log | head -3
    done
}
# `gpu_watch LABEL` starts logging the GPU's SM clock, temperature, power and throttle reasons every 100 ms;
# `gpu_watch_stop` ends it, prints the SM clock's and power's spread, and appends the samples, each line
# starting with LABEL, to $OUT/smi-all.csv (one file: the device returns only so many files). Why: the same build
# measured 1.76x and 1.92x on two H100s (sessions 23-24), and the profiled per-kernel times ran up to 19% over
# the unprofiled pass: whether clocks differ between the phases of a bench run (ours, then torch's) is unknown.
gpu_watch() {
    GPU_WATCH_LABEL=$1; GPU_WATCH_FILE=${TMPDIR:-/tmp}/smi-$1.csv
    nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv,noheader,nounits -lms 100 > $GPU_WATCH_FILE 2>&1 &
    GPU_WATCH_PID=$!
}
gpu_watch_stop() {
    kill $GPU_WATCH_PID 2>/dev/null; wait $GPU_WATCH_PID 2>/dev/null
    python3 - "$GPU_WATCH_FILE" <<'PY'
import sys, statistics as st
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") >= 4]
busy = [r for r in rows if r[3].replace(".", "", 1).isdigit() and float(r[3]) > 200]
if not busy: print("   gpu_watch: no busy samples"); sys.exit()
clk, temp, pw = ([float(r[i]) for r in busy] for i in (1, 2, 3))
q = lambda v: f"{min(v):.0f}/{st.median(v):.0f}/{max(v):.0f}"
print(f"   gpu_watch {sys.argv[1].split('/')[-1]}: {len(busy)} busy samples (>200 W) of {len(rows)}; SM MHz min/median/max {q(clk)}, temp C {q(temp)}, W {q(pw)}")
PY
    sed "s/^/$GPU_WATCH_LABEL, /" "$GPU_WATCH_FILE" >> $OUT/smi-all.csv
}
# `bench_round PRESET HEAT_MS LABEL` runs bench-gpu against the PyTorch baseline (main's build, the
# environment's settings) into $OUT/bench-LABEL.log and prints the summary. HEAT_MS > 0 heats both sides that
# long before each timed phase (`--heat-ms`, the baseline through the heated wrapper, with joules per pass);
# 0 gives the burst after the warm-up, the shared baseline's own measurement.
cli_gpu_tests() { # the command-line GPU tests with REQUIRE_GPU=1 (`run --device cuda` candidates through `check`)
    for t in cli_gpu cli_gpu_fast; do
        MOE_ORACLE_BIN=.gpu/bin/moe-oracle REQUIRE_GPU=1 timeout 120 .gpu/bin/$t --test-threads=1 > $OUT/$t.log 2>&1
        echo "== $t rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/$t.log | cut -c1-300 | head -8
    done
}
bench_round() { # preset heat_ms label (BENCH_EXTRA: more bench-gpu arguments, e.g. --kernel-energy-ms 1000)
    local script=.gpu/bench/torch_moe_heated.py
    [ $2 -eq 0 ] && script=.gpu/bench/torch_moe_baseline.py
    timeout 200 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --reps 10 --check-tokens 1 \
        --check-wgrad 32 --heat-ms $2 --baseline $script ${BENCH_EXTRA:-} > "$OUT/bench-$3.log" 2>&1
    echo "== $3 ($1, --heat-ms $2 ${BENCH_EXTRA:-}) rc $? at ${SECONDS}s"
    grep -E "^fast|heat|energy|oracle|sum of the|^\| torch|speedup|^  [a-z(]|memory" "$OUT/bench-$3.log" | grep -v route | cut -c1-170 | head -60
    grep '^baseline.*{' "$OUT/bench-$3.log" | sed 's/"gpu".*//' | cut -c1-150
}
# `baselines UNTIL LABEL` runs bench_round for both presets, each only if the script has run at most UNTIL
# seconds, into $OUT/bench-LABEL-PRESET.log. Both sides heated for BASELINE_HEAT ms first (default 3000, the
# power-capped steady state: session 27 found it steadier than the burst after the warm-up, and lower);
# BASELINE_HEAT=0 gives the burst.
baselines() { # until label
    for p in qwen3-30b-a3b qwen3-235b-a22b; do
        [ $SECONDS -gt $1 ] && break
        bench_round $p ${BASELINE_HEAT:-3000} "$2-$p"
    done
}
# `ncu_235b KERNEL TIMEOUT LABEL` profiles two launches of persistent GEMM KERNEL (e.g. ws_rows_bmn) in one 235b
# forward+backward (SpeedOfLight, MemoryWorkloadAnalysis) into $OUT/prof.ncu-rep and prints the memory lines.
ncu_235b() { # kernel timeout label
    local ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
    timeout $2 $ncu -k regex:"^$1\$" --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis -f -o $OUT/prof \
        .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/ncu.log 2>&1
    echo "== ncu 235b $3 rc $? at ${SECONDS}s"
    $ncu -i $OUT/prof.ncu-rep --page details 2>&1 | grep -E "$1|Duration|DRAM Throughput|L2 Hit Rate|L1/TEX Hit|Memory Throughput|Mem Busy|Max Bandwidth|Compute \(SM\)" | head -24
}
# `h200_burst UNTIL LABEL`: on an H200 (the issue's card) only, the burst rounds of both presets against the
# shared baseline (`baselines` with BASELINE_HEAT=0, the issue's own method); on another card, a line saying so.
h200_burst() {
    case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
        *H200*) BASELINE_HEAT=0 baselines $1 $2 ;;
        *) echo "not an H200: no burst rounds" ;;
    esac
}
# ncu with its default clock control (the same locked clock for every profile of a call).
ncu_bin() { command -v ncu || ls /usr/local/cuda/bin/ncu; }
# `ncu_cublas M N K REP LOG NCU_OPTION...`: ncu on cuBLAS's kernel for a dense bf16 M x N x K GEMM through
# torch (the third of four launches, after the warm-up), into REP.ncu-rep, ncu's output into LOG.
ncu_cublas() {
    local py=/tmp/mm-$1x$2x$3.py
    printf 'import torch\na = torch.randn(%d, %d, device="cuda", dtype=torch.bfloat16)\nb = torch.randn(%d, %d, device="cuda", dtype=torch.bfloat16)\nfor _ in range(4):\n    c = a @ b\ntorch.cuda.synchronize()\n' \
        $1 $3 $3 $2 > $py
    timeout 120 $(ncu_bin) -k regex:nvjet --launch-skip 2 --launch-count 1 "${@:6}" -f -o $4 python3 $py > $5 2>&1
    echo "== ncu cuBLAS $1 x $2 x $3 rc $? at ${SECONDS}s"
}
# `ncu_summary REP TXT`: REP.ncu-rep's details page into TXT, and its clock, cycles, throughputs, issue and
# launch lines printed.
ncu_summary() {
    $(ncu_bin) -i $1.ncu-rep --page details > $2 2>&1
    echo "== $(basename $1)"
    grep -E "^  [a-z_]|Duration|SM Frequency|Elapsed Cycles|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Warp Cycles Per Issued|Registers Per Thread|Block Size|Grid Size|Cluster Size|Shared Memory Configuration Size|Dynamic Shared Memory Per Block|L2 Hit Rate|Mem Busy|Max Bandwidth|Tensor is the highest" $2 | head -70
}
