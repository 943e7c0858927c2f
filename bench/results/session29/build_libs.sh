#!/usr/bin/env bash
# Rebuilds call F's carried folder, .device/s29 (git-ignored), from the repository: the
# libraries `clus` (main's kernels) and `plan8` (main with branch wip/s29-min-split-8's
# kMinSplitTiles 8), main's bench programs and demo, and the shared libraries the device
# image lacks. Run from the repository root on a clean tree (~10 min on two cores); it
# leaves the tree as it found it.
#   bash bench/results/session29/build_libs.sh [BUILD_DIR=build-s29]
set -euo pipefail
build=${1:-build-s29}
out=.device/s29
[ -z "$(git status --porcelain -- kernels)" ] || { echo "kernels/ has changes: commit or stash them first"; exit 1; }
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$build" -G Ninja -DBSPA_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DBSPA_CUDA_ARCHS=90a >/dev/null
mkdir -p "$out/bin/bench" "$out/sys"
lib() {  # lib NAME: the current tree's library as NAME.so.3.xz
  ninja -C "$build" bspa >/dev/null
  xz -T0 -6 -c "$build/libbspa.so.3" > "$out/$1.so.3.xz"
  echo "built $out/$1.so.3.xz"
}
ninja -C "$build" >/dev/null  # the library, the bench programs, the demo
lib clus
cp "$build"/bench/{bench_decode,bench_gpu_check,bench_fp8_check,bench_step,bench_prefill} "$out/bin/bench/"
cp "$build/examples/demo/bspa-demo" "$out/bin/"
cp -L /lib/x86_64-linux-gnu/{libsimdjson.so.14,libxxhash.so.0,libgomp.so.1} "$out/sys/"
file=kernels/decode_split_plan.hpp
trap 'git checkout -q HEAD -- $file' EXIT
git checkout -q wip/s29-min-split-8 -- $file
lib plan8
