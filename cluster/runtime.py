"""Start or join a Ray cluster and place host actors on it.

Knows nothing of protocols or roles: it takes an actor class and how many copies with what
resources, reserves a placement group whose bundles are spread over the cluster's nodes, and
starts one actor in each bundle.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

log = logging.getLogger(__name__)

AUTH_MODE_ENV = "RAY_AUTH_MODE"  # Ray's switch for token authentication (token | disabled)


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    nodes: int
    cpus: float
    gpus: float
    started_here: bool


def start_or_join(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    status: Callable[[str], None] | None = None,
) -> ClusterInfo:
    """Join the cluster at ``address`` (``"auto"`` or ``HOST:PORT``), or start a local Ray instance.

    Re-uses an already initialised Ray session (tests start one per session). ``status`` is told
    in one line when Ray is started or joined (it takes seconds)."""
    started = False
    if not ray.is_initialized():
        if status is not None:
            status(f"joining the Ray cluster at {address}…" if address else "starting Ray…")
        os.environ.setdefault("RAY_DEDUP_LOGS", "1")
        kwargs = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
        if address:
            # a cluster that asks for a token finds it the usual way (RAY_AUTH_MODE=token and
            # RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token): nothing is changed here
            ray.init(address=address, **kwargs)
        else:
            with _local_auth_mode():
                ray.init(num_cpus=num_cpus, num_gpus=num_gpus, **kwargs)
        started = True
    res = ray.cluster_resources()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    return ClusterInfo(
        address=ray.get_runtime_context().gcs_address,
        nodes=len(alive),
        cpus=float(res.get("CPU", 0.0)),
        gpus=float(res.get("GPU", 0.0)),
        started_here=started,
    )


@contextmanager
def _local_auth_mode():
    """A local single-user instance (bound to this machine, gone with this process) starts
    without token authentication, so Ray does not warn that it turned it on; an explicit
    ``RAY_AUTH_MODE`` in the environment is respected. Only the start sees the setting: a later
    ``ray.init(address=...)`` in this process is unaffected."""
    if AUTH_MODE_ENV in os.environ:
        yield
        return
    os.environ[AUTH_MODE_ENV] = "disabled"
    try:
        yield
    finally:
        os.environ.pop(AUTH_MODE_ENV, None)


@dataclass
class PlacedActors:
    handles: list
    group: object  # the placement group (kept so that it can be removed)
    make: object = None  # make(i) starts actor i in its bundle (used to replace a dead one)
    key: tuple | None = None  # (class, count, resources, cluster) when the group may be reused

    def respawn(self, i: int):
        """Start a fresh actor ``i`` in the bundle of the one that died, with the same arguments."""
        self.handles[i] = self.make(i)
        return self.handles[i]

    def release(self) -> None:
        """Give the actors back: kept idle for the next :func:`spawn_spread` of the same shape
        when their class can ``reset`` (starting an actor costs seconds: a Python process that
        imports torch), else killed with their placement group."""
        if self.key is not None and ray.is_initialized():
            _park(self)
        else:
            self.kill()

    def kill(self) -> None:
        for h in self.handles:
            with contextlib.suppress(Exception):  # already dead
                ray.kill(h)
        with contextlib.suppress(Exception):
            remove_placement_group(self.group)


# Idle groups of actors, kept between deployments of one driver (a comparison, a test session, a
# tuning grid): a deployment of the same shape resets one instead of starting new processes. At
# most MAX_IDLE_ACTORS are kept (the oldest go first), and all are killed when a new placement
# group would not fit beside them, so idle actors never hold resources a deployment waits for.
_IDLE: list[PlacedActors] = []
MAX_IDLE_ACTORS = 8


def _park(placed: PlacedActors) -> None:
    _IDLE.append(placed)
    while sum(len(p.handles) for p in _IDLE) > MAX_IDLE_ACTORS:
        _kill_idle(_IDLE.pop(0))


def drain_idle() -> None:
    """Kill the idle actors kept for reuse (their placement groups removed)."""
    while _IDLE:
        _kill_idle(_IDLE.pop())


def _kill_idle(placed: PlacedActors) -> None:
    if ray.is_initialized() and placed.key[-1] == _cluster_id():
        placed.kill()  # (actors of an earlier Ray session are gone with it)


def _cluster_id() -> str:
    return ray.get_runtime_context().gcs_address


def _reuse(key: tuple, args_for) -> PlacedActors | None:
    """An idle group of shape ``key``, its actors reset with ``args_for``'s arguments; None
    when there is none (or one of its actors has died: then all of them are killed)."""
    for j in range(len(_IDLE) - 1, -1, -1):
        if _IDLE[j].key == key:
            placed = _IDLE.pop(j)
            break
    else:
        return None
    calls = []
    for i, h in enumerate(placed.handles):
        args, kwargs = args_for(i)
        calls.append(h.reset.remote(*args, **kwargs))
    try:
        ray.get(calls, timeout=120)
    except Exception:  # noqa: BLE001 — a dead or stuck idle actor: start afresh
        placed.kill()
        return None
    return placed


def _make_room(bundle: dict, count: int) -> None:
    """Kill the idle actors when ``count`` bundles would not fit in what the cluster has free."""
    free = ray.available_resources()
    if any(free.get(r, 0.0) < amount * count - 1e-9 for r, amount in bundle.items()):
        drain_idle()


def spawn_spread(
    actor_cls, count: int, *, num_cpus: float, num_gpus: float, args_for=lambda i: ((), {})
) -> PlacedActors:
    """Start ``count`` actors of ``actor_cls`` (a plain class), each with ``num_cpus``/``num_gpus``
    (fractions allowed), spread over the cluster's nodes with a SPREAD placement group. An actor
    class with a ``reset`` method (same arguments as its constructor, the same state as a fresh
    actor after it) is reused: the group released last, when of the same shape, is reset
    instead of started.

    ``args_for(i)`` gives the constructor's ``(args, kwargs)`` for actor ``i``."""
    if count < 1:
        raise ValueError(f"need at least one actor, got {count}")
    if num_cpus <= 0 and num_gpus <= 0:
        raise ValueError("an actor must ask for some CPU or GPU")
    reusable = callable(getattr(actor_cls, "reset", None))
    key = (
        f"{actor_cls.__module__}.{actor_cls.__qualname__}",
        count,
        num_cpus,
        num_gpus,
        _cluster_id(),
    )
    placed = _reuse(key, args_for) if reusable else None
    if placed is None:
        placed = _spawn(actor_cls, count, num_cpus, num_gpus, args_for)
    else:  # a replacement for a dead actor takes this deployment's arguments
        placed.make = _maker(actor_cls, placed.group, num_cpus, num_gpus, args_for)
    placed.key = key if reusable else None
    return placed


