"""The command line: every flag explained, impossible values refused in one line, a run writes its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from conftest import needs_shared_data

import cli.commands
import cli.run
from engine.report import SUMMARY_KEYS, read_rows


def error_of(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for flag in (
        "--protocol",
        "--dataset",
        "--data-dir",
        "--address",
        "--placement",
        "--hosts",
        "--gpus-per-host",
        "--rounds",
        "--seed",
        "--config",
        "--out",
    ):
        assert flag in out


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--rounds", "0"], "--rounds"),
        (["--hosts", "-1"], "--hosts"),
        (["--gpus-per-host", "-0.5"], "--gpus-per-host"),
        (["--placement", "scattered"], "--placement"),
        (["--protocol", "nope"], "--protocol"),
        (["--dataset", "nope"], "--dataset"),
        (["--address", "not an address"], "--address"),
        (["--data-dir", "/nonexistent/dir"], "--data-dir"),
        (["--config", "/nonexistent.toml"], "--config"),
        (["--placement", "dedicated", "--hosts", "3"], "--hosts"),
        (["--hosts", "100000"], "--hosts"),
    ],
)
def test_impossible_values_name_the_flag(capsys, argv, flag):
    assert flag in error_of(capsys, argv)


def test_bad_config_values_name_the_parameter(capsys, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("pairs = 0\n")
    assert "pairs" in error_of(capsys, ["--config", str(cfg)])
    cfg.write_text("no_such_parameter = 1\n")
    assert "no_such_parameter" in error_of(capsys, ["--config", str(cfg)])
    cfg.write_text("dim = 'big'\n")
    assert "dim" in error_of(capsys, ["--config", str(cfg)])
    cfg.write_text("dim = [\n")
    assert "TOML" in error_of(capsys, ["--config", str(cfg)])


@pytest.mark.ray
def test_a_run_writes_its_report(ray_local, tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("users_per_round = 20\ndim = 8\n[dataset]\nn_users = 40\nn_items = 60\n")
    assert (
        cli.main(
            [
                "--rounds",
                "3",
                "--out",
                str(tmp_path / "runs"),
                "--config",
                str(cfg),
                "--hosts",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["protocol"] == "fedmf" and summary["rounds"] == 3
    assert summary["hosts"] == 2 and summary["host_actors"] == 3  # as asked; + the server's
    assert summary["bytes_total"] == sum(summary["bytes_by_kind"].values()) > 0
    assert 0.0 <= summary["metrics"]["recall@20"] <= 1.0
    rows = read_rows(run_dir)
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert sum(r["bytes"] for r in rows) == summary["bytes_total"]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["protocol_config"]["users_per_round"] == 20
    assert (run_dir / "metrics.png").exists() and (run_dir / "bytes.png").exists()


def test_protocol_flags_are_typed_by_the_config_and_override_the_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("dim = 8\npairs = 4\n")
    _, _, params, _, _ = cli.run.parse(["--config", str(cfg), "--dim", "16", "--lr-user=0.5"])
    assert params == {"dim": 16, "pairs": 4, "lr_user": 0.5}
    _, _, params, _, _ = cli.run.parse(
        ["--protocol", "dgrec", "--public-ratio", "0.2", "--use-bipartite", "--no-pearson"]
    )
    assert params == {"public_ratio": 0.2, "use_bipartite": True, "pearson": False}
    _, _, params, _, _ = cli.run.parse(["--protocol", "dgrec", "--mechanism", "laplace"])
    assert params == {"mechanism": "laplace"}


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--no-such-thing", "1"], "--no-such-thing"),
        (["--dim", "eight"], "--dim"),
        (["--dim"], "--dim"),
        (["--no-dim"], "--no-dim"),
        (["--protocol", "dgrec", "--pearson=maybe"], "--pearson"),
        (["stray"], "stray"),
        (["--dim", "0"], "dim"),  # typed fine, refused by the config's range check
    ],
)
def test_bad_protocol_flags_name_the_flag(capsys, argv, needle):
    assert needle in error_of(capsys, argv)


@pytest.mark.parametrize(
    "protocol,old,new",
    [("fedpergnn", "--keyservers", "--key-servers"), ("fedpergnn", "--laplace", "--laplace-scale")],
)
def test_a_renamed_parameter_is_an_unknown_flag_with_its_new_name_as_hint(
    capsys, tmp_path, protocol, old, new
):
    """A parameter's former name is refused like any unknown flag, in one line whose "did you
    mean" names the parameter; with --resume too, typed by the run's own protocol."""
    line = error_of(capsys, ["--protocol", protocol, old, "2"])
    assert f"unknown flag {old}; did you mean {new}?" in line
    (tmp_path / "config.json").write_text(json.dumps({"settings": {"protocol": protocol}}))
    line = error_of(capsys, ["--resume", str(tmp_path), old, "2"])
    assert line.startswith(
        f"launch.py: --resume {tmp_path}: unknown flag {old}; did you mean {new}?"
    )


