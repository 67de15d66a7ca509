"""Min-cut under a memory budget: the saved set each budget must give, eager's numbers at
every budget, the trade-off hull, and the error when a budget cannot be met."""
import copy
import functools

import pytest
import torch
import torch.nn.functional as F

import aotgrad
from aotgrad.partition import cost, min_cut
from aotgrad.partition.graphs import split_joint
from tests.oracle import assert_same_as_eager


def chain(x):
    return x.sin().sin().sin()


def matmul_between_chains(x, w):
    return (x.sin().cos() @ w).sin().cos()


def residual_block(x, w1, w2):
    return x + torch.tanh(torch.relu(x @ w1) @ w2)


def dropout_chain(x):
    return F.dropout(x.sin(), 0.5, training=True).sin().sin()


def _leaf(*shape):
    return torch.randn(*shape, requires_grad=True)


EXAMPLES = {
    "chain": (chain, lambda: [_leaf(5)]),
    "matmul_between_chains": (matmul_between_chains, lambda: [_leaf(8, 16), _leaf(16, 32)]),
    "residual_block": (residual_block, lambda: [_leaf(8, 16), _leaf(16, 64), _leaf(64, 16)]),
    "dropout_chain": (dropout_chain, lambda: [_leaf(64)]),
}


def with_budget(fn, budget=None):
    return aotgrad.aot_function(fn, aotgrad.nop, partition_fn=functools.partial(
        aotgrad.min_cut_rematerialization_partition, memory_budget=budget))


def saved_names(fn, args, budget=None) -> list[str]:
    compiled = with_budget(fn, budget)
    compiled(*args)
    _, bw = compiled.last_graphs
    return [n.name for n in bw.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]


def backward_ops(fn, args, budget=None) -> list:
    compiled = with_budget(fn, budget)
    compiled(*args)
    return [n.target for n in compiled.last_graphs[1].graph.nodes if n.op == "call_function"]


def joint_graph(fn, args):
    box = {}

    def keep_joint(gm, inputs, *, num_fwd_outputs):
        box["joint"] = (gm, num_fwd_outputs)
        return aotgrad.default_partition(gm, inputs, num_fwd_outputs=num_fwd_outputs)
    aotgrad.aot_function(fn, aotgrad.nop, partition_fn=keep_joint)(*args)
    return box["joint"]


def problem_of(fn, args) -> min_cut.CutProblem:
    gm, num_fwd_outputs = joint_graph(fn, args)
    return min_cut.cut_problem(split_joint(gm, num_fwd_outputs))


# -- what each budget saves ---------------------------------------------------------------

def test_budget_one_recomputes_pointwise_ops_but_not_a_matmul():
    # cos is saved: w's grad is a matmul reading it (rerun, it would be a kernel of its own);
    # x.sin() runs again inside the loop of cos's backward
    args = EXAMPLES["matmul_between_chains"][1]()
    assert saved_names(matmul_between_chains, args, 1.0) == ["primals_1", "primals_2", "cos", "mm"]
    assert backward_ops(matmul_between_chains, args, 1.0).count(torch.ops.aten.mm.default) == 2


def test_budget_zero_recomputes_the_matmul_and_saves_only_inputs():
    args = EXAMPLES["matmul_between_chains"][1]()
    assert saved_names(matmul_between_chains, args, 0.0) == ["primals_1", "primals_2"]
    assert backward_ops(matmul_between_chains, args, 0.0).count(torch.ops.aten.mm.default) == 3


def test_residual_block_saves_less_as_the_budget_falls():
    args = EXAMPLES["residual_block"][1]()
    primals = ["primals_1", "primals_2", "primals_3"]
    assert saved_names(residual_block, args, 1.0) == primals + ["relu", "tanh"]    # 2048 + 512 bytes
    assert saved_names(residual_block, args, 0.5) == primals + ["tanh"]            # relu from x @ w1 again
    assert saved_names(residual_block, args, 0.0) == primals


def test_dropout_mask_is_saved_and_never_drawn_again_at_any_budget():
    args = EXAMPLES["dropout_chain"][1]()
    for budget in (1.0, 0.5):
        assert "div" in saved_names(dropout_chain, args, budget)          # the scaled mask
        ops = backward_ops(dropout_chain, args, budget)
        assert torch.ops.aten.bernoulli.p not in ops and torch.ops.aten.empty_like.default not in ops


