"""Partitioners: the forward saves only what the backward needs; grads equal eager."""
import pytest
import torch

import aotgrad
from tests.oracle import assert_same_as_eager


def _graphs(fn, partition_fn, *args):
    f = aotgrad.aot_function(fn, aotgrad.nop, partition_fn=partition_fn)
    f(*args)
    return f, f.last_graphs


def chain(x):
    return x.sin().sin().sin()


@pytest.mark.parametrize("partition_fn", [aotgrad.default_partition, aotgrad.min_cut_rematerialization_partition])
def test_partitioned_graphs_give_eager_gradients(partition_fn):
    x = torch.randn(5, requires_grad=True)
    f = aotgrad.aot_function(chain, aotgrad.nop, partition_fn=partition_fn)
    assert_same_as_eager(chain, [x], compiled=f)


def test_default_partition_saves_inputs_of_backward_only():
    _, (fw, bw) = _graphs(chain, aotgrad.default_partition, torch.randn(5, requires_grad=True))
    saved = [n.name for n in bw.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
    assert saved == ["primals_1", "sin", "sin_1"]


def test_min_cut_saves_fewer_bytes_by_recomputing_pointwise_ops():
    _, (fw, bw) = _graphs(chain, aotgrad.min_cut_rematerialization_partition, torch.randn(5, requires_grad=True))
    saved = [n.name for n in bw.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
    assert saved == ["primals_1"]
    assert sum(n.target is torch.ops.aten.sin.default for n in bw.graph.nodes) == 2


def test_min_cut_never_recomputes_random_ops():
    def fn(x):
        return torch.nn.functional.dropout(x.sin(), 0.5, training=True).cos()
    f, (fw, bw) = _graphs(fn, aotgrad.min_cut_rematerialization_partition, torch.randn(64, requires_grad=True))
    assert not any("dropout" in str(n.target) or "bernoulli" in str(n.target) for n in bw.graph.nodes)
    assert_same_as_eager(fn, [torch.randn(64, requires_grad=True)], compiled=f)
