#!/usr/bin/env bash
# ThreadSanitizer run of the concurrency tests: builds bspa and the C tests with
# -fsanitize=thread (gcc; OpenMP off, since libgomp is not instrumented) and runs the
# tests that share one pool between threads. Any data race report fails the run.
#   bash scripts/tsan.sh [BUILD_DIR=build-tsan] [CTEST_REGEX=stress|prefix_cache|pool]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-tsan}
regex=${2:-'stress|prefix_cache|pool'}
start=$(date +%s)
flags="-fsanitize=thread -g -O1"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBSPA_CUDA=OFF -DBSPA_OPENMP=OFF \
  -DBSPA_BUILD_BENCH=OFF -DBSPA_BUILD_EXAMPLES=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" || exit 1
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4"
(cd "$build" && ctest --output-on-failure -R "$regex" --timeout 900)
rc=$?
echo "tsan: total $(( $(date +%s) - start )) s (rc $rc)"
exit $rc
