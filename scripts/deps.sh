#!/usr/bin/env bash
# Installs what building and testing bspa needs on a fresh Debian 12 machine
# (apt as root, pip for the Python tools). Safe to run again: it skips what is there.
set -euo pipefail

# The Rust crate bspa's one dependency, half (f16/bf16), is Debian's librust-half-dev
# (bindings/rust/.cargo/config.toml points cargo at /usr/share/cargo/registry; bspa-sys ships
# its bindings and needs nothing). `bindgen` (the tool)
# with the libclang it loads (libclang1-14) is for CI's check that they match bspa.h.
# cargo, rustfmt and clippy come with the machine's Rust toolchain (rustup's, in ~/.cargo/bin);
# where they are missing, Debian's rustfmt and rust-clippy are installed (below). clang-format-14:
# the C/C++/CUDA formatting check (scripts/format.sh). libzmq3-dev: the C KV event
# publisher example (examples/events) and its end-to-end CTest test; without it they are
# not built. libcli11-dev and nlohmann-json3-dev (header-only): the flags of the demo and the
# benchmarks and the demo's JSON report; libsimdjson-dev: the Mooncake trace reader (examples/trace).
apt_packages=(cmake ninja-build pkg-config g++ libomp-dev libxxhash-dev libdlpack-dev libcriterion-dev
              swig golang-go bindgen libclang1-14 clang libclang-rt-14-dev libzmq3-dev
              libcli11-dev nlohmann-json3-dev libsimdjson-dev clang-format-14 librust-half-dev)
missing=()
# A machine without a Rust toolchain gets Debian's (1.63); rustup's, where present, comes first.
command -v cargo >/dev/null 2>&1 || apt_packages+=(cargo rustc)
# Python: venv, pip and the headers the SWIG module builds against, where the interpreter
# lacks them (Debian's python3 ships them as separate packages; pyenv's has them).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || apt_packages+=(python3-venv)
python3 -m pip --version >/dev/null 2>&1 || apt_packages+=(python3-pip)
python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
  apt_packages+=(python3-dev)
# Debian's own interpreter refuses pip installs outside a venv (PEP 668): its numpy and
# pytest come from apt instead (the bindings' tests make venvs of their own).
externally_managed=0
python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")))' &&
  externally_managed=1 && apt_packages+=(python3-numpy python3-pytest)
# Rust's formatter and linter, where the toolchain has none (Debian's are older: 1.63).
cargo fmt --version >/dev/null 2>&1 || apt_packages+=(rustfmt)
cargo clippy --version >/dev/null 2>&1 || apt_packages+=(rust-clippy)
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$externally_managed" = 0 ]; then
  python3 -m pip install -q --disable-pip-version-check numpy pytest scikit-build-core swig 2>&1 | grep -v "already satisfied" || true
fi
