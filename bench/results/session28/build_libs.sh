#!/usr/bin/env bash
# Rebuilds call D's carried folder, .device/s28 (git-ignored), from the repository: the
# libraries `landed` (main's kernels since 2c98422), `stamp` (landed +
# decode_phase_stamps.diff), `lateq` (branch wip/s28-late-q's decode.cuh), `mrel` (branch
# wip/s28-merge-release's decode.cuh and sm80_primitives.cuh) and `both` (the two branches
# merged), main's bench programs and demo, and the shared libraries the device image lacks
# (bench/device_libs.sh). Run from the repository root on a clean tree (~15 min on two
# cores); it leaves the tree as it found it. Its diff and branches were made against
# 6d21745's kernels (main has moved since: lateq and the cluster merge, session 29), so run
# it from a checkout of 6d21745 with this script and bench/device_libs.sh copied in.
#   bash bench/results/session28/build_libs.sh [BUILD_DIR=build-s28]
set -euo pipefail
source bench/device_libs.sh .device/s28 "${1:-build-s28}"
device_lib landed
files="kernels/cuda/decode.cuh kernels/cuda/sm80_primitives.cuh"
restore() { git checkout -q HEAD -- $files; }
trap restore EXIT
git apply bench/results/session28/decode_phase_stamps.diff
device_lib stamp
restore
git checkout -q wip/s28-late-q -- kernels/cuda/decode.cuh
device_lib lateq
restore
git checkout -q wip/s28-merge-release -- $files
device_lib mrel
restore
git diff HEAD wip/s28-late-q -- kernels/cuda/decode.cuh | git apply
git diff HEAD wip/s28-merge-release -- $files | git apply
device_lib both
