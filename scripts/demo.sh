#!/usr/bin/env bash
# Builds bspa and runs the demo (the main job): a serving-workload replay through the
# prefix cache and the prefill, on the GPU when one is present, else the CPU backend.
# Usage: bash scripts/demo.sh [demo arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc)" --target bspa-demo
exec ./build/examples/demo/bspa-demo "$@"