def test_least_recompute_under_a_bound_takes_a_point_inside_a_hull_edge():
    problem = problem_of(chain, [_leaf(5)])      # hull: (40, 0) and (0, 80); (20, 40) lies between
    cut = min_cut.least_recompute_under(problem, 20, "bound")
    assert (cut.bytes, cut.recompute) == (20, 40)
    assert [n.name for n in cut.saved] == ["primals_1", "sin"]      # of equals, the earlier: sin_1 runs again


def test_recomputed_values_run_just_before_their_first_use():
    def two_branches(a, b):
        return a.exp().sin() + b.exp().sin()
    ops = [str(op) for op in backward_ops(two_branches, [_leaf(8), _leaf(8)], 1.0)]
    # each exp runs again right before its branch's grads, not both at the start
    assert ops.index("aten.exp.default") < ops.index("aten.mul.Tensor")
    assert ops.index("aten.mul.Tensor") < len(ops) - 1 - ops[::-1].index("aten.exp.default")


def test_score_saved_counts_another_partitioners_saved_view_as_its_base_once():
    def exp_and_views(x):
        y = x.exp()
        return y.view(5, 2).sin(), y.t()
    args = [_leaf(2, 5)]
    gm, num_fwd_outputs = joint_graph(exp_and_views, args)
    problem = min_cut.cut_problem(split_joint(gm, num_fwd_outputs))
    by_name = {n.name: n for n in gm.graph.nodes}
    cut = min_cut.score_saved(problem, [by_name["exp"], by_name["view"]])     # default_partition's
    assert cut.bytes == 2 * 5 * 4 and cut.recompute == 0


def _saved_in_joint(gm, fw, num_fwd_outputs):
    by_name = {n.name: n for n in gm.graph.nodes}
    outputs = fw.graph.output_node().args[0][num_fwd_outputs:]
    return [by_name[o.name] for o in outputs if isinstance(o, torch.fx.Node) and o.name in by_name]


def test_score_saved_scores_pytorchs_partition_and_the_default_one_with_finite_bytes():
    from torch._functorch.partitioners import min_cut_rematerialization_partition as pytorch_min_cut

    def linear_chain(x, w):
        return F.linear(x.sin(), w).cos()
    args = [_leaf(8, 16), _leaf(32, 16)]
    gm, num_fwd_outputs = joint_graph(linear_chain, args)
    for partition in (pytorch_min_cut, aotgrad.default_partition):
        fw, _ = partition(gm, args, num_fwd_outputs=num_fwd_outputs)
        problem = min_cut.cut_problem(split_joint(gm, num_fwd_outputs))      # PyTorch's edits the joint
        saved = _saved_in_joint(gm, fw, num_fwd_outputs)
        assert any(cost.is_view(n) for n in saved)          # t(w): free, w is a parameter
        cut = min_cut.score_saved(problem, saved)
        assert cut.bytes == (8 * 16 + 8 * 32) * 4           # sin and mm; inputs and views of them free
        assert cut.recompute == 0
    ours = min_cut.choose_cut(problem, 1.0, None)
    assert (min_cut.score_saved(problem, ours.saved).bytes, min_cut.score_saved(problem, ours.saved).recompute) \
        == (ours.bytes, ours.recompute)


def test_a_budget_on_the_grid_gets_the_least_recompute_cut_for_its_bound():
    problem = problem_of(residual_block, EXAMPLES["residual_block"][1]())
    most = min_cut.solve(problem, *min_cut._recompute_first(problem)).bytes
    for budget in (0.5, 0.25):
        cut = min_cut.choose_cut(problem, budget, None)
        best = min_cut.least_recompute_under(problem, int(budget * most), "")
        assert (cut.bytes, cut.recompute) == (best.bytes, best.recompute)


def _default_price(problem, cut) -> int:
    """A cut's value as the default cut prices it: bytes (those of values only the backward
    reads, MOVED_BYTES times) + DEFAULT_LAMBDA x recompute."""
    p, q = min_cut.DEFAULT_LAMBDA
    vertex = problem.network.vertex
    moved = sum(problem.save_bytes[n] for n in problem.nodes if n not in problem.forward_required
                and vertex[n][0] in cut.side and vertex[n][1] not in cut.side)
    return q * (cut.bytes + (min_cut.MOVED_BYTES - 1) * moved) + p * cut.recompute


