"""The cost model: bytes of a saved value, recompute cost of an op, what never runs twice."""
import math

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode

import aotgrad
from aotgrad.partition import cost

aten = torch.ops.aten


class Graph:
    """An fx.Graph built by hand on fake tensors: each node's meta["val"] is its op run on fakes."""

    def __init__(self):
        self.mode = FakeTensorMode()
        self.graph = fx.Graph()

    def input(self, name: str, *shape, dtype=torch.float32, requires_grad=False) -> fx.Node:
        node = self.graph.placeholder(name)
        with self.mode:
            node.meta["val"] = torch.empty(*shape, dtype=dtype, requires_grad=requires_grad)
        return node

    def op(self, target, *args, **kwargs) -> fx.Node:
        node = self.graph.call_function(target, args, kwargs)
        vals = pytree.tree_map_only(fx.Node, lambda a: a.meta["val"], args)
        with self.mode:
            node.meta["val"] = target(*vals, **kwargs)
        return node


def test_values_cost_their_bytes_and_attributes_views_and_sizes_are_free():
    g = Graph()
    x = g.input("x", 4, 8)
    y = g.op(aten.sin.default, x)
    view = g.op(aten.view.default, y, [32])
    mask = g.op(aten.gt.Scalar, y, 0)
    size = g.graph.call_function(aten.sym_size.int, (x, 0))
    size.meta["val"] = 4
    assert cost.value_bytes(y) == 4 * 8 * 4
    assert cost.value_bytes(mask) == 32          # bool: one byte each
    assert cost.value_bytes(x) == 4 * 8 * 4      # an input: free only where the backward reads it anyway
    assert cost.value_bytes(view) == 0           # its base holds it
    assert cost.value_bytes(size) == 0           # a Python int


def test_parameters_and_inputs_the_backward_reads_anyway_are_free_to_keep():
    g = Graph()
    x, w, tangent = g.input("x", 4, 8), g.input("w", 8, 2), g.input("tangents_1", 4, 2)
    weight = g.input("weight", 2, requires_grad=True)
    out = g.op(aten.mul.Tensor, g.op(aten.mm.default, x, w), weight)        # the forward output
    grad_w = g.op(aten.mm.default, g.op(aten.t.default, x), tangent)        # a backward op reads x
    forward_nodes = {x, w, weight, out.args[0], out}
    assert grad_w not in forward_nodes
    assert cost.free_to_keep(x, forward_nodes)            # read anyway: eager saves it too
    assert cost.free_to_keep(weight, forward_nodes)       # a parameter: the caller holds it
    assert not cost.free_to_keep(w, forward_nodes)        # data only the forward reads


def test_pointwise_and_reductions_cost_the_bytes_they_move():
    g = Graph()
    x = g.input("x", 64, 32)
    assert cost.recompute_cost(g.op(aten.sin.default, x)) == 2 * 64 * 32 * 4
    assert cost.recompute_cost(g.op(aten.sum.dim_IntList, x, [1])) == (64 * 32 + 64) * 4
    assert cost.recompute_cost(g.op(aten.view.default, x, [2048])) == 0


def test_a_large_matmul_costs_its_flops():
    g = Graph()
    a, b = g.input("a", 1024, 1024), g.input("b", 1024, 1024)
    flops = 2 * 1024 ** 3
    assert cost.recompute_cost(g.op(aten.mm.default, a, b)) == math.ceil(flops / cost.FLOPS_PER_BYTE)
    bias = g.input("bias", 1024)
    assert cost.recompute_cost(g.op(aten.addmm.default, bias, a, b)) == math.ceil(flops / cost.FLOPS_PER_BYTE)


def test_a_small_matmul_costs_the_bytes_it_moves():
    g = Graph()
    a, b = g.input("a", 64, 32), g.input("b", 32, 16)
    assert cost.recompute_cost(g.op(aten.mm.default, a, b)) == (64 * 32 + 32 * 16 + 64 * 16) * 4


