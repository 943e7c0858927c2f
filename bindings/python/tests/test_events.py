"""KV cache events from Python: the msgpack drain and the ZMQ publisher's framing.
(tests/router/run.sh checks the same events against NVIDIA Dynamo's router.)"""

import struct

import numpy as np
import pytest

import bspa


def serve(pool, tokens, salt=None):
    seq = pool.sequence(salt=salt)
    cached = seq.match(tokens)
    seq.append(tokens[cached:])
    seq.commit(len(tokens))
    seq.close()


def test_drain_needs_a_pool_with_events():
    with bspa.Pool(num_kv_heads=1, head_dim=8, num_layers=0, page_size=16, num_pages=4) as pool:
        with pytest.raises(bspa.InvalidStateError, match="events_capacity"):
            pool.drain_events_msgpack()


def test_drain_returns_one_vllm_batch_then_an_empty_one():
    with bspa.Pool(num_kv_heads=1, head_dim=8, num_layers=0, page_size=16, num_pages=8,
                   events_capacity=64) as pool:
        serve(pool, np.arange(40, dtype=np.int32), salt=b"t")
        payload = pool.drain_events_msgpack(ts=3.0, dp_rank=2)
        assert payload[0] == 0x93 and payload[1] == 0xCB  # [float64 ts, events, rank]
        assert struct.unpack(">d", payload[2:10])[0] == 3.0
        assert payload[10] == 0x91  # one BlockStored for the two pages of one chain
        assert b"BlockStored" in payload and b"cache_salt" in payload
        assert payload.endswith(b"\xaekv_cache_dtype\xa7float32\x02")  # the CPU pool's f32, then the rank
        assert payload[-1] == 2
        empty = pool.drain_events_msgpack(ts=3.0, dp_rank=None)
        assert empty == b"\x93\xcb" + struct.pack(">d", 3.0) + b"\x90\xc0"
        try:
            import msgpack
        except ImportError:
            return
        ts, events, rank = msgpack.unpackb(payload)
        (e,) = events
        assert e["type"] == "BlockStored" and e["token_ids"] == list(range(32)) and e["block_size"] == 16
        assert e["parent_block_hash"] is None and len(e["block_hashes"]) == 2 and e["cache_salt"] == "t"
        assert e["kv_cache_dtype"] == "float32"  # the pool's dtype (f32 on the CPU), bspa's own key


def test_publisher_sends_topic_sequence_payload():
    zmq = pytest.importorskip("zmq")
    from bspa.events import KvEventPublisher

    ctx = zmq.Context()
    with bspa.Pool(num_kv_heads=1, head_dim=8, num_layers=0, page_size=16, num_pages=8,
                   events_capacity=64) as pool, \
            KvEventPublisher("inproc://bspa-events", topic="kv", context=ctx) as pub:
        sub = ctx.socket(zmq.SUB)
        sub.connect("inproc://bspa-events")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        assert pub.publish(pool) is None  # nothing to send
        serve(pool, np.arange(17, dtype=np.int32))
        assert pub.publish(pool) == 0
        serve(pool, np.arange(17, dtype=np.int32) + 100)
        assert pub.publish(pool) == 1
        frames = [sub.recv_multipart() for _ in range(2)]
        assert [f[0] for f in frames] == [b"kv", b"kv"]
        assert [int.from_bytes(f[1], "big") for f in frames] == [0, 1]
        assert all(f[2][:1] == b"\x93" for f in frames)
        sub.close()
    ctx.term()
