"""The Flower half of benchmarks/vs_flower.py: the FedAvg-echo workload on Flower's simulation
runtime (Ray backend). Runs in its own virtual environment (``flwr[simulation]==1.42.0``), not the
project's; imports nothing from privrec.

    python benchmarks/flower_echo.py --clients 1000 --rounds 5 --fail 0.1 --out result.json

Workload (the same as protocols/echo.py): the server holds a ``dim``-float32 vector (zeros at the
start) and sends it to every client each round (``fraction_train=1.0``); client ``p`` (its
partition id) returns it plus ``delta · ((p mod 100) + 1)`` with weight 1; the server replaces the
vector by the average. With ``--fail q`` a client raises an exception in ``train`` with probability
``q``, drawn from (seed, round, partition id); the simulation runtime turns the exception into an
error reply.

API: Flower 1.42's Message API — ``ServerApp`` with ``@app.main()`` driving
``flwr.serverapp.strategy.FedAvg.start``, a ``ClientApp`` with ``@app.train()``, launched with
``flwr.simulation.run_simulation`` on the Ray backend. That FedAvg aggregates the replies without
error and logs the failures, which is what ``accept_failures=True`` means in the legacy
``flwr.server.strategy.FedAvg`` (the legacy strategy has the flag; the Message-API one has no flag
and always accepts failures). ``--api legacy`` runs the legacy path instead: ``NumPyClient`` +
``flwr.server.strategy.FedAvg(accept_failures=True)`` through the compatibility ``ServerApp``.

The round time is measured inside the strategy, from the start of ``configure_train`` (resp.
``configure_fit``) to the end of ``aggregate_train`` (``aggregate_fit``): sending the vector, every
client's ``train``, the replies and the average. Evaluation is switched off
(``fraction_evaluate=0``). The result (per-round seconds, replies, failures, the final vector's
mean) is written as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time

import numpy as np


def fails(seed: int, round_: int, pid: int, rate: float) -> bool:
    if rate <= 0:
        return False
    digest = hashlib.sha256(f"flower-echo:{seed}:{round_}:{pid}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64 < rate


def client_delta(pid: int, delta: float) -> float:
    return delta * ((pid % 100) + 1)


def message_api(args, rounds_log: list) -> float:
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        rnd = int(msg.content["config"]["server-round"])
        if fails(args.seed, rnd, pid, args.fail):
            raise RuntimeError(f"client {pid} fails in round {rnd}")
        w = msg.content["arrays"].to_numpy_ndarrays()[0]
        out = w + np.float32(client_delta(pid, args.delta))
        content = RecordDict(
            {"arrays": ArrayRecord([out]), "metrics": MetricRecord({"num-examples": 1})}
        )
        return Message(content=content, reply_to=msg)

    class TimedFedAvg(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            self._t0 = time.perf_counter()
            return super().configure_train(server_round, arrays, config, grid)

        def aggregate_train(self, server_round, replies):
            replies = list(replies)
            out = super().aggregate_train(server_round, replies)
            errors = sum(1 for m in replies if m.has_error())
            rounds_log.append(
                {
                    "seconds": time.perf_counter() - self._t0,
                    "results": len(replies) - errors,
                    "failures": errors,
                }
            )
            return out

    server_app = ServerApp()
    final: dict = {}

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = TimedFedAvg(
            fraction_train=1.0,
            fraction_evaluate=0.0,
            min_train_nodes=args.clients,
            min_available_nodes=args.clients,
        )
        result = strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord([np.zeros(args.dim, dtype=np.float32)]),
            num_rounds=args.rounds,
        )
        final["w"] = result.arrays.to_numpy_ndarrays()[0]

    from flwr.simulation import run_simulation

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=args.clients,
        backend_config=backend_config(args),
    )
    return float(np.mean(final["w"], dtype=np.float64))


def legacy_api(args, rounds_log: list) -> float:
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg

    class EchoClient(NumPyClient):
        def __init__(self, pid: int):
            self.pid = pid

        def fit(self, parameters, config):
            rnd = int(config["server-round"])
            if fails(args.seed, rnd, self.pid, args.fail):
                raise RuntimeError(f"client {self.pid} fails in round {rnd}")
            return [parameters[0] + np.float32(client_delta(self.pid, args.delta))], 1, {}

    def client_fn(context: Context):
        return EchoClient(int(context.node_config["partition-id"])).to_client()

    final: dict = {}

    class TimedFedAvg(FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            self._t0 = time.perf_counter()
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            out = super().aggregate_fit(server_round, results, failures)
            rounds_log.append(
                {
                    "seconds": time.perf_counter() - self._t0,
                    "results": len(results),
                    "failures": len(failures),
                }
            )
            if out[0] is not None:
                final["w"] = parameters_to_ndarrays(out[0])[0]
            return out

    def server_fn(context: Context):
        strategy = TimedFedAvg(
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=args.clients,
            min_available_clients=args.clients,
            accept_failures=True,
            on_fit_config_fn=lambda rnd: {"server-round": rnd},
            initial_parameters=ndarrays_to_parameters([np.zeros(args.dim, dtype=np.float32)]),
        )
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=args.rounds))

    from flwr.simulation import run_simulation

    run_simulation(
        server_app=ServerApp(server_fn=server_fn),
        client_app=ClientApp(client_fn=client_fn),
        num_supernodes=args.clients,
        backend_config=backend_config(args),
    )
    return float(np.mean(final["w"], dtype=np.float64)) if "w" in final else float("nan")


def backend_config(args) -> dict:
    return {
        "client_resources": {"num_cpus": args.client_cpus, "num_gpus": 0.0},
        "init_args": {"num_cpus": args.ray_cpus},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dim", type=int, default=10000)
    ap.add_argument("--delta", type=float, default=1e-3)
    ap.add_argument("--fail", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--client-cpus", type=float, default=0.5)
    ap.add_argument("--ray-cpus", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--api", choices=("message", "legacy"), default="message")
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=0.0,
        help="stop (keeping the rounds done) after this long",
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import flwr
    import ray

    t0 = time.perf_counter()
    doc = {
        "flwr": flwr.__version__,
        "ray": ray.__version__,
        "api": args.api,
        "clients": args.clients,
        "rounds": [],
        "global_mean": float("nan"),
        "wall_seconds": 0.0,
        "client_resources": backend_config(args)["client_resources"],
        "ray_cpus": args.ray_cpus,
        "error": None,
    }
    lock = threading.Lock()

    def write(error: str | None = None) -> None:
        with lock:
            doc["wall_seconds"] = time.perf_counter() - t0
            if error and not doc["error"]:
                doc["error"] = error
            tmp = args.out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(doc, f, indent=2)
            os.replace(tmp, args.out)

    class Log(list):  # every finished round is on disk at once, so a run cut short keeps it
        def append(self, item):
            super().append(item)
            doc["rounds"] = list(self)
            write()

    if args.max_seconds > 0:

        def watchdog() -> None:
            time.sleep(args.max_seconds)
            write(f"stopped after --max-seconds {args.max_seconds:g} s")
            try:
                ray.shutdown()
            finally:
                os._exit(3)

        threading.Thread(target=watchdog, daemon=True).start()
    try:
        run = message_api if args.api == "message" else legacy_api
        doc["global_mean"] = run(args, Log())
        write()
    except BaseException as e:  # report what was measured before the failure
        write(f"{type(e).__name__}: {e}")
        raise SystemExit(doc["error"]) from None


if __name__ == "__main__":
    main()
