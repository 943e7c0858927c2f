#!/usr/bin/env bash
# Rebuilds call C's carried folder, .device/s30 (git-ignored), from the repository: main's
# library as `main`, main's bench programs and demo, and the shared libraries the device
# image lacks (bench/device_libs.sh). Run from the repository root (~4 min on an existing
# build directory, ~10 fresh on two cores).
#   bash bench/results/session30/build_libs.sh [BUILD_DIR=build-s30]
set -euo pipefail
source bench/device_libs.sh .device/s30 "${1:-build-s30}"
device_lib main
