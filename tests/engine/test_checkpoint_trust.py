"""A checkpoint cannot run code when loaded (engine/checkpoint.py): it is signed with a key kept in
the user's home (HMAC-SHA256 over the file), and a file whose tag does not verify with this
machine's key — an older plain pickle, a forged or foreign one, one changed after it was written
— is refused in one line before anything in it is unpickled."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import pickle
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import cli
from engine.checkpoint import (
    CHECKPOINT_NAME,
    FORMAT,
    HEADER_SIZE,
    MAGIC,
    PREVIOUS_NAME,
    Checkpoint,
    CheckpointError,
    key_path,
    load_checkpoint,
    save_checkpoint,
)

STATE = {
    "next_round": 2,
    "settings": {"rounds": 4},
    "protocol": "a protocol object",
    "deployment": {"hosts": [b"host 0's pickled nodes"]},
    "metrics": {"recall@20": 0.5},
    "elapsed": 1.0,
}
CHECKPOINT = Checkpoint(**STATE)


class _CreatesFile:
    """Unpickling it creates ``path`` (as a ``__reduce__`` calling os.system would run a
    command): a loader that unpickles it has run code from the file."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _evil_pickle(marker: Path) -> bytes:
    return pickle.dumps({"format": FORMAT, **STATE, "protocol": _CreatesFile(marker)})


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """This test's own key folder (``PRIVREC_HOME``)."""
    folder = tmp_path / "home"
    monkeypatch.setenv("PRIVREC_HOME", str(folder))
    return folder


def test_the_crafted_payload_would_run_if_unpickled(tmp_path):
    """What the tests below refuse is a real attack: unpickled, the payload creates its file."""
    marker = tmp_path / "ran"
    pickle.loads(_evil_pickle(marker))
    assert marker.exists()


