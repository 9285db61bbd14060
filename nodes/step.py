"""The superstep contract: what the driver orders each host to do, and what a host answers.

A superstep is one exchange between the driver and every host (nodes/host.py): the driver sends
each host a :class:`StepOrder`; the host delivers the message batches addressed to it, runs the
handlers of its active nodes, clocks and routes their messages, hands its batches for other hosts
to the transport (nodes/transport.py) and answers with a :class:`StepOutcome`. The deployment
(nodes/deployment.py) adds the outcomes up into the protocol's :class:`StepResult` and the
round's :class:`RoundStats`. These records are all that crosses between driver and hosts besides
the batches themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cluster.ledger import Ledger, LedgerDelta

if TYPE_CHECKING:
    from nodes.conditions import Conditions


@dataclass(frozen=True, slots=True)
class StepOrder:
    """What the driver asks of one host in one superstep.

    Attributes:
        seq: the deployment's superstep counter; a host asked again for a superstep it already
            ran (a transport falling back after a failed execution) answers what it answered then.
        round: the protocol round.
        phase: the phase's name (``eval*``: evaluation).
        activate: node ids, or role names, to run even without mail.
        tap: keep a copy of every message sent (tests scan them for private data).
        availability: apply the run's availability model (offline participants).
        clock: measure simulated time (training phases).
        t_start: simulated seconds since the round began, for the deadline.
        absent: every node of this host lost this round to a fault.
        absent_hosts: hosts whose nodes lost this round; mail for them is undelivered.
        failed: participants whose handler raised earlier this round, skipped like offline ones.
        drop_sources: hosts that died since they sent the mail this host holds: it is discarded.
        batches: references of batches for this host that the driver holds (sent over actor
            calls, or restored from a checkpoint), where the transport passes them in the order
            (a compiled graph); the host reads them from the object store.
    """

    seq: int
    round: int
    phase: str
    activate: tuple[str, ...] = ()
    tap: bool = False
    availability: bool = False
    clock: bool = False
    t_start: float = 0.0
    absent: bool = False
    absent_hosts: tuple[int, ...] = ()
    failed: tuple[str, ...] = ()
    drop_sources: tuple[int, ...] = ()
    batches: tuple[object, ...] = ()


@dataclass(frozen=True, slots=True)
class Fault:
    """A participant whose handler raised: it has failed for the round (the round goes on)."""

    node: str
    round: int
    phase: str
    error: str  # ``ExcType: message`` on one line


@dataclass(frozen=True, slots=True)
class Failure:
    """A node whose handler raised and whose failure stops the run (a server, key server...)."""

    node: str
    round: int
    phase: str
    error: str
    traceback: str


@dataclass(frozen=True, slots=True)
class StepTiming:
    """Wall seconds of a host's stages: decoding its mail, running handlers, encoding batches."""

    decode: float = 0.0
    compute: float = 0.0
    encode: float = 0.0


@dataclass(slots=True)
class StepOutcome:
    """What one host answers for one superstep.

    Attributes:
        batch_bytes: bytes of the batch this host sent to each destination host.
        batches: destination host -> the batch's object reference, where the transport moves
            batches through Ray's object store (actor calls); empty where it moves them itself.
        ledger: the logical and crossed bytes of the messages it sent.
        reports: figures its nodes reported (name -> values).
        timing: its stages' wall seconds.
        pending_local: messages kept for its own nodes' next superstep.
        tapped: copies of the messages sent, when the order asked for them.
        sim: simulated seconds of its slowest node.
        dropped: nodes that were offline or lost, so missed their mail.
        undelivered: messages not delivered (receiver offline, lost, or the sender late).
        rejected: (kind, reason) -> messages that failed their receivers' checks.
        late: messages dropped because their senders missed the deadline.
        late_nodes: those senders.
        faults: participants whose handler raised.
        participants: participants that ran a handler this round (this kind of phase).
        failure: a node whose failure stops the run (then nothing else is filled in).
    """

    batch_bytes: dict[int, int] = field(default_factory=dict)
    batches: dict[int, object] = field(default_factory=dict)
    ledger: LedgerDelta | None = None
    reports: dict[str, list[float]] = field(default_factory=dict)
    timing: StepTiming = field(default_factory=StepTiming)
    pending_local: int = 0
    tapped: list = field(default_factory=list)
    sim: float = 0.0
    dropped: list[str] = field(default_factory=list)
    undelivered: int = 0
    rejected: dict[tuple[str, str], int] = field(default_factory=dict)
    late: int = 0
    late_nodes: list[str] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    participants: int = 0
    failure: Failure | None = None


@dataclass
class StepResult:
    """What a protocol's driver gets back from a superstep.

    Attributes:
        reports: every figure the nodes reported, name -> values (order: by host, then node).
        wall: the superstep's wall seconds at the driver.
        compute_max: the slowest host's handler seconds.
        encode_decode_max: the slowest host's codec seconds.
    """

    reports: dict[str, list[float]]
    wall: float
    compute_max: float
    encode_decode_max: float


@dataclass(frozen=True)
class RoundStats:
    """The current round so far, as the deployment has added it up.

    Attributes:
        sim_seconds: simulated seconds (each superstep lasts as long as its slowest host says).
        dropped: participants dropped (offline, or lost to a fault), sorted.
        late: messages dropped because their senders missed the deadline.
        late_nodes: those senders, sorted.
        undelivered: messages not delivered.
        rejected: kind -> reason -> messages rejected by their receivers' checks.
        faults: the round's fault records (a host lost, a handler raised), as the summary has them.
    """

    sim_seconds: float = 0.0
    dropped: list[str] = field(default_factory=list)
    late: int = 0
    late_nodes: list[str] = field(default_factory=list)
    undelivered: int = 0
    rejected: dict[str, dict[str, int]] = field(default_factory=dict)
    faults: list[dict] = field(default_factory=list)


@runtime_checkable
class Runtime(Protocol):
    """What a protocol's driver and the round loop may ask of the nodes' runtime: a
    :class:`nodes.deployment.Deployment` (host actors, Ray), or a stand-in that runs every node
    in one process (``benchmarks.floor.InProcess``).

    Attributes:
        ledger: the bytes of every message sent (cluster/ledger.py).
        conditions: the run conditions (nodes/conditions.py).
        status: takes a one-line description of a long step.
    """

    ledger: Ledger
    conditions: Conditions
    status: Callable[[str], None]

    def begin_round(self, round_: int) -> None:
        """Start round ``round_`` (availability, snapshots, injected faults)."""

    def superstep(
        self,
        round_: int,
        phase: str,
        activate: tuple[str, ...] | list[str] = (),
        *,
        availability: bool = True,
    ) -> StepResult:
        """Deliver the pending messages and run the handlers of the nodes that got mail or are
        named in ``activate`` (a role name: all its nodes)."""

    def round_stats(self) -> RoundStats:
        """The current round so far."""

    def has_pending(self) -> bool:
        """Whether messages wait for a next superstep."""

    def call(self, nid: str, method: str, *args, **kwargs):
        """Run a method of one node (inspection, not protocol traffic)."""

    def close(self) -> None:
        """Release what it holds."""
