"""A tiny protocol for runtime tests: every node forwards a counter to the next node in a ring."""

from __future__ import annotations

import struct

from cluster.message import node_id
from nodes.node import Node, NodeContext, expect_kinds


class RingNode(Node):
    role = "user"

    def __init__(self, nid: str, ctx: NodeContext, n: int):
        super().__init__(nid, ctx)
        self.n = n
        self.received: list[tuple[str, int]] = []

    def handle(self, phase, inbox):
        expect_kinds(inbox, "token", node=self.id)
        for m in inbox:
            self.received.append((m.src, struct.unpack("<q", m.payload)[0]))
        nxt = node_id("user", (int(self.id.split("/")[1]) + 1) % self.n)
        value = int(self.rng.integers(0, 1000))
        self.send("token", nxt, struct.pack("<q", value))
        self.report("value", value)

    def get_received(self):
        return list(self.received)


class Echo(Node):
    role = "server"

    def handle(self, phase, inbox):
        for m in inbox:
            self.send("echo", m.src, m.payload * 2)


class GlobalDraw(Node):
    """Draws from torch's global RNG, as a model's default initialisation does."""

    role = "user"

    def handle(self, phase, inbox):
        import torch

        self.report("draw", float(torch.rand(1)))

    def draw(self):
        import torch

        return float(torch.rand(1))


class MakesTensor(Node):
    """Makes a tensor the way ``how`` says and adds it to one on its own device."""

    role = "server"

    def __init__(self, nid: str, ctx: NodeContext, how: str):
        super().__init__(nid, ctx)
        self.how = how

    def handle(self, phase, inbox):
        import numpy as np
        import torch

        made = {
            "torch.zeros": lambda: torch.zeros(3),
            "torch.from_numpy": lambda: torch.from_numpy(np.ones(3, dtype=np.float32)),
            "torch.tensor": lambda: torch.tensor([1.0, 2.0, 3.0]),
            "nn.Linear": lambda: torch.nn.Linear(3, 1).weight[0],
            "device=": lambda: torch.zeros(3, device=self.device),
            "self.tensor": lambda: self.tensor(np.ones(3, dtype=np.float32)),
            "self.build": lambda: self.build(lambda: torch.nn.Linear(3, 1)).weight[0],
            "nn.Linear(device=)": lambda: torch.nn.Linear(3, 1, device=self.device).weight[0],
        }[self.how]()
        mine = torch.ones(3, device=self.device)
        self.report("sum", float((made.detach() + mine).sum()))


class BrokenAtStart(Node):
    """A node whose constructor raises."""

    role = "server"

    def __init__(self, nid: str, ctx: NodeContext):
        raise ValueError("no data for this node")
