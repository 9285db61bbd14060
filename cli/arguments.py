"""The flags that one run and a comparison share: data, cluster and placement; the run's seed,
rounds, config file and outputs; the run conditions."""

from __future__ import annotations

import argparse


def add_shared_arguments(p: argparse.ArgumentParser) -> None:
    """Data, cluster and placement flags."""
    p.add_argument(
        "--dataset",
        default="synthetic",
        metavar="NAME|FOLDER",
        help="dataset name (synthetic, ml-100k, gowalla, ciao, epinions, filmtrust, diffnet-yelp, "
        "diffnet-flickr), or a folder of dataset files (RecBole atomic, LightGCN train.txt/test.txt, "
        "CSV/TSV; see data/loaders/files.py) (default: the embedded synthetic generator)",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="folder holding the dataset folders (default: ../shared/data beside the checkout, if present)",
    )
    p.add_argument(
        "--address",
        default=None,
        help="'auto' or HOST:PORT of a cluster started with `ray start --head` (default: start a local Ray instance)",
    )
    p.add_argument(
        "--placement",
        default="packed",
        choices=["dedicated", "packed"],  # nodes.deployment.PLACEMENTS
        help="dedicated: one actor per participant; packed: users share --hosts actors (default: %(default)s)",
    )
    p.add_argument(
        "--hosts",
        type=int,
        default=1,
        help="number of host actors carrying the users when packed (default: %(default)s)",
    )
    p.add_argument(
        "--gpus-per-host",
        type=float,
        default=None,
        help="GPU share each host actor asks Ray for, fractions allowed; hosts with a share are "
        "spread round-robin over every GPU of every node, and their nodes compute there; 0: the "
        "CPU (default: on a cluster with GPUs, 1 when there is a GPU per host actor, else "
        "1/ceil(host actors / GPUs), e.g. 0.5 for 3 hosts on 2 GPUs; without GPUs, 0). A host's "
        "memory budget is its share of its GPU's memory less 10%% for CUDA (a 0.5 share of an "
        "80 GiB GPU: 36 GiB; Ray does not enforce it), so a host on a GPU may carry more users "
        "than a CPU host: fewer --hosts",
    )
    p.add_argument(
        "--cpus-per-host",
        type=float,
        default=None,
        help="CPU share each host asks Ray for (default: the cluster's CPUs divided among the hosts, at most 1)",
    )
    p.add_argument(
        "--dashboard",
        action="store_true",
        help="start the local Ray instance with Ray's dashboard (on 127.0.0.1) and print its address",
    )


def add_run_arguments(p: argparse.ArgumentParser, *, rounds_default: int | None) -> None:
    """Rounds, seed, --config, outputs, --audit, --transport, --check-device and --dry-run; a
    comparison's --rounds (``rounds_default`` None) has no single default."""
    if rounds_default is None:
        p.add_argument(
            "--rounds",
            type=int,
            default=None,
            help="training rounds of every protocol (default: 20, or the [compare] table's, "
            "or --quick's small ones)",
        )
    else:  # None until parsed: with --resume, no --rounds means the resumed run's own plan
        p.add_argument(
            "--rounds",
            type=int,
            default=None,
            help=f"training rounds (default: {rounds_default}; with --resume: the run's own)",
        )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of every participant's RNG (default: %(default)s)"
    )
    p.add_argument(
        "--config", default=None, help="TOML file with protocol parameters and a [dataset] table"
    )
    p.add_argument(
        "--out", default="runs", help="where run reports are written (default: %(default)s)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--tensorboard",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="write every round's loss and training figures, the metrics of each evaluation, "
        "bytes by kind, ε spent and simulated seconds as TensorBoard event files while the run "
        "goes: in RUN_DIR/tensorboard, or in DIR/<run folder name> (compare: one folder, a run "
        "per protocol); then `tensorboard --logdir ...` (needs `pip install tensorboard`)",
    )
    p.add_argument(
        "--audit",
        action="store_true",
        help="after the run, audit the protocol's privacy mechanism(s) with the run's parameters "
        "(seconds): an empirical 95%% lower bound on ε beside the rigorous and the paper's "
        "figures, in summary.json's privacy.audit and the comparison's 'ε audit' column "
        "(python -m benchmarks.audit: every mechanism at full size)",
    )
    p.add_argument(
        "--transport",
        choices=("auto", "calls", "channels"),  # nodes.transport.CHOICES (no Ray import here)
        default=None,
        help="how supersteps travel between the driver and the host actors: 'calls' (an actor "
        "call per host, batches through Ray's object store) or 'channels' (a Ray compiled graph "
        "of the hosts, built once: orders, batches and outcomes through its channels); results "
        "are the same; 'auto' (the default) takes channels where the cluster has a CPU for each "
        "host actor and two to spare (a graph's hosts poll between supersteps), else calls "
        "(with --resume: the run's own)",
    )
    p.add_argument(
        "--check-device",
        action="store_true",
        help="run the nodes' code with torch's default device 'meta', so that a tensor a role "
        "makes without its node's device (self.device, self.tensor, self.build) fails the run "
        "here, on the CPU, as it would on a GPU host (slower; for protocol authors)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="load the data, build and check everything (parameters, placement, conditions), "
        "print the plan and stop before Ray starts",
    )


