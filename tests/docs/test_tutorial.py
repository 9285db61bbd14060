"""docs/writing-a-protocol.md cannot rot:

* every code listing whose first line names a file (``# examples/pfedrec/...``) is a verbatim
  excerpt of that file, so the page shows the code that runs;
* every ```bash block is run, in order, by bash from a scratch folder as a reader would run it
  from the checkout (``examples/pfedrec`` is given as the checkout's absolute path, so an
  editable install never points into the scratch folder; ``runs/`` lands in the scratch folder).
  Nothing is dry except the one command that says ``--dry-run``: the comparison at 3 rounds on
  ml-100k, the dropout run and the killed-host run really run (marked slow: minutes on 2 cores).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_shared_data

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "writing-a-protocol.md"
BIN = Path(sys.executable).parent


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", TUTORIAL.read_text(), flags=re.S)


def commands() -> list[str]:
    """Every command line of the ```bash blocks (comments and blank lines left out)."""
    lines = "\n".join(blocks("bash")).replace("\\\n", " ").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def test_listings_are_excerpts_of_the_example_package():
    listings = [b for lang in ("python", "toml") for b in blocks(lang)]
    named = [b for b in listings if b.startswith("# examples/")]
    assert len(named) >= 8, "the tutorial's listings name their files"
    for block in named:
        first, _, body = block.partition("\n")
        path = REPO / first.removeprefix("# ").strip()
        assert path.is_file(), f"the tutorial quotes {path}, which does not exist"
        assert body.strip() and body.rstrip() in path.read_text(), (
            f"a listing of {path.relative_to(REPO)} is not in that file any more:\n{body}"
        )


def test_the_commands_cover_what_the_issue_asks():
    cmds = commands()
    assert cmds[0] == "pip install --no-build-isolation --no-deps -e examples/pfedrec"
    assert "privrec --protocol pfedrec --help" in cmds
    compare = [c for c in cmds if c.startswith("privrec compare")]
    assert any(
        "pfedrec,fedmf,central:lightgcn" in c and "--dataset ml-100k" in c and "--rounds 3" in c
        for c in compare
    )
    runs = [c for c in cmds if c.startswith("privrec") and "--help" not in c]
    assert any("--dropout 0.3" in c and "--dry-run" not in c for c in runs)
    assert any("--kill-host" in c and "--dry-run" not in c for c in runs)
    assert any("--laplace-scale" in c for c in runs)  # and a run that reports its ε
    assert any("--attack byzantine-scaled" in c and "--defence" in c for c in runs)
    assert sum("--dry-run" in c for c in runs) <= 1


@pytest.mark.slow
@pytest.mark.ray
@needs_shared_data
def test_tutorial_commands_run_as_written(tmp_path):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for block in blocks("bash"):
        script = block.replace("examples/pfedrec", str(REPO / "examples" / "pfedrec"))
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (
            f"tutorial block failed ({proc.returncode}):\n{block}\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    runs = tmp_path / "runs"
    # the comparison: pfedrec, fedmf, central LightGCN and pfedrec's own baseline all ran
    (cmp_dir,) = [p for p in runs.iterdir() if p.name.endswith("-compare")]
    rows = {
        r["label"]: r for r in json.loads((cmp_dir / "comparison.json").read_text())["protocols"]
    }
    assert set(rows) == {"pfedrec", "fedmf", "central:lightgcn", "central:bprmf"}
    assert all(r["status"] == "ok" for r in rows.values()), rows
    assert rows["pfedrec"]["value"] > 0 and rows["pfedrec"]["ratio"] is not None
    # the two single runs: dropout with the LDP variant (a finite ε), then the killed host
    first, second, third = sorted(p for p in runs.iterdir() if p.name.endswith("-pfedrec"))
    dropout = json.loads((first / "summary.json").read_text())
    assert dropout["conditions"]["dropout"] == 0.3
    assert math.isfinite(dropout["privacy"]["epsilon"]) and dropout["privacy"]["epsilon"] > 0
    killed = json.loads((second / "summary.json").read_text())
    assert [f["round"] for f in killed["faults"]] == [1]
    assert killed["metrics"]["recall@20"] > 0  # its clients are back for the last round
    # the attack the plugin declares, played by its own class, against the median
    attacked = json.loads((third / "summary.json").read_text())
    adv = attacked["adversaries"]
    assert adv["attack"] == "byzantine-scaled" and adv["defence"] == "median"
    assert adv["compromised_users"] == round(0.05 * 943) and adv["fake_users"] == 0
    assert attacked["status"] == "ok" and attacked["metrics"]["recall@20"] > 0
