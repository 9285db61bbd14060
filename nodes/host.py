"""The host: one Ray actor (one OS process) that carries one or more logical nodes.

In a superstep the host decodes the message batches addressed to it, runs one handler per active
node (batched per node class), records every outgoing message in its byte ledger, keeps messages
for its own nodes in memory and encodes the rest into one batch per destination host, which it
puts into Ray's object store. The driver passes those references on to the destination hosts in
the next superstep, so message bytes travel host to host and never through the driver.
"""

from __future__ import annotations

import copyreg
import gc
import io
import os
import pickle
import time
from collections import defaultdict

import ray
import ray.cloudpickle as cloudpickle
import torch

from cluster.ledger import Ledger
from cluster.message import Message, decode_batch, encode_batch, role_of
from nodes.node import Node, NodeContext, Shared


def _pick_device() -> tuple[torch.device, list]:
    gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
    if gpu_ids and torch.cuda.is_available():
        return torch.device("cuda", 0), gpu_ids  # Ray sets CUDA_VISIBLE_DEVICES to our share
    return torch.device("cpu"), gpu_ids


def _tensor_from_numpy(array, requires_grad: bool) -> torch.Tensor:
    t = torch.from_numpy(array)
    return t.requires_grad_() if requires_grad else t


def _reduce_tensor(t: torch.Tensor):
    """A whole, contiguous CPU tensor pickles as its numpy array (about 4x faster than torch's own
    reduction for the thousands of small per-user tensors of a host); views, sparse and GPU tensors,
    bfloat16 and tensors inside an autograd graph keep torch's reduction."""
    dense = t.layout == torch.strided and t.device.type == "cpu" and t.dtype != torch.bfloat16
    if dense and t.grad_fn is None and t.is_contiguous() and t.storage_offset() == 0:
        if t.untyped_storage().nbytes() == t.numel() * t.element_size():
            return _tensor_from_numpy, (t.detach().numpy(), t.requires_grad)
    return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)


_DISPATCH = copyreg.dispatch_table.copy()
_DISPATCH[torch.Tensor] = _reduce_tensor


