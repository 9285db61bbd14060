"""A local Ray instance is started with privrec's system config (cluster/runtime.py)."""

from __future__ import annotations

import pytest

from cluster import runtime


class _Stop(Exception):
    pass


def test_a_local_instance_frees_unreferenced_batches_often(monkeypatch):
    seen = {}

    def fake_init(**kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(runtime.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(runtime.ray, "init", fake_init)
    with pytest.raises(_Stop):
        runtime.start_or_join(None)
    assert seen["address"] == "local"
    period = seen["_system_config"]["free_objects_period_milliseconds"]
    assert 0 < period < 1000  # Ray's default is 1,000 ms: a 10,000-client round's length
