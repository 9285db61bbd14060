"""A protocol from outside the tree, as a user gets one: examples/pfedrec (PFedRec, IJCAI 2023)
is pip-installed into the running environment and driven only through the ``privrec`` console
command, in subprocesses (an interpreter that was running before the install does not see the
new package or its entry point; fresh ones, and Ray's workers, do).

* the ``privrec.protocols`` entry point: ``pfedrec`` is listed, gets its flags from its Config's
  comments, runs in ``compare`` with its central baseline, and its row's bytes are what the codec
  sizes give;
* the privacy-enhanced variant: the accountant's ε is finite and bounded by basic composition;
* the ``package.module:Class`` form: a copy of the package under a name no entry point and no
  installation knows, importable through PYTHONPATH (the Ray workers inherit it); and the clear
  error when the module is not importable at all;
* a client's result does not depend on the placement (1 or 3 host actors).

Only the first check is in the default run; the others start Ray in a subprocess (a minute or
more each on 2 cores) and are marked slow (CI runs them: .ci/run).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import needs_shared_data

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "examples" / "pfedrec"
BIN = Path(sys.executable).parent
sys.path.insert(0, str(PLUGIN))  # the codec sizes, for the byte formula (no Ray involved)

from privrec_pfedrec.messages import table_size  # noqa: E402


def run(args: list[str], cwd: Path, env: dict | None = None, timeout: int = 900):
    """``args`` in a subprocess; stdout and stderr as text."""
    full = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    return subprocess.run(
        args, cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout, check=False
    )


def ok(proc) -> str:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def privrec():
    """examples/pfedrec installed (editable, no dependency resolution) into this environment;
    the path of the ``privrec`` console command."""
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-q",
         "-e", str(PLUGIN)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if pip.returncode != 0:
        tail = (pip.stderr or pip.stdout).strip().splitlines()[-1:] or ["?"]
        why = f"pip cannot install examples/pfedrec into this environment: {tail[0]}"
        if os.environ.get("CI"):  # CI installs privrec[dev] (setuptools included): it must work
            pytest.fail(why)
        pytest.skip(why)
    command = BIN / "privrec"
    if not command.exists():
        pytest.skip(f"no privrec console command beside {sys.executable} (pip install -e . first)")
    return str(command)


def summary_of(out: Path) -> dict:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow  # pip-installs examples/pfedrec (≈ 20 s): `.ci/run` runs `-m slow` too
def test_entry_point_lists_pfedrec_with_flags_from_its_config(privrec, tmp_path):
    listed = ok(run([privrec, "--help"], tmp_path))
    assert "pfedrec" in listed  # among --protocol's choices
    text = ok(run([privrec, "--protocol", "pfedrec", "--help"], tmp_path))
    assert "protocol parameters of pfedrec" in text
    for flag, doc in (
        ("--lr-eta", "the item step is"),
        ("--laplace-scale", "scale b of the Laplace noise"),
        ("--users-per-round", "0 = every client"),
    ):
        assert flag in text and doc in text, flag
    # a malformed parameter is refused in one line, before anything starts
    bad = run([privrec, "--protocol", "pfedrec", "--laplace-scale", "-1", "--dry-run"], tmp_path)
    assert bad.returncode == 2 and "laplace" in bad.stderr and "Traceback" not in bad.stderr


def test_local_step_is_the_authors_two_optimizer_loop():
    """One client's vectorised round (roles._train, eqs. 2-4) equals the authors' engine.py on
    the same examples in the same order: torch Embedding + Linear + Sigmoid, BCELoss, an SGD step
    on the score function, then one on the item embedding with lr·|I|·lr_eta, per batch."""
    import numpy as np
    import torch
    from privrec_pfedrec.config import PFedRecConfig, PFedRecPublic
    from privrec_pfedrec.roles import PFedRecUser, _train

    from nodes.node import NodeContext, Shared
    from protocols.base import build_config

    n_items, dim = 50, 6
    cfg = build_config(PFedRecConfig, {"dim": dim, "batch_size": 16, "local_epochs": 2})
    ctx = NodeContext(7, torch.device("cpu"), Shared(cfg, PFedRecPublic(10, n_items, 7)))
    train, test = np.array([1, 4, 9, 20, 33, 41, 42]), np.array([5])
    node, twin = (PFedRecUser("user/3", ctx, train, test) for _ in range(2))
    table = np.random.default_rng(0).normal(size=(n_items, dim)).astype(np.float32)

    # the reference, on the twin's draws (examples, then one permutation per epoch)
    items, labels = twin.examples()
    emb = torch.nn.Embedding(n_items, dim)
    lin = torch.nn.Linear(dim, 1)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(table))
        lin.weight.copy_(twin.weight[None])
        lin.bias.fill_(float(twin.bias))
    opt = torch.optim.SGD(lin.parameters(), lr=cfg.lr)
    opt_i = torch.optim.SGD(emb.parameters(), lr=cfg.lr * n_items * cfg.lr_eta)
    crit = torch.nn.BCELoss()
    for _ in range(cfg.local_epochs):
        order = twin.rng.permutation(len(items))
        for start in range(0, len(order), cfg.batch_size):
            sel = order[start : start + cfg.batch_size]
            it, y = torch.from_numpy(items[sel]), torch.from_numpy(labels[sel])
            for o in (opt, opt_i):
                o.zero_grad()
                crit(torch.sigmoid(lin(emb(it))).view(-1), y).backward()
                o.step()

    _train([node], [table])
    assert np.allclose(node.weight, lin.weight.detach().numpy()[0], atol=1e-5)
    assert node.bias == pytest.approx(lin.bias.item(), abs=1e-5)
    expected = emb.weight.detach().numpy()
    assert np.array_equal(node.rows, np.unique(items))
    assert np.allclose(node.values, expected[node.rows], rtol=1e-4, atol=1e-4)
    # no clip, no noise: the upload is the client's whole fine-tuned table
    (sent,) = node._outbox
    from privrec_pfedrec.messages import decode_table

    assert np.allclose(decode_table(sent.payload, n_items, dim), expected, rtol=1e-4, atol=1e-4)


def test_the_plugins_attack_changes_the_upload_and_its_defence_resists_it():
    """PFedRec declares attacks played by classes of its own package (attacks.py): a compromised
    client uploads E + scale·(Ẽ_u − E) where its honest twin uploads Ẽ_u; the server's eq. (5)
    under ``--defence median`` keeps the honest clients' table, the plain mean does not."""
    import numpy as np
    import torch
    from privrec_pfedrec.attacks import ByzantineScaled
    from privrec_pfedrec.config import PFedRecConfig, PFedRecPublic
    from privrec_pfedrec.messages import decode_table
    from privrec_pfedrec.protocol import PFedRec
    from privrec_pfedrec.roles import PFedRecUser, _train, defended_mean

    from adversaries.attacks import attack_class
    from adversaries.condition import Knowledge, Threat
    from nodes.node import NodeContext, Shared
    from protocols.base import build_config

    assert attack_class("byzantine-scaled", PFedRec) is ByzantineScaled
    n_items, dim = 40, 4
    cfg = build_config(PFedRecConfig, {"dim": dim, "batch_size": 8})
    ctx = NodeContext(3, torch.device("cpu"), Shared(cfg, PFedRecPublic(10, n_items, 3)))
    train, test = np.array([2, 5, 11, 30]), np.array([7])
    know = Knowledge(np.array([0]), {"scale": 5.0}, np.ones(n_items, np.int64), [], 4)
    honest = PFedRecUser("user/1", ctx, train, test)
    bad = ByzantineScaled("user/1", ctx, train, test, knowledge=know)
    assert bad.adversary and not len(bad.test_items)  # an adversary is not evaluated
    table = np.random.default_rng(1).normal(size=(n_items, dim)).astype(np.float32)
    _train([honest], [table])
    _train([bad], [table])
    up_h = decode_table(honest._outbox[0].payload, n_items, dim)
    up_b = decode_table(bad._outbox[0].payload, n_items, dim)
    assert not np.allclose(up_h, table)  # the honest client changed some rows
    assert np.allclose(up_b - table, 5.0 * (up_h - table), atol=1e-5)
    # three honest uploads (the same) and one scaled: median keeps the honest table, mean not
    uploads = [up_h, up_h, up_h, up_b]
    median = defended_mean(table, uploads, Threat((0,), 10, "median", ()))
    assert np.allclose(median, up_h, atol=1e-5)
    assert not np.allclose(np.mean(uploads, axis=0), up_h, atol=1e-3)