def _spawn(actor_cls, count: int, num_cpus: float, num_gpus: float, args_for) -> PlacedActors:
    bundle = {"CPU": num_cpus}
    if num_gpus > 0:
        bundle["GPU"] = num_gpus
    if _IDLE:
        _make_room(bundle, count)
    group = placement_group([dict(bundle) for _ in range(count)], strategy="SPREAD")
    ready, _ = ray.wait([group.ready()], timeout=120)
    if not ready:
        remove_placement_group(group)
        res = ray.cluster_resources()
        raise RuntimeError(
            f"cannot place {count} hosts of {bundle}: the cluster has {res.get('CPU', 0)} CPUs and "
            f"{res.get('GPU', 0)} GPUs (lower --hosts or --gpus-per-host)"
        )
    make = _maker(actor_cls, group, num_cpus, num_gpus, args_for)
    return PlacedActors([make(i) for i in range(count)], group, make)


def _maker(actor_cls, group, num_cpus: float, num_gpus: float, args_for):
    """make(i): a new actor ``i`` of ``actor_cls`` in bundle i of ``group``."""
    remote_cls = ray.remote(actor_cls)

    def make(i: int):
        args, kwargs = args_for(i)
        return remote_cls.options(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=i
            ),
        ).remote(*args, **kwargs)

    return make
