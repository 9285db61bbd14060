"""The host: one Ray actor (one OS process) that carries one or more logical nodes.

In a superstep (nodes/step.py) the host decodes the message batches addressed to it, runs one
handler per active node (batched per node class), records every outgoing message in its byte
ledger, keeps messages for its own nodes in memory and encodes the rest into one batch per
destination host. The transport (nodes/transport.py) carries those batches host to host: through
Ray's object store, the driver passing the references on (actor calls), or through the channels
of a compiled graph. Message bytes never travel through the driver.
"""

from __future__ import annotations

import contextlib
import copyreg
import gc
import io
import os
import pickle
import sys
import time
import traceback
from collections import ChainMap, defaultdict
from dataclasses import replace

import numpy as np
import ray
import ray.cloudpickle as cloudpickle

from cluster.ledger import Ledger, is_eval_phase
from cluster.message import (
    Message,
    batch_size,
    decode_batch,
    encode_batch_parts,
    join_batch,
    role_of,
)
from cluster.validate import screen
from nodes.allocator import keep_freed_memory_if_worth_it
from nodes.envelope import check_envelope
from nodes.node import Node, NodeContext, Shared
from nodes.step import Failure, Fault, StepOrder, StepOutcome, StepTiming

# torch is imported by the protocol's own modules when they need it (the node specs a host
# unpickles import them), not by the host: a protocol that never uses torch (echo) keeps it out of
# its host processes (about 180 MiB each).


def _pick_device() -> tuple:
    """(the nodes' device, this actor's GPU ids): a GPU share when Ray gave one, else "cpu" (made
    a torch.device when a node first asks, :class:`nodes.node.NodeContext`)."""
    gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
    if gpu_ids:
        import torch

        if torch.cuda.is_available():
            return torch.device("cuda", 0), gpu_ids  # Ray sets CUDA_VISIBLE_DEVICES to our share
    return "cpu", gpu_ids


# The device this process's nodes compute on (Host sets it): a tensor or torch generator that sat
# on its host's device when pickled (a snapshot, checkpoint or rollback) is put back on the device
# of the host that unpickles it, so that state taken on a GPU host restores on a CPU-only machine
# and the reverse. The pickle itself holds CPU data only.
_NODE_DEVICE = "cpu"


def _node_device():
    import torch

    return torch.device(_NODE_DEVICE)


def _on_node(device) -> bool:
    """Whether ``device`` is this process's nodes' device (an index-less "cuda" is cuda:0)."""
    mine = _node_device()
    return device.type == mine.type and (device.index or 0) == (mine.index or 0)


def _tensor_from_numpy(array, requires_grad: bool, on_node: bool = True):
    from cluster.device import from_numpy

    t = from_numpy(array)
    if on_node:
        t = t.to(_NODE_DEVICE)  # the same tensor on a CPU host
    return t.requires_grad_() if requires_grad else t


def _tensor_to_node_device(t, requires_grad: bool):
    t = t.to(_NODE_DEVICE)
    return t.requires_grad_() if requires_grad else t


def _reduce_tensor(t):
    """A tensor on the nodes' device pickles as CPU data and unpickles on the unpickling host's
    device. A whole, contiguous CPU tensor pickles as its numpy array (about 4x faster than torch's
    own reduction for the thousands of small per-user tensors of a host); CPU views, sparse and
    bfloat16 tensors and tensors inside an autograd graph keep torch's reduction (and the CPU)."""
    import torch

    if t.device.type != "cpu":  # its CPU copy, by the reductions below
        return _tensor_to_node_device, (t.detach().cpu(), t.requires_grad)
    dense = t.layout == torch.strided and t.dtype != torch.bfloat16
    if dense and t.grad_fn is None and t.is_contiguous() and t.storage_offset() == 0:
        if t.untyped_storage().nbytes() == t.numel() * t.element_size():
            return _tensor_from_numpy, (t.detach().numpy(), t.requires_grad, _on_node(t.device))
    return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)


def _generator_on_node_device(kind: str, state, on_node: bool):
    """A torch generator unpickled: on the nodes' device when it sat on its host's device, with
    its state where the device type is the same; on another type of device (a GPU host's state
    restored on a CPU host, or the reverse) none carries over, so it is seeded from a digest of
    the state (the draws go on reproducibly, from another stream)."""
    import hashlib

    import torch

    device = _node_device() if on_node else torch.device(kind)
    g = torch.Generator(device=device)
    if device.type == kind:
        g.set_state(state)
    else:
        digest = hashlib.sha256(state.numpy().tobytes()).digest()
        g.manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    return g


