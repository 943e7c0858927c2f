#!/usr/bin/env bash
# Rebuilds call D's carried folder, .device/s28 (git-ignored), from the repository: the
# libraries `landed` (main's kernels since 2c98422), `stamp` (landed +
# decode_phase_stamps.diff), `lateq` (branch wip/s28-late-q's decode.cuh), `mrel` (branch
# wip/s28-merge-release's decode.cuh and sm80_primitives.cuh) and `both` (the two branches
# merged), main's bench programs and demo, and the shared libraries the device image lacks.
# Run from the repository root on a clean tree (~15 min on two cores); it leaves the tree as
# it found it.
#   bash bench/results/session28/build_libs.sh [BUILD_DIR=build-s28]
set -euo pipefail
build=${1:-build-s28}
out=.device/s28
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
lib landed
cp "$build"/bench/{bench_decode,bench_gpu_check,bench_fp8_check,bench_step,bench_prefill} "$out/bin/bench/"
cp "$build/examples/demo/bspa-demo" "$out/bin/"
cp -L /lib/x86_64-linux-gnu/{libsimdjson.so.14,libxxhash.so.0,libgomp.so.1} "$out/sys/"
files="kernels/cuda/decode.cuh kernels/cuda/sm80_primitives.cuh"
restore() { git checkout -q HEAD -- $files; }
trap restore EXIT
git apply bench/results/session28/decode_phase_stamps.diff
lib stamp
restore
git checkout -q wip/s28-late-q -- kernels/cuda/decode.cuh
lib lateq
restore
git checkout -q wip/s28-merge-release -- $files
lib mrel
restore
git diff HEAD wip/s28-late-q -- kernels/cuda/decode.cuh | git apply
git diff HEAD wip/s28-merge-release -- $files | git apply
lib both
