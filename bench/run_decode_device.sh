#!/usr/bin/env bash
# One call on the GPU machine for the decode path: the correctness sweep (bench_gpu_check:
# decode rows, prefill rows, mixed launches, the prefix identity), compute-sanitizer on its
# small subset, bench_decode with the decode kernel and without it (BSPA_CUDA_DECODE=0:
# the prefill tiling the decode rows took before), torch's decode baselines, and an A/B of
# bench_prefill against a base library (the prefill must not change).
#   bash bench/run_decode_device.sh BUILD_DIR [BASE_LIB_DIR] [stages...]
# Stages (default all): check sanitize decode torch ab fp8 (a plot when decode and torch ran);
# decode_ab (not in the default) times bench_decode over BASE_LIB_DIR's library and BUILD's
# in turn (DECODE_AB_ONLY: the cases, default 1x32767 256x2047). BUILD_DIR holds binaries built on
# the development machine (static cudart; carry it); BASE_LIB_DIR a libbspa.so.N of the
# same ABI to A/B bench_prefill against. Logs and JSON go to $OUT (or bench/results/local),
# a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=$1; shift
BASE=""
if [ $# -gt 0 ] && [ -d "$1" ]; then BASE=$1; shift; fi
STAGES=${*:-check sanitize decode torch ab fp8}
OUT=${OUT:-bench/results/local}
mkdir -p "$OUT"
has() { [[ " $STAGES " == *" $1 "* ]]; }
export LD_LIBRARY_PATH="$PWD/$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
COMMIT=${BSPA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
summary=()
T() { timeout "${STEP_TIMEOUT:-300}" "$@"; }
if has check; then
  for path in sm90 sm80; do  # the prefill family the mixed cases use; the decode kernel is the same
    BSPA_CUDA_PATH=$path T "$BUILD/bench/bench_gpu_check" >"$OUT/check_$path.log" 2>&1; rc=$?
    grep -E "FAIL" "$OUT/check_$path.log" | head -20
    summary+=("check ($path prefill): rc=$rc, $(tail -1 "$OUT/check_$path.log")")
  done
  # Mixed launches with the two kernels one after the other (no overlap): they must still
  # keep to their own parts of the workspace (before 2026-12 they did not: NaN outputs).
  BSPA_CUDA_OVERLAP=0 T "$BUILD/bench/bench_gpu_check" --quick >"$OUT/check_overlap0.log" 2>&1; rc=$?
  grep -E "FAIL" "$OUT/check_overlap0.log" | head -20
  summary+=("check (BSPA_CUDA_OVERLAP=0, --quick): rc=$rc, $(tail -1 "$OUT/check_overlap0.log")")
fi
if has sanitize; then
  OUT="$OUT/sanitize" T bash scripts/gpu_sanitize.sh "$BUILD" >"$OUT/sanitize.log" 2>&1; rc=$?
  summary+=("sanitize: rc=$rc, $(grep -cE 'rc=0 ' "$OUT/sanitize.log") clean of $(grep -cE ' rc=[0-9]+ ' "$OUT/sanitize.log")")
fi
if has decode; then
  T "$BUILD/bench/bench_decode" --json "$OUT/bench_decode.json" --commit "$COMMIT" >"$OUT/bench_decode.log" 2>&1
  summary+=("bench_decode: rc=$?")
  if [ "${DECODE_EXTRA:-1}" = 1 ]; then  # the prefill-tiling path and speculative rows (DECODE_EXTRA=0: skip)
    BSPA_CUDA_DECODE=0 T "$BUILD/bench/bench_decode" --json "$OUT/bench_decode_prefill_path.json" --commit "$COMMIT" \
      >"$OUT/bench_decode_prefill_path.log" 2>&1
    summary+=("bench_decode (BSPA_CUDA_DECODE=0): rc=$?")
    T "$BUILD/bench/bench_decode" --q 4 --pages 64 --json "$OUT/bench_decode_q4.json" --commit "$COMMIT" >"$OUT/bench_decode_q4.log" 2>&1
    summary+=("bench_decode q=4: rc=$?")
  fi
fi
if has fp8; then
  # e4m3 pages against bf16 pages in the same call: decode (bench_decode's cases) and prefill.
  T "$BUILD/bench/bench_decode" --kv fp8 --json "$OUT/bench_decode_fp8.json" --commit "$COMMIT" >"$OUT/bench_decode_fp8.log" 2>&1
  summary+=("bench_decode --kv fp8: rc=$?")
  has decode || { T "$BUILD/bench/bench_decode" --json "$OUT/bench_decode.json" --commit "$COMMIT" >"$OUT/bench_decode.log" 2>&1
                  summary+=("bench_decode: rc=$?"); }
  for kv in $([ "${FP8_PREFILL:-1}" = 1 ] && echo bf16 fp8); do  # FP8_PREFILL=0: decode only
    T "$BUILD/bench/bench_prefill" --no-sweep $([ $kv = fp8 ] && echo --kv fp8) --json "$OUT/bench_prefill_$kv.json" \
      --commit "$COMMIT" >"$OUT/bench_prefill_$kv.log" 2>&1
    summary+=("bench_prefill ($kv pages): rc=$?")
  done
fi
if has decode_ab && [ -n "$BASE" ]; then
  for round in 1 2; do
    for lib in "$BASE" "$BUILD"; do
      for c in ${DECODE_AB_ONLY:-1x32767 256x2047}; do
        LD_LIBRARY_PATH="$PWD/$lib" T "$BUILD/bench/bench_decode" --only "$c" >"$OUT/decode_ab_$(basename "$lib")_${c}_$round.log" 2>&1
        echo "== $lib $c round $round rc=$?" >>"$OUT/decode_ab.log"
        grep -E "^$c " "$OUT/decode_ab_$(basename "$lib")_${c}_$round.log" >>"$OUT/decode_ab.log"
      done
    done
  done
  summary+=("decode_ab: done")
fi
if has torch; then
  PYTHONUNBUFFERED=1 T python3 bench/compare_torch_decode.py --json "$OUT/compare_torch_decode.json" --budget 200 \
    >"$OUT/torch_decode.log" 2>&1
  summary+=("torch decode: rc=$?")
fi
if has torch && has decode; then
  python3 bench/plot_decode.py "$OUT/bench_decode.json" "$OUT/compare_torch_decode.json" --out "$OUT/h200_decode.png" \
    >"$OUT/plot.log" 2>&1
  summary+=("plot: rc=$?")
fi
if has ab && [ -n "$BASE" ]; then
  OUT="$OUT/ab" ROUNDS=2 CHECK=none T bash bench/ab_libs.sh "$BUILD" "$BASE" "$BUILD" >"$OUT/ab.log" 2>&1
  summary+=("ab: rc=$?")
fi
echo "=================================================================="
has check && grep -hE "^(ok|FAIL)" "$OUT"/check_sm90.log 2>/dev/null | awk '{print $1}' | sort | uniq -c
has torch && grep -vE "^(case|copy)" "$OUT/torch_decode.log" | head -40 && grep -E "^copy" "$OUT/torch_decode.log"
has decode && for f in bench_decode bench_decode_prefill_path bench_decode_q4; do [ -f "$OUT/$f.log" ] && echo "-- $f" && cat "$OUT/$f.log"; done
has ab && [ -f "$OUT/ab.log" ] && cat "$OUT/ab.log"
has decode_ab && [ -f "$OUT/decode_ab.log" ] && cat "$OUT/decode_ab.log"
if has fp8; then
  echo "-- bench_decode --kv fp8"; cat "$OUT/bench_decode_fp8.log"
  for kv in bf16 fp8; do [ -f "$OUT/bench_prefill_$kv.log" ] && echo "-- bench_prefill ($kv pages)" && grep -E "S=" "$OUT/bench_prefill_$kv.log"; done
fi
printf '%s\n' "${summary[@]}"
