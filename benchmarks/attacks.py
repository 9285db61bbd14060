"""Poisoning attacks and the defences that answer them: protocol × attack × defence × adversary
fraction → the targets' exposure among honest users (target ER@K, HR@K) beside the main metric.

    python -m benchmarks.attacks --dataset ml-100k --protocols fedmf \\
        --attacks random,bandwagon,fedrecattack,pipattack,byzantine-scaled \\
        --defences none,norm-bound,median,trimmed-mean,krum --fractions 0.01,0.05,0.1 --rounds 30
    python -m benchmarks.attacks --quick          # synthetic data, every protocol, a few cells

For every protocol and defence, a run without adversaries (fraction 0, the same target items)
comes first: the targets' exposure with no attack, and the defence's accuracy cost (its main
metric beside the plain mean's). Then each attack × fraction under that defence. Every run goes
through the same runner as ``launch.py``, on one Ray instance; a cell an attack has no role for in
a protocol is recorded as such. The JSON (``benchmarks/out/attacks-<dataset>[-quick].json``, or
``--name``) is rewritten after every run, and ``--resume`` skips the cells it already holds, so a
long grid can be stopped and continued. A recorded result (a file git tracks, which RESULTS.md
cites) is refused before anything runs unless ``--write`` is given. ``--published`` prints the paper figures recorded beside ours (``PUBLISHED``).
"""

from __future__ import annotations

import json
import sys
import time

from benchmarks.common import (
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    check_dataset,
    claim_result,
    dataset_tag,
    result_name,
    run_main,
    scoped_key_values,
    text_table,
    usage_errors,
    write_result,
)

QUICK = {
    "dataset": "synthetic",
    "protocols": "fedmf,fedlightgcn,dmf,dgrec,verfedgnn,dipsgnn",
    "attacks": "byzantine-scaled,random",
    "defences": "none,median",
    "fractions": "0.05",
    "rounds": 3,
}

# Figures a paper states for a setting close to one of ours: (protocol, dataset, attack,
# fraction) -> [(figure, what it is, where it is stated)]. Only figures read in the paper itself.
PUBLISHED: dict[tuple[str, str, str, float], list[tuple[float, str, str]]] = {
    ("fedmf", "ml-100k", "none", 0.0): [
        (
            0.0023,
            "ER@10 without attack, MF-FRS, 256 users a round, K=10 (0.23%)",
            "Pieck (Zhang et al., ICDE 2024), supplementary Table XII (BCE loss)",
        )
    ],
    ("fedmf", "ml-100k", "fedrecattack", 0.05): [
        (
            0.7824,
            "ER@10 after epoch 5 of 200, xi = 1% public, dim 32 (a sample log, not a paper "
            "table: the paper's own tables were not retrieved)",
            "FedRecAttack's code README (github.com/rdz98/FedRecAttack)",
        )
    ],
}


def _cell_key(protocol: str, attack: str, fraction: float, defence: str) -> str:
    return f"{protocol}|{attack or 'none'}|{fraction:g}|{defence or 'none'}"


