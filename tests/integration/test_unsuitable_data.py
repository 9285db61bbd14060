"""Data a protocol cannot run on is refused in one line before Ray starts: fewer items
than the K of its ranking metric, or a training user with no item left to sample as a negative
(the RecBole-style tiny datasets: a 7-item file, one user with one item)."""

from __future__ import annotations

from pathlib import Path

import pytest

import cli


def _csv(path: Path, rows: list[str]) -> Path:
    path.write_text("user,item\n" + "".join(r + "\n" for r in rows))
    return path


SEVEN_ITEMS = [f"u{u},i{i}" for u in range(1, 4) for i in range(1, 8) if (u + i) % 3]


def refusal(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_fewer_items_than_k_is_refused_before_ray(capsys, tmp_path):
    data = _csv(tmp_path / "seven.csv", SEVEN_ITEMS)
    out = tmp_path / "runs"
    line = refusal(capsys, ["--dataset", str(data), "--out", str(out)])
    assert "eval_k 20: the dataset has 7 items" in line and "--eval-k 7" in line
    assert not out.exists()  # refused before a run folder (or Ray) was made
    # the same data with K within the catalogue is a plan
    assert cli.main(["--dataset", str(data), "--eval-k", "5", "--dry-run"]) == 0


@pytest.mark.parametrize("protocol", ["fedmf", "fedlightgcn"])
def test_a_user_without_a_negative_is_refused(capsys, tmp_path, protocol):
    data = _csv(tmp_path / "one.csv", ["u1,i1"])
    line = refusal(capsys, ["--protocol", protocol, "--dataset", str(data), "--eval-k", "1"])
    assert "user 0 has interacted with every one of the 1 items" in line
    both = _csv(tmp_path / "two.csv", ["u1,i1", "u1,i2", "u2,i1", "u2,i2", "u3,i1"])
    line = refusal(capsys, ["--protocol", protocol, "--dataset", str(both), "--eval-k", "1"])
    assert "2 users (user 0 first) have interacted with every one of the 2 items" in line


def test_only_protocols_that_sample_negatives_ask_for_them():
    from protocols import get_protocol
    from protocols.base import build_config
    from tests.integration.test_golden import dataset

    data = dataset()
    for name, params, wanted in [
        ("fedmf", {}, True),
        ("fedpergnn", {"backbone": "gat"}, False),  # rating prediction
        ("central", {"model": "gcn"}, False),
        ("central", {"model": "bprmf"}, True),
        ("verfedgnn", {}, False),
    ]:
        cls = get_protocol(name)
        protocol = cls(data, build_config(cls.Config, params), 0)
        assert protocol.needs_negatives() is wanted, name
        protocol.check_data()  # the synthetic world fits them all
