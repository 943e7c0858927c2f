#!/usr/bin/env bash
# Probe of one case across libraries (bench/NOTES.md, sixth session): queued, --no-workspace
# and --idle-ms timings, then ncu duration / SM-active balance / instruction counts.
#   CASE="32k C=30k" bash bench/probe_c30k.sh BIN_DIR LIB_DIR...
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$1; shift
OUT=${OUT:-bench/results/local}; mkdir -p "$OUT"
CASE=${CASE:-32k C=30k}
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_bytes.sum,sm__cycles_elapsed.avg.per_second
for lib in "$@"; do
  n=$(basename "$lib")
  for args in "" "--no-workspace" "--idle-ms 20"; do
    r=$(LD_LIBRARY_PATH="$PWD/$lib" timeout 60 "$BIN/bench/bench_prefill" --only "$CASE" $args 2>&1 | grep -E "sparse +S=" | awk '{print $(NF-1)}')
    echo "$n [$args] $r"
  done
  LD_LIBRARY_PATH="$PWD/$lib" timeout 120 ncu --clock-control none --kernel-name regex:prefill_sm --launch-skip 3 --launch-count 1 \
    --metrics $M "$BIN/bench/bench_prefill" --only "$CASE" >"$OUT/ncu_$n.log" 2>&1
  echo "$n ncu: $(grep -E 'gpu__time|sm__cycles_active|inst_executed.sum|dram__bytes|lts__t_bytes|per_second' "$OUT/ncu_$n.log" | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done
