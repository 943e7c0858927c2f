"""bspa's KV cache events against NVIDIA Dynamo's real KV router (ai-dynamo-runtime 1.6.1).

Run by tests/router/run.sh inside a network namespace with only loopback up. Dynamo's
standalone indexer (python -m dynamo.indexer) subscribes to a bspa worker's ZMQ PUB
socket and mirrors its prefix cache; a few hundred Mooncake trace requests of two tenants
go through a bspa pool small enough to evict, their events are published after each
request, and after each phase every probe prompt's Dynamo overlap score must equal what
bspa_seq_match returns for it (in pages), for both tenants:
  1. stores only (no eviction yet),
  2. after many evictions,
  3. after an event queue overflow (the pool empties its index and sends AllBlocksCleared),
  4. then more requests on top.
Dynamo drops batches it cannot use with a log line only, so everything is asserted on
scores. Negative controls prove that a broken stream is caught: on a second worker a batch
whose block_size differs from the registered one and a batch that is never sent, and on
the first the queries of one tenant made with the other's salt, each must make the
comparison fail. Also checked: the payload bytes equal what msgspec writes
for vLLM's own struct definitions (vllm/distributed/kv_events.py) of the same events.

With BSPA_ROUTER_C_PUBLISHER=path/to/libbspa_kv_publisher.so the batches go out through the
C publisher (examples/events/kv_event_publisher.c, over libzmq, loaded with ctypes) instead
of the Python binding's KvEventPublisher (pyzmq); run.sh runs both when the library is built.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgpack
import msgspec
import numpy as np

import bspa
from bspa.events import KvEventPublisher

ROOT = Path(__file__).resolve().parents[2]
PAGE = 16            # Dynamo's registered block size = the pool's page size
PAGES = 1024         # 16k tokens: a few requests fill it, the replay evicts a lot
EVENTS = 4096        # records; one request makes at most 2 * MAX_TOKENS / PAGE of them
MAX_TOKENS = 2048    # prompts are cut to this many tokens (speed)
TENANTS = ["tenant-a", "tenant-b"]
HTTP_PORT = int(os.environ.get("BSPA_ROUTER_TEST_HTTP_PORT", "18090"))
ZMQ_PORT = HTTP_PORT + 1
ZMQ_PORT_NEG = HTTP_PORT + 2
MODEL = "bspa"


class CKvEventPublisher:
    """KvEventPublisher's interface (send, a context manager) over the C publisher."""

    class Options(ctypes.Structure):  # kv_publisher_options (kv_event_publisher.h)
        _fields_ = [("endpoint", ctypes.c_char_p), ("replay_endpoint", ctypes.c_char_p),
                    ("topic", ctypes.c_char_p), ("replay_batches", ctypes.c_size_t), ("hwm", ctypes.c_int),
                    ("dp_rank", ctypes.c_int32), ("wait_subscribers", ctypes.c_int), ("wait_ms", ctypes.c_int),
                    ("linger_ms", ctypes.c_int)]

    def __init__(self, lib_path: str, endpoint: str) -> None:
        lib = ctypes.CDLL(lib_path)
        lib.kv_publisher_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                            ctypes.POINTER(self.Options)]
        lib.kv_publisher_send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                          ctypes.POINTER(ctypes.c_int64)]
        lib.kv_publisher_error.argtypes = [ctypes.c_void_p]
        lib.kv_publisher_error.restype = ctypes.c_char_p
        lib.kv_publisher_destroy.argtypes = [ctypes.c_void_p]
        self._lib, self._pub = lib, ctypes.c_void_p()
        opts = self.Options(endpoint=endpoint.encode())
        if lib.kv_publisher_create(ctypes.byref(self._pub), None, ctypes.byref(opts)) != 0:
            fail(f"kv_publisher_create({endpoint}): {lib.kv_publisher_error(None).decode()}")
        self.next_seq = 0

    def send(self, payload: bytes) -> int:
        seq = ctypes.c_int64(-1)
        if self._lib.kv_publisher_send(self._pub, payload, len(payload), ctypes.byref(seq)) != 0:
            fail(f"kv_publisher_send: {self._lib.kv_publisher_error(self._pub).decode()}")
        if seq.value != self.next_seq:
            fail(f"the C publisher numbered batch {self.next_seq} as {seq.value}")
        self.next_seq += 1
        return seq.value

    def __enter__(self) -> "CKvEventPublisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self._lib.kv_publisher_destroy(self._pub)


