#!/usr/bin/env bash
# KV pages between two processes through NIXL (tests/nixl/test_nixl_transfer.py, with
# examples/nixl/kv_move.py as both engines). Makes a venv with NIXL 1.5.1 from PyPI
# (nixl and nixl-cu12, about 70 MB, installed with --no-deps: nixl 1.5.2 requires variant
# packages that do not exist, and torch is not needed; kept in BUILD_DIR for later runs),
# then runs the test in a network namespace of its own with only loopback up (UCX over TCP
# on 127.0.0.1; NIXL's listeners bind every address).
#
#   bash tests/nixl/run.sh BUILD_DIR BSPA_SITE_PACKAGES
#
# BSPA_SITE_PACKAGES holds the installed bspa Python package (bindings/test_all.sh passes
# its venv's). Exit 0 passed, 1 failed, 77 skipped (no NIXL wheel, no network namespace): a
# skip says why and never counts as a pass.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath -m "${1:?usage: run.sh BUILD_DIR BSPA_SITE_PACKAGES}")
bspa_site=${2:?usage: run.sh BUILD_DIR BSPA_SITE_PACKAGES}
venv=$build/nixl-venv
skip() { echo "SKIP: NIXL KV transfer test: $*"; exit 77; }

if ! "$venv/bin/python" -c "from nixl._api import nixl_agent" 2>/dev/null; then
  rm -rf "$venv"
  # --system-site-packages: numpy comes from the system, as in the bindings venv.
  python3 -m venv --system-site-packages "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed"
  timeout 300 "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
      nixl==1.5.1 nixl-cu12==1.5.1 >"$build/nixl-venv.log" 2>&1 ||
    skip "pip install --no-deps nixl==1.5.1 nixl-cu12==1.5.1 failed (no PyPI?): see $build/nixl-venv.log"
  "$venv/bin/python" -c "from nixl._api import nixl_agent" >>"$build/nixl-venv.log" 2>&1 ||
    skip "the NIXL wheel installed but does not import: see $build/nixl-venv.log"
fi
unshare -n true 2>/dev/null || skip "unshare -n is not permitted here (needs root or user namespaces)"

export PYTHONPATH="$bspa_site${PYTHONPATH:+:$PYTHONPATH}"
# NIXL's own log lines (connection retries while the peer's listener starts) go to the logs.
timeout 600 unshare -n sh -c 'ip link set lo up && exec "$0" tests/nixl/test_nixl_transfer.py' "$venv/bin/python"