def _reduce_generator(g):
    return _generator_on_node_device, (g.device.type, g.get_state(), _on_node(g.device))


_DISPATCH: dict | None = None  # copyreg's table plus the reductions above, once torch is loaded


def _dispatch() -> dict:
    global _DISPATCH
    torch = sys.modules.get("torch")
    if torch is None:  # no tensor can exist in this process
        return copyreg.dispatch_table
    if _DISPATCH is None:
        _DISPATCH = copyreg.dispatch_table.copy()
        _DISPATCH[torch.Tensor] = _reduce_tensor
        _DISPATCH[torch.Generator] = _reduce_generator
    return _DISPATCH


def dumps_state(state) -> bytes:
    """Pickle a host's nodes: the C pickler with the tensor reduction above, cloudpickle for state
    the standard pickler cannot take (e.g. a lambda)."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _dispatch()
    try:
        pickler.dump(state)
    except (pickle.PicklingError, TypeError, AttributeError):
        buf = io.BytesIO()
        pickler = cloudpickle.CloudPickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = ChainMap(_dispatch(), cloudpickle.CloudPickler.dispatch_table)
        pickler.dump(state)
    return buf.getvalue()


def dumps_specs(specs: list[tuple[type, str, dict]]) -> bytes:
    """Node specs for :meth:`Host.add_nodes`, pickled with cloudpickle (node classes defined in a
    script or a test travel by value where registered so). Protocol 4: numpy arrays are copied
    into the pickle and unpickle writable; protocol 5 would bring a read-only array back
    read-only."""
    return cloudpickle.dumps(specs, protocol=4)


def one_line(e: BaseException, limit: int = 300) -> str:
    """``ExcType: message`` on one line, at most ``limit`` characters."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failure(node: str, round_: int, phase: str, e: BaseException) -> Failure:
    """What the driver learns of a node whose handler raised: where, the exception in one line and
    its full traceback."""
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return Failure(node, round_, phase, one_line(e), tb)


def _fault(node: str, round_: int, phase: str, e: BaseException) -> Fault:
    """A participant's fault record (no traceback: the round goes on)."""
    return Fault(node, round_, phase, one_line(e))


def activated(nodes: dict[str, Node], received, activate) -> set[str]:
    """The nodes that run a superstep: every node that received a message, every node named in
    ``activate`` that is here, and every node of a role named there."""
    active = set(received)
    for a in activate:
        if "/" in a:
            if a in nodes:
                active.add(a)
        else:
            active.update(nid for nid in nodes if role_of(nid) == a)
    return active


def class_batches(nodes: dict[str, Node], active) -> list[tuple[type, list[str]]]:
    """``active`` grouped into one batch per node class, in the order the host runs them (classes
    by name, ids sorted)."""
    by_class: dict[type, list[str]] = defaultdict(list)
    for nid in sorted(active):
        by_class[type(nodes[nid])].append(nid)
    return sorted(by_class.items(), key=lambda kv: kv[0].__name__)


def _round_log(round_) -> dict:
    """What a participant's rollback needs in round ``round_`` (Host._remember): round-start
    pickles (``blobs``, ``where``: node → blob), the supersteps to replay (``steps``), per class
    the pickle a replay starts from where the log restarted (``base``), the classes whose batched
    pass ran (``ran``) and those that keep no inboxes now (``unlogged``)."""
    return {
        "round": round_,
        "blobs": [],
        "where": {},
        "steps": [],
        "base": {},
        "ran": set(),
        "unlogged": set(),
    }


# The seed of torch's global RNG in this process (drawn when torch was loaded; it differs between
# processes): a reset host puts the RNG back in the state that seed gives, which is the state torch
# was loaded with, so a reused actor computes what a new one would even where a model draws from
# the global RNG. Read by the first host call that finds torch loaded (draws do not change it).
_FRESH_TORCH_SEED: int | None = None


class _Presence:
    """Which nodes are away in a superstep: offline this round by the availability model (where
    the order applies it), failed earlier this round, or all of them when the host lost the
    round to a fault."""

    def __init__(self, ctx: NodeContext, order: StepOrder):
        self._cond, self._seed, self._round = ctx.conditions, ctx.seed, order.round
        self._absent = order.absent
        self._avail = order.availability and not self._cond.fair_weather
        self._failed = set(order.failed)
        self._offline: dict[str, bool] = {}
        self.may_be_away = self._absent or self._avail or bool(self._failed)

    def away(self, nid: str) -> bool:
        if self._absent or nid in self._failed:
            return True
        if not self._avail:
            return False
        v = self._offline.get(nid)
        if v is None:
            v = self._offline[nid] = self._cond.offline(self._seed, self._round, nid)
        return v


