"""``--resume RUN_DIR``: which flags a resumed run takes (the rest come from its checkpoint), its
protocol flags typed by the run's own protocol, and the resume itself."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli.parser import options
from cli.protocol_flags import protocol_flags
from cli.shared import placement_message, show
from engine.checkpoint import CheckpointError
from protocols import get_protocol

# the flags a resumed run takes; protocol flags are checked against its Config's RESUMABLE
RESUME_FLAGS = (
    "--resume",
    "--rounds",
    "--transport",
    "--address",
    "--checkpoint-every",
    "--no-progress",
    "--tensorboard",
    "--dashboard",
    "--dry-run",
    "--gpus-per-host",
)


def refuse_fixed_flags(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A flag given with ``--resume`` that the checkpoint fixes (data, seed, placement, conditions,
    --config, ...) is refused in one line rather than dropped."""
    fixed = {
        opt
        for action in parser._actions
        for opt in action.option_strings
        if opt.startswith("--") and not set(action.option_strings) & set(RESUME_FLAGS)
    } - {"--help"}
    given = [t.partition("=")[0] for t in argv if t.partition("=")[0] in fixed]
    if given:
        parser.error(
            f"{', '.join(dict.fromkeys(given))}: cannot change when a run resumes (the run takes "
            f"it from the checkpoint; with --resume only {', '.join(RESUME_FLAGS[1:])} and the "
            "step-size parameters its protocol names apply)"
        )


def resume_flags(parser: argparse.ArgumentParser, run_dir: str, extras: list[str]) -> dict:
    """Protocol flags given with ``--resume``, typed by the run's protocol (its config.json); one
    that is not in the Config's ``RESUMABLE`` is refused here, before the checkpoint is read:
    the nodes' state was built with it."""
    if not extras:
        return {}
    try:
        name = json.loads((Path(run_dir) / "config.json").read_text())["settings"]["protocol"]
        cls = get_protocol(name).Config
        params = protocol_flags(extras, cls, options(parser))
    except (OSError, KeyError, json.JSONDecodeError) as e:
        parser.error(f"--resume {run_dir}: cannot read its protocol from config.json ({e})")
    except ValueError as e:
        parser.error(f"--resume {run_dir}: {e}")
    frozen = [k for k in params if k not in cls.RESUMABLE]
    if frozen:
        flags = ", ".join("--" + k.replace("_", "-") for k in frozen)
        may = ", ".join("--" + k.replace("_", "-") for k in cls.RESUMABLE)
        parser.error(
            f"--resume {run_dir}: {flags}: cannot change when a run resumes (the nodes' state "
            f"was built with {'it' if len(frozen) == 1 else 'them'}; {name} may change {may})"
        )
    return params


def resume(parser: argparse.ArgumentParser, args, params: dict) -> int:
    """Continue the run in ``args.resume`` (or, with --dry-run, say from which round to which);
    returns the exit status."""
    from cluster.runtime import ClusterError  # imports Ray
    from engine import resume as resume_run
    from engine.runner import resume_plan
    from nodes.deployment import HostLostError, NodeFailure, PlacementError
    from protocols.base import ConfigError

    try:
        if args.dry_run:
            _, start, rounds = resume_plan(args.resume, args.rounds, params)
            print(f"{args.resume}: resumes at round {start}, runs to {rounds} rounds (dry run)")
            return 0
        run_dir, summary = resume_run(
            args.resume,
            args.rounds,  # None: the run's own plan
            address=args.address,
            progress=not args.no_progress,
            checkpoint_every=args.checkpoint_every or None,
            params=params,
            tensorboard=args.tensorboard,
            gpus_per_host=args.gpus_per_host,  # None: the run's own, or the CPU here
            transport=args.transport,  # None: the run's own
        )
    except (CheckpointError, ConfigError) as e:
        parser.error(f"--resume: {e}")
    except PlacementError as e:
        parser.error(placement_message(e))
    except (HostLostError, NodeFailure) as e:  # one line; the traceback is in the run folder
        print(f"launch.py: run stopped: {e}", file=sys.stderr)
        return 1
    except ClusterError as e:
        parser.error(f"--address: {e}")
    show(summary, run_dir)
    return 0