@pytest.mark.slow
@needs_shared_data
@pytest.mark.ray
def test_compare_pfedrec_and_fedmf_on_ml100k_through_the_entry_point(privrec, tmp_path):
    """The issue's acceptance: ``privrec compare --protocols pfedrec,fedmf --dataset ml-100k
    --rounds 3``; pfedrec's row is ok, set beside central:bprmf, and its bytes are the codec's."""
    out = tmp_path / "runs"
    ok(run([privrec, "compare", "--protocols", "pfedrec,fedmf", "--dataset", "ml-100k",
            "--rounds", "3", "--no-progress", "--out", str(out)], tmp_path))  # fmt: skip
    (cmp_dir,) = list(out.iterdir())
    comparison = json.loads((cmp_dir / "comparison.json").read_text())
    rows = {r["label"]: r for r in comparison["protocols"]}
    assert list(rows) == ["pfedrec", "fedmf", "central:bprmf"]  # its baseline was added
    assert all(r["status"] == "ok" for r in rows.values()), rows
    row = rows["pfedrec"]
    assert row["metric"] == "recall@20" and row["better"] == "higher"
    assert 0.0 < row["value"] <= 1.0
    assert row["baseline"] == "central:bprmf" and row["ratio"] is not None
    assert 0.0 < row["metrics"]["sampled_hr@10"] <= 1.0  # the paper's metric rides along
    # bytes: every round, every client with training data downloads E and uploads its table
    from data.registry import load_dataset

    data = load_dataset("ml-100k")
    clients = len(set(data.train.user.tolist()))
    one = table_size(comparison["dataset"]["n_items"], 32)
    assert row["bytes_per_round_by_kind"] == {
        "item_table": clients * one,
        "item_table_upload": clients * one,
    }
    assert row["bytes_total"] == 3 * 2 * clients * one
    # no noise: no DP claimed (not a "non-private" centralized baseline either)
    assert row["epsilon"] is None and row["private"] is True and row["epsilon_paper"] is None
    assert "pfedrec" in (cmp_dir / "comparison.md").read_text()