@needs_shared_data
def test_a_model_that_does_not_fit_the_dataset_is_refused_in_one_line(capsys):
    line = error_of(
        capsys, ["--protocol", "central", "--model", "dipsgnn", "--dataset", "filmtrust"]
    )
    assert "model" in line and "timestamps" in line


def test_no_arguments_is_the_main_job_and_run_is_the_single_run(monkeypatch):
    seen = []
    monkeypatch.setattr(cli.commands, "compare_main", lambda argv: seen.append(argv) or 0)
    assert cli.main([]) == 0 and seen == [["--quick"]]
    assert cli.main(["compare", "--protocols", "dgrec"]) == 0
    assert seen[-1] == ["--protocols", "dgrec"]
    _, args, params, _, _ = cli.run.parse(["run", "--protocol", "dmf", "--dim", "16"])
    assert args.protocol == "dmf" and params == {"dim": 16}


def test_privrec_console_command_is_cli_main():
    doc = tomllib.loads((Path(cli.__file__).parents[1] / "pyproject.toml").read_text())
    assert doc["project"]["scripts"]["privrec"] == "cli:main"
    assert "cli*" in doc["tool"]["setuptools"]["packages"]["find"]["include"]
    assert "launch" in doc["tool"]["setuptools"]["py-modules"]


def test_launch_py_is_the_same_program_as_cli_main():
    import launch

    assert launch.main is cli.main


@pytest.mark.parametrize(
    "argv",
    [
        ["--protocol", "verfedgnn", "--attack"],
        ["--protocol", "verfedgnn", "--attack", "--dry-run"],
        ["compare", "--attack"],
    ],
)
def test_attack_without_a_name_is_refused_naming_deanonymization(capsys, argv):
    """``--attack`` takes an attack's name; verfedgnn's de-anonymization attack is its own flag."""
    line = error_of(capsys, argv)
    assert "--attack: give the attack's name" in line and "--deanonymization" in line


def test_a_local_ray_start_has_no_token_warning(tmp_path):
    """privrec's own single-user instance starts without Ray's token-authentication warning."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    code = (
        "import os, ray; from cluster.runtime import start_or_join; "
        "c = start_or_join(num_cpus=1); assert c.started_here; "
        "assert 'RAY_AUTH_MODE' not in os.environ; ray.shutdown()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(cli.__file__).parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Token authentication" not in done.stderr + done.stdout


def test_one_coercion_types_flags_toml_and_python_alike():
    """A flag (text), a TOML value and a Python value go through the same ``coerce``."""
    from protocols import get_protocol
    from protocols.base import ConfigError, build_config

    FedMFConfig = get_protocol("fedmf").Config
    from_text = build_config(FedMFConfig, {"dim": "16", "lr_user": "0.5"})
    from_toml = build_config(FedMFConfig, {"dim": 16, "lr_user": 0.5})
    assert from_text == from_toml and isinstance(from_text.lr_user, float)
    for bad in ({"dim": "eight"}, {"dim": 1.5}, {"dim": True}, {"lr_user": "fast"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            build_config(FedMFConfig, bad)


def test_run_takes_a_built_config_and_refuses_another_protocols(tmp_path):
    """engine.run uses a Config it is given as is (cli builds it once); another protocol's
    Config fails in one line before Ray starts."""
    from data.synthetic import synthetic
    from engine import RunSettings, run
    from protocols import get_protocol
    from protocols.base import ConfigError, build_config

    dmf_config = build_config(get_protocol("dmf").Config, {})
    settings = RunSettings(protocol="fedmf", rounds=1, out=str(tmp_path), params=dmf_config)
    with pytest.raises(ConfigError, match="DMFConfig, not FedMFConfig"):
        run(settings, synthetic(n_users=10, n_items=12, seed=0))
