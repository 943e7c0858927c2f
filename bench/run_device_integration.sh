#!/usr/bin/env bash
# On a GPU machine: the end-to-end paths the kernel checks do not cover — the demo on the
# CUDA backend (prefix cache + kv write + prefill against a full recompute, bf16 and f16),
# and the Python binding's GPU test (torch tensors through __dlpack__, on torch's stream,
# against torch's own attention with the same mask).
# Usage: bash bench/run_device_integration.sh BUILD_DIR   (BUILD_DIR built with CUDA and
# installed into BUILD_DIR/install; a swig wheel in .whl/ when the machine has no SWIG; the
# H200 image has no DLPack header: copy /usr/include/dlpack into BUILD_DIR/install/include).
# Measured 2026-11-29 on the H200 with the library of commit af2196b: both demos verified, test_gpu.py 8 passed.
set -uo pipefail
build=${1:?build dir}
out=${OUT:-/tmp/out}
mkdir -p "$out"
declare -a rows=()
run() { # name command...
  local name=$1; shift
  echo "==> $name"
  if timeout "${STEP_TIMEOUT:-240}" "$@" >"$out/$name.log" 2>&1; then rows+=("$name passed"); else rows+=("$name FAILED ($?)"); fi
  tail -20 "$out/$name.log"
}

# The demo links Debian's libsimdjson (its trace reader), which the H200 image lacks: copy
# /usr/lib/x86_64-linux-gnu/libsimdjson.so.* into BUILD_DIR/devlib before carrying it.
export LD_LIBRARY_PATH=$PWD/$build:$PWD/$build/devlib:${LD_LIBRARY_PATH:-}
run demo_cuda_bf16 "$build/examples/demo/bspa-demo" --device cuda --no-progress
run demo_cuda_f16 "$build/examples/demo/bspa-demo" --device cuda --dtype f16 --no-progress --conversations 6 --system-tokens 1500

python_gpu() {
  local site=/tmp/bspa-site
  mkdir -p $site
  if ! command -v swig >/dev/null && ls .whl/swig-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target $site .whl/swig-*.whl || return 1
    export PATH=$site/bin:$PATH PYTHONPATH=$site:${PYTHONPATH:-}
  fi
  local inc
  inc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  [ -f "$inc/Python.h" ] || { echo "no Python.h in $inc: cannot build the SWIG module here"; return 2; }
  CMAKE_PREFIX_PATH=$PWD/$build/install python3 -m pip install -q --no-index --no-deps --no-build-isolation \
    --target $site ./bindings/python || return 1
  PYTHONPATH=$site:${PYTHONPATH:-} python3 -m pytest -q -p no:cacheprovider bindings/python/tests/test_gpu.py -rs
}
export -f python_gpu
run python_gpu bash -c python_gpu

echo
echo "== integration on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) =="
printf '%s\n' "${rows[@]}"
