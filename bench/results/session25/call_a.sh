#!/usr/bin/env bash
# Session 25's call A (~9 min; carry [".device/s24", ".device/s25"]): the wgmma e4m3
# decode-tile probe (bench/probes/wgmma_e4m3_decode_tile.cu, built here for sm_90a; seconds),
# then session 24's call A unchanged (bench/results/session24/call_a.sh).
set -uo pipefail
mkdir -p $OUT
timeout 60 .device/s25/probe_wgmma_e4m3_decode 2>&1 | tee $OUT/probe_wgmma_e4m3_decode.txt
echo "probe rc=${PIPESTATUS[0]}"
bash bench/results/session24/call_a.sh
