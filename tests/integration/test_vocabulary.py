"""One vocabulary across protocols: ``clip``, ``privacy_delta``, ``mechanism``, ``l2``,
``key_servers``; an old parameter name is an unknown name, refused from the Python API, a TOML file
and the command line."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

import cli
from protocols import PROTOCOLS, get_protocol
from protocols.base import ConfigError, build_config

# names that no protocol parameter may have any more (each has a new name)
FORBIDDEN = ("delta", "sharing", "reg", "l2_weight", "weight_decay", "keyservers")


def configs():
    return {name: get_protocol(name).Config for name in sorted(PROTOCOLS)}


def test_no_config_uses_an_old_name():
    for name, cls in configs().items():
        fields = {f.name for f in dataclasses.fields(cls)}
        assert not fields & set(FORBIDDEN), f"{name}: {sorted(fields & set(FORBIDDEN))}"


@pytest.mark.parametrize(
    "protocol,old,new,value",
    [
        ("dgrec", "delta", "clip", 0.2),  # the clip bound in DGREC ...
        ("dipsgnn", "delta", "privacy_delta", 1e-6),  # ... the DP δ in DIPSGNN
        ("dgrec", "sharing", "mechanism", "laplace"),
        ("dlgnn", "sharing", "mechanism", "onebit"),  # inherited from DGREC's config
        ("dgrec", "l2_weight", "l2", 1e-4),
        ("dipsgnn", "weight_decay", "l2", 1e-4),
        ("fedmf", "reg", "l2", 1e-3),
        ("dmf", "reg", "l2", 1e-3),
        ("fedpergnn", "reg", "l2", 1e-4),
        ("fedpergnn", "keyservers", "key_servers", 2),
        ("central", "reg", "l2", 1e-2),
        ("echo", "delta", "increment", 2e-3),
    ],
)
def test_old_name_is_refused(protocol, old, new, value):
    cls = get_protocol(protocol).Config
    with pytest.raises(ConfigError, match=f"^{old}: unknown parameter"):
        build_config(cls, {old: value})
    assert getattr(build_config(cls, {new: value}), new) == value


@pytest.mark.parametrize(
    "protocol,old,new", [("dgrec", "delta", "clip"), ("dipsgnn", "delta", "privacy_delta")]
)
def test_old_and_new_name_at_once_fail(protocol, old, new):
    with pytest.raises(ConfigError, match=f"^{old}: unknown parameter"):
        build_config(get_protocol(protocol).Config, {old: 0.5, new: 0.5})


def test_new_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_config(get_protocol("dgrec").Config, {"clip": 0.2, "mechanism": "laplace"})
        build_config(get_protocol("dipsgnn").Config, {"privacy_delta": 1e-6, "l2": 0.0})


def test_old_names_on_the_command_line_and_in_a_file_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--protocol", "dgrec", "--delta", "0.2", "--sharing=float"])
    assert e.value.code == 2
    assert "unknown flag --delta" in capsys.readouterr().err.strip().splitlines()[-1]
    toml = tmp_path / "c.toml"
    toml.write_text("delta = 1e-6\nweight_decay = 0.0\n")
    with pytest.raises(SystemExit) as e:
        cli.main(["--protocol", "dipsgnn", "--config", str(toml)])
    assert e.value.code == 2
    assert "delta: unknown parameter" in capsys.readouterr().err.strip().splitlines()[-1]


def test_old_and_new_flag_at_once_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--protocol", "dgrec", "--delta", "0.2", "--clip", "0.3"])
    assert e.value.code == 2
    assert "unknown flag --delta" in capsys.readouterr().err.strip().splitlines()[-1]