def test_budget_one_is_the_best_cut_at_its_price_that_reruns_nothing_it_keeps():
    # the default cut: at DEFAULT_LAMBDA, no cut that runs none of kept_by_default twice costs less
    for name in ("matmul_between_chains", "residual_block"):
        fn, make_args = EXAMPLES[name]
        problem = problem_of(fn, make_args())
        top = min_cut.default_cut(problem)
        vertex = problem.network.vertex
        kept = [vertex[n][0] for n in min_cut.kept_by_default(problem) & problem.forward_required if n in vertex]
        assert any(cost.is_compute_bound(n) for n in min_cut.kept_by_default(problem)), name
        assert all(v in top.side for v in kept), name
        for cut in min_cut.hull_cuts(problem):
            if all(v in cut.side for v in kept):
                assert _default_price(problem, cut) >= _default_price(problem, top), (name, cut, top)


def _saved_matching_eager(model, x):
    """`model` compiled as _compiled_with_inductors_decompositions compiles it, on a copy: outputs
    and parameter grads as eager's for `x`; the values its forward saves, and its graphs."""
    twin = copy.deepcopy(model)
    compiled, graphs = _compiled_with_inductors_decompositions(twin)
    assert_close_and_backward(model(x), compiled(x))
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    return [n for n in list(graphs["forward"].graph.nodes)[-1].args[0][1:] if isinstance(n, torch.fx.Node)], graphs


def _compiled_with_inductors_decompositions(model):
    """`model` under aot_module with Inductor's decompositions and min-cut; its graphs, once called."""
    from torch._inductor.decomposition import select_decomp_table

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return gm
        return compiler

    compiled = aotgrad.aot_module(model, fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                                  decompositions=select_decomp_table(),
                                  partition_fn=aotgrad.min_cut_rematerialization_partition)
    return compiled, graphs


def test_budget_one_recomputes_batchnorm_and_relu6_from_the_saved_convolution():
    """conv -> bn -> relu6 (in place) -> conv, Inductor's decompositions: the backward recomputes
    the BatchNorm's output and the ReLU6 mask from the convolution's output it reads anyway, as
    PyTorch's partitioner does, instead of saving a mask per BatchNorm (under Inductor those
    masks cost MobileNetV2 1.8x of backend="inductor"'s step). Grads as eager's."""
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU6(inplace=True), nn.Conv2d(4, 4, 1))
    saved, graphs = _saved_matching_eager(model, torch.randn(2, 3, 8, 8))
    assert not any(n.meta["val"].dtype == torch.bool for n in saved if isinstance(n, torch.fx.Node)), saved


