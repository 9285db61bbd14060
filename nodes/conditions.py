"""Run conditions: who is offline, how fast each device computes and talks, and how long a
superstep takes in a real deployment. No Ray; every host evaluates the same pure functions.

**Availability.** A participant of a role in ``dropout_roles`` is offline in round ``r`` with
probability ``dropout``, drawn from ``(seed, r, node id)`` alone, so the offline set of a round is
the same whatever the placement and the number of hosts. An availability trace (a JSON file
``{"user/3": [[0, 10], [25, 40]], "party/1": [2, 3, 5]}``: half-open ``[start, end)`` round windows
or single rounds in which the node is online) overrides the draw for the nodes it names. An offline
node runs no handler and receives nothing in that round; messages addressed to it are not
delivered (and not counted as protocol bytes). Evaluation phases ignore availability: they measure
the model, they are not deployment traffic.

**Heterogeneity and the simulated clock.** Every node has a compute-speed factor (a multiplier of
the handler time measured on this machine) and a link class. A node that acted in a superstep
finishes after

    t_n = handler_seconds_n × speed_n + bytes_received_n / down_n + bytes_sent_n / up_n + latency_n

and the superstep lasts ``max_n t_n``. A host measures one handler call per node class (a batched
pass); each node of the batch is charged an equal share. The round ``deadline`` binds participants
(roles in ``dropout_roles``): a message whose participant sender finishes after it
(``round start + t_n > deadline``) is dropped and counted as *late*, and nobody waits for that
sender past the deadline (its ``t_n`` is cut there). The server's own steps after the deadline
(aggregating what arrived) still take their time. With a deadline, lateness depends on measured
handler times, so a run with a deadline is reproducible only up to timing noise; without one, the
results do not depend on time.

Default figures (bytes per second, seconds):

* ``mobile`` — 50 Mbit/s down, 10 Mbit/s up, 30 ms latency: rounded global medians of mobile
  connections in Ookla's Speedtest Global Index (2024), the asymmetric link of a phone.
* ``datacenter`` — 10 Gbit/s both ways, 0.5 ms: a common cloud VM network interface and the
  round-trip time inside one region.
* User devices compute ``user_speed`` (default 2) times slower than this machine's core at the
  median, spread log-normally with σ = ``speed_spread`` (default 0.5: the 5–95% range of devices is
  0.44×–2.3× the median, the order of the spread FedScale (Lai et al., ICML 2022) measured across
  mobile devices). Servers, parties, key servers and matchers compute at ``server_speed`` (default
  1: this machine) on datacenter links.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.message import role_of


class ConditionsError(ValueError):
    """An impossible run condition; the message names the parameter."""


@dataclass(frozen=True)
class Link:
    down: float  # bytes per second
    up: float  # bytes per second
    latency: float  # seconds per superstep in which the node talks


LINKS: dict[str, Link] = {
    "mobile": Link(down=50e6 / 8, up=10e6 / 8, latency=0.030),
    "datacenter": Link(down=10e9 / 8, up=10e9 / 8, latency=0.0005),
}

DEVICE_ROLES = ("user",)  # roles that run on people's devices; every other role is a datacenter


def _unit(*parts) -> float:
    """A uniform number in [0, 1) determined by ``parts`` only."""
    digest = hashlib.sha256(":".join(map(str, ("privrec-conditions", *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64


@functools.lru_cache(maxsize=1 << 20)
def _speed_normal(seed: int, nid: str) -> float:
    """A standard normal draw fixed per (seed, node) (Box–Muller on two hashed uniforms)."""
    u1, u2 = _unit(seed, "speed", nid, "a"), _unit(seed, "speed", nid, "b")
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


@dataclass(frozen=True)
class Conditions:
    """How participants behave in a run. The defaults are a fair-weather run (everyone online, no
    deadline) whose simulated clock uses the mobile/datacenter figures above."""

    dropout: float = 0.0  # probability that a participant of dropout_roles is offline in a round
    dropout_roles: tuple[str, ...] = ("user", "party")
    trace: str = (
        ""  # path of an availability trace (JSON), overrides dropout for the nodes it names
    )
    min_participants: int = 1  # a server skips its update when fewer uploads arrived
    deadline: float = 0.0  # simulated seconds per round after which messages are late (0: none)
    user_speed: float = 2.0  # median compute-time multiplier of user devices
    server_speed: float = 1.0  # compute-time multiplier of datacenter roles (server, party, ...)
    speed_spread: float = 0.5  # σ of the log-normal spread of user devices' speed factors
    user_link: str = "mobile"  # link class of user devices: mobile | datacenter
    # rounds between per-host snapshots for fault recovery (0: none). A snapshot pickles every node
    # of a host: on ml-100k it adds 14-22% to a fedmf/FedLightGCN round, 2.6% a round when taken
    # every 5 rounds
    snapshot_every: int = 5
    kill_hosts: tuple[tuple[int, int], ...] = ()  # (round, host): SIGKILL that host at round start
    # a participant whose handler raises has failed for the round (like a dropout); when more
    # than this share of the participants that ran in a round failed, the run stops (1: never)
    max_failed_fraction: float = 0.5
    # keep each participant as the round found it (pickled once a round, at its first training
    # superstep) and, until its class's batched pass has run, the round's inboxes, so that one
    # that raises is put back as the round found it (its round then equals an offline one's) and
    # the rest of its batch keeps its result (nodes/host.py Host._handle). The copy costs about a
    # fifth of fedmf's train handler (256 users of ml-100k: 65 ms of pickling beside 275 ms of
    # handler). false: no copy; a batch that raises fails all its nodes for the round, left as
    # the exception left them
    failure_rollback: bool = True
    # where the privacy mechanisms draw their noise (privacy/noise.py): false, each node's stream
    # seeded from (seed, node id) (reproducible: one seed, the same noise); true, a ChaCha20
    # generator keyed from the operating system on every node (as Opacus's secure mode): the
    # noise cannot be rebuilt from the published seed, and runs are not reproducible
    secure_rng: bool = False
    # SecAgg+ where a server sums user uploads (privacy/secagg.py SecureAggregation; a dict from
    # TOML is made one); None: uploads in the clear, as each protocol's paper has them
    secure_aggregation: Any = None
    online_rounds: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if not 0.0 <= self.dropout < 1.0:
            raise ConditionsError(f"dropout: must be in [0, 1), got {self.dropout}")
        if self.min_participants < 0:
            raise ConditionsError(f"min_participants: must be >= 0, got {self.min_participants}")
        if not self.deadline >= 0:
            raise ConditionsError(f"deadline: must be >= 0 seconds, got {self.deadline}")
        if not self.user_speed >= 0 or not self.speed_spread >= 0 or not self.server_speed >= 0:
            raise ConditionsError("user_speed/server_speed/speed_spread: must be >= 0")
        if self.user_link not in LINKS:
            raise ConditionsError(f"user_link: one of {sorted(LINKS)}, got {self.user_link!r}")
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise ConditionsError(
                f"max_failed_fraction: must be in [0, 1], got {self.max_failed_fraction}"
            )
        if self.snapshot_every < 0:
            raise ConditionsError(f"snapshot_every: must be >= 0, got {self.snapshot_every}")
        if not isinstance(self.secure_rng, bool):
            raise ConditionsError(f"secure_rng: must be true or false, got {self.secure_rng!r}")
        if self.secure_aggregation is True:  # `secure_aggregation = true`: the defaults
            object.__setattr__(self, "secure_aggregation", {})
        elif self.secure_aggregation is False:
            object.__setattr__(self, "secure_aggregation", None)
        if isinstance(self.secure_aggregation, dict):
            from privacy.secagg import SecureAggregation

            try:
                sa = SecureAggregation.from_dict(self.secure_aggregation)
            except (ValueError, TypeError) as e:
                raise ConditionsError(str(e)) from None
            object.__setattr__(self, "secure_aggregation", sa)
        from privacy.secagg import SecureAggregation

        if self.secure_aggregation is not None and not isinstance(
            self.secure_aggregation, SecureAggregation
        ):
            raise ConditionsError(
                "secure_aggregation: true, false or a table of its parameters, got "
                f"{self.secure_aggregation!r}"
            )
        object.__setattr__(self, "dropout_roles", tuple(self.dropout_roles))
        object.__setattr__(self, "kill_hosts", tuple(tuple(map(int, k)) for k in self.kill_hosts))
        if self.trace and not self.online_rounds:
            object.__setattr__(self, "online_rounds", load_trace(self.trace))

    @classmethod
    def from_dict(cls, values: dict) -> Conditions:
        """One validation path for TOML tables, flags and the Python API."""
        names = {f.name for f in dataclasses.fields(cls)} - {"online_rounds"}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConditionsError(
                f"{', '.join(unknown)}: unknown run condition (known: {', '.join(sorted(names))})"
            )
        return cls(**values)

    def check_run(self, node_ids: list[str], rounds: int, n_hosts: int) -> None:
        """Refuse what cannot apply to this run, before Ray starts: a trace naming a node that
        does not exist, a kill at a round the run does not reach or of a host it does not have."""
        known = set(node_ids)
        missing = sorted(n for n in self.online_rounds if n not in known)
        if missing:
            shown = ", ".join(missing[:3]) + (
                f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            )
            raise ConditionsError(
                f"trace: {self.trace}: no node {shown} in this run "
                f"({len(node_ids)} nodes, e.g. {', '.join(node_ids[:2])})"
            )
        for r, h in self.kill_hosts:
            if not 0 <= r < rounds:
                raise ConditionsError(
                    f"kill_hosts: round {r} is outside the run's rounds 0..{rounds - 1}"
                )
            if not 0 <= h < n_hosts:
                raise ConditionsError(
                    f"kill_hosts: no host {h} (this run has hosts 0..{n_hosts - 1})"
                )

    # --- availability --------------------------------------------------------------------------
    def participant(self, nid: str) -> bool:
        """Whether ``nid`` is of a participant role (``dropout_roles``): the nodes that can be
        offline and that the round deadline binds."""
        return role_of(nid) in self.dropout_roles

    def offline(self, seed: int, round_: int, nid: str) -> bool:
        """Whether ``nid`` is offline in training round ``round_`` (a function of its arguments)."""
        if nid in self.online_rounds:
            return round_ not in self.online_rounds[nid]
        if self.dropout <= 0.0 or not self.participant(nid):
            return False
        return _unit(seed, "offline", round_, nid) < self.dropout

    @property
    def fair_weather(self) -> bool:
        return self.dropout <= 0.0 and not self.online_rounds and self.deadline <= 0.0

    # --- heterogeneity -------------------------------------------------------------------------
    def speed(self, seed: int, nid: str) -> float:
        if role_of(nid) not in DEVICE_ROLES:
            return self.server_speed
        return self.user_speed * math.exp(self.speed_spread * _speed_normal(seed, nid))

    def link(self, nid: str) -> Link:
        return LINKS[self.user_link] if role_of(nid) in DEVICE_ROLES else LINKS["datacenter"]

    def node_seconds(
        self, seed: int, nid: str, handler_s: float, received: int, sent: int
    ) -> float:
        """Simulated seconds until ``nid`` has received its inbox, run its handler and sent."""
        link = self.link(nid)
        talked = received > 0 or sent > 0
        return (
            handler_s * self.speed(seed, nid)
            + received / link.down
            + sent / link.up
            + (link.latency if talked else 0.0)
        )


class _Rounds:
    """Rounds in which a traced node is online: single rounds and half-open windows."""

    def __init__(self, singles: set[int], windows: list[tuple[int, int]]):
        self.singles, self.windows = singles, windows

    def __contains__(self, r: int) -> bool:
        return r in self.singles or any(a <= r < b for a, b in self.windows)


def load_trace(path: str | Path) -> dict[str, _Rounds]:
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConditionsError(f"trace: cannot read {p} ({e})") from None
    if not isinstance(doc, dict):
        raise ConditionsError(f"trace: {p} must hold an object {{node id: rounds online}}")
    out = {}
    for nid, entries in doc.items():
        if "/" not in nid or not isinstance(entries, list):
            raise ConditionsError(
                f"trace: {p}: entry {nid!r} must be 'role/index': [rounds or [start, end) windows]"
            )
        singles, windows = set(), []
        for e in entries:
            if isinstance(e, int) and not isinstance(e, bool):
                if e < 0:
                    raise ConditionsError(f"trace: {p}: {nid}: round {e} is negative")
                singles.add(e)
            elif isinstance(e, list) and len(e) == 2 and all(isinstance(x, int) for x in e):
                if not 0 <= e[0] < e[1]:
                    raise ConditionsError(
                        f"trace: {p}: {nid}: window {e!r} is empty or reversed "
                        "(expected [start, end) with 0 <= start < end)"
                    )
                windows.append((e[0], e[1]))
            else:
                raise ConditionsError(
                    f"trace: {p}: {nid}: {e!r} is neither a round nor [start, end)"
                )
        out[nid] = _Rounds(singles, windows)
    return out
