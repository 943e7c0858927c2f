#!/usr/bin/env bash
# Formats the sources: C, C++ and CUDA with clang-format-14 (.clang-format; Debian 12's
# clang-format-14), Rust with rustfmt (bindings/rust/bspa/rustfmt.toml; `cargo fmt`), Go with
# gofmt. Generated and vendored files are left alone (third_party/, bspa-sys's bindings.rs,
# which bindgen writes and CI compares with the header), and so is the public header
# capi/include/bspa/bspa.h: its hand layout is its documentation, and bindgen copies its
# comments into bindings.rs (a reflow there would change the generated bindings).
#   bash scripts/format.sh            format in place
#   bash scripts/format.sh --check    change nothing; list what is not formatted, exit 1 if any
set -uo pipefail
cd "$(dirname "$0")/.."
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
clang_format=${CLANG_FORMAT:-clang-format-14}
rc=0
need() { command -v "$1" >/dev/null || { echo "format: $1 not found (bash scripts/deps.sh installs it)" >&2; exit 1; }; }
need "$clang_format"; need gofmt; need cargo

mapfile -t c_files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh' |
                       grep -v -e '^third_party/' -e '^capi/include/bspa/bspa\.h$')
mapfile -t go_files < <(git ls-files '*.go')

if ((check)); then
  bad=()
  for f in "${c_files[@]}"; do
    "$clang_format" --style=file "$f" | cmp -s "$f" - || bad+=("$f")
  done
  if ((${#bad[@]})); then
    printf 'format: not clang-formatted: %s\n' "${bad[@]}"
    rc=1
  fi
  (cd bindings/rust && cargo fmt --all --check -- -l) | sed 's|^|format: not rustfmt-formatted: |'
  ((PIPESTATUS[0])) && rc=1
  unformatted=$(gofmt -l "${go_files[@]}")
  if [ -n "$unformatted" ]; then
    printf 'format: not gofmt-formatted: %s\n' $unformatted
    rc=1
  fi
  if ((rc)); then
    echo "format: run bash scripts/format.sh (clang-format $("$clang_format" --version | grep -oE '[0-9]+\.[0-9.]+' | head -1), $(rustfmt --version))"
  else
    echo "format: ${#c_files[@]} C/C++/CUDA, $(git ls-files 'bindings/rust/*.rs' | wc -l) Rust and ${#go_files[@]} Go files are formatted"
  fi
  exit $rc
fi

"$clang_format" --style=file -i "${c_files[@]}" || rc=1
(cd bindings/rust && cargo fmt --all) || rc=1
gofmt -w "${go_files[@]}" || rc=1
exit $rc
