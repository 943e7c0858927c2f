#!/usr/bin/env bash
# Cases probed one at a time (bench/NOTES.md, sixth session): each case alone (--only, a
# cold start) with the library of LIB_DIR, then ncu's duration, SM-active balance,
# instruction and DRAM counts for one launch of it.
#   bash bench/probe_cases.sh BIN_DIR LIB_DIR "CASE" ["CASE"...]
# VARIANTS="--no-workspace|--idle-ms 20" also times each case alone with those
# bench_prefill options ("|"-separated). Logs go to $OUT (or bench/results/local).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$1; LIB=$2; shift 2
case $LIB in /*) ;; *) LIB=$PWD/$LIB ;; esac
OUT=${OUT:-bench/results/local}; mkdir -p "$OUT"
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,smsp__inst_executed.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second
export LD_LIBRARY_PATH="$LIB"
IFS='|' read -r -a variants <<< "${VARIANTS:-}"
for c in "$@"; do
  for v in "" "${variants[@]}"; do
    # shellcheck disable=SC2086  # a variant is several words
    r=$(timeout 60 "$BIN/bench/bench_prefill" --only "$c" $v 2>&1 | grep -E "sparse +S=" | awk '{print $(NF-3), $(NF-1)}')
    echo "$c [$v] | $(basename "$LIB") alone: $r"
  done
  f="$OUT/ncu_$(basename "$LIB")_$(echo "$c" | tr -c 'A-Za-z0-9' _).log"
  timeout 120 ncu --clock-control none --kernel-name regex:prefill_sm --launch-skip 3 --launch-count 1 --metrics $M \
    "$BIN/bench/bench_prefill" --only "$c" >"$f" 2>&1
  echo "$c | $(basename "$LIB") ncu: $(grep -E 'gpu__time|sm__cycles_active|inst_executed.sum|dram__bytes|per_second' "$f" | awk '{printf "%s %s; ", $1, $NF}')"
done
