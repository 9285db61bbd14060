"""Start or join a Ray cluster and place host actors on it.

Knows nothing of protocols or roles: it takes an actor class and how many copies with what
resources, reserves a placement group whose bundles are spread over the cluster's nodes, and
starts one actor in each bundle. Called from inside a placement group that captures its child
tasks (a Ray Tune trial, benchmarks.tune), it reserves nothing: the actors take the last bundles
of that group, so that they use what the trial reserved and nothing beside it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

log = logging.getLogger(__name__)

AUTH_MODE_ENV = "RAY_AUTH_MODE"  # Ray's switch for token authentication (token | disabled)


class ClusterError(RuntimeError):
    """The Ray cluster at ``--address`` cannot be joined, in one line that says what to do
    (nobody answers there; it asks for a token this process does not send)."""


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    nodes: int
    cpus: float
    gpus: float
    started_here: bool


# A local instance frees the object-store space of batches no longer referenced every 50 ms (Ray's
# default: every second). A round at 10,000 clients takes about a second, so with the default the
# previous round's batches are often still there when the next ones are put, and they go elsewhere in
# the store: every host then keeps two rounds' pages resident. At 50 ms the freed space is reused
# by the next round's batches.
LOCAL_SYSTEM_CONFIG = {"free_objects_period_milliseconds": 50}

# A local instance listens only on this machine: its node address is the loopback interface, which
# its GCS, raylet, object manager, workers and dashboard agent bind to (checked with `ss -ltn` on
# Ray 2.60: every listening socket on 127.0.0.1; with Ray's default node address they listen on
# all interfaces). Nothing of a run (the nodes' messages, their state in the object store) can be
# reached from another machine. A cluster is joined with --address instead.
LOCAL_HOST = "127.0.0.1"


# ``launch.py --dashboard`` (use_dashboard): the next local Ray instance this process starts runs
# Ray's dashboard, and its address is printed once; a cluster joined with --address is asked for
# the address of its own dashboard.
_DASHBOARD = {"wanted": False, "shown": False}


def use_dashboard(on: bool = True) -> None:
    """Start the next local Ray instance of this process with its dashboard (listening on
    127.0.0.1 like the rest of it: :data:`LOCAL_HOST`) and print its address once on stderr; a
    joined cluster's dashboard address is printed too. Without it nothing changes."""
    _DASHBOARD["wanted"] = bool(on)
    _DASHBOARD["shown"] = False


def start_or_join(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    status: Callable[[str], None] | None = None,
    dashboard: bool | None = None,
) -> ClusterInfo:
    """Join the cluster at ``address`` (``"auto"`` or ``HOST:PORT``), or start a local Ray instance.

    Re-uses an already initialised Ray session (tests start one per session). ``status`` is told
    in one line when Ray is started or joined (it takes seconds). ``dashboard``: start a local
    instance with Ray's dashboard and print its address once (None: as :func:`use_dashboard`
    said; off by default)."""
    started = False
    want_dashboard = _DASHBOARD["wanted"] if dashboard is None else dashboard
    if not ray.is_initialized():
        if status is not None:
            status(f"joining the Ray cluster at {address}…" if address else "starting Ray…")
        os.environ.setdefault("RAY_DEDUP_LOGS", "1")
        kwargs = dict(
            include_dashboard=bool(want_dashboard) and not address,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )
        if address:
            context = _join(address, kwargs)
        else:
            # "local": a new instance even when a `ray start` cluster runs on this machine (plain
            # ray.init() would join that one); joining is what --address asks for
            with _local_auth_mode(), _driver_path_for_workers(), _loopback_node():
                context = ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    num_gpus=num_gpus,
                    _system_config=LOCAL_SYSTEM_CONFIG,
                    _node_ip_address=LOCAL_HOST,  # see LOCAL_HOST
                    dashboard_host=LOCAL_HOST,
                    **kwargs,
                )
        started = True
        if want_dashboard:
            _show_dashboard(getattr(context, "dashboard_url", None))
    res = ray.cluster_resources()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    return ClusterInfo(
        address=ray.get_runtime_context().gcs_address,
        nodes=len(alive),
        cpus=float(res.get("CPU", 0.0)),
        gpus=float(res.get("GPU", 0.0)),
        started_here=started,
    )


