#!/usr/bin/env bash
# Session 25's call A (~10 min; carry [".device/s24", ".device/s25"]): the wgmma e4m3
# decode-tile probe and its loop (bench/probes/wgmma_e4m3_decode_{tile,loop}.cu, built here for
# sm_90a; seconds),
# then session 24's call A unchanged (bench/results/session24/call_a.sh).
set -uo pipefail
mkdir -p $OUT
timeout 60 .device/s25/probe_wgmma_e4m3_decode 2>&1 | tee $OUT/probe_wgmma_e4m3_decode.txt
echo "probe rc=${PIPESTATUS[0]}"
timeout 120 .device/s25/probe_wgmma_e4m3_loop 2>&1 | tee $OUT/probe_wgmma_e4m3_loop.txt
echo "loop probe rc=${PIPESTATUS[0]}"
bash bench/results/session24/call_a.sh
