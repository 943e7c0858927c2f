#!/usr/bin/env bash
# Builds bspa and its CPU tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DBSPA_SANITIZE=ON, no CUDA) and runs them with leak checking. Any report fails the run:
# everything is compiled with -fno-sanitize-recover=all (ASan and UBSan reports abort the
# process; CMakeLists.txt), and halt_on_error=1 below says the same at run time. The fuzz
# corpus replay (fuzz_corpus_replay) runs here too, so every kept input is replayed under
# both sanitizers.
#   bash scripts/sanitize.sh [BUILD_DIR=build-asan]
# Called by scripts/test.sh (and so by .ci/run) with BUILD_DIR = <build>-asan.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build-asan}
jobs=$(nproc)
start=$(date +%s)

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBSPA_SANITIZE=ON -DBSPA_CUDA=OFF \
  -DBSPA_BUILD_BENCH=OFF -DBSPA_BUILD_EXAMPLES=ON >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$jobs" || exit 1
built=$(date +%s)

# allocator_may_return_null: bad-input tests ask for petabyte pools and expect
# BSPA_ERR_OUT_OF_MEMORY, not an ASan abort. The suppressions cover only third-party
# runtime allocations (see the file).
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1
export LSAN_OPTIONS=suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizers/ubsan.supp
# Sanitizer-slowed tests honour BSPA_TEST_QUICK=1 (fewer random cases, same coverage of paths).
export BSPA_TEST_QUICK=1
# install_consumer links an uninstrumented program against the installed library, which
# ASan cannot load; it tests packaging, which the plain build covers.
(cd "$build" && ctest --output-on-failure -j "$jobs" -LE gpu -E '^install_consumer$' --timeout 600)
rc=$?
end=$(date +%s)
echo "sanitize: build $((built - start)) s, tests $((end - built)) s, total $((end - start)) s (rc $rc)"
exit $rc
