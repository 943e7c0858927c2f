#!/usr/bin/env bash
# Builds bspa and runs every test suite: Criterion C tests (CTest), pytest, cargo test,
# go test, the C tests again under ASan+UBSan. GPU tests skip cleanly without a GPU.
# Prints one summary line per suite with its test counts, then a total line; exits non-zero
# when any step fails, any test fails or any suite runs no test.
#   Usage: bash scripts/test.sh [build-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build}
jobs=$(nproc)
start=$(date +%s)

bash scripts/deps.sh || exit 1

. scripts/suites.sh
suites_init "$root/$build.suites"
: >"$BSPA_SUITES_FILE"

step "configure + build" bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX='$root/$build/install' >'$build.configure.log' 2>&1 || { cat '$build.configure.log'; exit 1; }; cmake --build '$build' -j $jobs && cmake --install '$build' >/dev/null"
# Formatting is checked, never fixed, here: bash scripts/format.sh formats.
suite "format (clang-format, rustfmt, gofmt)" script bash scripts/format.sh --check
suite "C tests (ctest)" ctest bash -c "cd '$build' && ctest --output-on-failure -j $jobs"
# Each binding records its own line (python, rust, go) in the same summary file.
records=$(wc -l <"$BSPA_SUITES_FILE")
if ! bash bindings/test_all.sh "$root/$build" "$root/$build/install" &&
   [ "$(wc -l <"$BSPA_SUITES_FILE")" -eq "$records" ]; then
  suites_record "bindings" FAILED  # it stopped before running any binding's tests
fi
suite "ASan+UBSan C tests (ctest)" ctest bash scripts/sanitize.sh "$build-asan"

echo
echo "== summary (finished in $(( $(date +%s) - start )) s) =="
suites_summary
