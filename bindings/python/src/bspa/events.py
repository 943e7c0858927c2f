"""KV cache events over ZMQ, the way vLLM publishes them (DESIGN §13).

A KV-aware router (NVIDIA Dynamo's, llm-d's) subscribes to an engine's ZMQ PUB socket and
mirrors its prefix cache from the events. :class:`KvEventPublisher` sends what
:meth:`bspa.Pool.drain_events_msgpack` drains as vLLM's ``ZmqEventPublisher`` does: three
frames per batch, (topic, 8-byte big-endian sequence number starting at 0, msgpack
payload). It keeps the last ``replay_batches`` payloads so a subscriber that joined late
can ask for them on an optional ROUTER socket (vLLM's replay protocol: a request carries
the first wanted sequence number as 8 big-endian bytes; the answer is (seq, payload)
frames for every kept batch from there on, then (-1, b"")).

Needs pyzmq (``pip install pyzmq``), imported when a publisher is made. One thread uses a
publisher (ZMQ sockets are not thread-safe); the pool it drains may be shared.

    pool = bspa.Pool(..., events_capacity=65536)
    with KvEventPublisher("tcp://*:5557") as pub:
        ...                              # engine steps
        pub.publish(pool)                # once per step: drain and send (nothing if empty)
"""

from __future__ import annotations

import collections
from typing import Optional

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class KvEventPublisher:
    def __init__(self, endpoint: str = "tcp://*:5557", *, topic: str = "", replay_endpoint: Optional[str] = None,
                 replay_batches: int = 10_000, hwm: int = 100_000, dp_rank: int = 0, context=None) -> None:
        import zmq  # optional dependency: only publishers need it

        self._zmq = zmq
        self._ctx = context or zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(hwm)
        # vLLM's rule: bind a wildcard or local transport, connect to anything else.
        if "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
            self._pub.bind(endpoint)
        else:
            self._pub.connect(endpoint)
        self._replay = None
        if replay_endpoint is not None:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.bind(replay_endpoint)
        self._topic = topic.encode("utf-8")
        self._buffer: "collections.deque[tuple[int, bytes]]" = collections.deque(maxlen=replay_batches)
        self._dp_rank = dp_rank
        self.next_seq = 0

    def send(self, payload: bytes) -> int:
        """Sends one encoded batch; returns its sequence number."""
        seq = self.next_seq
        self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
        self._buffer.append((seq, payload))
        self.next_seq += 1
        self.serve_replay()
        return seq

    def publish(self, pool, ts: Optional[float] = None, *, skip_empty: bool = True) -> Optional[int]:
        """Drains the pool's events and sends them as one batch. Returns the batch's
        sequence number, or None when there was nothing to send (``skip_empty``)."""
        payload = pool.drain_events_msgpack(ts=ts, dp_rank=self._dp_rank)
        # An empty batch is [ts, [], rank]: its second element is the empty array 0x90.
        if skip_empty and payload[10:11] == b"\x90":
            self.serve_replay()
            return None
        return self.send(payload)

    def serve_replay(self) -> None:
        """Answers the replay requests waiting on the ROUTER socket (non-blocking)."""
        if self._replay is None:
            return
        while self._replay.poll(0):
            frames = self._replay.recv_multipart()
            if len(frames) != 3:
                continue
            client, _, start = frames
            first = int.from_bytes(start, "big")
            for seq, payload in self._buffer:
                if seq >= first:
                    self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
            self._replay.send_multipart((client, b"", END_SEQ, b""))

    def close(self) -> None:
        for sock in (self._pub, self._replay):
            if sock is not None:
                sock.close(linger=0)
        self._pub = self._replay = None

    def __enter__(self) -> "KvEventPublisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