def dumps_state(state) -> bytes:
    """Pickle a host's nodes: the C pickler with the tensor reduction above, cloudpickle for state
    the standard pickler cannot take (e.g. a lambda)."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    try:
        pickler.dump(state)
    except (pickle.PicklingError, TypeError, AttributeError):
        return cloudpickle.dumps(state)
    return buf.getvalue()


def dumps_specs(specs: list[tuple[type, str, dict]]) -> bytes:
    """Node specs for :meth:`Host.add_nodes`, pickled with cloudpickle (node classes defined in a
    script or a test travel by value where registered so). Protocol 4: numpy arrays are copied
    into the pickle and unpickle writable; protocol 5 would bring a read-only array back
    read-only."""
    return cloudpickle.dumps(specs, protocol=4)


# torch's global RNG as a fresh process has it (its default seed): a reset host restores it, so
# a reused actor computes what a new one would even where a model draws from the global RNG
_FRESH_TORCH_RNG = torch.get_rng_state()


class Host:
    def __init__(self, index: int, seed: int, shared: Shared, num_cpus: float, conditions=None):
        self.index = index
        self.device, self.gpu_ids = _pick_device()
        torch.set_num_threads(max(1, int(round(num_cpus))))
        self.ctx = NodeContext(seed, self.device, shared, conditions)
        self.nodes: dict[str, Node] = {}
        self.route: dict[str, int] = {}
        self.local_inbox: list[Message] = []

    def reset(self, index: int, seed: int, shared: Shared, num_cpus: float, conditions=None):
        """Become the fresh host the constructor makes with these arguments (cluster.runtime
        reuses an idle host actor rather than start a new process): no node, no mail, torch's
        global RNG as at start."""
        torch.set_rng_state(_FRESH_TORCH_RNG)
        self.__init__(index, seed, shared, num_cpus, conditions)
        gc.collect()

    # --- set-up (not protocol traffic: this is where each participant's own data comes from) ----
    def add_nodes(self, specs: bytes | list[tuple[type, str, dict]]) -> int:
        """Make the nodes of ``specs``: (class, node id, constructor kwargs), or those pickled
        (:func:`dumps_specs`). Pickled specs unpickle into this process's own, writable memory;
        numpy arrays that Ray passes as arguments are read-only views of its object store, which
        torch warns about when a node makes tensors of them."""
        if isinstance(specs, (bytes, bytearray)):
            specs = pickle.loads(specs)
        for cls, nid, kwargs in specs:
            if nid in self.nodes:
                raise ValueError(f"node {nid} is already on host {self.index}")
            self.nodes[nid] = cls(nid, self.ctx, **kwargs)
        return len(self.nodes)

    def set_route(self, route: dict[str, int]) -> None:
        self.route = route

    # --- checkpoints (not protocol traffic: the operator saving the participants' own state) ----
    def snapshot(self) -> bytes:
        """Every node on this host with its private state and RNG, and undelivered local mail."""
        ctxs = {nid: node.ctx for nid, node in self.nodes.items()}
        try:
            for node in self.nodes.values():
                node.ctx = None  # the host's device and shared config are re-attached on restore
            return dumps_state({"nodes": self.nodes, "local_inbox": self.local_inbox})
        finally:
            for nid, node in self.nodes.items():
                node.ctx = ctxs[nid]

    def restore(self, blob: bytes, keep_mail: bool = True) -> int:
        """Put a :meth:`snapshot` back; ``keep_mail=False`` (recovery after a fault) discards the
        snapshot's undelivered local mail, which belongs to an earlier round."""
        state = pickle.loads(blob)
        if sorted(state["nodes"]) != sorted(self.nodes):
            raise ValueError(f"host {self.index}: the checkpoint holds other nodes than this host")
        for node in state["nodes"].values():
            node.ctx = self.ctx
        self.nodes = state["nodes"]
        self.local_inbox = state["local_inbox"] if keep_mail else []
        return len(self.local_inbox)

    def info(self) -> dict:
        return {
            "index": self.index,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpu_ids": [str(g) for g in self.gpu_ids],
            "device": str(self.device),
            "torch_threads": torch.get_num_threads(),
            "nodes": len(self.nodes),
        }

    # --- one superstep -------------------------------------------------------------------------
    def step(
        self, round_: int, phase: str, activate: list[str], tap: bool, ctrl: dict, *batches: bytes
    ) -> dict:
        """Run one superstep. ``ctrl``: ``availability`` (apply the run's availability model),
        ``absent`` (every node here lost the round to a fault), ``t_start`` (simulated seconds
        since the round began, for the deadline), ``clock`` (measure simulated time)."""
        t0 = time.perf_counter()
        cond = self.ctx.conditions
        seed = self.ctx.seed
        absent = bool(ctrl.get("absent"))
        avail = bool(ctrl.get("availability")) and not cond.fair_weather
        offline_cache: dict[str, bool] = {}

        def away(nid: str) -> bool:  # offline this round (availability), or lost to a fault
            if not avail:
                return False
            v = offline_cache.get(nid)
            if v is None:
                v = offline_cache[nid] = cond.offline(seed, round_, nid)
            return v

        lost_hosts = set(ctrl.get("absent_hosts", ()))  # hosts whose nodes lost this round
        dropped: set[str] = set()
        undelivered = 0
        inbox: dict[str, list[Message]] = defaultdict(list)
        incoming = list(self.local_inbox)
        self.local_inbox = []
        for batch in batches:
            incoming.extend(decode_batch(batch))
        for m in incoming:
            if m.dst not in self.nodes:
                raise ValueError(
                    f"host {self.index}: message {m.kind} for {m.dst}, which it does not carry"
                )
            if absent or away(m.dst):
                dropped.add(m.dst)
                undelivered += 1
                continue
            inbox[m.dst].append(m)
        for msgs in inbox.values():  # a deterministic order, whatever the placement
            msgs.sort(key=lambda m: m.src)

        active = set(inbox)
        for a in activate:
            if "/" in a:
                if a in self.nodes:
                    active.add(a)
            else:
                active.update(nid for nid in self.nodes if role_of(nid) == a)
        if absent or avail:
            gone = {nid for nid in active if absent or away(nid)}
            dropped |= gone
            active -= gone
        by_class: dict[type, list[str]] = defaultdict(list)
        for nid in sorted(active):
            by_class[type(self.nodes[nid])].append(nid)
        t1 = time.perf_counter()

        clock = bool(ctrl.get("clock"))
        deadline = cond.deadline if clock else 0.0
        t_start = float(ctrl.get("t_start", 0.0))
        ledger = Ledger()
        tapped: list[Message] = []
        reports: dict[str, list[float]] = defaultdict(list)
        outgoing: dict[int, list[Message]] = defaultdict(list)
        sim_max, late, late_nodes = 0.0, 0, []
        for cls, nids in sorted(by_class.items(), key=lambda kv: kv[0].__name__):
            nodes = [self.nodes[n] for n in nids]
            for n in nodes:
                n.round, n.phase = round_, phase
            tc = time.perf_counter()
            cls.handle_batch(nodes, phase, [inbox.get(n, []) for n in nids])
            share = (time.perf_counter() - tc) / len(nodes)  # each node's share of the batch
            for n in nodes:
                out, rep = n._drain()
                for name, values in rep.items():
                    reports[name].extend(values)
                keep = []
                for m in out:
                    if m.dst not in self.route:
                        raise ValueError(f"{m.src} sent {m.kind} to unknown node {m.dst}")
                    if away(m.dst) or self.route[m.dst] in lost_hosts:
                        dropped.add(m.dst)
                        undelivered += 1
                    else:
                        keep.append(m)
                if clock:
                    t_n = cond.node_seconds(
                        seed,
                        n.id,
                        share,
                        sum(len(m.payload) for m in inbox.get(n.id, ())),
                        sum(len(m.payload) for m in keep),
                    )
                    if deadline > 0 and t_start + t_n > deadline and cond.participant(n.id):
                        late += len(keep)
                        if keep:
                            late_nodes.append(n.id)
                        keep = []
                        t_n = max(0.0, deadline - t_start)  # nobody waits past the deadline
                    sim_max = max(sim_max, t_n)
                for m in keep:
                    dst_host = self.route[m.dst]
                    ledger.record((round_, phase, m.kind, m.src_role, m.dst_role), len(m.payload))
                    if tap:
                        tapped.append(m)
                    if dst_host == self.index:
                        self.local_inbox.append(m)
                    else:
                        outgoing[dst_host].append(m)
        t2 = time.perf_counter()

        refs, sizes = {}, {}
        for dst_host, msgs in outgoing.items():
            batch = encode_batch(msgs)
            ledger.record_crossed(round_, phase, len(batch))
            refs[dst_host] = ray.put(batch)
            sizes[dst_host] = len(batch)
        t3 = time.perf_counter()
        return {
            "batches": refs,
            "batch_bytes": sizes,  # by destination host (the driver knows which are on other nodes)
            "ledger": ledger.export(),
            "reports": dict(reports),
            "timing": {"decode": t1 - t0, "compute": t2 - t1, "encode": t3 - t2},
            "pending_local": len(self.local_inbox),
            "tapped": tapped,
            "sim": sim_max,
            "dropped": sorted(dropped),
            "undelivered": undelivered,
            "late": late,
            "late_nodes": late_nodes,
        }

    def call(self, nid: str, method: str, *args, **kwargs):
        """Inspection for tests and final read-outs: run a method of one node (no messages)."""
        return getattr(self.nodes[nid], method)(*args, **kwargs)