def run_cell(args, dataset, protocol: str, attack: str, fraction: float, defence: str) -> dict:
    """One run: its target exposure, main metric, adversaries and wall time (or why it cannot)."""
    from adversaries import Adversaries, AdversaryError
    from engine import RunSettings, run
    from engine.compare import main_metric

    k = args.er_k
    adv = Adversaries(
        fraction=fraction,
        attack=attack if fraction else "",
        n_targets=args.n_targets,
        er_k=k,
        params=args.attack_param.get(attack, {}) if fraction else {},
        defence=defence,
        defence_params=args.defence_param.get(defence, {}),
    )
    settings = RunSettings(
        protocol=protocol,
        rounds=args.rounds,
        seed=args.seed,
        hosts=args.hosts,
        out=args.out,
        params=args.set.get(protocol, {}),
        progress=False,
        adversaries=adv,
    )
    t0 = time.perf_counter()
    try:
        run_dir, summary = run(settings, dataset, dataset.meta)
    except AdversaryError as err:  # no adversary role for this attack in this protocol
        return {"skipped": str(err)}
    metric, better = main_metric(summary["metrics"])
    record = summary.get("adversaries") or {}
    return {
        f"target_er@{k}": summary["metrics"].get(f"target_er@{k}"),
        f"target_hr@{k}": summary["metrics"].get(f"target_hr@{k}"),
        "metric": metric,
        "better": better,
        "value": summary["metrics"].get(metric),
        "fake_users": record.get("fake_users"),
        "compromised": record.get("compromised_users"),
        "targets": record.get("targets"),
        "rejected": sum(n for kind in summary["rejected"].values() for n in kind.values()),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "run_dir": str(run_dir),
    }


def grid(args) -> list[tuple[str, str, float, str]]:
    cells = []
    for protocol in args.protocols:
        for defence in args.defences:
            cells.append((protocol, "", 0.0, defence))
            for attack in args.attacks:
                for fraction in args.fractions:
                    cells.append((protocol, attack, fraction, defence))
    return cells


def add_relative(cells: dict) -> None:
    """Each cell's main metric relative to the same protocol's run without attack or defence."""
    for key, cell in cells.items():
        protocol = key.split("|")[0]
        base = cells.get(_cell_key(protocol, "", 0.0, ""), {}).get("value")
        if cell.get("value") is not None and base:
            cell["vs_honest"] = round(cell["value"] / base, 4)


def table(cells: dict, k: int) -> str:
    rows = []
    for key, c in cells.items():
        protocol, attack, fraction, defence = key.split("|")
        if "skipped" in c:
            rows.append([protocol, attack, fraction, defence, "n/a", "", "", "", ""])
            continue
        rows.append(
            [
                protocol,
                attack,
                fraction,
                defence,
                f"{c[f'target_er@{k}']:.3f}",
                f"{c[f'target_hr@{k}']:.3f}",
                f"{c['metric']} {c['value']:.4f}",
                "" if c.get("vs_honest") is None else f"{c['vs_honest']:.3f}",
                f"{c['wall_seconds']:.0f}",
            ]
        )
    header = ["protocol", "attack", "fraction", "defence", f"ER@{k}", f"HR@{k}", "main metric"]
    return text_table([*header, "vs honest", "wall s"], rows)


def published_table() -> str:
    rows = [
        [p, d, a, f"{f:g}", f"{v:g}", what, where]
        for (p, d, a, f), figs in PUBLISHED.items()
        for v, what, where in figs
    ]
    return text_table(
        ["protocol", "dataset", "attack", "fraction", "figure", "what", "where"], rows
    )


def parse(argv) -> object:
    ap = ArgumentParser("benchmarks.attacks", __doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="synthetic data, a few cells")
    ap.add_argument("--dataset", default="ml-100k")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--protocols", default="fedmf")
    ap.add_argument("--attacks", default="random,bandwagon,fedrecattack,pipattack,byzantine-scaled")
    ap.add_argument("--defences", default="none,norm-bound,median,trimmed-mean,krum")
    ap.add_argument("--fractions", default="0.01,0.05,0.1")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-targets", type=int, default=1)
    ap.add_argument("--er-k", type=int, default=10)
    ap.add_argument("--attack-param", action="append", default=[], metavar="ATTACK.key=value")
    ap.add_argument("--defence-param", action="append", default=[], metavar="DEFENCE.key=value")
    ap.add_argument("--set", action="append", default=[], metavar="PROTOCOL.key=value")
    ap.add_argument("--out", default="runs/bench-attacks")
    ap.add_argument("--name", default=None, help="JSON name (default attacks-DATASET[-quick])")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    ap.add_argument("--resume", action="store_true", help="keep the cells the JSON holds")
    ap.add_argument("--published", action="store_true", help="print the papers' figures, exit")
    ap.add_argument("--dry-run", action="store_true", help="check the names, list the runs, exit")
    args = ap.parse_args(argv)
    explicit = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
    if args.quick:
        for key, value in QUICK.items():
            if f"--{key}" not in explicit:
                setattr(args, key, value)
    args.protocols = [p for p in args.protocols.split(",") if p]
    args.attacks = [a for a in args.attacks.split(",") if a]
    args.defences = ["" if d == "none" else d for d in args.defences.split(",") if d]
    with usage_errors("--fractions"):
        args.fractions = [float(f) for f in args.fractions.split(",") if f]
    if args.rounds < 1:
        raise UsageError("--rounds: must be >= 1")
    for name, flag in (
        ("attack_param", "--attack-param"),
        ("defence_param", "--defence-param"),
        ("set", "--set"),
    ):
        setattr(args, name, scoped_key_values(getattr(args, name), flag, "expected NAME.key=value"))
    return args