def _join(address: str, kwargs: dict):
    """``ray.init(address=...)`` (its context), or a :class:`ClusterError` in one line. A cluster that asks for
    a token gets it the way Ray reads it (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN /
    RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token); privrec never sends a token on its own. A
    ``HOST:PORT`` is probed first (a TCP connection, then one GCS handshake), so that a wrong
    address or a missing token fails at once rather than after Ray's retries (about 20 s, a
    warning a second)."""
    if address != "auto":
        _probe(address)
    try:
        return ray.init(address=address, **kwargs)
    except Exception as e:  # noqa: BLE001 — ConnectionError, AuthenticationError, RuntimeError
        if _is_auth_failure(e):
            raise ClusterError(_auth_message(address)) from None
        if isinstance(e, ConnectionError):
            where = "on this machine" if address == "auto" else f"at {address}"
            raise ClusterError(
                f"cannot join the Ray cluster {where} ({_one_line(e)}): start one with "
                "`ray start --head`, or pass --address HOST:PORT of its head node"
            ) from None
        raise


def dashboard_address(url: str | None) -> str | None:
    """``http://HOST:PORT`` of a dashboard URL as Ray gives it (``127.0.0.1:8265``, sometimes
    with the scheme); None when Ray started none."""
    if not url:
        return None
    return url if "://" in url else f"http://{url}"


def _show_dashboard(url: str | None) -> None:
    """Print the dashboard's address once per :func:`use_dashboard` (or per start asked with
    ``dashboard=True``), on stderr, where a run's other one-line messages go."""
    if _DASHBOARD["shown"]:
        return
    _DASHBOARD["shown"] = True
    shown = dashboard_address(url)
    if shown is None:
        print(
            "Ray dashboard: not running (is Ray's dashboard installed? pip install 'ray[default]')",
            file=sys.stderr,
            flush=True,
        )
    else:
        print(f"Ray dashboard: {shown}", file=sys.stderr, flush=True)


def _probe(address: str) -> None:
    """Fail at once, in one line, when nothing listens at ``address`` or its GCS refuses this
    process's token (or the lack of one)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except (OSError, ValueError) as e:
        raise ClusterError(
            f"no Ray cluster answers at {address} ({_one_line(e)}): start its head node with "
            f"`ray start --head --port {port}` there, or check HOST:PORT and the firewall"
        ) from None
    try:
        from ray._private.authentication.authentication_token_setup import (
            ensure_token_if_auth_enabled,
        )
        from ray._raylet import GcsClient  # Ray's own client of the head's GCS (not public API)
        from ray.exceptions import AuthenticationError
    except ImportError:  # another Ray: ray.init says what is wrong
        return
    try:  # what ray.init checks first (token mode without a token: Ray's core would abort)
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)
    except AuthenticationError:
        raise ClusterError(
            f"{AUTH_MODE_ENV}=token but this machine has no token for the Ray cluster at "
            f"{address}: export RAY_AUTH_TOKEN=<its token> (`ray get-auth-token` on its head "
            "node prints it)"
        ) from None
    try:
        with _muted_stderr():  # Ray's C++ core logs the refusal on stderr before raising
            GcsClient(address=address)
    except AuthenticationError:
        raise ClusterError(_auth_message(address)) from None
    except Exception:  # noqa: BLE001 — anything else: ray.init retries and says what is wrong
        return


def _is_auth_failure(e: BaseException | None) -> bool:
    """``e`` or what caused it is Ray refusing the token (ray.init wraps the refusal in a
    ConnectionError whose cause holds it as text)."""
    from ray.exceptions import AuthenticationError

    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, AuthenticationError) or "InvalidAuthToken" in str(e):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _auth_message(address: str) -> str:
    """What to set when the cluster at ``address`` refused this process's token (or none)."""
    where = "on this machine" if address == "auto" else f"at {address}"
    get = "`ray get-auth-token` on its head node prints it"
    if os.environ.get(AUTH_MODE_ENV, "").lower() != "token":
        return (
            f"the Ray cluster {where} asks for a token: export {AUTH_MODE_ENV}=token, and "
            f"RAY_AUTH_TOKEN=<its token> unless ~/.ray/auth_token holds it ({get})"
        )
    return (
        f"the Ray cluster {where} refused this machine's token (RAY_AUTH_TOKEN, else the file "
        f"RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token): export RAY_AUTH_TOKEN=<its token> "
        f"({get})"
    )


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


