"""How a superstep's orders, batches and outcomes travel between the driver and the hosts.

Two transports carry the same contract (nodes/step.py) and give the same results:

* :class:`ActorCalls` (``calls``): the driver calls every host's ``step`` with its order and the
  references of the batches other hosts put in Ray's object store for it; each host puts its own
  batches there and answers with their references.
* :class:`Channels` (``channels``): a Ray compiled graph of the host actors, built once per
  deployment: every execution carries the orders to the hosts (``graph_step``), each host's batch
  for each other host straight to that host (``deliver``, which keeps it for the next superstep
  and answers the host's outcome) and the outcomes back, through channels set up at compile
  time (shared memory between processes of one machine; a batch of 1 MiB or more goes through
  the object store and its reference through the channel) instead of an actor task, an
  object-store entry and a driver round trip each.
  Where the graph cannot serve — a host died (it is torn down, the superstep runs over actor
  calls, which replace the host, and the graph is built again over the new actors), or it cannot
  be compiled — the superstep goes over actor calls, and :attr:`Channels.notes` says so (the
  run's summary, ``transport``). Batch references the driver holds then (or from a restored
  checkpoint) reach their hosts in the next graph's orders.

Ray 2.60's channel readers poll: every host of an open graph keeps about half a CPU busy while it
waits for the next superstep. On a machine with cores to spare
that buys the lower fixed cost per superstep; on a small one it slows everything else running
beside the graph (another deployment, another test worker). Hence the default, ``auto``
(:func:`choose_transport`): channels where the cluster has a CPU for every host actor and two to
spare, else actor calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import ray
from ray.exceptions import ObjectLostError, RayActorError, RayChannelError, RaySystemError

from nodes.step import StepOrder, StepOutcome

TRANSPORTS = ("calls", "channels")
# the default, "auto": channels where the cluster has a CPU for every host's polling reader and
# two to spare (the driver, Ray), else actor calls (choose_transport). A graph's supersteps cost
# less, but its readers poll: about half a CPU per host while a graph is open, taken from
# everything else
DEFAULT_TRANSPORT = "auto"
CHOICES = ("auto", *TRANSPORTS)


def choose_transport(name: str, n_hosts: int, cpus: float) -> tuple[str, str | None]:
    """The transport ``name`` stands for on a cluster of ``cpus`` CPUs with ``n_hosts`` host
    actors, and a note saying why where it was chosen (``auto``). Raises ValueError for a name
    that is none of :data:`CHOICES`."""
    _check(name)
    if name != "auto":
        return name, None
    if cpus >= n_hosts + 2:
        return "channels", f"auto: channels ({cpus:g} CPUs for {n_hosts} host actors)"
    return "calls", (
        f"auto: calls ({cpus:g} CPUs for {n_hosts} host actors; a compiled graph's hosts poll "
        f"for their next superstep: channels from {n_hosts + 2} CPUs)"
    )


@dataclass
class Answers:
    """The hosts' answers to one superstep's orders.

    Attributes:
        outcomes: host -> its outcome.
        dead: hosts that died (no outcome).
        starved: hosts that could not run: a batch for them was lost with the host that put it.
    """

    outcomes: dict[int, StepOutcome] = field(default_factory=dict)
    dead: list[int] = field(default_factory=list)
    starved: list[int] = field(default_factory=list)


class ActorCalls:
    """A superstep as one ``Host.step`` actor call per host."""

    name = "calls"
    # a host runs its actor calls one at a time, in order: a snapshot asked before a superstep
    # is taken before it
    in_order_with_calls = True

    def __init__(self):
        self.notes: list[str] = []

    def run(self, hosts: list, orders: list[StepOrder], pending: list[list]) -> Answers:
        """Run ``orders`` (one per host) on ``hosts``; ``pending[h]``: (source host, batch
        reference or None where host h holds the batch itself) for every batch sent to h."""
        futures = [
            hosts[h].step.remote(orders[h], *[ref for _, ref in pending[h] if ref is not None])
            for h in range(len(orders))
        ]
        answers = Answers()
        for h, fut in enumerate(futures):
            try:
                answers.outcomes[h] = ray.get(fut)
            except RayActorError:
                answers.dead.append(h)
            except ObjectLostError:  # an input batch died with the host that sent it
                answers.starved.append(h)
        return answers

    def invalidate(self, why: str) -> None:
        """The hosts changed (one died or was replaced): nothing to rebuild."""

    def close(self) -> None:
        pass


class Channels:
    """A superstep as one execution of a compiled graph of the host actors: every host runs
    ``graph_step`` on the orders and returns one batch per host; each host's ``deliver``
    receives the batches addressed to it and answers the host's outcome."""

    name = "channels"
    # a graph's executions run on a thread of their own in each host, beside its actor calls: the
    # driver waits for a call (a snapshot) before the next superstep
    in_order_with_calls = False

    def __init__(self):
        self.notes: list[str] = []
        self.supersteps = {"channels": 0, "calls": 0}  # how each superstep went
        self._calls = ActorCalls()
        self._graph = None
        self._hosts: list | None = None
        self._calls_next = 0  # supersteps to run over actor calls before building the graph
        self._broken = False  # the graph cannot be compiled here: actor calls from now on
        self._round = None
        self.compile_seconds = 0.0

    def run(self, hosts: list, orders: list[StepOrder], pending: list[list]) -> Answers:
        self._round = orders[0].round
        if self._broken or self._calls_next:
            self._calls_next = max(0, self._calls_next - 1)
            return self._over_calls(hosts, orders, pending)
        if self._graph is None or self._hosts != _ids(hosts):
            if not self._build(hosts):
                return self._over_calls(hosts, orders, pending)
        # batches the driver holds (a superstep over actor calls before, a checkpoint restored)
        # go to their hosts as references in the orders
        # (the fallback below passes them as arguments, with the orders as they came)
        with_refs = [
            replace(o, batches=refs)
            if (refs := tuple(r for _, r in pending[h] if r is not None))
            else o
            for h, o in enumerate(orders)
        ]
        try:
            refs = self._graph.execute(tuple(with_refs))
            values = [r.get(timeout=-1) for r in refs]
        except (RayChannelError, RayActorError, RaySystemError, ObjectLostError) as e:
            # a host died during the execution: the graph is gone; the hosts that ran the
            # superstep answer it again from what they kept, the others run it now
            self.invalidate(f"an execution failed ({type(e).__name__})")
            self._calls_next = 0
            return self._over_calls(hosts, orders, pending)
        self.supersteps["channels"] += 1
        return Answers(outcomes=dict(enumerate(values)))

    def _over_calls(self, hosts: list, orders: list[StepOrder], pending: list[list]) -> Answers:
        self.supersteps["calls"] += 1
        return self._calls.run(hosts, orders, pending)

    def _build(self, hosts: list) -> bool:
        """Compile the graph over ``hosts``; False (and actor calls from now on) where Ray
        cannot."""
        from ray.dag import InputNode, MultiOutputNode

        self.close()
        n = len(hosts)
        t0 = time.perf_counter()
        try:
            _keep_one_proxy()
            ray.get([h.join_graph.remote() for h in hosts])
            with InputNode() as orders:
                if n == 1:  # no batch to carry: the host answers its outcome
                    dag = MultiOutputNode([hosts[0].graph_step.bind(orders)])
                else:
                    steps = [h.graph_step.options(num_returns=n).bind(orders) for h in hosts]
                    # host d's deliver takes every host's batch for d (after its own step) and
                    # answers d's outcome
                    dag = MultiOutputNode(
                        [hosts[d].deliver.bind(*[s[d] for s in steps]) for d in range(n)]
                    )
            self._graph = dag.experimental_compile(_submit_timeout=-1)
        except Exception as e:  # noqa: BLE001 — any reason the graph cannot be built here
            self._broken = True
            self.notes.append(
                f"round {self._round}: no compiled graph ({type(e).__name__}: "
                f"{' '.join(str(e).split())[:200]}); actor calls instead"
            )
            return False
        self.compile_seconds += time.perf_counter() - t0
        if self._hosts is not None:
            self.notes.append(
                f"round {self._round}: graph rebuilt over the hosts now running "
                f"({time.perf_counter() - t0:.2f} s)"
            )
        self._hosts = _ids(hosts)
        return True

    def invalidate(self, why: str) -> None:
        """A host died or was replaced: tear the graph down; the next superstep runs over actor
        calls (which find dead hosts and replace them), the one after builds it again."""
        if self._graph is not None:
            self.notes.append(f"round {self._round}: graph torn down: {why}")
        self.close()
        self._calls_next = 1

    def close(self) -> None:
        if self._graph is not None:
            graph, self._graph = self._graph, None
            try:
                graph.teardown()
            except Exception:  # noqa: BLE001 — a graph whose actor died is torn down already
                pass


