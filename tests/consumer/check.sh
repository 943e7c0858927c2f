#!/usr/bin/env bash
# Installs the built library into a scratch prefix, then builds a consumer through
# find_package(bspa) and another through pkg-config, and runs both.
# Usage: check.sh BUILD_DIR SCRATCH_DIR
set -euo pipefail
build=$1 scratch=$2 here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$here" -B "$scratch/cmake-consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/cmake-consumer" >/dev/null
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/cmake-consumer/consumer"
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
cc -std=c99 "$here/main.c" $(pkg-config --cflags --libs bspa) -o "$scratch/pc-consumer"
LD_LIBRARY_PATH="$scratch/prefix/lib" "$scratch/pc-consumer"