@contextmanager
def _muted_stderr():
    """Silence file descriptor 2 (where Ray's C++ core logs) for the block."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def _driver_path_for_workers():
    """The local instance's processes (and so every host actor) import what the driver can: the
    folders on the driver's ``sys.path`` outside the Python installation (a protocol given as
    ``package.module:Class`` from such a folder, the checkout itself) are put on ``PYTHONPATH``
    while Ray starts, which its raylet and workers inherit."""
    prefixes = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    extra = [
        os.path.abspath(p)
        for p in sys.path
        if p and os.path.isdir(p) and not os.path.abspath(p).startswith(prefixes)
    ]
    before = os.environ.get("PYTHONPATH")
    paths = [p for p in (before or "").split(os.pathsep) if p]
    paths += [p for p in extra if p not in paths]
    if paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


@contextmanager
def _loopback_node():
    """Let ``ray.init`` keep ``_node_ip_address="127.0.0.1"`` for the local instance it starts:
    Ray 2.60 replaces a loopback node address with this machine's outward one
    (``services.resolve_ip_for_localhost``) unless it runs in its single-machine mode
    (``ray_constants.ENABLE_RAY_CLUSTER`` false, what ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
    sets), in which the loopback address is kept. Only the start sees the setting: joining a
    cluster later in this process is unaffected. A Ray without that constant is left as it is."""
    try:
        from ray._private import ray_constants
    except ImportError:
        yield
        return
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


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


def current_group():
    """The placement group this process's new actors belong to: the one it runs in when it was
    started with ``placement_group_capture_child_tasks`` (a Ray Tune trial: its trainable runs
    in the first bundle of the trial's placement group), else None (a driver, a plain actor)."""
    if not ray.is_initialized():
        return None
    ctx = ray.get_runtime_context()
    if not ctx.should_capture_child_tasks_in_placement_group:
        return None
    from ray.util.placement_group import get_current_placement_group

    return get_current_placement_group()


def group_host_bundles(group, count: int) -> list[int]:
    """The bundles of ``group`` that ``count`` host actors take: its last ``count`` (the first is
    the caller's own, as Tune's ``PlacementGroupFactory`` puts the trainable there); a
    :class:`PlacementError`-like ``RuntimeError`` when there are not enough of them."""
    n = len(group.bundle_specs)
    if n < count + 1:
        raise RuntimeError(
            f"cannot place {count} host actors in this task's placement group of {n} bundles: "
            f"the first is the caller's own, so it needs {count + 1} (one more per host actor)"
        )
    return list(range(n - count, n))


def usable_cpus() -> float:
    """The CPUs the cluster has for its processes: what Ray declares, at most this machine's
    cores on each of its nodes (a local instance may declare more than it has, as the tests'
    does); 0 without Ray."""
    if not ray.is_initialized():
        return 0.0
    declared = ray.cluster_resources().get("CPU", 0.0)
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return min(declared, (os.cpu_count() or 1) * max(nodes, 1))


def host_cpu_share(count: int, cap: float = 1.0) -> float:
    """The CPU share each of ``count`` host actors asks for by default: the cluster's CPUs
    divided among them, at most ``cap`` (a host's work is mostly serial), and small enough that
    all ``count`` fit on the nodes as they are: two 1-CPU nodes take 5 hosts of 1/3 CPU, not of
    0.4 (two per node). Inside a placement group (:func:`current_group`): the CPUs of the
    smallest bundle the hosts take, at most ``cap``."""
    group = current_group()
    if group is not None:
        specs = group.bundle_specs
        cpus = [specs[i].get("CPU", 0.0) for i in group_host_bundles(group, count)]
        return min(cap, max(0.01, min(cpus)))
    share = min(cap, max(0.01, ray.cluster_resources().get("CPU", 1.0) / count))
    per_node = [n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]

    def fits(s: float) -> bool:
        return sum(math.floor(c / s + 1e-9) for c in per_node) >= count

    if len(per_node) < 2 or fits(share):
        return share
    # the largest c/k below the even share that fits, rounded down to Ray's 1/10000 of a CPU
    for s in sorted({c / k for c in per_node for k in range(1, count + 1) if 0 < c / k < share})[
        ::-1
    ]:
        s = math.floor(s * 1e4) / 1e4
        if s >= 0.01 and fits(s):
            return s
    return share


@dataclass
class PlacedActors:
    handles: list
    # the placement group (removed with the actors), or None: actors placed one by one
    group: object
    make: object = None  # make(i) starts actor i in its bundle (used to replace a dead one)
    key: tuple | None = None  # (class, [count,] resources, cluster) when the actors may be reused
    # False: ``group`` is the caller's (a Tune trial's), which outlives the actors: kept on kill
    owns_group: bool = True
    first: int = 0  # the bundle of actor 0 in ``group`` (actor i: first + i)

    def respawn(self, i: int):
        """Start a fresh actor ``i`` in the bundle of the one that died, with the same arguments."""
        self.handles[i] = self.make(i)
        return self.handles[i]

    def release(self) -> None:
        """Give the actors back: kept idle for the next :func:`spawn_spread` that can use them
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
        if self.group is not None and self.owns_group:
            with contextlib.suppress(Exception):
                remove_placement_group(self.group)


# Idle actors, kept between deployments of one driver (a comparison, a test session, a tuning
# grid): a deployment resets them instead of starting new processes. Actors in a placement
# group (on a cluster of several nodes; with a fractional GPU share on any cluster:
# :func:`_spawn_over_gpus`) are reused as a whole group by a deployment of the same shape; on
# one node (where spreading means nothing) actors are placed one by one and parked one by one,
# so a deployment of any size takes whichever idle actors ask for the resources it asks for and
# starts only the rest. At most MAX_IDLE_ACTORS are kept (the oldest go first), and idle actors
# are killed when new ones would not fit beside them, so they never hold resources a deployment
# waits for.
_IDLE: list[PlacedActors] = []
MAX_IDLE_ACTORS = 8


def _park(placed: PlacedActors) -> None:
    if placed.group is None:  # one by one, in their order (reused in the same order)
        _IDLE.extend(PlacedActors([h], None, None, placed.key) for h in placed.handles)
    else:
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
        if _IDLE[j].key == key and _IDLE[j].group is not None:
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


def _reuse_solo(key: tuple, count: int, args_for) -> list:
    """Up to ``count`` idle one-by-one actors of ``key`` (the most recently parked, in their
    parking order), reset with the arguments of positions 0, 1, ...; an actor that does not come
    back from its reset (dead, stuck) is killed and its position left None."""
    taken: list[PlacedActors] = []
    for j in range(len(_IDLE) - 1, -1, -1):
        if len(taken) == count:
            break
        if _IDLE[j].key == key and _IDLE[j].group is None:
            taken.append(_IDLE.pop(j))
    handles = [p.handles[0] for p in reversed(taken)]
    calls = []
    for i, h in enumerate(handles):
        args, kwargs = args_for(i)
        calls.append(h.reset.remote(*args, **kwargs))
    out: list = []
    for h, call in zip(handles, calls):
        try:
            ray.get(call, timeout=120)
            out.append(h)
        except Exception:  # noqa: BLE001 — a dead or stuck idle actor: start afresh
            with contextlib.suppress(Exception):
                ray.kill(h)
            out.append(None)
    return out


def _fits(bundle: dict, count: int) -> bool:
    free = ray.available_resources()
    return all(free.get(r, 0.0) >= amount * count - 1e-9 for r, amount in bundle.items())


def _make_room(bundle: dict, count: int) -> None:
    """Kill the idle actors when ``count`` bundles would not fit in what the cluster has free."""
    if not _fits(bundle, count):
        drain_idle()


def spawn_spread(
    actor_cls, count: int, *, num_cpus: float, num_gpus: float, args_for=lambda i: ((), {})
) -> PlacedActors:
    """Start ``count`` actors of ``actor_cls`` (a plain class), each with ``num_cpus``/``num_gpus``
    (fractions allowed), spread over the cluster's nodes with a SPREAD placement group (on a
    one-node cluster each actor is placed on its own; actors with a fractional GPU share are
    spread round-robin over the cluster's GPUs: :func:`_spawn_over_gpus`). An actor class with a
    ``reset`` method (same arguments as its constructor, the same state as a fresh actor after
    it) is reused: a placement group released last, when of the same shape, is reset instead of
    started; on one node any idle actors that ask for the same resources are, and only the rest
    start.

    ``args_for(i)`` gives the constructor's ``(args, kwargs)`` for actor ``i``."""
    if count < 1:
        raise ValueError(f"need at least one actor, got {count}")
    if num_cpus <= 0 and num_gpus <= 0:
        raise ValueError("an actor must ask for some CPU or GPU")
    reusable = callable(getattr(actor_cls, "reset", None))
    name = f"{actor_cls.__module__}.{actor_cls.__qualname__}"
    group = current_group()
    if group is not None:  # inside a Tune trial: the trial's own bundles, never more
        key = (name, count, num_cpus, num_gpus, group.id.hex(), _cluster_id())
        return _spawn_in_group(
            actor_cls, group, count, num_cpus, num_gpus, args_for, key if reusable else None
        )
    if 0 < num_gpus < 1:  # fractional GPU shares: spread over the GPUs, not packed onto one
        key = (name, "over GPUs", count, num_cpus, num_gpus, _cluster_id())
        return _spawn_over_gpus(
            actor_cls, count, num_cpus, num_gpus, args_for, key if reusable else None
        )
    if len([n for n in ray.nodes() if n.get("Alive")]) == 1:
        key = (name, num_cpus, num_gpus, _cluster_id())
        return _spawn_solo(
            actor_cls, count, num_cpus, num_gpus, args_for, key if reusable else None
        )
    key = (name, count, num_cpus, num_gpus, _cluster_id())
    placed = _reuse(key, args_for) if reusable else None
    if placed is None:
        placed = _spawn(actor_cls, count, num_cpus, num_gpus, args_for)
    else:  # a replacement for a dead actor takes this deployment's arguments
        placed.make = _maker(actor_cls, placed.group, num_cpus, num_gpus, args_for)
    placed.key = key if reusable else None
    return placed


def _spawn_solo(actor_cls, count, num_cpus, num_gpus, args_for, key) -> PlacedActors:
    """``count`` actors on a one-node cluster, each placed on its own: idle ones of ``key``
    reset, the rest started (after killing other idle actors if they would not fit)."""
    handles = _reuse_solo(key, count, args_for) if key is not None else []
    handles += [None] * (count - len(handles))
    missing = handles.count(None)
    bundle = _bundle(num_cpus, num_gpus)
    if missing:
        _make_room(bundle, missing)
        deadline = time.monotonic() + 120  # a killed actor's resources come back in a moment
        while not _fits(bundle, missing):
            if time.monotonic() > deadline:
                for h in handles:
                    with contextlib.suppress(Exception):
                        ray.kill(h)
                _no_room(count, bundle)
            time.sleep(0.1)
    make = _maker(actor_cls, None, num_cpus, num_gpus, args_for)
    handles = [h if h is not None else make(i) for i, h in enumerate(handles)]
    return PlacedActors(handles, None, make, key)


def _spawn_in_group(actor_cls, group, count, num_cpus, num_gpus, args_for, key) -> PlacedActors:
    """``count`` actors in the last ``count`` bundles of ``group``, the placement group of the
    task that asks (:func:`current_group`: a Tune trial's), each in its own bundle, so that the
    actors use what the trial reserved and nothing beside it. The group is the caller's: never
    removed here. Idle actors of the same group (a trial actor Tune reuses for the next trial
    keeps its group) are reset instead of started."""
    placed = _reuse(key, args_for) if key is not None else None
    if placed is not None:
        placed.make = _maker(actor_cls, group, num_cpus, num_gpus, args_for, placed.first)
        return placed
    indices = group_host_bundles(group, count)
    specs = group.bundle_specs
    need = _bundle(num_cpus, num_gpus)
    for i in indices:
        if any(specs[i].get(r, 0.0) < amount - 1e-9 for r, amount in need.items()):
            raise RuntimeError(
                f"cannot place a host actor of {need} in bundle {i} of this task's placement "
                f"group ({specs[i]}): ask the group for the hosts' share"
            )
    make = _maker(actor_cls, group, num_cpus, num_gpus, args_for, indices[0])
    handles = [make(i) for i in range(count)]
    return PlacedActors(handles, group, make, key, owns_group=False, first=indices[0])


# What a host actor with a share of a GPU may hold in that GPU's memory: its share of the
# device's memory, less this fraction kept for the CUDA contexts of the processes beside it (a
# host on a GPU carries more users than a CPU host; its budget is this, not the machine's RAM).
# Ray does not enforce it: a host that outgrows it stops with CUDA's out-of-memory error.
GPU_MEMORY_RESERVE = 0.1


def gpu_memory_budget(share: float, device_bytes: int) -> int:
    """The bytes of GPU memory a host actor with ``share`` of a GPU of ``device_bytes`` may use
    (:data:`GPU_MEMORY_RESERVE`): a 0.5 share of an 80 GiB GPU, 36 GiB; a whole one, 72 GiB."""
    return int(min(1.0, share) * (1.0 - GPU_MEMORY_RESERVE) * device_bytes)


def gpus_needed(count: int, num_gpus: float) -> int:
    """The GPUs ``count`` actors of a share ``num_gpus`` need: Ray puts at most ⌊1/share⌋
    fractional shares on one GPU (0.6 + 0.6 do not fit on one), and whole shares are whole GPUs."""
    if num_gpus <= 0:
        return 0
    if num_gpus >= 1:
        return count * math.ceil(num_gpus - 1e-9)
    return math.ceil(count / max(1, math.floor(1.0 / num_gpus + 1e-9)))


def gpu_bundles(count: int, num_gpus: float, gpus: int) -> list[list[int]]:
    """The actors of each whole-GPU bundle when ``count`` actors of a fractional share
    ``num_gpus`` spread over a cluster of ``gpus`` GPUs: one bundle per GPU used, as many as
    there are GPUs (at most one per actor) or as the shares need, actor i in bundle i mod B."""
    n = max(gpus_needed(count, num_gpus), min(gpus, count))
    return [list(range(b, count, n)) for b in range(n)]


def _spawn_over_gpus(actor_cls, count, num_cpus, num_gpus, args_for, key) -> PlacedActors:
    """``count`` actors of a fractional GPU share spread round-robin over the cluster's GPUs:
    Ray would fit fractional shares onto the first GPU with room, leaving the others idle. A
    placement group holds one bundle of a whole GPU (and its actors' CPUs) per GPU used
    (:func:`gpu_bundles`), spread over the nodes; each actor asks for its share inside its
    bundle, so the actors of different bundles get different GPU ids (Ray gives an actor in a
    bundle the GPU the bundle reserved). A replacement for a dead actor starts in the same
    bundle, on the same GPU. With ``key`` (an actor class that can ``reset``), the group is
    parked idle after the run and reset by the next deployment of the same shape."""
    placed = _reuse(key, args_for) if key is not None else None
    if placed is not None:
        placed.make = _gpu_maker(actor_cls, placed.group, num_cpus, num_gpus, args_for)
        return placed
    members = gpu_bundles(count, num_gpus, int(ray.cluster_resources().get("GPU", 0)))
    bundles = [
        {"GPU": 1.0} | ({"CPU": round(num_cpus * len(m), 4)} if num_cpus > 0 else {})
        for m in members
    ]
    if _IDLE:  # idle actors (of CPU runs, of another shape) may hold what the group needs
        _make_room({"GPU": float(len(bundles)), "CPU": max(0.0, num_cpus) * count}, 1)
    group = placement_group(bundles, strategy="SPREAD")
    ready, _ = ray.wait([group.ready()], timeout=120)
    if not ready:
        remove_placement_group(group)
        _no_room(count, _bundle(num_cpus, num_gpus))
    make = _gpu_maker(actor_cls, group, num_cpus, num_gpus, args_for)
    return PlacedActors([make(i) for i in range(count)], group, make, key)


def _gpu_maker(actor_cls, group, num_cpus: float, num_gpus: float, args_for):
    """make(i): a new actor ``i`` of ``actor_cls`` with its GPU share in bundle i mod B of
    ``group`` (:func:`_spawn_over_gpus`)."""
    remote_cls = ray.remote(actor_cls)
    n = len(group.bundle_specs)

    def make(i: int):
        args, kwargs = args_for(i)
        where = PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=i % n
        )
        return remote_cls.options(
            num_cpus=num_cpus, num_gpus=num_gpus, scheduling_strategy=where
        ).remote(*args, **kwargs)

    return make