def add_condition_arguments(p: argparse.ArgumentParser) -> None:
    """The run conditions' flags (nodes/conditions.py), in a group of their own."""
    c = p.add_argument_group("run conditions (also a [conditions] table in --config)")
    c.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="probability that a user or party is offline in a round (default: 0)",
    )
    c.add_argument(
        "--availability-trace",
        dest="trace",
        default=None,
        metavar="FILE",
        help="JSON {node id: [rounds or [start, end) windows online]}; overrides --dropout for the nodes it names",
    )
    c.add_argument(
        "--min-participants",
        type=int,
        default=None,
        help="a server skips its update when fewer uploads arrived (default: 1)",
    )
    c.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="simulated seconds per round after which messages are late and dropped (default: 0 = none)",
    )
    c.add_argument(
        "--user-speed",
        type=float,
        default=None,
        help="median compute-time multiplier of user devices vs this machine (default: 2)",
    )
    c.add_argument(
        "--speed-spread",
        type=float,
        default=None,
        help="sigma of the log-normal spread of device speeds (default: 0.5)",
    )
    c.add_argument(
        "--user-link",
        default=None,
        choices=["mobile", "datacenter"],
        help="link class of user devices (default: mobile)",
    )
    c.add_argument(
        "--snapshot-every",
        type=int,
        default=None,
        help="rounds between host snapshots for recovering a dead host (default: 5; 0 = none)",
    )
    c.add_argument(
        "--max-failed-fraction",
        type=float,
        default=None,
        help="a user or party whose handler raises fails for the round, like a dropout; the run "
        "stops when more than this share of a round's participants failed (default: 0.5; 1 = "
        "never). A server, key server or matcher that raises always stops it",
    )
    c.add_argument(
        "--kill-host",
        dest="kill_hosts",
        action="append",
        default=None,
        metavar="ROUND:HOST",
        help="fault injection: SIGKILL host HOST at the start of round ROUND (repeatable)",
    )
    c.add_argument(
        "--secure-aggregation",
        dest="secure_aggregation",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="SecAgg+ where a server sums user uploads (fedmf, fedpergnn, fedlightgcn, plugins "
        "that declare it): each upload is densified over the whole item table, masked and "
        "summed, so the server learns only the sum of the round's survivors; parameters in a "
        "[secure_aggregation] TOML table (neighbours, threshold, bound, min_users, "
        "stage_dropout; see nodes/secure_sum.py)",
    )
    c.add_argument(
        "--secure-rng",
        dest="secure_rng",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw every noise sample of the privacy mechanisms from a cryptographically secure "
        "generator (ChaCha20 keyed from the operating system, as Opacus's secure mode) instead of "
        "each node's stream seeded from --seed: the noise cannot be rebuilt from the published "
        "seed, and runs are no longer reproducible (default: seeded; the report's "
        "privacy.noise_rng says which was used)",
    )
