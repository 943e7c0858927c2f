#!/usr/bin/env bash
# Session 18's call D: main's library after the lean decode landed (main.so.3.xz, built from
# commit.txt), with session 17's bench binaries (unchanged since): the full checks, the demo's
# graphs, the sanitizers, then bench_decode bf16 and e4m3 (pages 64 and 16) for the record.
set -uo pipefail
D=.device/s17; B=$D/d/build; R=/tmp/resd; mkdir -p $R /tmp/libnew
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for l in libgomp.so.1 libxxhash.so.0 libsimdjson.so.14; do cp $B/$l /tmp/libnew/; done
xz -dc .device/s18/main.so.3.xz > /tmp/libnew/libbspa.so.3
export LD_LIBRARY_PATH=/tmp/libnew
t check; timeout 200 $B/bench/bench_gpu_check > $R/check.log 2>&1; echo "check rc=$? $(tail -1 $R/check.log)"; grep FAIL $R/check.log | head -5
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check.log)"
t step-check; timeout 60 $B/bench/bench_step --check > $R/step_check.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check.log)"
t sanitize; OUT=$R/san timeout 150 bash scripts/gpu_sanitize.sh $B memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|ERROR SUMMARY" $R/sanitize.txt | head
t "demo graphs"; timeout 100 $B/bspa-demo --graphs > $R/demo_graphs.log 2>&1; echo "demo --graphs rc=$?"; grep -E "verified|host time|replay" $R/demo_graphs.log | head -4
t "demo fp8"; timeout 100 $B/bspa-demo --dtype fp8 > $R/demo_fp8.log 2>&1; echo "demo --dtype fp8 rc=$?"; grep -E "verified" $R/demo_fp8.log | head -2
tar czf $OUT/resd.tgz -C /tmp resd
for kv in bf16 fp8; do
  log=$R/decode_$kv
  timeout 120 $B/bench/bench_decode --pages 64,16 $( [ $kv = fp8 ] && echo --kv fp8 ) --json $log.json > $log.log 2>&1
  echo "== decode $kv rc=$?"; awk '$2 ~ /^(64|16)$/ && ($3 == "sparse" || $3 == "dense") {printf "%s %s %s %s | ", $1, $2, $3, $4} END {print ""}' $log.log
done
t done
tar czf $OUT/resd.tgz -C /tmp resd
