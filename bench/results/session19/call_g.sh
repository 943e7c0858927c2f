#!/usr/bin/env bash
# Session 19's call G (~1.5 min): the narrow tile's S^T in two accumulator chains (odd
# k-steps apart: 4 dependent mma instead of 8 before the softmax; chains.so.3.xz) against
# v28 (narrowx.so.3.xz): bench_gpu_check on chains, then bench_decode e4m3 at pages 64 and
# 16, alternating, two rounds. Prediction: 0-5% on the latency-bound cases (64 x 8191
# sparse, batch 1), nothing elsewhere.
set -uo pipefail
D=.device/s17; B=$D/d/build; R=/tmp/resg; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in narrowx chains; do
  mkdir -p /tmp/lib$lib; for l in libgomp.so.1 libxxhash.so.0 libsimdjson.so.14; do cp $B/$l /tmp/lib$lib/; done
  xz -dc .device/s19/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3
done
LD_LIBRARY_PATH=/tmp/libchains timeout 100 $B/bench/bench_gpu_check > $R/check_chains.log 2>&1; echo "check (chains) rc=$? $(tail -1 $R/check_chains.log)"; grep FAIL $R/check_chains.log | head -4
tar czf $OUT/resg.tgz -C /tmp resg
for round in 1 2; do
  for lib in narrowx chains; do
    log=$R/decode_${lib}_fp8_r$round
    LD_LIBRARY_PATH=/tmp/lib$lib timeout 40 $B/bench/bench_decode --pages 64,16 --kv fp8 --json $log.json > $log.log 2>&1
    echo "== decode $lib fp8 r$round rc=$?"; awk '$2 ~ /^(64|16)$/ && ($3 == "sparse" || $3 == "dense") {printf "%s %s %s %s | ", $1, $2, $3, $4} END {print ""}' $log.log
  done
  tar czf $OUT/resg.tgz -C /tmp resg
done
