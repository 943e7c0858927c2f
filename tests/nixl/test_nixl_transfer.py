"""KV pages between two processes through NIXL (UCX), with examples/nixl/kv_move.py as both
engines. Run by tests/nixl/run.sh inside a network namespace with only loopback up.

Each scenario starts an exporter (a prefill engine: a pool of 96 pages that computed a
prompt of 63 pages and 17 tokens, 4 layers) and an importer (a decode engine: a pool of
80 pages, fragmented by another prompt's cached pages and a live sequence) and checks what
both wrote:
  1. roundtrip: all 63 pages move in one READ; the importer's next turn hits all of them
     and its attention output is bitwise equal (sha256) to the exporter's, which computed
     the prefix itself; the exporter's pins are released (stats as before);
  2. partial overlap: the importer computed the first 20 pages itself; only the other 43
     move (bytes counted from the descriptors), and the next turn still matches bitwise;
  3. mismatched fingerprint (importer head_dim 128): refused before any reservation or
     transfer; both pools' stats as before;
  4. a failed transfer (the exporter registered only 2 of its 4 layers with NIXL, so the
     importer's READ cannot be prepared): the import aborts; the importer's stats and
     invariants are as before, nothing is published (its next turn hits nothing of it), and
     the exporter's stats are as before.
With --device cuda[:N] (a GPU machine: bf16 CUDA pools registered as NIXL VRAM, torch inputs on
the device) the same scenarios run between two processes on one GPU, plus a larger transfer
(32 layers, head_dim 128) whose bandwidth is printed.
Exit status 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "nixl" / "kv_move.py"
PAGES, TOKENS, PAGE, LAYERS, HKV, D = 63, 63 * 64 + 17, 64, 4, 2, 64
DEVICE = "cpu"  # --device: cpu (float32 pools) or cuda[:N] (bf16 pools)
PAGE_BYTES = HKV * PAGE * D * 4  # one page of one region: float32, or bf16 (set in main)
failures: list[str] = []


def expect(ok: bool, what: str) -> None:
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def run_pair(name: str, port: int, export_args: list[str], import_args: list[str]) -> tuple[dict, dict]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bspa-nixl-{name}-"))
    common = ["--tokens", str(TOKENS), "--layers", str(LAYERS), "--page-size", str(PAGE), "--device", DEVICE]
    exp_cmd = [sys.executable, str(EXAMPLE), "export", "--name", "prefill", "--port", str(port), "--peer", "decode",
               "--peer-port", str(port + 1), "--out", str(tmp / "export.json"), "--pages", "96", *common, *export_args]
    imp_cmd = [sys.executable, str(EXAMPLE), "import", "--name", "decode", "--port", str(port + 1), "--peer",
               "prefill", "--peer-port", str(port), "--out", str(tmp / "import.json"), "--pages", "80", *common,
               *import_args]
    with open(tmp / "export.log", "w") as elog, open(tmp / "import.log", "w") as ilog:
        exporter = subprocess.Popen(exp_cmd, stdout=elog, stderr=subprocess.STDOUT)
        importer = subprocess.Popen(imp_cmd, stdout=ilog, stderr=subprocess.STDOUT)
        rc_i = importer.wait(timeout=300)
        rc_e = exporter.wait(timeout=300)
    if rc_i != 0 or rc_e != 0:
        for log in ("export.log", "import.log"):
            print(f"--- {name}: {log} (last lines)")
            print("\n".join((tmp / log).read_text().splitlines()[-25:]))
        raise SystemExit(f"FAIL: scenario {name}: exporter exit {rc_e}, importer exit {rc_i} (logs in {tmp})")
    e = json.loads((tmp / "export.json").read_text())
    i = json.loads((tmp / "import.json").read_text())
    print(f"== {name}: exporter {json.dumps({k: v for k, v in e.items() if not k.startswith('stats')})}")
    print(f"== {name}: importer {json.dumps({k: v for k, v in i.items() if not k.startswith('stats')})}")
    return e, i


def device_arg() -> str:
    """--device DEVICE of the command line: cpu (the default) or cuda[:N]."""
    return sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"


def main() -> int:
    global DEVICE, PAGE_BYTES
    DEVICE = device_arg()
    if DEVICE != "cpu":
        PAGE_BYTES = HKV * PAGE * D * 2  # bf16
    # 1. The whole prefix.
    e, i = run_pair("roundtrip", 5601, [], [])
    expect(e["exported_pages"] == PAGES, f"the exporter exported {e['exported_pages']} pages, expected {PAGES}")
    expect(i["outcome"] == "committed" and i["published"] == PAGES, f"the import committed {i.get('published')} pages")
    expect(i["num_cached"] == 0 and i["reserved"] == PAGES, "the importer lacked every page")
    expect(i["moved_bytes"] == PAGES * 2 * LAYERS * PAGE_BYTES, f"moved {i['moved_bytes']} bytes")
    expect(e["next_cached"] == i["next_cached"] == PAGES * PAGE,
           f"next turn cached {e['next_cached']} (exporter) and {i['next_cached']} (importer) tokens")
    expect(e["next_digest"] == i["next_digest"], "next turn's attention output is bitwise equal")
    expect(e["stats_after_export"] == e["stats_before"], "the exporter's stats are as before once the export is done")
    if i.get("gbytes_per_s"):
        print(f"transfer: {i['moved_bytes'] / 2**20:.1f} MiB in {i['descriptors']} descriptors, "
              f"{i['transfer_seconds'] * 1e3:.1f} ms, {i['gbytes_per_s']:.2f} GB/s (fresh memory)")

    # 2. Partial overlap.
    have = 20 * PAGE + 3
    e, i = run_pair("partial", 5611, [], ["--have-tokens", str(have)])
    expect(i["outcome"] == "committed" and i["num_cached"] == 20 and i["reserved"] == PAGES - 20,
           f"the importer had {i.get('num_cached')} pages and reserved {i.get('reserved')}")
    expect(i["moved_bytes"] == (PAGES - 20) * 2 * LAYERS * PAGE_BYTES, f"moved only the missing pages' bytes "
           f"({i['moved_bytes']})")
    expect(e["next_digest"] == i["next_digest"] and i["next_cached"] == PAGES * PAGE,
           "next turn hits everything and is bitwise equal")

    # 3. Mismatched fingerprint.
    e, i = run_pair("mismatch", 5621, [], ["--head-dim", "128"])
    expect(i["outcome"] == "refused" and e["reply"]["kind"] == "refused", "a pool of another head_dim is refused")
    expect(i["moved_bytes"] == 0, "nothing moved")
    expect(i["stats_after_import"] == i["stats_before"], "the importer's stats are as before")
    expect(e["stats_after_export"] == e["stats_before"], "the exporter's stats are as before")

    # 4. A failed transfer aborts.
    e, i = run_pair("abort", 5631, ["--register-layers", "2"], [])
    expect(i["outcome"] == "aborted" and e["reply"]["kind"] == "aborted",
           f"the import aborted ({i.get('error', 'no error')})")
    expect(i["stats_after_import"] == i["stats_before"], "the importer's stats are as before after the abort")
    expect(i["next_cached"] == 0, "an aborted import published nothing")
    expect(e["stats_after_export"] == e["stats_before"], "the exporter's stats are as before")

    if DEVICE != "cpu":
        # 5. A larger prefix on the GPU: 63 pages x 32 layers x K/V, 2 KV heads x 128 dims (bf16, 126 MiB).
        big = ["--layers", "32", "--head-dim", "128"]
        e, i = run_pair("bandwidth", 5641, big, big)
        expect(i["outcome"] == "committed" and e["next_digest"] == i["next_digest"],
               "the larger prefix moved and its next turn is bitwise equal")
        if i.get("gbytes_per_s"):
            print(f"bandwidth: {i['moved_bytes'] / 2**20:.1f} MiB in {i['descriptors']} descriptors, "
                  f"{i['transfer_seconds'] * 1e3:.2f} ms, {i['gbytes_per_s']:.2f} GB/s (fresh memory, first transfer)")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("NIXL KV transfer: every check passed")
    return 0


if __name__ == "__main__":
    # Loopback only: no RDMA devices in the namespace; on a GPU, CUDA copies and IPC between
    # the two processes' device memory as well.
    os.environ.setdefault("UCX_TLS", "tcp,self,sm" if device_arg() == "cpu" else "tcp,self,sm,cuda_copy,cuda_ipc")
    sys.exit(main())