class _OneProxy:
    """Ray's compiled graph starts an actor of its own on the driver's node for every graph it
    compiles (``CompiledDAG.DAGDriverProxyActor``: empty, a target through which the graph's
    writers reach the driver as a reader), and that actor dies with the graph: a new Python
    worker process every deployment, 1–2 s of CPU on a small machine. It holds no state, so one
    kept for this driver's Ray session serves every graph in turn."""

    def __init__(self, actor_class):
        self._cls = actor_class
        self._session = None
        self._actor = None
        self._options: dict = {}

    def options(self, **options):
        self._options = options
        return self

    def remote(self):
        ctx = ray.get_runtime_context()
        session = (ctx.get_job_id(), ctx.get_node_id())
        if self._actor is None or self._session != session:
            self._actor = self._cls.options(**self._options).remote()
            self._session = session
        return self._actor


def _keep_one_proxy() -> None:
    """Install :class:`_OneProxy` (once; where Ray has no such actor, nothing changes)."""
    from ray.dag.compiled_dag_node import CompiledDAG

    proxy = getattr(CompiledDAG, "DAGDriverProxyActor", None)
    if proxy is not None and not isinstance(proxy, _OneProxy):
        CompiledDAG.DAGDriverProxyActor = _OneProxy(proxy)


def _ids(hosts: list) -> list:
    return [h._actor_id for h in hosts]


def _check(name: str) -> None:
    """ValueError in one line unless ``name`` is one of :data:`CHOICES`."""
    if name not in CHOICES:
        raise ValueError(f"--transport must be one of {CHOICES}, got {name!r}")


def make_transport(name: str) -> ActorCalls | Channels:
    """The transport called ``name`` (one of :data:`TRANSPORTS`)."""
    _check(name)
    if name == "auto":
        raise ValueError("make_transport: 'auto' names no transport; choose_transport picks one")
    return ActorCalls() if name == "calls" else Channels()
