#!/usr/bin/env bash
# compute-sanitizer over the GPU check program, on a machine with a GPU:
# memcheck (with leak check), racecheck (shared-memory hazards), initcheck (reads of
# uninitialised device memory) and synccheck, each on the small subset
# (bench_gpu_check --tiny), plus memcheck over the Criterion GPU test when it was built.
#   bash scripts/gpu_sanitize.sh [BUILD_DIR=build-cuda] [tools...]
# BUILD_DIR holds the binaries (see bench/run_device.sh for building or carrying them).
# Logs go to $OUT (default bench/results/local); exit status 0 only if every tool is clean.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}; shift || true
TOOLS=${*:-memcheck racecheck initcheck synccheck}
OUT=${OUT:-bench/results/local}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
check="$BUILD/bench/bench_gpu_check"
[ -x "$check" ] || { echo "gpu_sanitize: $check not found (build with -DBSPA_CUDA=ON first)"; exit 2; }
command -v compute-sanitizer >/dev/null || { echo "gpu_sanitize: compute-sanitizer not on PATH"; exit 2; }

failed=0
summary=()
run_tool() { # tool log program args...
  local tool=$1 log=$2; shift 2
  local extra=()
  case $tool in
    memcheck) extra=(--leak-check full) ;;
    racecheck) extra=(--racecheck-report hazard) ;;
    initcheck) extra=() ;;  # the default; "--track-unused-memory no" is parsed as the program by compute-sanitizer 2025+
  esac
  local start=$(date +%s)
  compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 3 --target-processes all "$@" >"$log" 2>&1
  local rc=$?
  local line
  line=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$log" | tail -1)
  summary+=("$(printf '%-10s %-28s rc=%d  %s  (%d s)' "$tool" "$(basename "$1")" "$rc" "$line" $(( $(date +%s) - start )))")
  if [ $rc -ne 0 ]; then
    failed=1
    grep -m 20 -E '^========= (Invalid|Race|Uninitialized|Barrier|Program hit|  at |Error)' "$log"
  fi
}

for tool in $TOOLS; do
  run_tool "$tool" "$OUT/sanitize_$tool.log" "$check" --tiny
done
# The Criterion GPU test forks per test; --target-processes all follows the children.
if [ -x "$BUILD/tests/test_gpu_prefill" ] && [[ " $TOOLS " == *" memcheck "* ]]; then
  LD_LIBRARY_PATH="$PWD/$BUILD/devlib:$LD_LIBRARY_PATH" \
    run_tool memcheck "$OUT/sanitize_memcheck_ctest.log" "$BUILD/tests/test_gpu_prefill" --jobs 1
fi
echo "== compute-sanitizer =="
printf '%s\n' "${summary[@]}"
exit $failed