class _Clock:
    """Simulated time in a training superstep (nodes/conditions.py): each node's seconds from its
    share of the handlers' time and the bytes it received and sent; a participant past the
    round's deadline is late, and what it sent is dropped."""

    def __init__(self, ctx: NodeContext, order: StepOrder, inbox: dict):
        self._cond, self._seed, self.on = ctx.conditions, ctx.seed, order.clock
        self._deadline = self._cond.deadline if order.clock else 0.0
        self._t_start = order.t_start
        self._inbound = (
            {n: sum(len(m.payload) for m in box) for n, box in inbox.items()} if self.on else {}
        )
        self.sim_max = 0.0

    def sent(self, nid: str, share: float, keep: list, out: StepOutcome) -> list:
        """What node ``nid`` sent that goes out (all of it, unless it was late)."""
        if not self.on:
            return keep
        cond = self._cond
        t_n = cond.node_seconds(
            self._seed, nid, share, self._inbound.get(nid, 0), sum(len(m.payload) for m in keep)
        )
        if self._deadline > 0 and self._t_start + t_n > self._deadline and cond.participant(nid):
            out.late += len(keep)
            if keep:
                out.late_nodes.append(nid)
            keep = []
            t_n = max(0.0, self._deadline - self._t_start)  # nobody waits past the deadline
        self.sim_max = max(self.sim_max, t_n)
        return keep


def _put_batches(parts: dict[int, list]) -> dict:
    """Put each destination host's batch (its parts) in the object store; references by
    destination host. A batch of at least _PARTS_FROM bytes whose payloads average
    _PARTS_PAYLOAD goes as its parts, each payload an out-of-band buffer: Ray copies it once,
    straight into the store, with no joined copy beside the payloads (10,000 echo clients: 200 MB
    a host). A smaller batch is joined first: there one copy costs less than Ray's work per
    buffer. Either way the receiver reads it in place from the store."""
    refs = {}
    for dst_host, (head, *payloads) in parts.items():
        size = batch_size([head, *payloads])
        if size >= _PARTS_FROM and size >= _PARTS_PAYLOAD * len(payloads):
            refs[dst_host] = ray.put([head, *map(pickle.PickleBuffer, payloads)])
        else:  # as a numpy array: stored out of band, read in place (bytes would be copied out)
            refs[dst_host] = ray.put(np.frombuffer(join_batch([head, *payloads]), dtype=np.uint8))
    return refs


_PARTS_FROM, _PARTS_PAYLOAD = 64 << 20, 16 << 10  # a batch goes as its parts (_put_batches)
# over a compiled graph, a batch of this many bytes goes through the object store, its reference
# through the channel: read in place there, where a channel copies it in and out
_BY_STORE_FROM = 1 << 20


def _resolved(batches: list) -> list:
    """``batches`` with each object reference (a large batch a compiled graph delivered) read from
    the object store, in place."""
    refs = [b for b in batches if isinstance(b, ray.ObjectRef)]
    if not refs:
        return batches
    got = iter(ray.get(refs))
    return [next(got) if isinstance(b, ray.ObjectRef) else b for b in batches]


