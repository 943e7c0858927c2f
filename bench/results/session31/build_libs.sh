#!/usr/bin/env bash
# Fills .device/s31 (git-ignored) for call C: main's library as `main` (session 30's
# .device/s30/main.so.3.xz, the same kernels, capi and cache as main at f4f2c7f) and the
# mixed share's (wip/s31-mixed-share for call C; main since bc9bd0c for call D) as `share`, with that tree's
# bench programs and demo. Run from the repository root on the branch:
#   bash bench/results/session31/build_libs.sh [BUILD_DIR=build-s31]
set -euo pipefail
source bench/device_libs.sh .device/s31 "${1:-build-s31}"
device_lib share
cp .device/s30/main.so.3.xz .device/s31/main.so.3.xz
