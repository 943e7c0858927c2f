#!/usr/bin/env bash
# A/B timing of library builds in one device call (the only comparison that is not
# machine-to-machine noise): bench_prefill of BIN_DIR against each library directory in
# turn, ROUNDS times alternating, then the full correctness check on the first one.
#   BSPA_CUDA_PATH=sm90 bash bench/ab_libs.sh BIN_DIR LIB_DIR... 
# LIB_DIR holds a libbspa.so.N of the same ABI (e.g. a copy of an older build's). ONLY picks bench cases
# (bench_prefill --only); ROUNDS (default 2); BENCH_ARGS adds bench_prefill options (e.g.
# --quick); CHECK=all runs the correctness check on every library, CHECK=none on none
# (default: the first).
# Logs go to $OUT (or bench/results/local); one line per run is printed: case, layout, TFLOP/s.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$1; shift
OUT=${OUT:-bench/results/local}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
for round in $(seq "${ROUNDS:-2}"); do
  for lib in "$@"; do
    log="$OUT/ab_$(basename "$lib")_$round.log"
    LD_LIBRARY_PATH="$PWD/$lib" timeout 120 "$BIN/bench/bench_prefill" --no-sweep ${BENCH_ARGS:-} ${ONLY:+--only "$ONLY"} >"$log" 2>&1
    echo "== $lib round $round rc=$?"
    grep -E "(sparse|dense) +S=" "$log" | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-1)} END {print ""}'
  done
done
[ "${CHECK:-first}" = none ] && exit 0
for lib in "$@"; do
  log="$OUT/check_$(basename "$lib").log"
  LD_LIBRARY_PATH="$PWD/$lib" timeout 200 "$BIN/bench/bench_gpu_check" >"$log" 2>&1
  echo "check ($lib) rc=$? $(tail -1 "$log")"
  [ "${CHECK:-first}" = all ] || break
done
