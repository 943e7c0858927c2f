#!/usr/bin/env bash
# Regenerates bspa-sys/src/bindings.rs, the committed Rust bindings, from the repository's
# capi/include/bspa/bspa.h, through the crate's own `bindgen` feature (its build.rs runs the
# bindgen tool with the options the file was made with). With --check it changes nothing and
# fails, printing the difference, when the committed file is not what the header gives now:
# CI runs that, so the header and the bindings cannot drift apart.
#
#   bash bindings/rust/regen_bindings.sh           # after editing bspa.h: rewrite, then commit
#   bash bindings/rust/regen_bindings.sh --check   # what bindings/test_all.sh runs
#
# Needs cargo, rustfmt (bindgen formats its output with it), Debian's `bindgen` package (or
# BINDGEN=/path/to/bindgen) and the libclang it loads; nothing else is fetched.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
mode=${1:-write}
case $mode in write|--check) ;; *) echo "usage: $0 [--check]" >&2; exit 2 ;; esac
committed=$PWD/bspa-sys/src/bindings.rs

command -v "${BINDGEN:-bindgen}" >/dev/null ||
  { echo "regen_bindings: no bindgen tool (apt-get install bindgen, or set BINDGEN)" >&2; exit 1; }
command -v rustfmt >/dev/null ||
  { echo "regen_bindings: no rustfmt; bindgen's output would not be formatted like the committed file" >&2; exit 1; }

# The build script's out_dir, from cargo's JSON messages (diagnostics still go to stderr).
messages=$(BSPA_INCLUDE_DIR=$root/capi/include cargo build --offline -q -p bspa-sys \
             --features bindgen --message-format=json-render-diagnostics)
generated=$(printf '%s\n' "$messages" | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "build-script-executed" and "bspa-sys" in m.get("package_id", ""):
        print(m["out_dir"] + "/bindings.rs")')
[ -f "$generated" ] || { echo "regen_bindings: cargo gave no generated bindings.rs" >&2; exit 1; }

if [ "$mode" = --check ]; then
  if ! diff -u "$committed" "$generated"; then
    echo "regen_bindings: bindings/rust/bspa-sys/src/bindings.rs does not match bspa.h;" \
         "run bash bindings/rust/regen_bindings.sh and commit the result" >&2
    exit 1
  fi
  echo "regen_bindings: bspa-sys/src/bindings.rs matches bspa.h"
else
  cp "$generated" "$committed"
  echo "regen_bindings: wrote bspa-sys/src/bindings.rs"
fi
