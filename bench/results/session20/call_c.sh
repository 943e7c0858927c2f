#!/usr/bin/env bash
# Session 20's call C (~5 min; issues 25 and 20, whatever card comes): the landed library
# (718d313's kernels, var2.so.3.xz) alone: bench_prefill (full timing, no sweep) at pages
# 16, 32 and 64 with JSON, then 16/16/64 at 16 and 64; bench_decode e4m3 and bf16 at pages
# 64 and 16 (issue 20's ratios of main's decode on this card).
set -uo pipefail
D=.device/s20; R=/tmp/resc; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
mkdir -p /tmp/libland; cp $D/sys/* /tmp/libland/; xz -dc $D/var2.so.3.xz > /tmp/libland/libbspa.so.3
export LD_LIBRARY_PATH=/tmp/libland
B=$D/bin
for kv in fp8 bf16; do
  t "decode $kv"; timeout 120 $B/bench/bench_decode --pages 64,16 $( [ $kv = fp8 ] && echo --kv fp8 ) --json $R/decode_$kv.json > $R/decode_$kv.log 2>&1
  awk '$2 ~ /^[0-9]+$/ && ($3 == "sparse" || $3 == "dense") {printf "%s %s %s %s | ", $1, $2, $3, $4} END {print ""}' $R/decode_$kv.log
done
tar czf $OUT/resc.tgz -C /tmp resc
for ps in 16 32 64; do
  t "prefill p$ps"; timeout 200 $B/bench/bench_prefill --no-sweep --page-size $ps --commit 718d313 --json $R/prefill_p$ps.json > $R/prefill_p$ps.log 2>&1
  grep -E "(sparse|dense) +S=" $R/prefill_p$ps.log | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-1)} END {print ""}'
  tar czf $OUT/resc.tgz -C /tmp resc
done
for ps in 16 64; do
  t "prefill d64 p$ps"; timeout 120 $B/bench/bench_prefill --no-sweep --quick --shape 16/16/64 --page-size $ps --commit 718d313 --json $R/prefill_d64_p$ps.json > $R/prefill_d64_p$ps.log 2>&1
  grep -E "(sparse|dense) +S=" $R/prefill_d64_p$ps.log | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-1)} END {print ""}'
  tar czf $OUT/resc.tgz -C /tmp resc
done
t done
