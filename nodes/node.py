"""A logical node: one participant of a protocol (a user's device, a party, a server, a key server).

A node owns private state and an RNG derived from ``(seed, node id)``; its privacy mechanisms
draw their noise from ``noise_rng`` / ``noise_generator()`` — that same seeded stream by default,
a cryptographically secure generator keyed from the OS with ``--secure-rng`` (privacy/noise.py).
It learns about the world only through the messages delivered to it, and acts by sending
messages. Protocols subclass :class:`Node` per role and implement :meth:`handle` (one node) or
:meth:`handle_batch` (all the active nodes of that class on a host at once, e.g. one vectorised
pass). A batched handler must give each node the result it would get alone: tests check that.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from cluster.message import Message, index_of, role_of

if TYPE_CHECKING:
    import torch


def node_seed(seed: int, nid: str) -> int:
    """The seed of a node's RNG, which depends only on the run's seed and the node id.

    Args:
        seed: The run's seed.
        nid: The node id (``"user/3"``).

    Returns:
        A non-negative 63-bit integer (from SHA-256 of both).
    """
    digest = hashlib.sha256(f"privrec:{seed}:{nid}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@dataclasses.dataclass(frozen=True)
class Shared:
    """What every host receives from the protocol, as typed records.

    Nodes read them as ``self.config``, ``self.public`` and ``self.threat``
    (:meth:`Protocol.shared <protocols.base.Protocol.shared>` makes it).

    Attributes:
        config: The protocol's Config dataclass (hyper-parameters).
        public: The protocol's record of public values derived from the data or calibrated before
            the run (sizes, the public catalogue, σ), never another node's data.
        threat: The run's adversary condition (:class:`adversaries.condition.Threat`: target
            items, the aggregating role's defence), set by the engine; None without one.
    """

    config: Any = None
    public: Any = None
    # the run's adversary condition as the nodes read it (adversaries.condition.Threat: target
    # items, the aggregating role's defence); None without one. The engine sets it.
    threat: Any = None


class NodeContext:
    """What the host gives every node it carries.

    Args:
        seed: The run's seed.
        device: The compute device, a ``torch.device`` or its name (made a device at first use,
            when torch is imported).
        shared: The protocol's :class:`Shared` records.
        conditions: The run conditions (:class:`nodes.conditions.Conditions`); None: none.
    """

    def __init__(self, seed: int, device, shared: Shared, conditions=None):
        from nodes.conditions import Conditions

        self.seed = seed
        # a torch.device, or its name (made one at first use: torch is imported then)
        self._device = device
        self.shared = shared
        self.conditions = conditions if conditions is not None else Conditions()

    @property
    def device(self) -> torch.device:
        """The compute device as a ``torch.device``."""
        if isinstance(self._device, str):
            import torch

            self._device = torch.device(self._device)
        return self._device


class Node:
    """One participant of a protocol; a protocol subclasses it once per role.

    A role implements :meth:`handle` (one node, one phase) or the classmethod :meth:`handle_batch`
    (all the active nodes of the class on a host at once). A handler reads the messages delivered
    to it, acts on its private state, and calls :meth:`send` and :meth:`report`; it draws from
    :attr:`rng`, takes privacy noise from :attr:`noise_rng` / :meth:`noise_generator`, and drops
    what a participant sent wrongly with :meth:`admit` / :meth:`reject` rather than raising.
    The class attributes below declare what the host checks and how it runs the class.

    Args:
        nid: The node's id, ``"{role}/{index}"`` (:func:`cluster.message.node_id`).
        ctx: What its host gives it (:class:`NodeContext`).

    Attributes:
        role: The role, the first part of the id of every node of the class (``"user"``).
        ACCEPTS: What the role accepts: message kind -> :class:`cluster.validate.Accept`.
        BATCHED_PHASES: The phases :meth:`handle_batch` runs as one pass (see :meth:`batches`).
        READS_IN_PLACE: Whether payloads may arrive as read-only views of the received batch.
        SECURE_SUM: What the role's server sums securely (:class:`nodes.secure_sum.SecureSum`).
        keep_masked_views: Whether a server keeps each user's masked input, for an attack.
        id: The node's id.
        ctx: Its :class:`NodeContext`.
        round: The current round (-1 before the first).
        phase: The current phase.

    Raises:
        ValueError: ``nid`` does not carry the class's ``role``.
    """

    role: ClassVar[str] = "node"
    # What this role accepts: message kind -> cluster.validate.Accept (sender roles, phases, the
    # payload's check). The host drops and counts what fails; None accepts everything (a class
    # that declares nothing, e.g. a plugin's, leaves every check to its handler).
    ACCEPTS: ClassVar[dict | None] = None
    # The phases (name before any "/") whose handle_batch is one pass over the whole batch, so that
    # one node raising leaves the others' results unknown. None: every phase, where the class
    # overrides handle_batch; a class that keeps the node-by-node handle_batch batches none.
    BATCHED_PHASES: ClassVar[frozenset[str] | None] = None
    # True where the class's handlers read each payload during the superstep and keep none of it
    # (an aggregating server that sums what arrives): the host then delivers payloads as read-only
    # views of the batch it received, not copies (cluster.message.decode_batch's in_place).
    READS_IN_PLACE: ClassVar[bool] = False
    # What this role's server sums (nodes/secure_sum.py SecureSum), declared on the server's and
    # the users' classes of a protocol that supports --secure-aggregation; None: nothing.
    SECURE_SUM: ClassVar[Any] = None
    # a server that keeps each user's masked input (what a curious server holds) for an attack
    keep_masked_views: ClassVar[bool] = False
    # the secure noise generator of --secure-rng, made at first use (see noise_rng); a class
    # default, so that a node restored from a pickle whose state lacks the attribute reads None
    _noise_rng: np.random.Generator | None = None

    @classmethod
    def batched_phases(cls) -> frozenset[str] | None:
        """The phases the class's :meth:`handle_batch` runs as one pass.

        Returns:
            ``BATCHED_PHASES`` (None: every phase), or an empty set where the class keeps the
            node-by-node :meth:`handle_batch`.
        """
        if getattr(cls.handle_batch, "__func__", None) is Node.handle_batch.__func__:
            return frozenset()
        return cls.BATCHED_PHASES

    @classmethod
    def batches(cls, phase: str) -> bool:
        """Whether :meth:`handle_batch` runs ``phase`` as one pass over its nodes.

        Where it does, one node raising leaves the others' results unknown; otherwise the host may
        run the nodes one at a time. The secure-aggregation stages (``secagg_*``) never do.

        Args:
            phase: The phase's name; its part before any ``"/"`` is matched against
                ``BATCHED_PHASES``.

        Returns:
            True where the phase is batched.
        """
        if phase.startswith("secagg_"):  # per-node crypto (nodes/secure_sum.py)
            return False
        declared = cls.batched_phases()
        return declared is None or phase.split("/", 1)[0] in declared

    def __init__(self, nid: str, ctx: NodeContext):
        if role_of(nid) != self.role:
            raise ValueError(
                f"node id {nid!r} does not carry the role {self.role!r} of {type(self).__name__}"
            )
        self.id = nid
        self.ctx = ctx
        self._rng: np.random.Generator | None = None  # made at first use (see rng)
        self.round = -1
        self.phase = ""
        self._outbox: list[Message] = []
        self._reports: dict[str, list[float]] = defaultdict(list)
        self._rejected: list[tuple[str, str]] = []  # (kind, reason) of messages it dropped

    # --- what a handler may do ------------------------------------------------------------------
    @property
    def rng(self) -> np.random.Generator:
        """This node's RNG, seeded from ``(seed, node id)`` alone (:func:`node_seed`).

        Made at its first use: a node that never draws (an echo client, a relay) carries none,
        which keeps its memory and the per-round copy of its state (the host's rollback) small;
        the stream does not depend on when it is made.
        """
        if self._rng is None:
            self._rng = np.random.default_rng(node_seed(self.ctx.seed, self.id))
        return self._rng

    @rng.setter
    def rng(self, value: np.random.Generator) -> None:
        self._rng = value

    @property
    def device(self) -> torch.device:
        """The compute device this node's host runs it on."""
        return self.ctx.device

    @property
    def config(self):
        """The protocol's Config dataclass (the same for every node of the run)."""
        return self.ctx.shared.config

    @property
    def public(self):
        """The protocol's record of public values (sizes, public catalogue, calibrated noise)."""
        return self.ctx.shared.public

    @property
    def threat(self):
        """The run's :class:`adversaries.condition.Threat` (target items, defence), or None."""
        return self.ctx.shared.threat

    def online(self, nid: str) -> bool:
        """Whether participant ``nid`` is reachable in the current round.

        What a device learns by trying to connect (see nodes/conditions.py). Evaluation phases
        see everyone online.

        Args:
            nid: The participant's node id.

        Returns:
            True where it is online.
        """
        from cluster.ledger import is_eval_phase

        if is_eval_phase(self.phase):
            return True
        return not self.ctx.conditions.offline(self.ctx.seed, self.round, nid)

    @property
    def min_participants(self) -> int:
        """Below this many uploads a server skips the round's update (run condition)."""
        return self.ctx.conditions.min_participants

    def torch_generator(self, device=None) -> torch.Generator:
        """A torch generator seeded from this node's RNG stream (the seed's draw advances it).

        Args:
            device: The generator's device; None: this node's device.

        Returns:
            A new seeded ``torch.Generator``.
        """
        import torch

        device = self.device if device is None else device
        return torch.Generator(device=device).manual_seed(int(self.rng.integers(0, 2**63 - 1)))

    def build(self, factory: Callable[[], torch.nn.Module]) -> torch.nn.Module:
        """A module initialised on the CPU and moved to this node's device.

        :func:`cluster.device.build`: the same initial numbers on every device.

        Args:
            factory: Makes the module; torch's CPU generator draws its initial weights.

        Returns:
            The module, on this node's device.
        """
        from cluster.device import build

        return build(factory, self.device)

    def tensor(self, data, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``data`` as a tensor on this node's device (:func:`cluster.device.to_device`).

        Args:
            data: A numpy array or a tensor; on the CPU a numpy array shares its memory, as
                ``torch.from_numpy`` does.
            dtype: The tensor's dtype; None: the data's own.

        Returns:
            The tensor.
        """
        from cluster.device import to_device

        return to_device(data, self.device, dtype)

    # --- where privacy mechanisms draw their noise (privacy/noise.py) ---------------------------
    @property
    def secure_rng(self) -> bool:
        """Whether the run draws its noise from a cryptographically secure generator
        (``--secure-rng``, the run condition ``secure_rng``)."""
        return bool(self.ctx.conditions.secure_rng)

    @property
    def noise_rng(self) -> np.random.Generator:
        """The numpy generator a privacy mechanism draws its noise from.

        By default :attr:`rng` itself (one seed, the same noise). With ``--secure-rng``, this
        node's :class:`privacy.noise.SecureGenerator` (ChaCha20 keyed from the OS, made at first
        use; a pickled copy of the node — snapshot, checkpoint, rollback — gets a fresh key).
        """
        if not self.secure_rng:
            return self.rng
        if self._noise_rng is None:
            from privacy.noise import SecureGenerator

            self._noise_rng = SecureGenerator()
        return self._noise_rng

    def noise_generator(self, seeded: torch.Generator | None = None, device=None):
        """What a torch mechanism draws its noise from.

        ``privacy.ldp``, ``onebit``, ``ternary``, DIPSGNN's eq. 7 and DP-SGD take either kind.

        Args:
            seeded: A torch generator the caller already holds, drawn from this node's stream.
            device: The device of a new generator; None: this node's device.

        Returns:
            By default a torch generator: ``seeded`` where given, else a new one seeded from
            :attr:`rng` on ``device`` (:meth:`torch_generator`). With ``--secure-rng``,
            :attr:`noise_rng` (a numpy generator: no torch generator is cryptographically
            secure; the mechanism converts its draws to torch).
        """
        if self.secure_rng:
            return self.noise_rng
        if seeded is not None:
            return seeded
        return self.torch_generator(device)

    def noise_seed(self) -> int | bytes:
        """A seed from which noise is regenerated on demand.

        For noise that must be the same each time it is drawn (e.g. EdgeRand's noise of one
        prefix graph, the same in every epoch).

        Returns:
            An int drawn from :attr:`rng` by default; with ``--secure-rng``, 32 secret bytes from
            the OS (expanded by ``privacy.noise.keyed_generator``).
        """
        if self.secure_rng:
            from privacy.noise import secret_key

            return secret_key()
        return int(self.rng.integers(0, 2**63 - 1))

    def send(self, kind: str, dst: str, payload: bytes) -> None:
        """Queue a message for ``dst``, delivered at the next superstep.

        With secure aggregation, an upload of a kind the server sums is not sent but held for
        this round's masked input (nodes/secure_sum.py).

        Args:
            kind: The message kind (what the receiver's ``ACCEPTS`` names).
            dst: The receiver's node id.
            payload: The encoded payload (cluster/wire.py); one bytes object may go to many.
        """
        spec = type(self).SECURE_SUM
        if (
            spec is not None
            and dst == spec.server
            and kind in spec.kinds
            and self.secure_aggregation
        ):
            from nodes import secure_sum

            secure_sum.hold(self, spec, kind, payload)
            return
        self._outbox.append(Message(kind, self.id, dst, self.round, self.phase, payload))

    @property
    def secure_aggregation(self) -> bool:
        """Whether this run sums the uploads of ``SECURE_SUM`` securely.

        Returns:
            True where the class declares ``SECURE_SUM`` and the run has ``--secure-aggregation``.
        """
        spec = type(self).SECURE_SUM
        cond = getattr(self.ctx.conditions, "secure_aggregation", None)
        return spec is not None and cond is not None

    def secure_sum_peers(self) -> Container[int] | None:
        """The user indices whose uploads may count this round.

        Returns:
            The server's sampled users; None (the default): any user. A summing server
            overrides it.
        """
        return None

    def reject(self, m: Message, reason: str) -> None:
        """Drop a message that fails a check only this node can make.

        Such as: its sender is not a neighbour this round, a blinded value is not below its own
        modulus, ids out of order. The message is counted under the run's ``rejected`` by kind and
        reason, like what the host's screen drops. A handler never raises on what a participant
        sent.

        Args:
            m: The message dropped.
            reason: One of ``cluster.validate.REASONS``.

        Raises:
            ValueError: ``reason`` is not one of ``cluster.validate.REASONS``.
        """
        from cluster.validate import REASONS

        if reason not in REASONS:
            raise ValueError(f"unknown rejection reason {reason!r} (one of {REASONS})")
        self._rejected.append((m.kind, reason))

    def admit(self, inbox: list[Message], peers: Container[int] | None = None) -> list[Message]:
        """The messages of ``inbox`` this node may act on, in order.

        Each other one is dropped and counted (:meth:`reject`): stamped with another round
        (``order``), from a sender whose index is not in ``peers`` (``peer``), or a second message
        of one kind from one sender (``budget``).

        Args:
            inbox: The messages delivered this phase.
            peers: The sender indices allowed; None: any sender the host's screen let through.

        Returns:
            The admitted messages.
        """
        kept, seen = [], set()
        for m in inbox:
            if m.round != self.round:
                self.reject(m, "order")
            elif peers is not None and index_of(m.src) not in peers:
                self.reject(m, "peer")
            elif (m.src, m.kind) in seen:
                self.reject(m, "budget")
            else:
                seen.add((m.src, m.kind))
                kept.append(m)
        return kept

    def admit_one(self, inbox: list[Message], kind: str) -> Message | None:
        """The one ``kind`` message a node receives per round (a table a client downloads).

        Every other ``kind`` message is dropped and counted like :meth:`admit`'s, a second
        admitted one as ``budget``.

        Args:
            inbox: The messages delivered this phase.
            kind: The message kind.

        Returns:
            The first ``kind`` message that :meth:`admit` lets through, or None.
        """
        kept = self.admit([m for m in inbox if m.kind == kind])
        for m in kept[1:]:
            self.reject(m, "budget")
        return kept[0] if kept else None

    def report(self, name: str, value: float) -> None:
        """Report a figure for the run report (e.g. this user's Recall@20).

        The driver sums each name's figures exactly.

        Args:
            name: The figure's name.
            value: Its value, taken as a float.
        """
        self._reports[name].append(float(value))

    # --- what a protocol implements -------------------------------------------------------------
    def handle(self, phase: str, inbox: list[Message]) -> None:
        """Act on one phase: read ``inbox``, update state, :meth:`send` and :meth:`report`.

        Args:
            phase: The phase the protocol's superstep runs (``"download"``, ``"aggregate"``).
            inbox: The messages delivered to this node, sorted by sender.

        Raises:
            NotImplementedError: The role has no handler for ``phase`` (the default).
        """
        raise NotImplementedError(f"{type(self).__name__} has no handler for phase {phase!r}")

    @classmethod
    def handle_batch(cls, nodes: list[Node], phase: str, inboxes: list[list[Message]]) -> None:
        """Act on one phase for all the active nodes of the class on a host.

        The default calls :meth:`handle` node by node. An override (one vectorised pass) must give
        each node the result it would get alone, and names its phases in ``BATCHED_PHASES``.

        Args:
            nodes: The active nodes of the class on this host.
            phase: The phase.
            inboxes: Each node's inbox, in the order of ``nodes``.

        Raises:
            ValueError: ``nodes`` and ``inboxes`` differ in length.
            NotImplementedError: From :meth:`handle`, for a phase the role does not handle.
        """
        for node, inbox in zip(nodes, inboxes, strict=True):
            node.handle(phase, inbox)

    # --- used by the host ------------------------------------------------------------------------
    @classmethod
    def run_phase(cls, nodes: list[Node], phase: str, inboxes: list[list[Message]]) -> None:
        """Run one phase for the class's nodes: what the host calls.

        The secure-aggregation stages (``secagg_*``, nodes/secure_sum.py) where the class declares
        ``SECURE_SUM``, else :meth:`handle_batch`.

        Args:
            nodes: The active nodes of the class on this host.
            phase: The phase.
            inboxes: Each node's inbox, in the order of ``nodes``.
        """
        spec = cls.SECURE_SUM
        if spec is not None and phase.startswith("secagg_"):
            from nodes import secure_sum

            for node, inbox in zip(nodes, inboxes, strict=True):
                if node.id == spec.server:
                    secure_sum.server_stage(node, spec, phase, inbox, node.secure_sum_peers())
                else:
                    secure_sum.user_stage(node, spec, phase, inbox)
            return
        cls.handle_batch(nodes, phase, inboxes)

    @classmethod
    def accepts(cls) -> dict | None:
        """What the class accepts, as the host's screen checks it.

        Returns:
            ``ACCEPTS``, with the secure-aggregation kinds added where the class declares
            ``SECURE_SUM`` (merged once per class); None: everything is accepted.
        """
        if cls.SECURE_SUM is None or cls.ACCEPTS is None:
            return cls.ACCEPTS
        merged = cls.__dict__.get("_accepts_merged")
        if merged is None:
            from nodes import secure_sum

            merged = {**cls.ACCEPTS, **secure_sum.accepts(cls.SECURE_SUM, cls.role)}
            cls._accepts_merged = merged
        return merged

    def _drain(self) -> tuple[list[Message], dict[str, list[float]]]:
        """What the handler sent and reported (its rejections are let go too: the host reads
        ``_rejected`` first where they stand)."""
        out, reports = self._outbox, self._reports
        self._outbox, self._reports, self._rejected = [], defaultdict(list), []
        return out, reports


def expect_kinds(inbox: list[Message], *kinds: str, node: str = "") -> None:
    """Check that every message of ``inbox`` is of an expected kind (nothing is silently dropped).

    Args:
        inbox: The messages delivered.
        *kinds: The kinds expected; none: an empty inbox is expected.
        node: The node's id for the message; empty: each message's ``dst``.

    Raises:
        ValueError: A message of another kind arrived.
    """
    for m in inbox:
        if m.kind not in kinds:
            raise ValueError(
                f"{node or m.dst}: unexpected message kind {m.kind!r} from {m.src} (expected one of {kinds})"
            )


def decode_shared(inboxes: list[list[Message]], kind: str, decode):
    """Decode each node's single ``kind`` message, a payload shared by several nodes once.

    A broadcast arrives as the same bytes object, which is decoded once for all its receivers.

    Args:
        inboxes: Each node's inbox.
        kind: The message kind each inbox holds exactly once.
        decode: Turns a payload into its value.

    Returns:
        One decoded value per inbox, in order; nodes that received the same payload object share
        one value.

    Raises:
        ValueError: An inbox holds no ``kind`` message or more than one.
    """
    cache: dict[int, object] = {}
    out = []
    for inbox in inboxes:
        msgs = [m for m in inbox if m.kind == kind]
        if len(msgs) != 1:
            raise ValueError(f"expected exactly one {kind!r} message, got {len(msgs)}")
        key = id(msgs[0].payload)
        if key not in cache:
            cache[key] = decode(msgs[0].payload)
        out.append(cache[key])
    return out
