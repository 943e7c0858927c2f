#!/usr/bin/env bash
# One call on the GPU machine: checks, sanitizers, timings and baselines in one go.
#   bash bench/run_device.sh [BUILD_DIR] [stages...]
# BUILD_DIR (default build-cuda) holds binaries built on the development machine
# (static cudart; carry it); without it, the script configures and builds there (needs
# the DLPack and xxHash headers: put them under .device/include and carry .device).
# Stages (default all but ncu, plot): check ctest sanitize ncu bench sweep torch plot. ctest runs the
# Criterion GPU test when it was built (its shared libraries carried in BUILD/devlib). Logs and JSON go to $OUT
# (or bench/results/local), and a short table is printed last.
# BSPA_PATHS="sm90 sm80" runs check, sanitize and bench once per kernel family (BSPA_CUDA_PATH
# forced; logs and JSON suffixed _sm90, _sm80); default "auto" (by compute capability, no
# suffix). STEP_TIMEOUT (seconds, default 600) bounds each program run; TORCH_BUDGET (default 240 s) and
# TORCH_ARGS (e.g. --quick) shape the torch stage; plot draws this run's bench and torch JSON.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}; shift || true
STAGES=${*:-check ctest sanitize bench sweep torch}
OUT=${OUT:-bench/results/local}
mkdir -p "$OUT"
has() { [[ " $STAGES " == *" $1 "* ]]; }
if [ ! -x "$BUILD/bench/bench_prefill" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DBSPA_CUDA=ON -DBSPA_BUILD_TESTS=OFF -DCMAKE_PREFIX_PATH="$PWD/.device" \
    -DCMAKE_INCLUDE_PATH="$PWD/.device/include" >"$OUT/build.log" 2>&1 && ninja -C "$BUILD" >>"$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log"; exit 2; }
fi
export LD_LIBRARY_PATH="$PWD/$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
COMMIT=${BSPA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}  # the copy on the GPU machine may not be a git checkout
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
summary=()
T() { timeout "${STEP_TIMEOUT:-600}" "$@"; }
for path in ${BSPA_PATHS:-auto}; do
if [ "$path" = auto ]; then unset BSPA_CUDA_PATH; sfx=""; else export BSPA_CUDA_PATH=$path; sfx="_$path"; fi
if has check; then
  T "$BUILD/bench/bench_gpu_check" >"$OUT/check$sfx.log" 2>&1; rc=$?
  grep -E "FAIL" "$OUT/check$sfx.log" | head -20
  summary+=("check$sfx: rc=$rc, $(tail -1 "$OUT/check$sfx.log")")
fi
if has ctest && [ -x "$BUILD/tests/test_gpu_prefill" ]; then  # the Criterion GPU test (libs carried in devlib/)
  LD_LIBRARY_PATH="$PWD/$BUILD/devlib:$LD_LIBRARY_PATH" "$BUILD/tests/test_gpu_prefill" --jobs 1 >"$OUT/ctest$sfx.log" 2>&1; rc=$?
  summary+=("test_gpu_prefill$sfx: rc=$rc, $(grep -E 'Synthesis' "$OUT/ctest$sfx.log" | tail -1)")
fi
if has sanitize; then  # one way to run compute-sanitizer: scripts/gpu_sanitize.sh (all four tools)
  OUT="$OUT/sanitize$sfx" T bash scripts/gpu_sanitize.sh "$BUILD" >"$OUT/sanitize$sfx.log" 2>&1; rc=$?
  summary+=("sanitize$sfx: rc=$rc, $(grep -cE 'rc=0 ' "$OUT/sanitize$sfx.log") clean of $(grep -cE ' rc=[0-9]+ ' "$OUT/sanitize$sfx.log") (logs in sanitize$sfx/)")
fi
if has ncu; then  # stall reasons of one sparse 32k launch (after the warm-up launches)
  ncu --clock-control none --kernel-name regex:prefill_sm --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$BUILD/bench/bench_prefill" --only "32k C=0" >"$OUT/ncu$sfx.log" 2>&1; rc=$?
  summary+=("ncu$sfx: rc=$rc")
fi
if has bench; then
  args=(--json "$OUT/bench_prefill$sfx.json" --commit "$COMMIT")
  has sweep || args+=(--no-sweep)
  # The SM clock and power every 200 ms while the bench runs: sustained clocks differ from
  # machine to machine (power), which is most of the run-to-run spread of one binary.
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 200 >"$OUT/clocks$sfx.csv" 2>/dev/null &
  smi=$!
  T "$BUILD/bench/bench_prefill" "${args[@]}" >"$OUT/bench$sfx.log" 2>&1; rc=$?
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  clocks=$(awk -F', *' '$1 > 1000 { n++; c += $1; p += $2 } END { if (n) printf "%.0f MHz, %.0f W mean over %d busy samples", c / n, p / n, n }' "$OUT/clocks$sfx.csv")
  summary+=("bench$sfx: rc=$rc (SM clock ${clocks:-not sampled})")
fi
done
unset BSPA_CUDA_PATH
if has torch; then
  PYTHONUNBUFFERED=1 timeout $(( ${TORCH_BUDGET:-240} + 90 )) python3 bench/compare_torch.py ${TORCH_ARGS:-} \
    --json "$OUT/compare_torch.json" --budget "${TORCH_BUDGET:-240}" \
    >"$OUT/torch.log" 2>&1; rc=$?
  summary+=("torch: rc=$rc")
fi
if has plot; then  # PNG of this run's JSON (default path) and torch baselines (matplotlib is on the GPU machine)
  bj="$OUT/bench_prefill.json"; [ -f "$bj" ] || bj=$(ls "$OUT"/bench_prefill*.json 2>/dev/null | head -1)
  tj="$OUT/compare_torch.json"; [ -f "$tj" ] || tj=bench/results/h200_compare_torch.json
  python3 bench/plot_results.py "$bj" --torch "$tj" --out "$OUT/h200.png" >"$OUT/plot.log" 2>&1; summary+=("plot: rc=$? ($bj)")
fi
echo "=================================================================="
has torch && tail -12 "$OUT/torch.log"
for path in ${BSPA_PATHS:-auto}; do
  sfx=$([ "$path" = auto ] || echo "_$path")
  has bench && { grep -A40 "^hit-rate" "$OUT/bench$sfx.log" | head -30; tail -12 "$OUT/bench$sfx.log"; }
done
printf '%s\n' "${summary[@]}"
