"""README.md walked as a newcomer would: every command line of its ```bash blocks, with the files
it names made from README's own examples, is run through its entry point with ``--dry-run`` (the
data loaded, the protocol built on it, the placement and conditions checked, nothing started) and
must exit as documented, 0. The runs the commands resume are real: two tiny checkpointed runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import start_test_ray

import cli
from data.registry import default_data_dir
from data.synthetic import synthetic
from engine import RunSettings, run
from engine.runner import RunInterrupted
from protocols.fedmf.protocol import FedMF

README = Path(__file__).resolve().parents[2] / "README.md"
SETUP = ("python3 -m venv", "python -m pytest")  # the two set-up lines: CI runs them itself


def readme_commands() -> list[str]:
    """Every command of README's ```bash blocks, continuation lines joined, comments removed."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def readme_toml(first_line: str) -> str:
    """README's ```toml block that begins with ``first_line``."""
    for block in re.findall(r"```toml\n(.*?)```", README.read_text(), flags=re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"README has no ```toml block starting {first_line!r}")


def test_readme_has_the_commands_this_test_walks():
    cmds = readme_commands()
    assert cmds[0].startswith("python3 -m venv") and cmds[0].endswith("python launch.py")
    assert cmds[1] == "python -m pytest -q"
    assert sum(c.startswith("python launch.py") for c in cmds) >= 10


@pytest.fixture(scope="module")
def walk_dir(tmp_path_factory):
    """A folder holding what README's commands name: exp.toml and cmp.toml (README's own TOML
    examples), online.json (its trace example) and, under runs/, the runs its --resume lines
    continue: a fedmf run stopped by Ctrl-C in round 2 of 4, a finished dgrec run."""
    start_test_ray()
    d = tmp_path_factory.mktemp("readme")
    (d / "exp.toml").write_text(readme_toml("users_per_round"))
    (d / "cmp.toml").write_text(readme_toml("[compare]"))
    (d / "online.json").write_text('{"user/3": [[0, 10], 25]}')
    data = synthetic(n_users=30, n_items=40, seed=1)
    kw = dict(checkpoint_every=1, progress=False, out=str(d / "runs"))
    dgrec = {"dim": 8, "hidden": 8, "n_interests": 2, "pairs": 8}
    runs = {"dgrec": run(RunSettings("dgrec", rounds=2, params=dgrec, **kw), data)[0]}
    # the fedmf run is stopped by Ctrl-C in round 2 of its 4, as a user would stop it
    real = FedMF.run_round

    def ctrl_c_in_round_2(self, dep, rnd):
        if rnd == 2:
            raise KeyboardInterrupt
        return real(self, dep, rnd)

    FedMF.run_round = ctrl_c_in_round_2
    try:
        with pytest.raises(RunInterrupted):
            run(RunSettings("fedmf", rounds=4, params={"dim": 8}, **kw), data)
    finally:
        FedMF.run_round = real
    runs["fedmf"] = next(p for p in (d / "runs").iterdir() if p.name.endswith("fedmf"))
    return d, runs


def _argv(cmd: str, runs: dict) -> tuple[str, list[str]]:
    """(entry point, arguments) of a README command; its placeholders are the fixture's runs."""
    cmd = cmd.replace("runs/<that run>", str(runs["fedmf"]))
    cmd = cmd.replace("runs/<a dgrec run>", str(runs["dgrec"]))
    if cmd.startswith("ray start --head && "):  # the cluster's start is the multi-node recipe's
        cmd = cmd.removeprefix("ray start --head && ")
    words = shlex.split(cmd)
    if words[:2] == ["python", "launch.py"]:
        return "launch", words[2:]
    if words[:1] == ["privrec"]:
        return "launch", words[1:]
    if words[:2] == ["python", "-m"] and words[2].startswith("benchmarks."):
        return words[2], words[3:]
    raise AssertionError(f"README command with no entry point this test knows: {cmd}")


WALKED = [c for c in readme_commands() if not c.startswith(SETUP)]


@pytest.mark.ray
@pytest.mark.parametrize("cmd", WALKED)
def test_readme_command_runs_as_documented(cmd, walk_dir, monkeypatch, capsys):
    d, runs = walk_dir
    entry, argv = _argv(cmd, runs)
    needs_data = any(
        a in argv for a in ("ml-100k", "gowalla", "fedpergnn", "verfedgnn", "dgrec", "dipsgnn")
    )
    if needs_data and default_data_dir() is None:
        pytest.skip("needs ../shared/data (the real datasets)")
    monkeypatch.chdir(d)
    monkeypatch.setattr("benchmarks.common.OUT", d / "out")  # run_report writes there
    if entry == "launch":
        if argv in ([], ["--help"]):
            argv = ["compare", "--quick"] if not argv else argv
        if "--help" in argv:
            with pytest.raises(SystemExit) as e:
                cli.main(argv)
            assert e.value.code == 0
            return
        assert cli.main([*argv, "--dry-run"]) == 0, capsys.readouterr().err
    elif entry == "benchmarks.run_report":
        from benchmarks import run_report

        assert run_report.main(argv) == 0, capsys.readouterr().err
        assert (d / "out" / "my-run.json").is_file()
    else:
        import importlib

        module = importlib.import_module(entry)
        assert module.main([*argv, "--dry-run"]) == 0, capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err