def test_own_checkpoint_round_trips_with_a_private_key(home, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = save_checkpoint(run_dir, CHECKPOINT)
    assert load_checkpoint(run_dir) == CHECKPOINT
    data = path.read_bytes()
    assert data.startswith(MAGIC) and len(data) > HEADER_SIZE
    key = key_path()
    assert key == home / "checkpoint.key" and len(key.read_bytes()) == 32
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds private state
    assert not any(p.name.endswith(".key") for p in run_dir.iterdir())
    # the key is made once and kept: a second save signs with the same one
    before = key.read_bytes()
    save_checkpoint(run_dir, dataclasses.replace(CHECKPOINT, next_round=3))
    assert key.read_bytes() == before and load_checkpoint(run_dir).next_round == 3


def test_the_key_comes_from_the_os_not_the_run(home, tmp_path, monkeypatch):
    """Two homes get different keys (secrets.token_bytes), whatever the run's seed."""
    keys = []
    for name in ("a", "b"):
        monkeypatch.setenv("PRIVREC_HOME", str(tmp_path / name))
        (tmp_path / f"run-{name}").mkdir()
        save_checkpoint(tmp_path / f"run-{name}", CHECKPOINT)
        keys.append(key_path().read_bytes())
    assert keys[0] != keys[1]


def _evil_variants(tmp_path: Path, marker: Path) -> dict[str, bytes]:
    """Checkpoint files whose unpickling would create ``marker``, by the reason each is refused."""
    evil = _evil_pickle(marker)
    genuine_dir = tmp_path / "genuine"
    genuine_dir.mkdir()
    genuine = save_checkpoint(genuine_dir, CHECKPOINT).read_bytes()
    head = MAGIC + FORMAT.to_bytes(2, "big") + len(evil).to_bytes(8, "big")
    other_key = secrets.token_bytes(32)  # another machine's
    foreign = head + hmac.new(other_key, head + evil, hashlib.sha256).digest() + evil
    n = len(genuine) - HEADER_SIZE
    return {
        "unsigned checkpoint": evil,  # a plain pickle, as format 2 wrote
        "not signed by this machine's key": head + bytes(32) + evil,  # a made-up tag
        # this machine's header and tag, another payload of the same length
        "changed since it was written": genuine[:HEADER_SIZE] + evil.ljust(n, b".")[:n],
        "written with another key": foreign,
    }


def test_crafted_checkpoints_are_refused_unread(home, tmp_path, capsys):
    marker = tmp_path / "ran"
    variants = _evil_variants(tmp_path, marker)
    for why, data in variants.items():
        run_dir = tmp_path / f"crafted-{len(why)}"
        run_dir.mkdir()
        (run_dir / CHECKPOINT_NAME).write_bytes(data)
        with pytest.raises(CheckpointError, match=why) as e:
            load_checkpoint(run_dir)
        assert str(run_dir / CHECKPOINT_NAME) in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(SystemExit) as e:
            cli.main(["--resume", str(run_dir), "--no-progress"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--resume" in err[0] and why in err[0], err
        assert not marker.exists(), why


def test_launch_resume_refuses_a_crafted_checkpoint_in_one_line(home, tmp_path):
    """The acceptance test as a user meets it: `python launch.py --resume FOLDER` on a folder
    whose checkpoint.pkl would create a file exits with status 2 and one line; no file."""
    marker = tmp_path / "ran"
    run_dir = tmp_path / "crafted"
    run_dir.mkdir()
    (run_dir / CHECKPOINT_NAME).write_bytes(_evil_pickle(marker))
    (run_dir / PREVIOUS_NAME).write_bytes(MAGIC + bytes(HEADER_SIZE) + _evil_pickle(marker))
    done = subprocess.run(
        [sys.executable, "launch.py", "--resume", str(run_dir)],
        cwd=Path(cli.__file__).parents[1],
        env={**os.environ, "PRIVREC_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(run_dir / CHECKPOINT_NAME) in lines[0], lines
    assert "unsigned checkpoint" in lines[0]
    assert not marker.exists()


def test_a_refused_newest_falls_back_to_the_previous_one(home, tmp_path):
    tmp_path = tmp_path / "run"
    tmp_path.mkdir()
    save_checkpoint(tmp_path, CHECKPOINT)
    save_checkpoint(tmp_path, dataclasses.replace(CHECKPOINT, next_round=3))
    newest = tmp_path / CHECKPOINT_NAME
    data = bytearray(newest.read_bytes())
    data[-2] ^= 1  # one bit of the payload
    newest.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="changed since it was written.*checkpoint.prev.pkl"):
        assert load_checkpoint(tmp_path).next_round == 2
    newest.write_bytes(newest.read_bytes()[:-7])  # truncated: the declared length says so
    with pytest.warns(UserWarning, match="truncated"):
        assert load_checkpoint(tmp_path).next_round == 2
    prev = tmp_path / PREVIOUS_NAME
    prev.write_bytes(prev.read_bytes()[: HEADER_SIZE + 5])
    with pytest.raises(CheckpointError, match=f"{CHECKPOINT_NAME}: .*truncated"):
        load_checkpoint(tmp_path)


def test_resuming_on_another_machine_of_yours_takes_its_key_file(home, tmp_path, monkeypatch):
    """What README says: copy the key file to the other machine (here: another PRIVREC_HOME)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_checkpoint(run_dir, CHECKPOINT)
    laptop = tmp_path / "laptop"
    monkeypatch.setenv("PRIVREC_HOME", str(laptop))
    with pytest.raises(CheckpointError, match="there is no .*checkpoint.key here.*copy"):
        load_checkpoint(run_dir)
    laptop.mkdir(mode=0o700)
    (laptop / "checkpoint.key").write_bytes((home / "checkpoint.key").read_bytes())
    os.chmod(laptop / "checkpoint.key", 0o600)
    assert load_checkpoint(run_dir).next_round == 2
    os.chmod(laptop / "checkpoint.key", 0o644)  # readable by others: refused, as ssh would
    with pytest.raises(CheckpointError, match="accessible to other users.*chmod 600"):
        load_checkpoint(run_dir)


def test_the_key_never_lives_in_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVREC_HOME", str(tmp_path / "keys"))
    with pytest.raises(CheckpointError, match="must not live in the run folder"):
        save_checkpoint(tmp_path, CHECKPOINT)
    assert not (tmp_path / CHECKPOINT_NAME).exists()
