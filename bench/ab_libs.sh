#!/usr/bin/env bash
# A/B timing of library builds in one device call (the only comparison that is not
# machine-to-machine noise): bench_prefill (or, BENCH=decode, bench_decode) of BIN_DIR
# against each library directory in turn, ROUNDS times alternating, then the full
# correctness check on the first one.
#   BSPA_CUDA_PATH=sm90 bash bench/ab_libs.sh BIN_DIR LIB_DIR...
#   BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh BIN_DIR LIB_DIR...
# LIB_DIR (absolute, or relative to the repository) holds a libbspa.so.N of the same ABI (e.g. a copy of an older build's). ONLY picks bench cases
# (bench_prefill --only); ROUNDS (default 2); BENCH_ARGS adds the bench's options (e.g.
# --quick); CHECK=all runs the correctness check on every library, CHECK=none on none
# (default: the first); TAG names the logs of one of several A/Bs into the same $OUT.
# Logs (and bench_decode's JSON) go to $OUT (or bench/results/local); one line per run is
# printed: case, layout, TFLOP/s (prefill) or case, page size, layout, ms (decode).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$1; shift
OUT=${OUT:-bench/results/local}
mkdir -p "$OUT"
lib_dir() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
for round in $(seq "${ROUNDS:-2}"); do
  for lib in "$@"; do
    dir=$(lib_dir "$lib")
    log="$OUT/ab_${TAG:+${TAG}_}$(basename "$lib")_$round"
    if [ "${BENCH:-prefill}" = decode ]; then
      # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
      LD_LIBRARY_PATH="$dir" timeout 120 "$BIN/bench/bench_decode" ${BENCH_ARGS:-} --json "$log.json" >"$log.log" 2>&1
      echo "== $lib round $round rc=$?"
      awk '$2 ~ /^[0-9]+$/ && ($3 == "sparse" || $3 == "dense") {printf "%s %s %s %s | ", $1, $2, $3, $4} END {print ""}' "$log.log"
    else
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH="$dir" timeout 120 "$BIN/bench/bench_prefill" --no-sweep ${BENCH_ARGS:-} ${ONLY:+--only "$ONLY"} >"$log.log" 2>&1
      echo "== $lib round $round rc=$?"
      grep -E "(sparse|dense) +S=" "$log.log" | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-1)} END {print ""}'
    fi
  done
done
[ "${CHECK:-first}" = none ] && exit 0
for lib in "$@"; do
  dir=$(lib_dir "$lib")
  log="$OUT/check_$(basename "$lib").log"
  LD_LIBRARY_PATH="$dir" timeout 200 "$BIN/bench/bench_gpu_check" >"$log" 2>&1
  echo "check ($lib) rc=$? $(tail -1 "$log")"
  [ "${CHECK:-first}" = all ] || break
done
