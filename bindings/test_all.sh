#!/usr/bin/env bash
# Builds and tests the Python, Rust and Go bindings against an installed libbspa, and runs
# each binding's two-turn example.
#
#   bash bindings/test_all.sh BUILD_DIR PREFIX      (or BSPA_BUILD_DIR / BSPA_PREFIX)
#
# BUILD_DIR receives the bindings' build outputs (a venv, cargo's target dir); PREFIX is
# where `cmake --install` put libbspa (lib/libbspa.so, lib/pkgconfig/bspa.pc, include/).
# Needs: python3 with pip (numpy, pytest, scikit-build-core, swig from PyPI), cargo with
# Debian's bindgen crates in /usr/share/cargo/registry (librust-bindgen-dev, libclang),
# Go >= 1.19 (golang-go), pkg-config. BSPA_BINDINGS="python rust go" picks a subset.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(realpath -m "${1:-${BSPA_BUILD_DIR:-build}}")
prefix=$(realpath -m "${2:-${BSPA_PREFIX:-$build/install}}")
libdir=$prefix/lib
[ -e "$libdir/libbspa.so" ] || libdir=$(dirname "$(ls "$prefix"/lib*/libbspa.so 2>/dev/null | head -1)")
if [ ! -e "$libdir/libbspa.so" ]; then
  echo "bindings: no libbspa.so under $prefix (run cmake --install first)" >&2
  exit 1
fi
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMAKE_PREFIX_PATH="$prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
mkdir -p "$build"

declare -a summary=()
failed=0
step() { # name command...  (exit status 77 = skipped, with the reason printed; not a pass)
  local name=$1; shift
  echo "==> bindings: $name"
  "$@"
  local rc=$?
  if [ $rc = 0 ]; then summary+=("$(printf '  %-34s passed' "$name")")
  elif [ $rc = 77 ]; then summary+=("$(printf '  %-34s SKIPPED (see above)' "$name")")
  else summary+=("$(printf '  %-34s FAILED' "$name")"); failed=1; fi
}

python_tests() {
  local venv=$build/bindings-python-venv
  # The venv sees the system's numpy/pytest/scikit-build-core/swig; the package goes into it only.
  [ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv" || return 1
  local isolation=()
  if "$venv/bin/python" -c "import scikit_build_core, swig" 2>/dev/null; then
    isolation=(--no-build-isolation)  # use the installed build tools: no download
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${isolation[@]}" \
    --config-settings=build-dir="$build/bindings-python-build" ./bindings/python || return 1
  (cd "$build" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests") || return 1
  "$venv/bin/python" bindings/python/examples/two_turns.py
}

# KV cache events against NVIDIA Dynamo's KV router (a venv of its own, from PyPI).
router_test() {
  local site
  site=$("$build/bindings-python-venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") || return 1
  [ -d "$site/bspa" ] || { echo "bspa is not installed in $site" >&2; return 1; }
  bash tests/router/run.sh "$build" "$site"
}

cargo_args=(--offline)
if [ -d /usr/share/cargo/registry ] && [ "${BSPA_CARGO_DEBIAN:-1}" = 1 ]; then
  # Debian's vendored crates (bindgen 0.60 and its dependencies) instead of crates.io.
  cargo_args+=(--config 'source.crates-io.replace-with="debian"'
               --config 'source.debian.directory="/usr/share/cargo/registry"')
fi
rust_tests() {
  command -v cargo >/dev/null || { echo "cargo not found" >&2; return 1; }
  export CARGO_TARGET_DIR=$build/bindings-rust-target
  (cd bindings/rust && cargo test -q "${cargo_args[@]}" && cargo run -q "${cargo_args[@]}" --example two_turns)
}

go_tests() {
  command -v go >/dev/null || { echo "go not found" >&2; return 1; }
  export GOFLAGS=-mod=mod GOPROXY=off GOCACHE=${GOCACHE:-$build/bindings-go-cache}
  (cd bindings/go && go vet ./... && go test -count=1 ./... && go run ./examples/two_turns) || return 1
  # A program outside the repository importing the package by its module path.
  bash tests/install/go_consumer.sh "$build/bindings-go-consumer"
}

for binding in ${BSPA_BINDINGS:-python rust go}; do
  case $binding in
    python) step "python (pip install, pytest)" python_tests
            [ "${BSPA_ROUTER_TEST:-1}" = 1 ] && step "python: KV events vs Dynamo" router_test ;;
    rust) step "rust (cargo test)" rust_tests ;;
    go) step "go (go test)" go_tests ;;
    *) echo "bindings: unknown binding $binding" >&2; failed=1 ;;
  esac
done
echo "== bindings =="
printf '%s\n' "${summary[@]}"
exit $failed
