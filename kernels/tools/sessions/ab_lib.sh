# Sourced by the session scripts (from s15a.sh on): `ab PRESET REPS LABEL "SETTINGS"` runs one interleaved A/B
# (`bench-gpu --ab`: A the environment's settings, B with SETTINGS) into $OUT/ab-LABEL.log and prints its
# summary; it skips when the script has run longer than AB_UNTIL seconds (default 430), to stay inside a call.
# `layer_tests BINDIR UNTIL` runs the layer_api and gpu_layer GPU tests of a staged build (e.g. .gpu/bin) into
# $OUT, each only if the script has run less than UNTIL seconds.
ab() { # preset reps label setting
    [ $SECONDS -gt ${AB_UNTIL:-430} ] && return
    local s=$SECONDS
    timeout 120 .gpu/bin/moe-oracle bench-gpu --preset $1 --tokens 16384 --engines ws --reps $2 --check-tokens 1 \
        --check-wgrad 16 --ab "$4" > $OUT/ab-$3.log 2>&1
    echo "=== $1 [$4] rc $? $((SECONDS - s)) s"
    grep -E "^A/B|^B/A|gemm1|wgrad|dX_rows|dA|swiglu_bwd|gemm2|^outputs|^oracle|rror" $OUT/ab-$3.log | cut -c1-150
}
layer_tests() { # bindir until
    for t in layer_api gpu_layer; do
        [ $SECONDS -gt $2 ] && return
        REQUIRE_GPU=1 timeout 40 $1/$t --test-threads=1 > $OUT/$t.log 2>&1
        echo "== $1/$t rc $? at ${SECONDS}s"; grep -E "test result|panicked" $OUT/$t.log | head -3
    done
}
