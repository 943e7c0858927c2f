#!/usr/bin/env bash
# ThreadSanitizer run of the concurrency tests: builds libbspa with -fsanitize=thread (clang:
# gcc instruments the ifunc resolver of target_clones, which then runs before TSan is
# initialised and crashes at load; OpenMP off, since libgomp is not instrumented), then builds the tests that share one pool
# between threads against a tiny Criterion stand-in (libcriterion itself crashes under
# TSan; see tests/sanitizers/criterion_shim) and runs them. The tests link the library's
# objects statically: with the shared TSan runtime, libstdc++'s initialisers run before
# TSan's and crash (-shared-libsan only lets the .so itself link). Any data race fails the run.
#   bash scripts/tsan.sh [BUILD_DIR=build-tsan] [TESTS="test_stress_threads test_prefix_cache test_pool test_events"]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-tsan}
tests=${2:-test_stress_threads test_prefix_cache test_pool test_events}
start=$(date +%s)
flags="-fsanitize=thread -g -O1"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBSPA_CUDA=OFF -DBSPA_OPENMP=OFF \
  -DBSPA_BUILD_TESTS=OFF -DBSPA_BUILD_BENCH=OFF -DBSPA_BUILD_EXAMPLES=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread -shared-libsan" \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target bspa || exit 1
rm -f "$build/libbspa_tsan.a"
# libbspa's objects: one OBJECT library per layer (cmake/layers.cmake).
ar rcs "$build/libbspa_tsan.a" $(find "$build"/{common,cache,kernels,capi}/CMakeFiles/bspa_*.dir -name '*.o') || exit 1
dlpack=$(grep -E '^DLPACK_INCLUDE_DIR:' "$build/CMakeCache.txt" | cut -d= -f2)

export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
rc=0
for t in $tests; do
  clang++ $flags -x c -std=gnu99 -Wall -Itests/sanitizers/criterion_shim -Itests/c -Icapi/include ${dlpack:+-I$dlpack} \
    -DBSPA_KEY_BITS=128 "tests/c/$t.c" tests/c/support.c tests/c/reference.c tests/sanitizers/criterion_shim/runner.c \
    -x none -o "$build/$t" "$build/libbspa_tsan.a" $(pkg-config --libs libxxhash) -lpthread -lm -ldl || { rc=1; continue; }
  echo "== $t (ThreadSanitizer)"
  t0=$(date +%s)
  "$build/$t" || rc=1
  echo "   $(( $(date +%s) - t0 )) s"
done
echo "tsan: total $(( $(date +%s) - start )) s (rc $rc)"
exit $rc
