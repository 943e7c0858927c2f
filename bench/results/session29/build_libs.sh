#!/usr/bin/env bash
# Rebuilds call F's carried folder, .device/s29 (git-ignored), from the repository: the
# libraries `clus` (main's kernels) and `plan8` (main with branch wip/s29-min-split-8's
# kMinSplitTiles 8), main's bench programs and demo, and the shared libraries the device
# image lacks (bench/device_libs.sh). Run from the repository root on a clean tree (~10 min
# on two cores); it leaves the tree as it found it.
#   bash bench/results/session29/build_libs.sh [BUILD_DIR=build-s29]
set -euo pipefail
source bench/device_libs.sh .device/s29 "${1:-build-s29}"
device_lib clus
file=kernels/decode_split_plan.hpp
trap 'git checkout -q HEAD -- $file' EXIT
git checkout -q wip/s29-min-split-8 -- $file
device_lib plan8
