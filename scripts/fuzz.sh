#!/usr/bin/env bash
# Builds the libFuzzer harness of the C ABI (tests/fuzz/fuzz_capi.cpp) against the library
# compiled with clang, ASan, UBSan and coverage, fuzzes for SECONDS on one core, and reports
# executions and crashes. Crash inputs land in BUILD/fuzz-artifacts/; add the fixed ones to
# tests/fuzz/corpus/ (the CTest test fuzz_corpus_replay replays that directory).
#
#   bash scripts/fuzz.sh SECONDS [BUILD_DIR=build-fuzz]
#   bash scripts/fuzz.sh 0          # only build, then replay the corpus once
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: scripts/fuzz.sh SECONDS [BUILD_DIR]}
build=${2:-build-fuzz}

# Sanitized shared objects built by clang leave the ASan runtime undefined; -shared-libsan
# only lets the .so link. The harness links the same objects statically (below).
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBSPA_CUDA=OFF -DBSPA_SANITIZE=ON -DBSPA_OPENMP=OFF \
  -DBSPA_BUILD_TESTS=OFF -DBSPA_BUILD_BENCH=OFF -DBSPA_BUILD_EXAMPLES=OFF \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
  -DCMAKE_SHARED_LINKER_FLAGS=-shared-libsan >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
ninja -C "$build" -j 2 bspa || exit 1
rm -f "$build/libbspa_fuzz.a"
# libbspa's objects: one OBJECT library per layer (cmake/layers.cmake).
ar rcs "$build/libbspa_fuzz.a" $(find "$build"/{common,cache,kernels,capi}/CMakeFiles/bspa_*.dir -name '*.o') || exit 1
clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Icapi/include tests/fuzz/fuzz_capi.cpp -o "$build/fuzz_capi" "$build/libbspa_fuzz.a" \
  $(pkg-config --libs libxxhash) -lpthread || exit 1

export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
corpus=tests/fuzz/corpus
work="$build/fuzz-corpus"      # grows while fuzzing; the checked-in corpus stays small
artifacts="$build/fuzz-artifacts"
mkdir -p "$work" "$artifacts"

if [ "$seconds" -le 0 ]; then
  exec "$build/fuzz_capi" -runs=0 "$corpus"
fi

log="$build/fuzz.log"
echo "fuzzing for $seconds s (log: $log, crashes: $artifacts/)"
start=$(date +%s)
# -fork keeps fuzzing past a crash (each crash is saved); -jobs=1 / one worker: one core.
nice -n 10 "$build/fuzz_capi" -fork=1 -ignore_crashes=1 -max_total_time="$seconds" -max_len=1024 \
  -rss_limit_mb=2048 -timeout=20 -artifact_prefix="$artifacts/" "$work" "$corpus" >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))

# libFuzzer's fork mode prints "#N: cov: .. exec/s: .. oom/timeout/crash: a/b/c time: ..";
# plain mode prints "#N DONE" / "stat::number_of_executed_units: N".
execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
stat_execs=$(grep -oE 'number_of_executed_units: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
[ -n "$stat_execs" ] && execs=$stat_execs
crashes=$(ls "$artifacts" 2>/dev/null | grep -cE '^(crash|leak|timeout|oom)-')
cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
otc=$(grep -oE 'oom/timeout/crash: [0-9/]+' "$log" | tail -1)
echo "fuzz: ${elapsed} s, ${execs:-0} executions, ${cov:-cov: ?}, corpus $(ls "$work" | wc -l) inputs, ${otc:-oom/timeout/crash: ?}, artifacts: $crashes (rc $rc)"
[ "$crashes" -eq 0 ]
