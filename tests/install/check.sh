#!/usr/bin/env bash
# The installed library works for consumers with no environment variables (README,
# "Installing"). Two parts:
#
#  1. Any prefix: `cmake --install` into a scratch prefix; a CMake consumer
#     (find_package(bspa), CMake's build RPATH) and a pkg-config consumer linked with
#     -Wl,-rpath,$(pkg-config --variable=libdir bspa) build and run with no LD_LIBRARY_PATH.
#  2. A system install: `cmake --install --prefix /usr/local` and `ldconfig`, then a C
#     program through plain `pkg-config`, a cargo crate depending on bindings/rust/bspa and a
#     Go program importing the module by its path build and run with neither PKG_CONFIG_PATH
#     nor LD_LIBRARY_PATH nor any DLPack package (/usr/include/dlpack is hidden). It runs in
#     a private mount namespace (unshare -m): /usr/local/{lib,include} and /etc (for
#     ldconfig's cache) are replaced by scratch copies there, so the machine's own /usr/local is not touched.
#     Without unshare (no root, no CAP_SYS_ADMIN) this part reports SKIPPED.
#
# Usage: check.sh BUILD_DIR SCRATCH_DIR [PARTS]   (PARTS: "prefix system", the default)
set -euo pipefail
build=$(realpath "$1") scratch=$(realpath -m "$2") parts=${3:-prefix system}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
consumer=$root/tests/consumer
mkdir -p "$scratch"
clean_env=(env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH -u CMAKE_PREFIX_PATH -u LIBRARY_PATH -u CPATH
           -u C_INCLUDE_PATH -u BSPA_INCLUDE_DIR -u BSPA_LIB_DIR)

prefix_part() {
  local s=$scratch/prefix-part p=$scratch/prefix-part/prefix
  rm -rf "$s" && mkdir -p "$s"
  cmake --install "$build" --prefix "$p" >/dev/null
  "${clean_env[@]}" cmake -S "$consumer" -B "$s/cmake-consumer" -DCMAKE_PREFIX_PATH="$p" >/dev/null
  "${clean_env[@]}" cmake --build "$s/cmake-consumer" >/dev/null
  "${clean_env[@]}" "$s/cmake-consumer/consumer"
  local pc=("${clean_env[@]}" PKG_CONFIG_PATH="$p/lib/pkgconfig" pkg-config)
  "${clean_env[@]}" cc -std=c99 "$consumer/main.c" $("${pc[@]}" --cflags --libs bspa) \
    -Wl,-rpath,"$("${pc[@]}" --variable=libdir bspa)" -o "$s/pc-consumer"
  "${clean_env[@]}" "$s/pc-consumer"
  echo "install check: prefix $p: CMake and pkg-config consumers run without LD_LIBRARY_PATH"
}

# Runs inside the mount namespace (as `check.sh ... __system_inside`).
system_inside() {
  local s=$scratch/system-part
  for d in /usr/local/lib /usr/local/include; do
    mkdir -p "$s/overlay$d" "$d"
    mount --bind "$s/overlay$d" "$d"
  done
  mkdir -p "$s/empty" && mount --bind "$s/empty" /usr/include/dlpack 2>/dev/null || true
  # ldconfig replaces /etc/ld.so.cache by a rename, so the whole /etc is a scratch copy.
  cp -a /etc "$s/etc" && mount --bind "$s/etc" /etc
  [ ! -e /usr/include/dlpack/dlpack.h ] || { echo "could not hide /usr/include/dlpack" >&2; exit 1; }

  cmake --install "$build" --prefix /usr/local >/dev/null
  ldconfig
  # The listing is read whole before it is searched: `ldconfig -p | grep -q` under pipefail
  # failed whenever grep stopped at the match while ldconfig was still writing (SIGPIPE),
  # about one CI run in four.
  local listing
  listing=$(ldconfig -p)
  if ! grep -q "libbspa.so.* => /usr/local/lib/" <<<"$listing"; then
    echo "ldconfig did not list libbspa; /usr/local/lib holds:" >&2
    ls -la /usr/local/lib >&2
    exit 1
  fi

  "${clean_env[@]}" cc -std=c99 "$consumer/main.c" $("${clean_env[@]}" pkg-config --cflags --libs bspa) -o "$s/c-consumer"
  "${clean_env[@]}" "$s/c-consumer"
  local dynamic
  dynamic=$(readelf -d "$s/c-consumer")  # read whole before searching it, as above
  if grep -qi "rpath\|runpath" <<<"$dynamic"; then echo "the C consumer has an rpath" >&2; exit 1; fi
  echo "install check: system: a pkg-config C program runs (no rpath, no environment)"

  if command -v cargo >/dev/null; then
    local crate=$s/rust-consumer
    mkdir -p "$crate/src"
    cat >"$crate/Cargo.toml" <<TOML
[package]
name = "rust-consumer"
version = "0.1.0"
edition = "2021"

[dependencies]
bspa = { path = "$root/bindings/rust/bspa" }

[workspace]
TOML
    # The bspa crate's one dependency (half) comes from Debian's crate directory, as in
    # bindings/rust: a consumer names its own crate source, here the same one.
    mkdir -p "$crate/.cargo"
    cp "$root/bindings/rust/.cargo/config.toml" "$crate/.cargo/config.toml"
    cat >"$crate/src/main.rs" <<'RS'
fn main() {
    let pool = bspa::Pool::new(&bspa::PoolOptions { num_kv_heads: 2, head_dim: 64, ..Default::default() })
        .expect("a default CPU pool");
    println!("rust consumer: bspa {}, {} pages", bspa::version(), pool.stats().unwrap().pages_total);
}
RS
    (cd "$crate" && "${clean_env[@]}" CARGO_TARGET_DIR="$s/rust-target" cargo build -q --offline && \
      "${clean_env[@]}" "$s/rust-target/debug/rust-consumer")
  else
    echo "install check: system: cargo not found, the Rust consumer SKIPPED"
  fi

  if command -v go >/dev/null; then
    "${clean_env[@]}" HOME="$HOME" bash "$root/tests/install/go_consumer.sh" "$s/go"
  else
    echo "install check: system: go not found, the Go consumer SKIPPED"
  fi
  echo "install check: system install to /usr/local + ldconfig: C, Rust and Go consumers run with no environment"
}

system_part() {
  if [ "$(id -u)" -ne 0 ] || ! unshare -m --propagation private true 2>/dev/null; then
    echo "install check: system install SKIPPED (needs root and unshare -m for a private /usr/local)"
    return 0
  fi
  rm -rf "$scratch/system-part" && mkdir -p "$scratch/system-part"
  unshare -m --propagation private bash "$0" "$build" "$scratch" __system_inside
}

if [ "$parts" = __system_inside ]; then
  system_inside
  exit 0
fi
for part in $parts; do
  case $part in
    prefix) prefix_part ;;
    system) system_part ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
