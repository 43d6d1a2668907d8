#!/usr/bin/env bash
# Session 14: s14a (WS_DYNAMIC correctness and A/B, no cycle counts) then s14b (ncu L2 hit rates) in one call.
S14A_CLOCKS_UNTIL=0 bash kernels/tools/sessions/s14a.sh
SECONDS_BEFORE=$SECONDS
S14B_UNTIL=$((430 - SECONDS_BEFORE)) bash kernels/tools/sessions/s14b.sh