def test_budget_one_saves_a_layer_norms_statistics_and_the_output_a_matmul_reads():
    """layer_norm -> linear, decomposed as Inductor decomposes it (var_mean, rsqrt, ...): the
    backward runs no var_mean (a reduction to 1/64 of its input: saving it is cheap) and does
    not rebuild the norm's output for the weight's grad (a matmul reads it: it would be a
    kernel of its own), as PyTorch's partitioner. Grads as eager's."""
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
    twin = copy.deepcopy(model)
    compiled, graphs = _compiled_with_inductors_decompositions(twin)
    x = torch.randn(4, 16, 64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    assert_close_and_backward(model(x), compiled(x2))
    torch.testing.assert_close(x2.grad, x.grad)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    backward_targets = {n.target for n in graphs["backward"].graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.var_mean.correction not in backward_targets
    assert torch.ops.aten.rsqrt.default not in backward_targets
    # the weight's grads read the norm's affine output and the GELU's output from the forward
    mms = [n for n in graphs["backward"].graph.nodes if n.target is torch.ops.aten.mm.default]
    assert all(any(a.op == "placeholder" for a in _through_views(mm.args)) for mm in mms), mms


class _ChannelNorm(torch.nn.LayerNorm):
    """A layer norm over the channels of an NCHW tensor, as ConvNeXt's (permute, norm, permute)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def test_budget_one_saves_no_value_only_the_backward_would_compute():
    """conv -> channel layer norm -> conv, Inductor's decompositions: the norm's backward needs
    `x - mean`. Computed in the forward and saved, it is a buffer the forward writes only to save
    it, 2.4% smaller than the convolution output and mean it is made from: the default cut saves
    those (the convolution's output is written anyway) and the backward recomputes `x - mean`, as
    PyTorch's partitioner, which never moves backward work into the forward. (Moved, it cost
    ConvNeXt 1.16x of backend="inductor"'s step.) Grads as eager's."""
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 40, 3), _ChannelNorm(40), nn.Conv2d(40, 8, 1))
    saved, graphs = _saved_matching_eager(model, torch.randn(2, 3, 8, 8))
    made_by = {n.target for n in saved}
    assert torch.ops.aten.convolution.default in made_by, saved
    assert torch.ops.aten.sub.Tensor not in made_by, saved
    assert any(n.target is torch.ops.aten.sub.Tensor for n in graphs["backward"].graph.nodes)


def test_budget_one_saves_the_view_a_convolution_reads_rather_than_its_base():
    """conv -> channel layer norm (permute, norm, permute) -> conv: the second convolution's
    weight grad reads its input, the norm's NHWC output permuted back to NCHW. The cut saves
    storages, but the forward saves that permute itself, the view the convolution reads, as
    PyTorch's partitioner does: Inductor lays out each saved output alone, and gave the NHWC
    base channels-last strides of the wrong dimensions, a second buffer and kernel (convnext:
    forward 9 kernels against inductor's 8). The first convolution's output, which the norm
    reads through a permute, stays saved as is (a library kernel made it). Grads as eager's."""
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 40, 3), _ChannelNorm(40), nn.Conv2d(40, 8, 1))
    saved, graphs = _saved_matching_eager(model, torch.randn(2, 3, 8, 8))
    convolutions = [n for n in graphs["forward"].graph.nodes if n.target is torch.ops.aten.convolution.default]
    assert convolutions[1].args[0] in saved, saved  # the permute the second convolution reads
    assert convolutions[1].args[0].target is torch.ops.aten.permute.default
    assert convolutions[1].args[0].args[0] not in saved, saved  # not its base as well
    assert convolutions[0] in saved, saved
    weight_grads = [n for n in graphs["backward"].graph.nodes if n.target is torch.ops.aten.convolution_backward.default]
    assert all(n.args[1].op == "placeholder" for n in weight_grads), [n.args[1] for n in weight_grads]


def _view_saved_for(base, forward_reader):
    """What saved_as_read saves for `a = base(x, w); v = a.t(); out = forward_reader(v, w)`, where
    the cut saved `a` and the backward recomputes `v` from it."""
    gm, num_fwd_outputs = joint_graph(lambda x, w: forward_reader(base(x, w).t(), w), (_leaf(8, 8), _leaf(8, 8)))
    parts = split_joint(gm, num_fwd_outputs)
    (v,) = [n for n in gm.graph.nodes if n.target is torch.ops.aten.t.default and n in parts.forward_nodes
            and n.args[0].op != "placeholder"][:1]
    a = v.args[0]
    parts.backward_nodes = [v] + [n for n in parts.backward_nodes if v in n.all_input_nodes]
    return min_cut.saved_as_read(parts, [a]), a, v, parts


def test_saved_as_read_saves_the_view_a_library_kernel_reads_of_a_value_a_fused_loop_makes():
    twice = lambda x, w: x * 2  # noqa: E731
    saved, a, v, parts = _view_saved_for(twice, lambda v, w: (v @ w).sum())
    assert saved == [v] and v not in parts.backward_nodes  # mm reads v in the forward
    saved, a, v, parts = _view_saved_for(twice, lambda v, w: (v.sin() * w).sum())
    assert saved == [a] and v in parts.backward_nodes  # only a fused loop reads v: a's layout is free
    saved, a, v, parts = _view_saved_for(lambda x, w: x @ w, lambda v, w: (v @ w).sum())
    assert saved == [a] and v in parts.backward_nodes  # a library kernel made a: its layout stays
    saved, a, v, parts = _view_saved_for(twice, lambda v, w: ((v @ w).sum(), v.t()))
    assert saved == [a] and v in parts.backward_nodes  # a is returned (its own layout): kept


def test_budget_one_still_saves_a_mask_much_smaller_than_what_it_is_made_from():
    """linear -> relu -> sum, Inductor's decompositions: the ReLU's backward needs `out <= 0`,
    a bool 1/4 the bytes of the float output; counted twice it is still half, so the forward
    saves the mask. Grads as eager's."""
    import torch.nn as nn

    class LinearRelu(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(64, 64)

        def forward(self, x):
            return self.linear(x).relu().sum(1)

    torch.manual_seed(0)
    model = LinearRelu()
    saved, graphs = _saved_matching_eager(model, torch.randn(8, 64))
    assert [n.meta["val"].dtype for n in saved if n.op != "placeholder"] == [torch.bool], saved


def _through_views(args):
    for a in args:
        while isinstance(a, torch.fx.Node) and cost.is_view(a):
            a = a.args[0]
        if isinstance(a, torch.fx.Node):
            yield a


def assert_close_and_backward(expected, actual):
    torch.testing.assert_close(actual, expected)
    expected.square().sum().backward()
    actual.square().sum().backward()


def test_budget_one_makes_a_mask_only_the_backward_reads_in_the_backward():
    """embedding -> layer norm, Inductor's decompositions: the embedding's backward masks the
    ids it scatter-adds (`0 <= id < 50`, `id != padding_idx`), and the scatter-add does not fuse
    its inputs. The masks read only the ids, which the backward reads anyway: they are made
    there, as PyTorch's partitioner makes them, not in the forward, in a kernel of their own
    that the forward runs only to save a mask (phi had one forward kernel more than
    backend="inductor"). Grads as eager's."""
    import torch.nn as nn

    class EmbedNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.norm = nn.Embedding(50, 16, padding_idx=0), nn.LayerNorm(16)

        def forward(self, ids):
            return self.norm(self.embed(ids))

    torch.manual_seed(0)
    saved, graphs = _saved_matching_eager(EmbedNorm(), torch.randint(0, 50, (4, 8)))
    assert not any(n.meta["val"].dtype == torch.bool for n in saved), saved
    assert torch.ops.aten.bitwise_and.Tensor not in {n.target for n in graphs["forward"].graph.nodes}
    assert torch.ops.aten.bitwise_and.Tensor in {n.target for n in graphs["backward"].graph.nodes}


def test_budget_one_saves_an_embeddings_output_several_ops_read():
    """embedding -> layer norm, plus a residual add reading the embedding: the default cut saves
    the lookup's output, as PyTorch's partitioner does, and the backward runs no lookup again
    (run again, Inductor repeats the lookup inside each reader and its CPU kernels split
    differently: bert's backward had one kernel more than backend="inductor"). Grads as eager's."""
    import torch.nn as nn

    class EmbedNormResidual(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.norm = nn.Embedding(50, 16), nn.LayerNorm(16)

        def forward(self, ids):
            h = self.embed(ids)
            return self.norm(h) * h + h

    torch.manual_seed(0)
    saved, graphs = _saved_matching_eager(EmbedNormResidual(), torch.randint(0, 50, (4, 8)))
    assert any(n.target is torch.ops.aten.embedding.default for n in saved), saved
    assert torch.ops.aten.embedding.default not in {n.target for n in graphs["backward"].graph.nodes}


def test_budget_one_makes_a_constant_again_rather_than_saving_it():
    """A constant the forward uses and a matmul of the backward reads: made again in the backward
    (writing it costs what saving it keeps), not saved. Grads as eager's."""
    def f(x):
        twos = torch.full((8, 8), 2.0)
        return (twos @ x.sin()).sum()

    x = _leaf(8, 8)
    saved = saved_names(f, [x])
    assert all(name.startswith("primals") or "sin" in name or "cos" in name for name in saved), saved
    assert_same_as_eager(f, [_leaf(8, 8)], compiled=with_budget(f))


# -- eager's numbers at every budget --------------------------------------------------------

@pytest.mark.parametrize("budget", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("name", ["chain", "matmul_between_chains", "residual_block"])
def test_outputs_and_gradients_equal_eager_at_every_budget(name, budget):
    fn, make_args = EXAMPLES[name]
    assert_same_as_eager(fn, make_args(), compiled=with_budget(fn, budget))


@pytest.mark.parametrize("budget", [0.5, 1.0])
def test_dropout_gradients_equal_eager_at_every_budget_it_meets(budget):
    assert_same_as_eager(dropout_chain, [_leaf(64)], compiled=with_budget(dropout_chain, budget))


@pytest.mark.parametrize("budget_bytes", [0, 256, 1000, 100_000])
@pytest.mark.parametrize("name", ["matmul_between_chains", "residual_block"])
def test_byte_budget_is_honoured_and_gradients_equal_eager(name, budget_bytes, monkeypatch):
    monkeypatch.setattr(aotgrad.config, "activation_memory_budget_bytes", budget_bytes)
    fn, make_args = EXAMPLES[name]
    compiled = with_budget(fn)
    assert_same_as_eager(fn, make_args(), compiled=compiled)
    fw, bw = compiled.last_graphs
    assert _saved_bytes(bw) <= budget_bytes


def _saved_bytes(bw) -> int:
    """Bytes of the saved values that are not inputs (inputs are free to keep)."""
    return sum(n.meta["val"].numel() * n.meta["val"].element_size() for n in bw.graph.nodes
               if n.op == "placeholder" and not n.name.startswith(("tangents", "primals")))


def test_byte_budget_below_the_default_cut_recomputes_least():
    problem = problem_of(residual_block, EXAMPLES["residual_block"][1]())
    cut = min_cut.choose_cut(problem, 1.0, 1000)             # default saves 2560 bytes: relu and tanh
    assert (cut.bytes, [n.name for n in cut.saved][-1]) == (512, "tanh")


def test_memory_budget_none_reads_the_config_at_call_time(monkeypatch):
    args = EXAMPLES["residual_block"][1]()
    monkeypatch.setattr(aotgrad.config, "activation_memory_budget", 0.0)
    assert saved_names(residual_block, args) == ["primals_1", "primals_2", "primals_3"]


def test_dynamic_shapes_meet_the_budget_and_equal_eager():
    compiled = aotgrad.aot_function(residual_block, aotgrad.nop, dynamic=True, partition_fn=functools.partial(
        aotgrad.min_cut_rematerialization_partition, memory_budget=0.5))
    for n in (8, 11):
        assert_same_as_eager(residual_block, [_leaf(n, 16), _leaf(16, 64), _leaf(64, 16)], compiled=compiled)


# -- the hull -------------------------------------------------------------------------------

def test_hull_of_a_chain_is_save_all_or_recompute_all():
    gm, num_fwd_outputs = joint_graph(chain, [_leaf(5)])
    # f32[5] values: saving sin and sin_1 costs 40 bytes; recomputing them costs 2 * (20 + 20) bytes moved
    assert min_cut.tradeoff_hull(gm, num_fwd_outputs) == [(40, 0), (0, 80)]


def test_hull_points_are_convex_and_each_is_a_cut_of_that_cost():
    problem = problem_of(residual_block, EXAMPLES["residual_block"][1]())
    points = [(c.bytes, c.recompute) for c in min_cut.hull_cuts(problem)]
    assert points == [(2560, 0), (512, 10752), (0, 18432)]
    for (b0, r0), (b1, r1), (b2, r2) in zip(points, points[1:], points[2:]):
        assert (r1 - r0) * (b1 - b2) < (r2 - r1) * (b0 - b1)      # slopes steepen: a lower convex hull
    for cut in min_cut.hull_cuts(problem):
        measured = min_cut.score_saved(problem, cut.saved)
        assert (measured.bytes, measured.recompute) == (cut.bytes, cut.recompute)


# -- budgets that cannot be met ---------------------------------------------------------------

def test_unreachable_budget_says_the_least_bytes_and_what_to_do():
    with pytest.raises(min_cut.MemoryBudgetError) as error:
        with_budget(dropout_chain, 0.0)(_leaf(64))
    message = str(error.value)
    assert "under 0 bytes" in message and "must save 256 bytes" in message
    assert "div = aten.div.Scalar: 256 bytes (computed from values that cannot run again" in message
    assert "primals_1" not in message
    assert "F.dropout(x.sin(), 0.5, training=True)" in message       # the user's line
    assert "memory_budget to at least 0.333" in message and "activation_memory_budget_bytes to at least 256" in message


def test_byte_budget_below_what_random_ops_need_is_refused(monkeypatch):
    monkeypatch.setattr(aotgrad.config, "activation_memory_budget_bytes", 100)
    with pytest.raises(min_cut.MemoryBudgetError, match="must save 256 bytes"):
        with_budget(dropout_chain)(_leaf(64))


def test_budget_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match=r"memory_budget must lie in \[0, 1\]"):
        with_budget(chain, 1.5)(_leaf(5))