class Host:
    """One Ray actor (one OS process) carrying logical nodes; its methods are what the driver and
    the other hosts may ask of it.

    It owns its nodes (their private state, RNGs and models, on :attr:`device`), their mail (the
    messages its own nodes sent one another, and the batches other hosts sent it and it has not
    delivered yet), the rollback copies of a round's participants, and its process's torch
    threads, RNG and allocator. In a superstep (:meth:`step` over actor calls, :meth:`graph_step`
    and :meth:`deliver` over a compiled graph; both take a :class:`nodes.step.StepOrder` and
    answer a :class:`nodes.step.StepOutcome`) it touches nothing else: what its nodes send
    leaves it only as encoded batches, counted in its ledger. Set-up (:meth:`add_nodes`,
    :meth:`set_route`), checkpoints (:meth:`snapshot`, :meth:`restore`, :meth:`held_mail`) and
    inspection (:meth:`call`, :meth:`info`) are the operator's, not protocol traffic."""

    def __init__(
        self,
        index: int,
        seed: int,
        shared: Shared,
        num_cpus: float,
        conditions=None,
        default_device: str | None = None,
    ):
        global _NODE_DEVICE
        self.index = index
        self.device, self.gpu_ids = _pick_device()
        _NODE_DEVICE = str(self.device)
        # torch's default device while the nodes' code runs (None: torch's own, the CPU). "meta"
        # makes a tensor that a node creates without its ctx.device a shapeless placeholder that
        # breaks the run at its first use beside a real one (--check-device)
        self.default_device = default_device
        self.threads = max(1, int(round(num_cpus)))  # torch's intra-op threads
        self._torch_ready = False
        self._torch_loaded()
        self.ctx = NodeContext(seed, self.device, shared, conditions)
        self.nodes: dict[str, Node] = {}
        self.route: dict[str, int] = {}
        self._roles: dict[str, str] = {}
        self._senders: dict = {}  # role -> the sender roles it accepts (nodes/envelope.py)
        self.local_inbox: list[Message] = []
        self._mail: dict[int, object] = {}  # source host -> the batch it sent (a compiled graph's)
        # (superstep, its outcome, its batches not yet delivered): the answer to give if asked again
        self._answered: tuple | None = None
        self._kept_refs: list = []  # batches this host put in the store over a graph
        self._in_place: frozenset[str] | None = None  # nodes whose class READS_IN_PLACE
        # ((round, training?), participants that ran a handler in it): the share that failed
        self._ran: tuple = (None, set())
        # what a participant's rollback needs this round (see _handle)
        self._round_log: dict = _round_log(None)

    def reset(self, *args, **kwargs):
        """Become the fresh host the constructor makes with these arguments (cluster.runtime
        reuses an idle host actor rather than start a new process): no node, no mail, torch's
        global RNG as at start."""
        if _FRESH_TORCH_SEED is not None:
            torch = sys.modules["torch"]
            torch.set_rng_state(torch.Generator().manual_seed(_FRESH_TORCH_SEED).get_state())
        self.__init__(*args, **kwargs)
        gc.collect()

    def _nodes_code(self):
        """The context the nodes' own code runs in: torch's default device set to
        :attr:`default_device` when one is given."""
        if self.default_device is None:
            return contextlib.nullcontext()
        from cluster.device import checking

        return checking(self.default_device)

    def _torch_loaded(self) -> None:
        """Once torch is loaded in this process: give it this host's thread count and remember
        its RNG's seed (once a process, see _FRESH_TORCH_SEED)."""
        global _FRESH_TORCH_SEED
        if self._torch_ready or "torch" not in sys.modules:
            return
        torch = sys.modules["torch"]
        if _FRESH_TORCH_SEED is None:
            _FRESH_TORCH_SEED = torch.initial_seed()
        torch.set_num_threads(self.threads)
        self._torch_ready = True

    # --- set-up (not protocol traffic: this is where each participant's own data comes from) ----
    def add_nodes(self, specs: bytes | list[tuple[type, str, dict]]) -> int:
        """Make the nodes of ``specs``: (class, node id, constructor kwargs), or those pickled
        (:func:`dumps_specs`). Pickled specs unpickle into this process's own, writable memory;
        numpy arrays that Ray passes as arguments are read-only views of its object store, which
        torch warns about when a node makes tensors of them."""
        if isinstance(specs, (bytes, bytearray)):
            specs = pickle.loads(specs)  # imports the protocol's modules (and torch if they do)
        self._torch_loaded()
        with self._nodes_code():
            for cls, nid, kwargs in specs:
                if nid in self.nodes:
                    raise ValueError(f"node {nid} is already on host {self.index}")
                self.nodes[nid] = cls(nid, self.ctx, **kwargs)
        self._in_place = None
        return len(self.nodes)

    def set_route(self, route: dict[str, int], senders: dict | None = None) -> None:
        """Where every node lives, and which sender roles each role accepts (the envelope,
        nodes/envelope.py; None: every role may address every role)."""
        self.route = route
        self._roles = {nid: role_of(nid) for nid in route}  # for the ledger's keys
        self._senders = senders or {}

    def _sent(self, nodes: list[Node], round_: int, phase: str) -> None:
        """Raise EnvelopeError where a node's outbox leaves the envelope (as if its handler had
        raised: a participant fails for the round, another node stops the run)."""
        for n in nodes:
            check_envelope(n.id, n._outbox, self.route, self._senders, round_, phase)

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
        self._torch_loaded()
        state = pickle.loads(blob)
        if sorted(state["nodes"]) != sorted(self.nodes):
            raise ValueError(f"host {self.index}: the checkpoint holds other nodes than this host")
        for node in state["nodes"].values():
            node.ctx = self.ctx
        self.nodes = state["nodes"]
        self.local_inbox = state["local_inbox"] if keep_mail else []
        self._mail, self._answered = {}, None
        self._round_log = _round_log(None)
        return len(self.local_inbox)

    def info(self) -> dict:
        torch = sys.modules.get("torch")
        return {
            "index": self.index,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpu_ids": [str(g) for g in self.gpu_ids],
            "device": str(self.device),
            "torch_loaded": torch is not None,
            # without torch: the count it gets when a protocol loads it
            "torch_threads": torch.get_num_threads() if torch is not None else self.threads,
            "nodes": len(self.nodes),
        }

    # --- one superstep -------------------------------------------------------------------------
    def step(self, order: StepOrder, *batches) -> StepOutcome:
        """Run one superstep over actor calls (nodes/transport.py ``ActorCalls``). ``batches``:
        the batches other hosts sent here (Ray resolves their references), delivered with any this
        host holds (:meth:`deliver`). The batches for other hosts go into Ray's object store; the
        outcome's ``batches`` holds their references.

        A participant (``conditions.participant``) whose handler raises has failed for the round
        (:meth:`_handle`): put back as it was before this superstep, its outputs and inbox
        discarded, listed in ``faults``. Any other node's exception ends the step at once with
        ``failure``, which the driver raises."""
        outcome, parts = self._superstep(order, batches)
        if parts:
            outcome = replace(outcome, batches=_put_batches(parts))
            self._answered = (order.seq, outcome, {})  # the store holds the batches now
        return outcome

    def join_graph(self) -> None:
        """Before a compiled graph is built over this host: tell Ray's channels that no torch
        tensor travels through them (the batches are bytes), so that they do not import torch
        into a process whose protocol never does (about 180 MiB)."""
        from ray.experimental.channel.common import ChannelContext

        ChannelContext.get_current()._torch_available = False

    def graph_step(self, orders: tuple[StepOrder, ...]) -> StepOutcome | tuple:
        """The first stage of a superstep over a compiled graph (nodes/transport.py
        ``Channels``): run this host's order of ``orders``. Alone in the graph, it returns its
        outcome; else the batch for each host in order (None where there is none), which the
        graph carries to that host's :meth:`deliver`, and the outcome waits for its own."""
        order = orders[self.index]
        outcome, parts = self._superstep(order, _resolved(list(order.batches)))
        if len(orders) == 1:
            return outcome
        big = {h: p for h, p in parts.items() if batch_size(p) >= _BY_STORE_FROM}
        refs = _put_batches(big) if big else {}
        # this host owns what it put: kept until its next superstep, by when every receiver has
        # read it (:meth:`deliver`; the driver waits for every stage of a superstep)
        self._kept_refs = list(refs.values())
        return tuple(refs.get(h, parts.get(h)) for h in range(len(orders)))

    def deliver(self, *batches) -> StepOutcome:
        """The second stage: keep the batch each host sent here (by source host; None where
        none) for the next superstep. Returns this host's outcome of the superstep."""
        # a large batch came as its object reference: read in place now, while its sender holds it
        for src, batch in enumerate(_resolved(list(batches))):
            if batch is not None:
                self._mail[src] = batch
        seq, outcome, _ = self._answered
        self._answered = (seq, outcome, {})  # delivered: a superstep asked again sends nothing
        return outcome

    def held_mail(self) -> list[tuple[int, bytes]]:
        """The batches this host holds for its next superstep, by source host, joined (what a
        checkpoint stores)."""
        return [(src, join_batch(b)) for src, b in sorted(self._mail.items())]

    def _superstep(self, order: StepOrder, batches) -> tuple[StepOutcome, dict[int, list]]:
        """The superstep ``order`` asks for, in its stages: :meth:`_take_mail`,
        :meth:`_deliver_mail`, :meth:`_run_handlers` (which clocks and routes what the nodes send)
        and :meth:`_encode`. Returns the outcome and the batches for other hosts (by host, as
        their parts). Asked again for the superstep it answered last, the host answers the same
        (its nodes do not run twice) with the batches not yet delivered."""
        if self._answered is not None and self._answered[0] == order.seq:
            return self._answered[1], self._answered[2]
        t0 = time.perf_counter()
        with self._nodes_code():
            self._torch_loaded()
            out = StepOutcome()
            mail = self._take_mail(order, batches)
            presence = _Presence(self.ctx, order)
            inbox, dropped = self._deliver_mail(order, mail, presence, out)
            t1 = time.perf_counter()
            outgoing, ledger = self._run_handlers(order, inbox, presence, dropped, out)
            if out.failure is not None:
                self._answered = (order.seq, out, {})
                return out, {}
            t2 = time.perf_counter()
            inbox.clear()  # what this superstep received is freed before the heap is trimmed
            parts = self._encode(order, outgoing, ledger, out)
            t3 = time.perf_counter()
        out.dropped = sorted(dropped)
        out.ledger = ledger.export()
        out.timing = StepTiming(decode=t1 - t0, compute=t2 - t1, encode=t3 - t2)
        out.pending_local = len(self.local_inbox)
        keep_freed_memory_if_worth_it(sum(map(batch_size, mail)) + sum(out.batch_bytes.values()))
        self._answered = (order.seq, out, parts)
        return out, parts

    def _take_mail(self, order: StepOrder, batches) -> list:
        """Stage 1: the batches to deliver: those held (less those from hosts in
        ``order.drop_sources``, which died since they sent them) and those passed in."""
        held = [b for src, b in sorted(self._mail.items()) if src not in order.drop_sources]
        self._mail = {}
        return held + list(batches)

    def _deliver_mail(self, order: StepOrder, mail: list, presence: _Presence, out: StepOutcome):
        """Stage 2: decode the mail and put each message in its node's inbox, sorted by sender;
        mail for a node that is away is undelivered, and a message that fails its receiver's
        check (cluster/validate.py) is rejected. Returns the inboxes and the nodes that missed
        theirs."""
        dropped: set[str] = set()
        rejected: dict[tuple[str, str], int] = defaultdict(int)
        shared, checked = self.ctx.shared, {}  # verdicts per (payload object, check)
        inbox: dict[str, list[Message]] = defaultdict(list)
        incoming, self.local_inbox = self.local_inbox, []
        if mail and self._in_place is None:
            self._in_place = frozenset(n for n, node in self.nodes.items() if node.READS_IN_PLACE)
        for batch in mail:
            incoming.extend(decode_batch(batch, self._in_place))
        for m in incoming:
            node = self.nodes.get(m.dst)
            if node is None:
                raise ValueError(
                    f"host {self.index}: message {m.kind} for {m.dst}, which it does not carry"
                )
            if presence.may_be_away and presence.away(m.dst):
                dropped.add(m.dst)
                out.undelivered += 1
                continue
            bad = screen(type(node).accepts(), m, order.phase, shared, checked)
            if bad is not None:  # untrusted input that fails its check never reaches a handler
                rejected[(m.kind, bad.reason)] += 1
                continue
            inbox[m.dst].append(m)
        for msgs in inbox.values():  # a deterministic order, whatever the placement
            msgs.sort(key=lambda m: m.src)
        out.rejected = rejected
        return inbox, dropped

    def _run_handlers(self, order: StepOrder, inbox, presence: _Presence, dropped, out):
        """Stage 3: run the handlers of the active nodes (those with mail and those the order
        activates, less those away), one batch per node class, then clock and route what each
        node sent: to its own host's next superstep, or to the batch for its destination host.
        Returns the messages for other hosts (by host) and the ledger of what was sent."""
        round_, phase, cond = order.round, order.phase, self.ctx.conditions
        active = activated(self.nodes, inbox, order.activate)
        if presence.may_be_away:
            gone = {nid for nid in active if presence.away(nid)}
            dropped |= gone
            active -= gone
        key = (round_, order.clock)
        if self._ran[0] != key:
            self._ran = (key, set())
        self._ran[1].update(nid for nid in active if cond.participant(nid))
        out.participants = len(self._ran[1])  # that ran a handler this round (this kind)
        clock = _Clock(self.ctx, order, inbox)
        ledger = Ledger()
        reports: dict[str, list[float]] = defaultdict(list)
        outgoing: dict[int, list[Message]] = defaultdict(list)
        lost_hosts = set(order.absent_hosts)
        for cls, nids in class_batches(self.nodes, active):
            tc = time.perf_counter()
            nids, raised, failure = self._handle(cls, nids, round_, phase, inbox)
            if failure is not None:  # a server, key server, matcher...: the run stops
                out.failure = failure
                return {}, ledger
            for f in raised:  # failed for the round, like a dropout: its inbox is not delivered
                dropped.add(f.node)
                out.undelivered += len(inbox.get(f.node, ()))
            out.faults.extend(raised)
            if not nids:
                continue
            nodes = [self.nodes[n] for n in nids]
            share = (time.perf_counter() - tc) / len(nodes)  # each node's share of the batch
            for n in nodes:
                for reason in n._rejected:
                    out.rejected[reason] = out.rejected.get(reason, 0) + 1
                sent, rep = n._drain()
                for name, values in rep.items():
                    reports[name].extend(values)
                keep = []
                for m in sent:  # inside the envelope (checked by _handle)
                    if (presence.may_be_away and presence.away(m.dst)) or (
                        lost_hosts and self.route[m.dst] in lost_hosts
                    ):
                        dropped.add(m.dst)
                        out.undelivered += 1
                    else:
                        keep.append(m)
                keep = clock.sent(n.id, share, keep, out)
                for m in keep:
                    dst_host = self.route[m.dst]
                    ledger.record(
                        (round_, phase, m.kind, self._roles[m.src], self._roles[m.dst]),
                        len(m.payload),
                    )
                    if order.tap:
                        out.tapped.append(m)
                    if dst_host == self.index:
                        self.local_inbox.append(m)
                    else:
                        outgoing[dst_host].append(m)
        out.reports = dict(reports)
        out.sim = clock.sim_max
        return outgoing, ledger

    def _encode(self, order: StepOrder, outgoing, ledger: Ledger, out: StepOutcome) -> dict:
        """Stage 4: each destination host's messages as one batch (its parts), its bytes counted
        as crossed."""
        parts = {}
        for dst_host, msgs in outgoing.items():
            parts[dst_host] = encode_batch_parts(msgs)
            out.batch_bytes[dst_host] = size = batch_size(parts[dst_host])
            ledger.record_crossed(order.round, order.phase, size)
        outgoing.clear()
        return parts

    def _handle(self, cls, nids: list[str], round_: int, phase: str, inbox: dict):
        """Run the handler of ``cls`` for the nodes ``nids`` (one batch). Returns the nodes that
        completed, the fault records of participants that raised, and the failure of a
        non-participant that raised (else None).

        A participant that raises has failed for the round, as if it had been offline all round:
        the host keeps each participant's state as the round found it (pickled once per round, at
        its first training superstep, :meth:`_remember`). A phase the class handles node by node
        (``Node.batches``) runs one node at a time: one that raises is put back as the round found
        it, its outputs dropped, and the others are not touched. When a batched pass raises, its
        nodes are put back as the round found them, replay the round's earlier supersteps from the
        inboxes the host kept for that (their outputs were sent then; now they are dropped), and
        run this superstep again one at a time (a batched handler gives each node what it would
        get alone): the nodes that did not raise keep their result; one that raises alone is put
        back as the round found it, its outputs dropped, and has failed for the round."""
        nodes = [self.nodes[n] for n in nids]
        for n in nodes:
            n.round, n.phase = round_, phase
        inboxes = [inbox.get(n, []) for n in nids]
        cond = self.ctx.conditions
        participant = cond.participant(nids[0])
        training = not is_eval_phase(phase)  # evaluation leaves a node's state as it was
        keep = participant and training and cond.failure_rollback
        batched = cls.batches(phase)
        if keep:
            logged = self._remember(cls, round_, phase, nids, nodes, inboxes, batched)
            if not batched:
                return self._one_by_one(cls, nids, nodes, inboxes, round_, phase, True, not logged)
        try:
            cls.run_phase(nodes, phase, inboxes)
            self._sent(nodes, round_, phase)
            return nids, [], None
        except Exception as e:
            if not participant:
                who = nids[0] if len(nids) == 1 else f"{nids[0]} (one of {len(nids)})"
                return [], [], _failure(who, round_, phase, e)
            error = e
        for n in nodes:
            n._drain()  # what the failed batch sent or reported does not stand
        if training and not keep:  # no copy kept (failure_rollback off): the batch failed
            return [], [_fault(nid, round_, phase, error) for nid in nids], None
        fresh = self._replayed(cls, nids) if keep else nodes
        return self._one_by_one(cls, nids, fresh, inboxes, round_, phase, keep, False)

    def _one_by_one(
        self, cls, nids, nodes, inboxes, round_: int, phase: str, restore: bool, release: bool
    ):
        """Run ``nodes`` (which become this host's nodes ``nids``) one at a time; one that raises
        has its outputs dropped and, with ``restore`` (a rollback copy is kept), is put back as the
        round found it: nothing it did this round stands. ``release``: the inboxes are not kept
        for a replay, so each is let go once its node has handled it (on a gossip step the step's
        traffic then leaves memory as the next step's comes in)."""
        done, raised = [], []
        for nid, node, box in zip(nids, nodes, inboxes):
            node.round, node.phase = round_, phase
            self.nodes[nid] = node
            try:
                cls.run_phase([node], phase, [box])
                self._sent([node], round_, phase)
            except Exception as e:
                node._drain()
                if restore:
                    self.nodes[nid] = self._as_round_began([nid])[nid]
                raised.append(_fault(nid, round_, phase, e))
            else:
                done.append(nid)
                if release:
                    box.clear()
        return done, raised, None

    def _remember(self, cls, round_: int, phase: str, nids, nodes, inboxes, batched) -> bool:
        """Keep what a rollback needs: the state of each participant as the round found it
        (pickled at its first training superstep of the round) and, until the class's first
        batched phase of the round (``BATCHED_PHASES``) has run, the inboxes of its supersteps, to
        replay them should that pass raise. After it, and in every phase of a class that batches
        none, the phases handled node by node keep no inboxes (on a gossip round those are the
        round's whole traffic); should another batched phase come in the same round, its class's
        nodes are pickled as they are then, the start of their replay. Returns whether this
        superstep's inboxes are kept."""
        log = self._round_log
        if log["round"] != round_:
            log = self._round_log = _round_log(round_)
        new = [n for n in nodes if n.id not in log["where"]]
        if new:
            log["blobs"].append(self._pickle_nodes(new))
            for n in new:
                log["where"][n.id] = len(log["blobs"]) - 1
        declared = cls.batched_phases()
        if batched and cls in log["unlogged"]:  # the replay starts here, for all its nodes
            mine = [self.nodes[nid] for nid in log["where"] if type(self.nodes[nid]) is cls]
            log["base"][cls] = self._pickle_nodes(mine)
            log["steps"] = [s for s in log["steps"] if s[0] is not cls]
            log["unlogged"].discard(cls)
        elif not batched and declared is not None and (cls in log["ran"] or not declared):
            # its batched pass ran, or it has none: no replay to keep inboxes for
            if cls not in log["unlogged"]:
                log["unlogged"].add(cls)
                log["steps"] = [s for s in log["steps"] if s[0] is not cls]
                log["base"].pop(cls, None)
            return False
        if batched:
            log["ran"].add(cls)
        log["steps"].append((cls, phase, list(nids), inboxes))
        return True

    def _as_round_began(self, nids) -> dict[str, Node]:
        """Fresh copies of the nodes ``nids`` as the round found them."""
        log, out = self._round_log, {}
        for b in sorted({log["where"][nid] for nid in nids}):
            for n in self._unpickle_nodes(log["blobs"][b]):
                if n.id in nids:
                    out[n.id] = n
        return out

    def _replayed(self, cls, nids) -> list[Node]:
        """The nodes ``nids`` as they were before this superstep: put back as the round found
        them (or as they were when the replay log of their class restarted), then the round's
        earlier supersteps of their class run again on them, in order, with the inboxes they had
        (what they send or report is dropped: it stood the first time)."""
        start = self._as_round_began(nids)
        base = self._round_log["base"].get(cls)
        if base is not None:
            start.update({n.id: n for n in self._unpickle_nodes(base) if n.id in start})
        for step_cls, phase, step_nids, boxes in self._round_log["steps"][:-1]:
            if step_cls is not cls:
                continue
            sel = [i for i, nid in enumerate(step_nids) if nid in start]
            if not sel:
                continue
            batch = [start[step_nids[i]] for i in sel]
            for n in batch:
                n.phase = phase
            cls.run_phase(batch, phase, [boxes[i] for i in sel])
            for n in batch:
                n._drain()
        return [start[nid] for nid in nids]

    def _pickle_nodes(self, nodes: list[Node]) -> bytes:
        ctxs = [n.ctx for n in nodes]
        try:
            for n in nodes:
                n.ctx = None
            return dumps_state(nodes)
        finally:
            for n, c in zip(nodes, ctxs):
                n.ctx = c

    def _unpickle_nodes(self, blob: bytes) -> list[Node]:
        nodes = pickle.loads(blob)
        for n in nodes:
            n.ctx = self.ctx
        return nodes

    def call(self, nid: str, method: str, *args, **kwargs):
        """Inspection for tests and final read-outs: run a method of one node (no messages)."""
        return getattr(self.nodes[nid], method)(*args, **kwargs)
