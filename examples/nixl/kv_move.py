"""Moves a cached prefix between two bspa pools in two processes with NIXL (UCX), as a
disaggregated-serving runtime would: a prefill engine computes a prompt and exports its
pages; a decode engine reserves the pages it lacks, pulls them with one prepared NIXL READ,
commits them, and its next turn hits the whole prefix.

    python examples/nixl/kv_move.py export --name prefill --port 5601 --peer decode --peer-port 5602 --out p.json &
    python examples/nixl/kv_move.py import --name decode --port 5602 --peer prefill --peer-port 5601 --out d.json

Needs the bspa Python package and NIXL (``pip install --no-deps nixl==1.5.1 nixl-cu12==1.5.1``;
no GPU needed: host memory to host memory). tests/nixl/run.sh runs it inside a network
namespace with only loopback up.

The protocol (the transport is NIXL's; bspa describes and guards the memory):
  1. Both agents start a NIXL listener, register their pool's storage (one region per
     (layer, K/V), "DRAM" for CPU pools, "VRAM" for CUDA pools) and exchange NIXL metadata
     through the listeners, fetching the peer's until check_remote_metadata says complete.
  2. Each sends "ready" once it holds the peer's metadata, and sends nothing else before it
     has received the peer's "ready" (which proves the peer holds its metadata).
  3. The exporter pins the prompt's cached pages (Pool.export_kv) and sends an offer: its
     pool memory description (with the fingerprint), the tokens, page ids and keys.
  4. The importer refuses an offer whose fingerprint differs from its pool's before anything
     is prepared; otherwise it reserves pages (Pool.import_kv; blocks it already holds are
     not moved), prepares local and remote descriptor lists that pair up index by index,
     posts one READ whose notification tells the exporter it is done, waits for it and
     commits (an error aborts: the reserved pages go back unpublished).
  5. The exporter releases its pins when the importer's notification arrives.
Both then run the next turn (the prompt plus new tokens) and write what they saw (cached
tokens, a digest of the attention output, pool stats) to --out for the caller to compare.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import numpy as np

import bspa

HQ, HKV, D = 4, 2, 64


DEVICE = "cpu"


def kv_rows(start: int, n: int, heads: int, layer: int, which: int):
    """Stand-in for a model's projections: deterministic per (position, layer, K/V/q), so
    every engine computes the same KV for the same prompt. float32 numpy arrays for a CPU
    pool; bf16 torch tensors on the device for a CUDA pool (run on an H200: tests/nixl/test_nixl_transfer.py --device cuda)."""
    i = np.arange(start * heads * D, (start + n) * heads * D, dtype=np.float64)
    rows = np.sin(i * 0.618 + 10 * layer + which).astype(np.float32).reshape(n, heads, D)
    if DEVICE == "cpu":
        return rows
    import torch
    return torch.from_numpy(rows).to(DEVICE, torch.bfloat16)


def prompt_tokens(n: int) -> np.ndarray:
    return (np.arange(n, dtype=np.int64) * 7919 % 32000).astype(np.int32)


def compute_turn(pool: bspa.Pool, layout: bspa.Layout, tokens: np.ndarray, layers: int,
                 limit: int | None = None) -> tuple[int, np.ndarray]:
    """One turn: match, append the rest (up to `limit` tokens in all), compute every layer, commit."""
    tokens = tokens[:limit] if limit is not None else tokens
    with pool.sequence() as seq:
        cached = seq.match(tokens)
        seq.append(tokens[cached:])
        n = len(tokens) - cached
        outs = []
        with pool.batch([seq], [n]) as batch:
            for layer in range(layers):
                pool.kv_write(batch, layer, kv_rows(cached, n, HKV, layer, 1), kv_rows(cached, n, HKV, layer, 2))
                out = pool.prefill(batch, layer, layout, kv_rows(cached, n, HQ, layer, 3), scale=1 / 8)
                outs.append(out if isinstance(out, np.ndarray) else out.float().cpu().numpy())
        seq.commit(len(tokens))
    return cached, np.stack(outs)


class Peer:
    """A NIXL agent with a listener, its pool registered, connected to one peer."""

    def __init__(self, nixl_api, name: str, port: int, peer: str, peer_port: int, mem: bspa.PoolMemory,
                 register_layers: int | None = None) -> None:
        config = nixl_api.nixl_agent_config(enable_prog_thread=True, enable_listen_thread=True, listen_port=port,
                                            backends=["UCX"])
        self.agent = nixl_api.nixl_agent(name, config)
        self.peer, self.peer_port = peer, peer_port
        regions = mem.registration(per_layer=True)
        if register_layers is not None:  # fault injection: register only some layers
            regions = regions[:2 * register_layers]
        self.reg = self.agent.register_memory(regions, mem.nixl_mem_type)
        self.pending: list[bytes] = []

    def connect(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.agent.check_remote_metadata(self.peer):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no complete NIXL metadata from {self.peer}")
            self.agent.send_local_metadata("127.0.0.1", self.peer_port)
            self.agent.fetch_remote_metadata(self.peer, "127.0.0.1", self.peer_port)
            time.sleep(0.05)
        # The peer's "ready" proves it holds our metadata: only then may we notify it.
        self.agent.send_notif(self.peer, b"ready")
        self.wait(lambda m: m == b"ready", timeout)

    def wait(self, accept, timeout: float = 60) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            for msgs in self.agent.get_new_notifs().values():
                self.pending.extend(msgs)
            for i, m in enumerate(self.pending):
                if accept(m):
                    return self.pending.pop(i)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no expected notification from {self.peer}")
            time.sleep(0.002)

    def send(self, kind: str, **body) -> None:
        self.agent.send_notif(self.peer, json.dumps({"kind": kind, **body}).encode())

    def recv(self, kinds: tuple[str, ...], timeout: float = 60) -> dict:
        def accept(m: bytes) -> bool:
            try:
                return json.loads(m).get("kind") in kinds
            except ValueError:
                return False
        return json.loads(self.wait(accept, timeout))


def make_pool(args, num_pages: int) -> bspa.Pool:
    return bspa.Pool(num_kv_heads=HKV, head_dim=args.head_dim, num_layers=args.layers, page_size=args.page_size,
                     num_pages=num_pages, dtype="f32" if args.device == "cpu" else "bf16", device=args.device)


def stats_dict(pool: bspa.Pool) -> dict:
    s = pool.stats()
    return {f: int(getattr(s, f)) for f in ("pages_free", "pages_cached", "pages_in_use", "published_pages",
                                             "evictions", "hits", "match_calls")}


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def run_export(args, nixl_api) -> dict:
    tokens = prompt_tokens(args.tokens)
    with make_pool(args, args.pages) as pool, bspa.Layout.dense(HQ) as layout:
        compute_turn(pool, layout, tokens, args.layers)  # the prefill engine computed the prompt
        mem = pool.memory()
        peer = Peer(nixl_api, args.name, args.port, args.peer, args.peer_port, mem,
                    register_layers=args.register_layers)
        peer.connect()
        before = stats_dict(pool)
        with pool.export_kv(tokens) as exp:
            peer.send("offer", memory=mem.to_dict(), tokens=tokens[:exp.num_tokens].tolist(),
                      pages=exp.pages.tolist(), keys=exp.keys.tolist())
            reply = peer.recv(("done", "refused", "aborted"), timeout=120)
        pool.check()
        result = {"reply": reply, "exported_pages": len(exp.pages), "stats_before": before,
                  "stats_after_export": stats_dict(pool)}
        peer.send("bye")
        # The next turn on the pool that computed the prefix itself: the reference.
        cached, out = compute_turn(pool, layout, prompt_tokens(args.tokens + args.next_tokens), args.layers)
        result.update(next_cached=cached, next_digest=digest(out))
        return result


def run_import(args, nixl_api) -> dict:
    with make_pool(args, args.pages) as pool, bspa.Layout.dense(HQ) as layout:
        # A busy pool: other prompts' cached pages and a live sequence in between.
        other = (prompt_tokens(3 * args.page_size) + 100000).astype(np.int32)
        compute_turn(pool, layout, other, args.layers)
        live = pool.sequence()
        live.append(other[:args.page_size + 5])
        if args.have_tokens:  # the importer already computed the prompt's first pages itself
            compute_turn(pool, layout, prompt_tokens(args.tokens), args.layers, limit=args.have_tokens)
        mem = pool.memory()
        peer = Peer(nixl_api, args.name, args.port, args.peer, args.peer_port, mem)
        peer.connect()
        offer = peer.recv(("offer",))
        remote = bspa.PoolMemory.from_dict(offer["memory"])
        before = stats_dict(pool)
        result: dict = {"stats_before": before}
        if remote.fingerprint != mem.fingerprint:
            # Refused before anything is reserved or prepared: the pages would not mean the same here.
            peer.send("refused", reason=f"fingerprint {remote.fingerprint:#x} != {mem.fingerprint:#x}")
            result.update(outcome="refused", moved_bytes=0)
        else:
            tokens = np.asarray(offer["tokens"], dtype=np.int32)
            remote_pages = np.asarray(offer["pages"], dtype=np.int32)
            moved = 0
            try:
                with pool.import_kv(tokens, peer_fingerprint=remote.fingerprint, peer_keys=offer["keys"]) as imp:
                    result.update(num_blocks=imp.num_blocks, num_cached=imp.num_cached, reserved=len(imp.pages))
                    if len(imp.pages):
                        local = imp.descs()
                        src = remote.page_descs(remote_pages[imp.blocks])
                        lh = peer.agent.prep_xfer_dlist("NIXL_INIT_AGENT", local, mem.nixl_mem_type)
                        rh = peer.agent.prep_xfer_dlist(args.peer, src, remote.nixl_mem_type)
                        idx = np.arange(len(local), dtype=np.int32)
                        h = peer.agent.make_prepped_xfer("READ", lh, idx, rh, idx, notif_msg=b"read-done")
                        t0 = time.perf_counter()
                        state = peer.agent.transfer(h)
                        while state == "PROC":
                            state = peer.agent.check_xfer_state(h)
                        seconds = time.perf_counter() - t0
                        if state != "DONE":
                            raise RuntimeError(f"NIXL transfer ended in state {state}")
                        moved = sum(n for _, n, _ in local)
                        result.update(transfer_seconds=seconds, descriptors=len(local),
                                      gbytes_per_s=moved / seconds / 1e9 if seconds > 0 else None)
                        h.release()
                        lh.release()
                        rh.release()
                # A clean exit committed the import.
                result.update(outcome="committed", published=imp.published, moved_bytes=moved)
                peer.send("done", moved_bytes=moved)
            except Exception as e:  # the import aborted itself on the way out
                result.update(outcome="aborted", error=f"{type(e).__name__}: {e}", moved_bytes=0)
                peer.send("aborted", error=str(e))
        pool.check()
        result["stats_after_import"] = stats_dict(pool)
        peer.recv(("bye",))
        live.close()
        cached, out = compute_turn(pool, layout, prompt_tokens(args.tokens + args.next_tokens), args.layers)
        result.update(next_cached=cached, next_digest=digest(out))
        pool.check()
        return result


def main() -> int:
    global D, DEVICE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=("export", "import"))
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--peer-port", type=int, required=True)
    ap.add_argument("--out", required=True, help="where to write the JSON result")
    ap.add_argument("--pages", type=int, default=96, help="pages of this engine's pool")
    ap.add_argument("--tokens", type=int, default=63 * 64 + 17, help="prompt length")
    ap.add_argument("--next-tokens", type=int, default=40, help="tokens the next turn adds")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=D)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda[:N] (bf16 pools, torch inputs, NIXL VRAM)")
    ap.add_argument("--have-tokens", type=int, default=0, help="importer: prompt tokens it computed itself")
    ap.add_argument("--register-layers", type=int, default=None,
                    help="exporter: register only this many layers with NIXL (makes the importer's READ fail)")
    args = ap.parse_args()
    D, DEVICE = args.head_dim, args.device  # what kv_rows makes
    try:
        from nixl import _api as nixl_api
    except ImportError as e:
        print(f"NIXL is not installed ({e}): pip install --no-deps nixl==1.5.1 nixl-cu12==1.5.1", file=sys.stderr)
        return 77
    result = run_export(args, nixl_api) if args.role == "export" else run_import(args, nixl_api)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{args.role}: {json.dumps({k: v for k, v in result.items() if not k.startswith('stats')})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