def test_convolution_costs_its_flops():
    g = Graph()
    x, w = g.input("x", 8, 64, 56, 56), g.input("w", 128, 64, 3, 3)
    conv = g.op(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    flops = 2 * (8 * 128 * 56 * 56) * (64 * 3 * 3)
    assert cost.recompute_cost(conv) == math.ceil(flops / cost.FLOPS_PER_BYTE)


def test_fused_attention_costs_its_two_matmuls():
    g = Graph()
    q, k, v = (g.input(name, 4, 8, 512, 64) for name in "qkv")
    attention = g.op(aten._scaled_dot_product_flash_attention_for_cpu.default, q, k, v)
    flops = 2 * (4 * 8 * 512) * 512 * (64 + 64)
    assert cost.recompute_cost(attention) == math.ceil(flops / cost.FLOPS_PER_BYTE)


def test_attention_kernels_with_keys_in_dim_1_count_their_length():
    g = Graph()
    q, k, v = (g.input(name, 2, 1024, 8, 64) for name in "qkv")      # [B, S, H, E]
    node = g.graph.call_function(aten._efficient_attention_forward.default,
                                 (q, k, v, None, None, None, None, None, 0.0, 0))
    node.meta["val"] = (q.meta["val"],)
    flops = 2 * (2 * 1024 * 8) * 1024 * (64 + 64)
    assert cost.recompute_cost(node) == math.ceil(flops / cost.FLOPS_PER_BYTE)


def test_random_ops_and_dropout_never_run_twice():
    g = Graph()
    x = g.input("x", 16)
    assert cost.never_recompute(g.op(aten.rand_like.default, x))
    assert cost.never_recompute(g.op(aten.bernoulli.p, x, 0.5))
    assert cost.never_recompute(g.op(aten.native_dropout.default, x, 0.5, True))
    assert not cost.never_recompute(g.op(aten.native_dropout.default, x, 0.0, True))
    assert cost.never_recompute(x)
    assert not cost.never_recompute(g.op(aten.sin.default, x))


def test_attention_without_dropout_may_run_twice():
    g = Graph()
    q, k, v = (g.input(name, 1, 2, 8, 4) for name in "qkv")
    sdpa = aten._scaled_dot_product_flash_attention_for_cpu.default
    assert not cost.never_recompute(g.op(sdpa, q, k, v))
    assert not cost.never_recompute(g.op(sdpa, q, k, v, 0.0, True))
    assert cost.never_recompute(g.op(sdpa, q, k, v, 0.1))
    assert cost.never_recompute(g.op(sdpa, q, k, v, dropout_p=0.1))


def test_an_op_making_a_data_dependent_size_never_runs_twice_but_its_users_may():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    g = Graph()
    g.mode = FakeTensorMode(shape_env=ShapeEnv())
    x = g.input("x", 8)
    nonzero = g.op(aten.nonzero.default, x)                       # f32[u0, 1]: u0 bound by this run
    assert cost.never_recompute(nonzero)
    assert not cost.never_recompute(g.op(aten.abs.default, nonzero))


def test_matmuls_convolutions_and_attention_are_compute_bound():
    g = Graph()
    a, b = g.input("a", 8, 8), g.input("b", 8, 8)
    assert cost.is_compute_bound(g.op(aten.mm.default, a, b))
    assert cost.is_compute_bound(g.op(aten.addmm.default, a, a, b))
    q = g.input("q", 1, 2, 4, 8)
    assert cost.is_compute_bound(g.op(aten._scaled_dot_product_flash_attention_for_cpu.default, q, q, q))
    x, w = g.input("x", 1, 3, 8, 8), g.input("w", 4, 3, 3, 3)
    assert cost.is_compute_bound(g.op(aten.convolution.default, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1))
    assert not cost.is_compute_bound(g.op(aten.relu.default, a))
    assert not cost.is_compute_bound(g.op(aten.sum.default, a))
    assert not cost.is_compute_bound(g.op(aten.t.default, a))
    assert not cost.is_compute_bound(a)


def test_the_default_cut_keeps_what_a_fusing_compiler_cannot_rerun_for_free():
    g = Graph()
    x, w, pair = g.input("x", 8, 64, 64), g.input("w", 64, 64), g.input("pair", 2, 64)
    ids = g.input("ids", 8, dtype=torch.int64)
    assert cost.kept_from_rerun(g.op(aten.mm.default, w, w))                          # compute-bound
    assert cost.kept_from_rerun(g.op(aten.var_mean.correction, x, [2], correction=0, keepdim=True))  # 64x smaller
    assert cost.kept_from_rerun(g.op(aten.amax.default, x, [0], True))               # 8x smaller
    assert cost.kept_from_rerun(g.op(aten.cumsum.default, x, 2))                      # a scan
    assert cost.kept_from_rerun(g.op(aten.cat.default, [w, w]))
    assert not cost.kept_from_rerun(g.op(aten.sum.dim_IntList, pair, [0], True))     # 2x smaller
    assert not cost.kept_from_rerun(g.op(aten.relu.default, x))
    assert not cost.kept_from_rerun(g.op(aten.view.default, x, [512, 64]))
    assert cost.kept_from_rerun(g.op(aten.embedding.default, w, ids))               # saved, as PyTorch's
    assert not cost.kept_from_rerun(g.op(aten.index_select.default, w, 0, ids))    # other gathers fuse
    assert not cost.kept_from_rerun(g.op(aten.full.default, [4, 4], 0.0))
    assert not cost.kept_from_rerun(x)


def test_ops_that_fuse_their_inputs_into_their_own_loop():
    g = Graph()
    a = g.input("a", 8, 8)
    for fused in (g.op(aten.add.Tensor, a, a), g.op(aten.sum.dim_IntList, a, [0]), g.op(aten.t.default, a),
                  g.op(aten.cat.default, [a, a]), g.op(aten.full.default, [2], 1.0)):
        assert cost.fuses_inputs(fused), fused
    for read_from_memory in (g.op(aten.mm.default, a, a), g.op(aten.cumsum.default, a, 0), a):
        assert not cost.fuses_inputs(read_from_memory), read_from_memory
    assert cost.writes_only(g.op(aten.full.default, [2], 1.0))
    assert not cost.writes_only(g.op(aten.add.Tensor, a, a))


def test_symbolic_sizes_count_at_their_hints():
    box = {}

    def keep_joint(gm, inputs, *, num_fwd_outputs):
        box["gm"] = gm
        return aotgrad.default_partition(gm, inputs, num_fwd_outputs=num_fwd_outputs)
    f = aotgrad.aot_function(lambda x: x.sin().cos(), aotgrad.nop, partition_fn=keep_joint, dynamic=True)
    f(torch.randn(6, 3, requires_grad=True))
    sin = next(n for n in box["gm"].graph.nodes if n.target is aten.sin.default)
    assert isinstance(sin.meta["val"].shape[0], torch.SymInt)
    assert cost.value_bytes(sin) == 6 * 3 * 4
    assert cost.recompute_cost(sin) == 2 * 6 * 3 * 4