def check(args) -> None:
    """Names the user can get wrong, refused in one line before Ray starts."""
    from adversaries.attacks import ATTACKS
    from adversaries.defences import DEFENCES
    from protocols import get_protocol

    for p in args.protocols:
        with usage_errors(f"--protocols {p}", (ValueError, KeyError)):
            get_protocol(p)
    for a in args.attacks:
        if a not in ATTACKS:
            raise UsageError(f"--attacks {a}: no such attack (known: {', '.join(ATTACKS)})")
    for d in args.defences:
        if d and d not in DEFENCES:
            raise UsageError(
                f"--defences {d}: no such defence (known: none, {', '.join(DEFENCES)})"
            )
    for f in args.fractions:
        if not 0 < f < 1:
            raise UsageError(f"--fractions {f:g}: must be in (0, 1)")
    if args.dataset != "synthetic":
        check_dataset(args.dataset, args.data_dir)
    claim_result(output_name(args), write=args.write)


def output_name(args) -> str:
    """``--name``, else ``attacks-DATASET[-quick]``."""
    return args.name or result_name("attacks", dataset_tag(args.dataset), quick=args.quick)


def _main(argv) -> int:
    args = parse(argv)
    if args.published:
        print(published_table())
        return 0
    check(args)
    if args.dry_run:
        cells = grid(args)
        print(f"benchmarks.attacks: {len(cells)} runs on {args.dataset} (dry run: nothing started)")
        return 0
    from cluster.runtime import start_or_join
    from data.registry import default_data_dir, load_dataset

    name = output_name(args)
    path = claim_result(name, write=args.write)
    cells: dict = {}
    if args.resume and path.exists():
        cells = json.loads(path.read_text())["figures"]["cells"]
    with usage_errors(f"--dataset {args.dataset}"):
        data_dir = None if args.dataset == "synthetic" else args.data_dir or default_data_dir()
        dataset = load_dataset(args.dataset, data_dir)
    start_or_join(None)
    todo = [c for c in grid(args) if _cell_key(*c) not in cells]
    print(f"benchmarks.attacks: {len(todo)} runs ({len(cells)} kept)", flush=True)
    for i, cell in enumerate(todo, 1):
        key = _cell_key(*cell)
        cells[key] = run_cell(args, dataset, *cell)
        print(f"[{i}/{len(todo)}] {key} {json.dumps(cells[key])}", flush=True)
        add_relative(cells)
        figures = {
            "dataset": args.dataset,
            "rounds": args.rounds,
            "seed": args.seed,
            "er_k": args.er_k,
            "n_targets": args.n_targets,
            "params": args.set,
            "cells": cells,
        }
        path = write_result(name, figures, echo=False, write=args.write)
    print(table(cells, args.er_k))
    print(f"written: {path}")
    return 0


def main(argv=None) -> int:
    return run_main("python -m benchmarks.attacks", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
