"""A node class that READS_IN_PLACE gets its payloads as read-only views of the batch its host
received, any other node its own bytes (nodes/host.py Host.step, cluster/message.decode_batch):
one host, in process, no Ray."""

from __future__ import annotations

import numpy as np

from cluster import wire
from cluster.message import Message, encode_batch_parts
from nodes.host import Host
from nodes.node import Node, Shared
from nodes.step import StepOrder


class Summer(Node):
    """Sums the vectors that arrive and keeps the sum, not the payloads."""

    role = "server"
    READS_IN_PLACE = True

    def __init__(self, nid, ctx):
        super().__init__(nid, ctx)
        self.total, self.kinds = 0.0, set()

    def handle(self, phase, inbox):
        for m in inbox:
            self.kinds.add(type(m.payload))
            self.total += float(wire.decode_dense(m.payload).sum())


class Keeper(Node):
    """Keeps what arrives (so it must get payloads of its own)."""

    role = "user"

    def __init__(self, nid, ctx):
        super().__init__(nid, ctx)
        self.kept = []

    def handle(self, phase, inbox):
        self.kept += [m.payload for m in inbox]


def test_in_place_nodes_read_views_and_the_others_get_bytes():
    host = Host(0, seed=1, shared=Shared(), num_cpus=1)
    host.add_nodes([(Summer, "server/0", {}), (Keeper, "user/0", {}), (Keeper, "user/1", {})])
    host.set_route({"server/0": 0, "user/0": 0, "user/1": 0, "user/9": 1})
    vecs = [np.full(5, i, dtype=np.float32) for i in range(3)]
    news = wire.encode_dense(np.arange(4, dtype=np.float32))
    msgs = [Message("up", "user/9", "server/0", 0, "p", wire.encode_dense(v)) for v in vecs]
    msgs += [Message("news", "user/9", f"user/{i}", 0, "p", news) for i in range(2)]
    parts = encode_batch_parts(msgs)
    host.step(StepOrder(0, 0, "p"), [memoryview(p) for p in parts])  # as Ray hands them over
    server = host.nodes["server/0"]
    assert server.kinds == {memoryview}
    assert server.total == float(sum(v.sum() for v in vecs))
    kept = [host.nodes[f"user/{i}"].kept for i in range(2)]
    assert [type(k[0]) for k in kept] == [bytes, bytes] and kept[0][0] == news
    # a fresh set of nodes on the host is looked at again
    host.add_nodes([(Summer, "server/1", {})])
    host.set_route({**host.route, "server/1": 0})
    host.step(
        StepOrder(1, 1, "p"),
        encode_batch_parts([Message("up", "user/9", "server/1", 1, "p", news)]),
    )
    assert host.nodes["server/1"].kinds == {memoryview}


def test_a_large_batch_travels_as_its_parts_and_a_small_one_joined(ray_local, monkeypatch):
    from cluster.message import batch_size, decode_batch, encode_batch
    from nodes import host as host_module

    msgs = [
        Message("up", f"user/{i}", "server/0", 0, "p", wire.encode_dense(np.full(300, i, "f4")))
        for i in range(4)
    ]
    joined = len(encode_batch(msgs))
    for threshold, kind in ((1 << 30, np.ndarray), (0, list)):
        monkeypatch.setattr(host_module, "_PARTS_FROM", threshold)
        monkeypatch.setattr(host_module, "_PARTS_PAYLOAD", threshold)
        refs = host_module._put_batches({1: encode_batch_parts(msgs)})
        batch = ray_local.get(refs[1])
        assert isinstance(batch, kind)
        assert decode_batch(batch) == msgs and batch_size(batch) == joined
