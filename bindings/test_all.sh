#!/usr/bin/env bash
# Builds and tests the Python, Rust and Go bindings against an installed libbspa, and runs
# each binding's two-turn example. Prints one line per binding with its test counts.
#
#   bash bindings/test_all.sh BUILD_DIR PREFIX      (or BSPA_BUILD_DIR / BSPA_PREFIX)
#
# BUILD_DIR receives the bindings' build outputs (a venv, cargo's target dir); PREFIX is
# where `cmake --install` put libbspa (lib/libbspa.so, lib/pkgconfig/bspa.pc, include/).
# Needs: python3 with pip (numpy, pytest, scikit-build-core, swig from PyPI; the fresh-venv
# install downloads them through pip's build isolation, and needs libxxhash-dev), cargo and
# rustfmt (bspa-sys has no dependencies; bspa needs `half`, Debian's librust-half-dev, which
# scripts/deps.sh installs; checking bspa-sys's committed bindings against bspa.h needs
# Debian's `bindgen` tool and libclang), Go >= 1.19 (golang-go), pkg-config.
# BSPA_BINDINGS="python rust go" picks a subset. Run from scripts/test.sh, its lines go into
# that script's summary too.
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

. "$root/scripts/suites.sh"
[ -n "${BSPA_SUITES_FILE:-}" ] || { suites_init "$build/bindings.suites"; : >"$BSPA_SUITES_FILE"; }
first=$(( $(wc -l <"$BSPA_SUITES_FILE") + 1 ))

# The self-contained install: a fresh venv with nothing in it, then `pip install
# ./bindings/python`, which builds libbspa from this checkout and bundles it (build tools
# from PyPI through pip's build isolation). The CPU backend by default, to keep the test
# short; BSPA_PY_CUDA=AUTO builds CUDA too when nvcc is found. No LD_LIBRARY_PATH: the
# module finds the bundled library through its RPATH ($ORIGIN).
python_bundled_tests() {
  local venv=$build/bindings-python-fresh
  rm -rf "$venv" && python3 -m venv "$venv" || return 1
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -C cmake.define.BSPA_CUDA="${BSPA_PY_CUDA:-OFF}" -C build-dir="$build/bindings-python-bundled" \
    ./bindings/python || return 1
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest || return 1
  (cd "$build" && env -u LD_LIBRARY_PATH "$venv/bin/python" -c "if True:
    import bspa, os
    print('bundled:', bspa.build_info())
    lib = os.path.join(os.path.dirname(bspa.__file__), 'libbspa.so.%d' % bspa.ABI_VERSION)
    assert os.path.isfile(lib), lib + ' is not in the package'") || return 1
  (cd "$build" && env -u LD_LIBRARY_PATH "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$root/bindings/python/tests") || return 1
  env -u LD_LIBRARY_PATH "$venv/bin/python" bindings/python/examples/two_turns.py
}

# Against the installed libbspa (BSPA_PYTHON_LIBBSPA=installed, found through
# CMAKE_PREFIX_PATH); the router test uses this venv.
python_tests() {
  local venv=$build/bindings-python-venv
  # The venv sees the system's numpy/pytest/scikit-build-core/swig; the package goes into it only.
  [ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv" || return 1
  local isolation=()
  if "$venv/bin/python" -c "import scikit_build_core, swig" 2>/dev/null; then
    isolation=(--no-build-isolation)  # use the installed build tools: no download
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${isolation[@]}" \
    -C cmake.define.BSPA_PYTHON_LIBBSPA=installed -C build-dir="$build/bindings-python-build" \
    ./bindings/python || return 1
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

# KV pages between two processes through NIXL (a venv of its own, from PyPI).
nixl_test() {
  local site
  site=$("$build/bindings-python-venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") || return 1
  [ -d "$site/bspa" ] || { echo "bspa is not installed in $site" >&2; return 1; }
  bash tests/nixl/run.sh "$build" "$site"
}

rust_tests() {
  command -v cargo >/dev/null || { echo "cargo not found" >&2; return 1; }
  export CARGO_TARGET_DIR=$build/bindings-rust-target
  # --offline: the one crate dependency, half, comes from Debian (bindings/rust/.cargo/config.toml),
  # so nothing is fetched. The committed bindings must be what bspa.h gives now (regenerated
  # through bspa-sys's `bindgen` feature).
  bash bindings/rust/regen_bindings.sh --check || return 1
  (cd bindings/rust && cargo test -q --offline && cargo run -q --offline --example two_turns) || return 1
  # Lints: any clippy warning fails the suite.
  (cd bindings/rust && cargo clippy -q --offline --all-targets -- -D warnings)
}

go_tests() {
  command -v go >/dev/null || { echo "go not found" >&2; return 1; }
  export GOFLAGS=-mod=mod GOPROXY=off GOCACHE=${GOCACHE:-$build/bindings-go-cache}
  # -v: one "--- PASS" line per test, which the summary counts. -race: the binding's
  # concurrency (pools, batches, transfers from several goroutines) under Go's race detector.
  (cd bindings/go && go vet ./... && go test -race -count=1 -v ./... && go run ./examples/two_turns) || return 1
  # A program outside the repository importing the package by its module path.
  bash tests/install/go_consumer.sh "$build/bindings-go-consumer"
}

for binding in ${BSPA_BINDINGS:-python rust go}; do
  case $binding in
    python) suite "python (fresh venv, bundled lib)" pytest python_bundled_tests
            suite "python (pip install, pytest)" pytest python_tests
            [ "${BSPA_ROUTER_TEST:-1}" = 1 ] && suite "python: KV events vs Dynamo" script router_test
            [ "${BSPA_NIXL_TEST:-1}" = 1 ] && suite "python: KV transfer over NIXL" script nixl_test ;;
    rust) suite "rust (bindings check, cargo test)" cargo rust_tests ;;
    go) suite "go (go test -race)" go go_tests ;;
    *) echo "bindings: unknown binding $binding" >&2; suites_record "bindings: $binding (unknown)" FAILED ;;
  esac
done
echo "== bindings =="
suites_summary "$first" bindings
