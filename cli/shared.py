"""What one run, a comparison and a resume share: the checks of the shared flags, the run
conditions, the data, the RunSettings, Ray's dashboard and the summary printed at the end."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from cli.parser import did_you_mean
from engine.figures import main_metric
from engine.tensorboard import TensorBoardMissing, require
from nodes.conditions import Conditions, ConditionsError


def check_shared(parser: argparse.ArgumentParser, args) -> None:
    """Placement, GPU and CPU shares, --address and --data-dir, refused in one line."""
    from nodes.deployment import PlacementError, check_placement  # imports Ray

    try:
        check_placement(args.placement, args.hosts)
    except PlacementError as e:
        parser.error(placement_message(e))
    if args.gpus_per_host is not None and not args.gpus_per_host >= 0:
        parser.error(f"--gpus-per-host must be >= 0, got {args.gpus_per_host}")
    if args.cpus_per_host is not None and not args.cpus_per_host > 0:
        parser.error(f"--cpus-per-host must be > 0, got {args.cpus_per_host}")
    if (
        args.address is not None
        and args.address != "auto"
        and not re.fullmatch(r"[\w.\-]+:\d{1,5}", args.address)
    ):
        parser.error(f"--address must be 'auto' or HOST:PORT, got {args.address!r}")
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        parser.error(f"--data-dir {args.data_dir!r} is not a directory")


def check_tensorboard(parser: argparse.ArgumentParser, args) -> None:
    """``--tensorboard`` without the tensorboard package: one line, before Ray starts."""
    if getattr(args, "tensorboard", None) is None:
        return
    try:
        require()
    except TensorBoardMissing as e:
        parser.error(str(e))


def placement_message(e: Exception) -> str:
    """A placement error in one line naming its flag."""
    text = str(e)
    return text if text.startswith("--") else f"--hosts/--placement: {text}"


def run_conditions(parser: argparse.ArgumentParser, values: dict) -> Conditions:
    """The typed run conditions of the [conditions] table and the condition flags."""
    try:
        return Conditions.from_dict(values)
    except (ConditionsError, TypeError) as e:
        parser.error(f"run condition {e}")


def load(parser: argparse.ArgumentParser, args, dataset_opts: dict):
    """--dataset, loaded with the [dataset] options; a mistake is one line, and a Ctrl-C says
    that nothing was written."""
    from data.errors import DataFormatError, UnknownDatasetError  # imports pyarrow
    from data.registry import DATASETS, load_dataset

    try:
        return load_dataset(args.dataset, args.data_dir, seed=args.seed, **dataset_opts)
    except UnknownDatasetError as e:
        hint = did_you_mean(str(args.dataset), DATASETS, prefix="did you mean --dataset ")
        if hint:
            parser.error(
                f"--dataset {args.dataset}: unknown dataset{hint} (known: {', '.join(DATASETS)}; "
                "or a folder of dataset files)"
            )
        parser.error(f"--dataset {args.dataset}: {' '.join(str(e).split())}")
    except (DataFormatError, FileNotFoundError, ValueError, TypeError) as e:
        parser.error(f"--dataset {args.dataset}: {' '.join(str(e).split())}")
    except KeyboardInterrupt as e:
        if str(e):
            raise
        raise KeyboardInterrupt(
            f"interrupted while loading --dataset {args.dataset}, before the run started; "
            "nothing was written"
        ) from None


def settings(args, conditions: Conditions | None, **fields):
    """The RunSettings of the flags that run and compare share, plus ``fields``."""
    from engine import RunSettings  # imports Ray

    return RunSettings(
        seed=args.seed,
        placement=args.placement,
        hosts=args.hosts,
        gpus_per_host=args.gpus_per_host,
        cpus_per_host=args.cpus_per_host,
        address=args.address,
        out=args.out,
        progress=not args.no_progress,
        conditions=conditions,
        adversaries=getattr(args, "adversaries", None),
        audit=args.audit,
        tensorboard=getattr(args, "tensorboard", None),
        check_device=getattr(args, "check_device", False),
        **({"transport": args.transport} if getattr(args, "transport", None) else {}),
        **fields,
    )


def dashboard(args) -> None:
    """--dashboard: the local Ray instance this command starts runs Ray's dashboard (and without
    it, none: a second command in one process does not inherit the first one's flag)."""
    from cluster.runtime import use_dashboard  # imports Ray

    use_dashboard(bool(getattr(args, "dashboard", False)))


def show(summary: dict, run_dir) -> None:
    """The run's main figures as JSON on stdout, and where its report is."""
    shown = {
        k: summary[k]
        for k in (
            "protocol",
            "dataset",
            "rounds",
            "metrics",
            "bytes_total",
            "wall_seconds",
            "sim_seconds",
        )
    }
    privacy = summary.get("privacy") or {}
    if "epsilon" in privacy:  # the rigorous ε, at the δ beside it
        shown["epsilon"] = privacy["epsilon"]
        if "privacy_delta" in privacy:
            shown["privacy_delta"] = privacy["privacy_delta"]
    if privacy.get("noise_rng", "seeded") != "seeded":  # --secure-rng
        shown["noise_rng"] = privacy["noise_rng"]
    if "audit" in privacy:  # --audit: each mechanism's lower bound beside the rigorous figure
        shown["audit"] = [
            {k: a[k] for k in ("mechanism", "lower_bound_95", "rigorous_epsilon", "verdict")}
            for a in privacy["audit"]
        ]
    if summary.get("faults"):
        shown["faults"] = summary["faults"]
    # the trivial baseline of the run's kind of metric (RMSE: rating prediction), under the name
    # summary.json gives it
    rating = main_metric(summary["metrics"], summary.get("main_metric"))[1] == "lower"
    kind = "mean_rating" if rating else "popularity"
    if kind in summary["baselines"]:
        shown["baselines"] = {kind: summary["baselines"][kind]}
    print(json.dumps(shown, indent=2, default=float))
    print(f"run report: {run_dir}")
