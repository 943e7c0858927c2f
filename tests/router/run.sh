#!/usr/bin/env bash
# bspa's KV cache events against NVIDIA Dynamo's real KV router (tests/router/
# test_dynamo_router.py). Makes a venv with ai-dynamo-runtime 1.6.1 (about 75 MB from PyPI,
# kept in BUILD_DIR for later runs), then runs the test in a network namespace of its own
# with only loopback up: Dynamo's servers bind 0.0.0.0 and its planes default to the
# machine's address.
#
#   bash tests/router/run.sh BUILD_DIR BSPA_SITE_PACKAGES
#
# It runs twice when BUILD_DIR has the C publisher (examples/events/libbspa_kv_publisher.so,
# built where libzmq is found): with the Python binding's publisher, then with the C one.
# BSPA_SITE_PACKAGES holds the installed bspa Python package (bindings/test_all.sh passes
# its venv's). Exit 0 passed, 1 failed, 77 skipped (no venv, no network namespace): a skip
# says why and never counts as a pass.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath -m "${1:?usage: run.sh BUILD_DIR BSPA_SITE_PACKAGES}")
bspa_site=${2:?usage: run.sh BUILD_DIR BSPA_SITE_PACKAGES}
venv=$build/router-venv
skip() { echo "SKIP: Dynamo router test: $*"; exit 77; }

if ! "$venv/bin/python" -c "import dynamo.llm, zmq, msgpack, msgspec" 2>/dev/null; then
  rm -rf "$venv"
  # --system-site-packages: numpy comes from the system, as in the bindings venv.
  python3 -m venv --system-site-packages "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed"
  timeout 300 "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      ai-dynamo-runtime==1.6.1 pyzmq msgpack msgspec >"$build/router-venv.log" 2>&1 ||
    skip "pip install ai-dynamo-runtime==1.6.1 pyzmq msgpack msgspec failed (no PyPI?): see $build/router-venv.log"
fi
unshare -n true 2>/dev/null || skip "unshare -n is not permitted here (needs root or user namespaces)"

export PYTHONPATH="$bspa_site${PYTHONPATH:+:$PYTHONPATH}"
export DYN_TCP_RPC_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 \
       DYN_SYSTEM_HOST=127.0.0.1 BSPA_ROUTER_TEST_LOG="$build/router-indexer.log"
run() { timeout 240 unshare -n sh -c 'ip link set lo up && exec "$0" tests/router/test_dynamo_router.py' "$venv/bin/python"; }
run || exit 1
# Again through the C publisher over libzmq (examples/events), where it was built.
c_publisher=$build/examples/events/libbspa_kv_publisher.so
if [ -e "$c_publisher" ]; then
  BSPA_ROUTER_C_PUBLISHER=$c_publisher run || exit 1
else
  echo "router test: $c_publisher not built (no libzmq): the C publisher is not checked against Dynamo"
fi