@pytest.mark.slow
@pytest.mark.ray
def test_ldp_variant_reports_a_finite_accounted_epsilon(privrec, tmp_path):
    """Clip + Laplace on the uploads (the paper's privacy-enhanced PFedRec): the accountant's ε
    per client over 2 rounds is finite, positive, at most 2 × (2·clip·|I|·d / b)."""
    out = tmp_path / "runs"
    clip, b, dim, rounds = 0.05, 2.0, 4, 2
    ok(run([privrec, "--protocol", "pfedrec", "--rounds", str(rounds), "--dim", str(dim),
            "--clip", str(clip), "--laplace-scale", str(b), "--no-progress", "--out", str(out)],
           tmp_path))  # fmt: skip
    summary = summary_of(out)
    p = summary["privacy"]
    coords = p["coordinates_per_upload"]
    assert coords % dim == 0
    per_upload = 2 * clip * coords / b
    assert p["epsilon_per_upload"] == pytest.approx(per_upload)
    assert p["epsilon_per_coordinate"] == pytest.approx(2 * clip / b)
    assert math.isfinite(p["epsilon"]) and 0 < p["epsilon"] <= rounds * per_upload * (1 + 1e-9)
    assert p["privacy_delta"] == 1e-5 and p["mechanism"] == "laplace" and "Laplace" in p["noise"]
    n_items = coords // dim
    clients = p["releases"] // rounds  # every client takes part in every round by default
    assert summary["bytes_total"] == rounds * 2 * clients * table_size(n_items, dim)


def _renamed_copy(root: Path, name: str) -> None:
    """examples/pfedrec's package as ``name`` under ``root``: a module no entry point names and
    no installation provides."""
    (root / name).mkdir(parents=True)
    for src in (PLUGIN / "privrec_pfedrec").glob("*.py"):
        (root / name / src.name).write_text(src.read_text().replace("privrec_pfedrec", name))