def publisher(endpoint: str):
    lib = os.environ.get("BSPA_ROUTER_C_PUBLISHER")
    return CKvEventPublisher(lib, endpoint) if lib else KvEventPublisher(endpoint)


def fail(msg: str) -> None:
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def trace_path() -> Path:
    for p in [os.environ.get("BSPA_TRACE"), ROOT / "data/traces/mooncake_conversation_trace.jsonl"]:
        if p and Path(p).is_file():
            return Path(p)
    fail("no Mooncake trace (data/traces/mooncake_conversation_trace.jsonl)")


def block_token(h: int, i: int) -> int:
    """examples/trace/mooncake.hpp's token of block h, position i (splitmix64)."""
    m = (1 << 64) - 1
    z = (h * 0x9E3779B97F4A7C15 + i + 0x632BE59BD9B4E019) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    return z % 100352


def requests(n: int) -> list[np.ndarray]:
    out = []
    with open(trace_path()) as f:
        for line in f:
            if len(out) == n:
                break
            r = json.loads(line)
            length = min(int(r["input_length"]), MAX_TOKENS)
            toks = [block_token(r["hash_ids"][t // 512], t % 512) for t in range(length)]
            out.append(np.array(toks, dtype=np.int32))
    return out


# ---- Dynamo's indexer over HTTP ------------------------------------------------------
def http(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{HTTP_PORT}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def dynamo_pages(tokens: np.ndarray, tenant: str, worker: int = 1) -> int:
    status, body = http("POST", "/query", {"token_ids": [int(t) for t in tokens], "model_name": MODEL,
                                           "cache_salt": tenant})
    if status != 200:
        fail(f"/query answered {status}: {body}")
    tokens_matched = body["scores"].get(str(worker), {}).get("0", 0)  # this indexer scores in tokens
    assert tokens_matched % PAGE == 0, body
    return tokens_matched // PAGE


def bspa_pages(pool: bspa.Pool, tokens: np.ndarray, tenant: str) -> int:
    seq = pool.sequence(salt=tenant)
    try:
        return seq.match(tokens) // PAGE
    finally:
        seq.close()


def mismatches(pool: bspa.Pool, probes: list[np.ndarray], worker: int = 1,
               query_tenant: dict[str, str] | None = None) -> list[str]:
    """Probes whose Dynamo score differs from bspa_seq_match, for every tenant."""
    bad = []
    for tenant in TENANTS:
        for i, p in enumerate(probes):
            want = bspa_pages(pool, p, tenant)
            got = dynamo_pages(p, (query_tenant or {}).get(tenant, tenant), worker)
            if got != want:
                bad.append(f"probe {i} ({len(p)} tokens) tenant {tenant}: Dynamo {got} pages, bspa {want}")
    return bad


def settle(pool: bspa.Pool, probes: list[np.ndarray], phase: str, worker: int = 1) -> dict[str, int]:
    """Waits (up to 10 s) for the indexer to apply what was sent, then asserts equality."""
    deadline = time.time() + 10
    while True:
        bad = mismatches(pool, probes, worker)
        if not bad or time.time() > deadline:
            break
        time.sleep(0.2)
    if bad:
        fail(f"{phase}: {len(bad)} probe(s) disagree:\n  " + "\n  ".join(bad[:10]))
    hits = {t: sum(bspa_pages(pool, p, t) for p in probes) for t in TENANTS}
    print(f"{phase}: {len(probes)} probes x {len(TENANTS)} tenants agree (matched pages per tenant {hits})",
          flush=True)
    return hits


def probe_set(reqs: list[np.ndarray], rng: random.Random) -> list[np.ndarray]:
    """Trace prompts cut to k pages + 1 token (so bspa's cap floor((n-1)/PAGE) equals
    Dynamo's full-block count), a few with a changed token mid-way, and one unseen."""
    probes = []
    for r in rng.sample(reqs, min(32, len(reqs))):
        k = rng.randint(1, (len(r) - 1) // PAGE)
        p = r[:k * PAGE + 1].copy()
        if rng.random() < 0.25 and k > 2:
            p[rng.randrange(PAGE, k * PAGE)] += 1  # diverges inside some page
        probes.append(p)
    probes.append(np.arange(5 * PAGE + 1, dtype=np.int32) + 7_000_000)
    return probes


# ---- the worker's side ---------------------------------------------------------------
def serve(pool: bspa.Pool, tokens: np.ndarray, tenant: str, generate: int = 0, seed: int = 0) -> np.ndarray:
    """One request: match, append, commit the prompt, then `generate` decoded tokens one
    by one (committed as they come; they differ with `seed`). Returns the whole sequence."""
    seq = pool.sequence(salt=tenant)
    cached = seq.match(tokens)
    seq.append(tokens[cached:])
    seq.commit(len(tokens))
    out = [tokens]
    for j in range(generate):
        t = np.array([(int(tokens[-1]) * 31 + j * 7919 + seed * 104729) % 100352], dtype=np.int32)
        seq.append(t)
        seq.commit(len(tokens) + j + 1)
        out.append(t)
    seq.close()
    return np.concatenate(out)


def check_wire_bytes() -> None:
    """The drained payload equals msgspec's encoding of vLLM's structs for the same events."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: int | None = None

    class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):  # vllm/distributed/kv_events.py, field for field
        block_hashes: list[int]
        parent_block_hash: int | None
        token_ids: list[int]
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None
        extra_keys: list | None = None
        group_idx: int | None = None
        kv_cache_spec_kind: str | None = None
        kv_cache_spec_sliding_window: int | None = None

    class BspaBlockStored(BlockStored, tag="BlockStored"):  # + the key Dynamo reads, + bspa's
        cache_salt: str | None = None
        kv_cache_dtype: str | None = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[int]
        medium: str | None
        group_idx: int | None = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    pool = bspa.Pool(num_kv_heads=1, head_dim=8, num_layers=0, page_size=PAGE, num_pages=6, events_capacity=64)
    a = np.arange(3 * PAGE + 5, dtype=np.int32) * 2477 - 3  # one negative token, 1-5 byte forms
    serve(pool, a, None)
    seq = pool.sequence(extra_key=42)
    seq.match(a[:2 * PAGE])
    seq.append(a[:2 * PAGE])
    seq.commit(2 * PAGE)
    seq.close()
    serve(pool, a + 5, "tenant-\u00e9")   # evicts: removals
    serve(pool, a + 9, b"\xff\x00salt")    # not UTF-8: bspa-hex:
    payload = pool.drain_events_msgpack(ts=1234.5, dp_rank=0)
    raw = msgpack.unpackb(payload)
    events = []
    for e in raw[1]:
        kind = e.pop("type")
        cls = {"BlockStored": BspaBlockStored,
               "BlockRemoved": BlockRemoved, "AllBlocksCleared": AllBlocksCleared}[kind]
        events.append(cls(**e))
    want = msgspec.msgpack.encode(EventBatch(ts=1234.5, events=events, data_parallel_rank=0))
    if want != payload:
        fail(f"payload differs from msgspec's encoding:\n  bspa    {payload.hex()}\n  msgspec {want.hex()}")
    kinds = [type(e).__name__ for e in events]
    salts = [e.cache_salt for e in events if isinstance(e, BspaBlockStored) and e.cache_salt is not None]
    if any(e.kv_cache_dtype != "float32" for e in events if isinstance(e, BspaBlockStored)):
        fail(f"stored pages of an f32 pool (the CPU default) without kv_cache_dtype 'float32': {events}")
    if "BlockRemoved" not in kinds or salts != ["tenant-\u00e9", "bspa-hex:ff0073616c74"] or \
            [e.lora_id for e in events if isinstance(e, BlockStored)][:2] != [None, 42]:
        fail(f"unexpected events {events}")
    # An overflow: a queue of 2 records, 3 pages stored.
    small = bspa.Pool(num_kv_heads=1, head_dim=8, num_layers=0, page_size=PAGE, num_pages=6, events_capacity=2)
    serve(small, a, None)
    ev = msgpack.unpackb(small.drain_events_msgpack(ts=0.0, dp_rank=None))
    if ev[2] is not None or ev[1][0] != {"type": "AllBlocksCleared"}:
        fail(f"overflow batch {ev}")
    small.check()
    print(f"wire: {len(payload)} bytes equal msgspec's encoding of vLLM's structs ({', '.join(kinds)})", flush=True)


def start_indexer() -> subprocess.Popen:
    log = open(os.environ.get("BSPA_ROUTER_TEST_LOG", "/tmp/bspa_dynamo_indexer.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "dynamo.indexer", "--port", str(HTTP_PORT), "--threads", "1"],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            if http("GET", "/workers")[0] == 200:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            fail(f"dynamo.indexer exited with {proc.returncode} (log: {log.name})")
        time.sleep(0.05)
    fail("dynamo.indexer did not start")


def register(worker: int, port: int) -> None:
    status, body = http("POST", "/register", {"instance_id": worker, "endpoint": f"tcp://127.0.0.1:{port}",
                                              "model_name": MODEL, "block_size": PAGE})
    if status not in (200, 201):
        fail(f"/register answered {status}: {body}")


def sync(pool: bspa.Pool, pub: Any, worker: int) -> None:
    """Waits until the indexer's subscription is live (ZMQ drops what a PUB sends before a
    subscriber has joined): one real page of a sync tenant, resent until Dynamo shows it.
    Resending a store Dynamo already holds changes nothing."""
    toks = np.arange(PAGE + 1, dtype=np.int32) + 9_000_000 + worker
    serve(pool, toks, "sync")
    payload = pool.drain_events_msgpack(dp_rank=0)
    for _ in range(100):
        pub.send(payload)
        time.sleep(0.1)
        if dynamo_pages(toks, "sync", worker) == 1:
            return
    fail(f"worker {worker}: the indexer never received the sync batch")


def negative_controls(reqs: list[np.ndarray]) -> None:
    """A broken event stream must make the comparison fail: Dynamo drops such batches
    without an error, so only the scores can tell."""
    pool = bspa.Pool(num_kv_heads=1, head_dim=8, num_layers=0, page_size=PAGE, num_pages=PAGES,
                     events_capacity=EVENTS)
    with publisher(f"tcp://*:{ZMQ_PORT_NEG}") as pub:
        register(2, ZMQ_PORT_NEG)
        sync(pool, pub, 2)
        probes = [r[:((len(r) - 1) // PAGE) * PAGE + 1] for r in reqs[:3]]
        # (a) block_size other than the registered one: Dynamo ignores the stores.
        serve(pool, reqs[0], TENANTS[0])
        batch = msgpack.unpackb(pool.drain_events_msgpack(dp_rank=0))
        for e in batch[1]:
            if e["type"] == "BlockStored":
                e["block_size"] = 2 * PAGE
        pub.send(msgpack.packb(batch))
        time.sleep(0.5)
        bad = mismatches(pool, probes[:1], worker=2)
        if not bad:
            fail("negative control (a): a batch with the wrong block_size went unnoticed")
        print(f"negative control (a) caught: {bad[0]}", flush=True)
        # (b) a batch that never reaches the router.
        serve(pool, reqs[1], TENANTS[1])
        pool.drain_events_msgpack(dp_rank=0)  # drained, not sent
        time.sleep(0.5)
        bad = mismatches(pool, probes[1:2], worker=2)
        if not bad:
            fail("negative control (b): a lost batch went unnoticed")
        print(f"negative control (b) caught: {bad[0]}", flush=True)


def main() -> None:
    t0 = time.time()
    check_wire_bytes()
    rng = random.Random(21)
    reqs = requests(320)
    indexer = start_indexer()
    try:
        pool = bspa.Pool(num_kv_heads=1, head_dim=8, num_layers=0, page_size=PAGE, num_pages=PAGES,
                         events_capacity=EVENTS)
        with publisher(f"tcp://*:{ZMQ_PORT}") as pub:
            register(1, ZMQ_PORT)
            sync(pool, pub, 1)

            served: list[np.ndarray] = []
            parent_of: dict[int, int] = {}
            gone: set[int] = set()
            orphans = [0]

            def send(payload: bytes) -> None:
                # Counts removals of pages whose parent left the index before them: the
                # case a router must get right without ever seeing the pages as a tree.
                for e in msgpack.unpackb(payload)[1]:
                    if e["type"] == "BlockStored":
                        prev = e["parent_block_hash"] or 0
                        for h in e["block_hashes"]:
                            parent_of[h], prev = prev, h
                    elif e["type"] == "BlockRemoved":
                        for h in e["block_hashes"]:
                            orphans[0] += parent_of.get(h, 0) in gone
                            gone.add(h)
                    else:
                        parent_of.clear()
                        gone.clear()
                pub.send(payload)

            def replay(rs: list[np.ndarray], first: int, publish: bool = True) -> None:
                # Decoded tokens extend prompts whose last page was recomputed (bspa_seq_match
                # leaves the last prompt token uncached): their pages hang under the page that
                # was already published, which may be evicted before them.
                for i, r in enumerate(rs):
                    served.append(serve(pool, r, TENANTS[(first + i) % 2], generate=(first + i) % 40,
                                        seed=first + i))
                    if publish:
                        send(pool.drain_events_msgpack(dp_rank=0))

            # 1. stores only.
            replay(reqs[:6], 0)
            if pool.stats().evictions != 0:
                fail("phase 1 evicted already: make the pool larger")
            hits = settle(pool, probe_set(reqs[:6], rng), "after stores")
            if min(hits.values()) == 0:
                fail("phase 1: no probe hit for some tenant, the comparison proves nothing")
            # 2. evictions. First the orphan case on purpose: a page-aligned prompt served
            # twice, the second time with decoded tokens. bspa_seq_match leaves its last page
            # uncached, the recomputed copy finds the published one and stands down, and the
            # decoded page is published under that older page, which the LRU evicts first.
            aligned = np.arange(4 * PAGE, dtype=np.int32) + 8_000_000
            serve(pool, aligned, TENANTS[0])
            send(pool.drain_events_msgpack(dp_rank=0))
            orphan_seq = serve(pool, aligned, TENANTS[0], generate=2 * PAGE + 3, seed=1)
            send(pool.drain_events_msgpack(dp_rank=0))
            replay(reqs[6:260], 6)
            ev = pool.stats().evictions
            if ev < PAGES:
                fail(f"phase 2: only {ev} evictions")
            hits = settle(pool, probe_set(reqs[200:260] + served[200:260], rng) + [orphan_seq[:6 * PAGE + 1]],
                          f"after {ev} evictions")
            if min(hits.values()) == 0:
                fail("phase 2: no probe hit for some tenant")
            # 3. an overflow: no drain for a while, so the queue of EVENTS records overflows.
            replay(reqs[260:300], 260, publish=False)
            payload = pool.drain_events_msgpack(dp_rank=0)
            first = msgpack.unpackb(payload)[1][0]
            if first != {"type": "AllBlocksCleared"}:
                fail(f"phase 3: the queue did not overflow (first event {first})")
            send(payload)
            pool.check()
            settle(pool, probe_set(reqs[260:300] + served[260:300], rng), "after an overflow (all cleared)")
            # 4. life goes on after the clear.
            replay(reqs[300:320], 300)
            hits = settle(pool, probe_set(reqs[290:320] + served[290:320], rng), "after more requests")
            if min(hits.values()) == 0:
                fail("phase 4: no probe hit for some tenant")
            pool.check()
            print(f"{orphans[0]} pages were evicted after their parent (orphans), e.g. decoded pages under a "
                  f"recomputed last prompt page", flush=True)
            if orphans[0] == 0:
                fail("the replay never evicted a page after its parent: the orphan case went untested")
            # Negative control (c): each tenant's probes asked with the other's salt.
            bad = mismatches(pool, probe_set(reqs[290:320], rng),
                             query_tenant={TENANTS[0]: TENANTS[1], TENANTS[1]: TENANTS[0]})
            if not bad:
                fail("negative control (c): queries with another tenant's salt matched like the tenant's own")
            print(f"negative control (c) caught ({len(bad)} probes): {bad[0]}", flush=True)
        negative_controls(reqs)
    finally:
        indexer.terminate()
        indexer.wait(timeout=10)
    via = "the C publisher" if os.environ.get("BSPA_ROUTER_C_PUBLISHER") else "KvEventPublisher (pyzmq)"
    print(f"PASS: Dynamo's KV router agrees with bspa_seq_match, events sent by {via} ({time.time() - t0:.1f} s)",
          flush=True)


if __name__ == "__main__":
    main()