def _no_room(count: int, bundle: dict):
    res = ray.cluster_resources()
    raise RuntimeError(
        f"cannot place {count} hosts of {bundle}: the cluster has {res.get('CPU', 0)} CPUs and "
        f"{res.get('GPU', 0)} GPUs (lower --hosts or --gpus-per-host)"
    )


def _bundle(num_cpus: float, num_gpus: float) -> dict:
    """What one actor asks for, as a placement-group bundle (no GPU key without a GPU share)."""
    return {"CPU": num_cpus} | ({"GPU": num_gpus} if num_gpus > 0 else {})


def _spawn(actor_cls, count: int, num_cpus: float, num_gpus: float, args_for) -> PlacedActors:
    bundle = _bundle(num_cpus, num_gpus)
    if _IDLE:
        _make_room(bundle, count)
    group = placement_group([dict(bundle) for _ in range(count)], strategy="SPREAD")
    ready, _ = ray.wait([group.ready()], timeout=120)
    if not ready:
        remove_placement_group(group)
        _no_room(count, bundle)
    make = _maker(actor_cls, group, num_cpus, num_gpus, args_for)
    return PlacedActors([make(i) for i in range(count)], group, make)


def _maker(actor_cls, group, num_cpus: float, num_gpus: float, args_for, first: int = 0):
    """make(i): a new actor ``i`` of ``actor_cls`` in bundle ``first + i`` of ``group`` (with no
    group: wherever its resources are free)."""
    remote_cls = ray.remote(actor_cls)

    def make(i: int):
        args, kwargs = args_for(i)
        where = {}
        if group is not None:
            where["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=first + i
            )
        return remote_cls.options(num_cpus=num_cpus, num_gpus=num_gpus, **where).remote(
            *args, **kwargs
        )

    return make
