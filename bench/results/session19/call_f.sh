#!/usr/bin/env bash
# Session 19's call F (issue 20, ~2.5 min, for an H200): v28 (narrowx.so.3.xz, the landed
# decode's kernels, SASS identical) against main before it (.device/s18/main.so.3.xz):
# bench_gpu_check on v28, then bench_decode e4m3 and bf16 at pages 64 and 16, alternating,
# two rounds. Call E measured the same on an H100.
set -uo pipefail
D=.device/s17; B=$D/d/build; R=/tmp/resf; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main narrowx; do
  mkdir -p /tmp/lib$lib; for l in libgomp.so.1 libxxhash.so.0 libsimdjson.so.14; do cp $B/$l /tmp/lib$lib/; done
done
xz -dc .device/s18/main.so.3.xz > /tmp/libmain/libbspa.so.3
xz -dc .device/s19/narrowx.so.3.xz > /tmp/libnarrowx/libbspa.so.3
LD_LIBRARY_PATH=/tmp/libnarrowx timeout 100 $B/bench/bench_gpu_check > $R/check_narrowx.log 2>&1; echo "check (v28) rc=$? $(tail -1 $R/check_narrowx.log)"; grep FAIL $R/check_narrowx.log | head -4
tar czf $OUT/resf.tgz -C /tmp resf
for round in 1 2; do
  for kv in fp8 bf16; do
    for lib in main narrowx; do
      log=$R/decode_${lib}_${kv}_r$round
      LD_LIBRARY_PATH=/tmp/lib$lib timeout 40 $B/bench/bench_decode --pages 64,16 $( [ $kv = fp8 ] && echo --kv fp8 ) --json $log.json > $log.log 2>&1
      echo "== decode $lib $kv r$round rc=$?"; awk '$2 ~ /^(64|16)$/ && ($3 == "sparse" || $3 == "dense") {printf "%s %s %s %s | ", $1, $2, $3, $4} END {print ""}' $log.log
    done
  done
  tar czf $OUT/resf.tgz -C /tmp resf
done
t done