@pytest.mark.slow
@pytest.mark.ray
def test_import_path_form_runs_a_package_that_is_not_installed(privrec, tmp_path):
    """``--protocol package.module:Class`` for a module found through PYTHONPATH only: the
    driver imports it, and so do the Ray workers that unpickle its node classes (they inherit
    the driver's environment)."""
    _renamed_copy(tmp_path / "ext", "pfedrec_copy")
    out = tmp_path / "runs"
    proc = run([privrec, "--protocol", "pfedrec_copy.protocol:PFedRec", "--rounds", "1",
                "--dim", "4", "--no-progress", "--out", str(out)], tmp_path,
               env={"PYTHONPATH": str(tmp_path / "ext")})  # fmt: skip
    ok(proc)
    summary = summary_of(out)
    assert summary["rounds"] == 1 and summary["metrics"]["recall@20"] >= 0.0
    # not importable at all: one line naming the module, before anything starts
    gone = run([privrec, "--protocol", "pfedrec_gone.protocol:PFedRec", "--dry-run"], tmp_path)
    assert gone.returncode == 2
    assert "cannot import pfedrec_gone.protocol:PFedRec" in gone.stderr
    assert "Traceback" not in gone.stderr


@pytest.mark.slow
@pytest.mark.ray
def test_import_path_form_from_the_drivers_sys_path_only(privrec, tmp_path):
    _renamed_copy(tmp_path / "ext", "pfedrec_syspath")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path / "ext")!r})
        import cli
        sys.exit(cli.main(["--protocol", "pfedrec_syspath.protocol:PFedRec", "--rounds", "1",
                           "--dim", "4", "--no-progress", "--out", {str(tmp_path / "runs")!r}]))
        """
    )
    ok(run([sys.executable, "-c", script], REPO))


@pytest.mark.slow
@pytest.mark.ray
def test_results_do_not_depend_on_the_placement(privrec, tmp_path):
    """The same seed gives the same metrics and bytes on 1 and on 3 host actors: each client's
    vectorised local training depends on its own data and RNG only. The 3-host run checks the
    device too (``check_device``: nothing made off the node's device)."""
    script = textwrap.dedent(
        """
        import json, sys
        from data.synthetic import synthetic
        from engine import RunSettings, run
        data = synthetic(n_users=40, n_items=60, seed=3)
        out = []
        for hosts in (1, 3):
            params = {"dim": 8, "users_per_round": 25, "eval_negatives": 20}
            settings = RunSettings("pfedrec", rounds=3, hosts=hosts, params=params,
                                   progress=False, out=sys.argv[1], check_device=hosts == 3)
            _, summary = run(settings, data)
            out.append({"metrics": summary["metrics"], "bytes": summary["bytes_total"]})
        print(json.dumps(out))
        """
    )
    text = ok(run([sys.executable, "-c", script, str(tmp_path / "runs")], REPO))
    one, three = json.loads(text.strip().splitlines()[-1])
    assert one == three
    assert one["metrics"]["recall@20"] > 0


@pytest.mark.slow
@pytest.mark.ray
def test_secure_aggregation_through_the_plugins_declaration(privrec, tmp_path):
    """The plugin declares what its server sums (``SECURE_SUM``) and gets SecAgg+ from the public
    API: with ``--secure-aggregation`` no table travels in the clear, the masked ones do, nothing
    is clipped by the fixed-point bound, and the metrics are those of the same run without it to
    the encoding's precision (2^-16 per coordinate of the mean at 300 clients)."""
    runs = {}
    for tag, extra in (("plain", []), ("secure", ["--secure-aggregation"])):
        out = tmp_path / tag
        ok(run([privrec, "--protocol", "pfedrec", "--rounds", "2", "--dim", "4",
                "--no-progress", "--out", str(out), *extra], tmp_path))  # fmt: skip
        runs[tag] = summary_of(out)
    plain, secure = runs["plain"], runs["secure"]
    kinds = secure["bytes_by_kind"]
    assert "item_table_upload" not in kinds and "item_table_upload" in plain["bytes_by_kind"]
    assert kinds["secagg_masked"] > 0 and kinds["secagg_shares"] > 0
    assert secure["privacy"]["secure_aggregation"]["min_users"] == 2
    rows = [json.loads(line) for line in open(Path(secure["run_dir"]) / "metrics.jsonl")]
    assert all(r["train"]["secagg_clipped"] == 0 and r["train"]["secagg_failed"] == 0 for r in rows)
    for name, value in plain["metrics"].items():
        assert secure["metrics"][name] == pytest.approx(value, abs=5e-3), name
