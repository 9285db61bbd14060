"""Nodes compute on their host's device (cluster/device.py), and their state moves between devices.

``check_device`` runs the nodes' code with torch's default device "meta" and ``torch.from_numpy``
giving meta tensors: a tensor a role makes without its ``ctx.device`` breaks the run on this
CPU-only machine, as it would on a GPU host. tests/integration/test_golden.py runs every protocol's golden
run so; here the check itself is shown to catch what it must and to pass what it must.

Snapshots, checkpoints and rollbacks (``nodes.host.dumps_state``) hold CPU data only: a tensor or
generator that sat on its host's device is put back on the device of the host that unpickles it.
Without a GPU, the "meta" device stands in for a host's device that is not the CPU.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import ray.cloudpickle
import torch

from cluster.device import checking, to_device
from nodes import host
from nodes.deployment import Deployment, NodeSpec
from tests import toy_protocol

ray.cloudpickle.register_pickle_by_value(toy_protocol)  # workers cannot import the tests folder

OFF_DEVICE = ["torch.zeros", "torch.from_numpy", "torch.tensor", "nn.Linear"]
ON_DEVICE = ["device=", "self.tensor", "self.build", "nn.Linear(device=)"]


def _run(hows: list[str], check: bool) -> list:
    specs = [
        NodeSpec(toy_protocol.MakesTensor, f"server/{i}", {"how": h}) for i, h in enumerate(hows)
    ]
    dep = Deployment(specs, seed=0, placement="dedicated", default_device="meta" if check else None)
    try:
        return sorted(dep.superstep(0, "make", activate=["server"]).reports["sum"])
    finally:
        dep.close()


@pytest.mark.ray
def test_check_device_catches_a_tensor_made_off_the_nodes_device(ray_local):
    assert _run(ON_DEVICE, check=True) == _run(ON_DEVICE, check=False)
    for how in OFF_DEVICE:
        assert len(_run([how], check=False)) == 1  # fine on the CPU, as it was
        with pytest.raises(Exception, match="meta"):
            _run([how], check=True)


def test_checking_restores_torch():
    real = torch.from_numpy
    with checking():
        assert torch.zeros(1).device.type == "meta"
        assert torch.from_numpy(np.ones(1)).device.type == "meta"
        assert to_device(np.ones(1), "cpu").device.type == "cpu"  # what nodes use instead
        with torch.device("cpu"):  # as cluster.device.build makes a model
            assert torch.from_numpy(np.ones(1)).device.type == "cpu"
    assert torch.from_numpy is real and torch.zeros(1).device.type == "cpu"


def _state():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
    return {"model": model, "opt": opt, "emb": torch.arange(6.0), "view": torch.arange(6.0)[2:4]}


def test_state_restores_on_the_unpickling_hosts_device(monkeypatch):
    blob = host.dumps_state(_state())  # taken on a CPU host
    monkeypatch.setattr(
        host, "_NODE_DEVICE", "meta"
    )  # restored on a host whose device is not the CPU
    state = pickle.loads(blob)
    assert state["model"].weight.device.type == "meta"
    assert isinstance(state["model"].weight, torch.nn.Parameter)
    assert state["emb"].device.type == "meta"
    moments = state["opt"].state[state["opt"].param_groups[0]["params"][0]]
    assert moments["exp_avg"].device.type == "meta"
    assert state["view"].device.type == "cpu"  # a CPU view keeps torch's own reduction


def test_state_on_the_cpu_restores_unchanged():
    state = _state()
    back = pickle.loads(host.dumps_state(state))
    assert torch.equal(back["model"].weight, state["model"].weight)
    assert back["model"].weight.requires_grad and back["emb"].device.type == "cpu"
    g = torch.Generator().manual_seed(11)
    torch.rand(5, generator=g)
    again = pickle.loads(host.dumps_state(g))
    assert torch.equal(torch.rand(5, generator=again), torch.rand(5, generator=g))


def test_a_generator_from_another_kind_of_device_is_reseeded_reproducibly():
    state = torch.Generator().manual_seed(3).get_state()
    # a GPU generator's state restored on this CPU host: seeded from the state's digest
    a = host._generator_on_node_device("cuda", state, on_node=True)
    b = host._generator_on_node_device("cuda", state, on_node=True)
    assert a.device.type == "cpu"
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))
