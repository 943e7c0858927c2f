#!/usr/bin/env bash
# Builds bspa and runs every test suite: Criterion C tests (CTest), pytest, cargo test,
# go test. GPU tests skip cleanly without a GPU. Usage: bash scripts/test.sh [build-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build}
jobs=$(nproc)

bash scripts/deps.sh || exit 1

declare -a summary=()
failed=0
record() { # name status
  summary+=("$(printf '%-28s %s' "$1" "$2")")
  [ "$2" = "passed" ] || failed=1
}

step() { # name command...
  local name=$1; shift
  echo "==> $name"
  if "$@"; then record "$name" passed; else record "$name" FAILED; fi
}

step "configure + build" bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX='$root/$build/install' >'$build.configure.log' 2>&1 || { cat '$build.configure.log'; exit 1; }; cmake --build '$build' -j $jobs && cmake --install '$build' >/dev/null"
step "C tests (ctest)" bash -c "cd '$build' && ctest --output-on-failure -j $jobs"
if [ -x bindings/test_all.sh ] || [ -f bindings/test_all.sh ]; then
  step "bindings (pytest, cargo, go)" bash bindings/test_all.sh "$root/$build" "$root/$build/install"
fi
if [ -f scripts/sanitize.sh ]; then
  step "ASan+UBSan C tests" bash scripts/sanitize.sh "$build-asan"
fi

echo
echo "== summary =="
printf '%s\n' "${summary[@]}"
exit $failed
