"""The exact optimum (an integer program): known answers, never worse than min-cut, and
min-cut's hull on or above it; its partitions run and equal eager."""
import functools

import pytest
import torch.nn.functional as F

import aotgrad
from aotgrad.partition import cost, min_cut, optimal
from tests.oracle import assert_same_as_eager
from tests.partition.test_min_cut_budget import EXAMPLES, _leaf, chain, dropout_chain, joint_graph, problem_of


def attention_block(x, wqkv, w1, w2):
    q, k, v = (F.layer_norm(x, x.shape[-1:]) @ wqkv).chunk(3, dim=-1)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a
    return x + F.gelu(x @ w1) @ w2


ALL = {**EXAMPLES, "attention_block": (
    attention_block, lambda: [_leaf(2, 16, 32), _leaf(32, 96), _leaf(32, 128), _leaf(128, 32)])}


def test_chain_under_twenty_bytes_saves_one_value_and_recomputes_one_sin():
    gm, num_fwd_outputs = joint_graph(chain, [_leaf(5)])
    result = optimal.optimal_cut(gm, num_fwd_outputs, max_bytes=20)
    assert result.proven
    assert (result.cut.bytes, result.cut.recompute) == (20, 40)     # one f32[5] saved, one sin run again


def test_dropout_optimum_saves_the_mask():
    gm, num_fwd_outputs = joint_graph(dropout_chain, [_leaf(64)])
    result = optimal.optimal_cut(gm, num_fwd_outputs, max_recompute=10 ** 9)
    assert result.cut.bytes == 256 and "div" in [n.name for n in result.cut.saved]
    with pytest.raises(ValueError, match="no partition fits"):
        optimal.optimal_cut(gm, num_fwd_outputs, max_bytes=255)


@pytest.mark.parametrize("name", list(ALL))
def test_hull_points_lie_on_or_above_the_optimum(name):
    problem = problem_of(*_graph_and_args(name))
    for cut in min_cut.hull_cuts(problem):
        assert optimal.solve_optimum(problem, max_bytes=cut.bytes).cut.recompute <= cut.recompute
        assert optimal.solve_optimum(problem, max_recompute=cut.recompute).cut.bytes <= cut.bytes


@pytest.mark.parametrize("name", list(ALL))
def test_optimum_is_no_worse_than_min_cut_at_equal_bound(name):
    problem = problem_of(*_graph_and_args(name))
    hull = min_cut.hull_cuts(problem)
    most, least = hull[0].bytes, hull[-1].bytes
    for fraction in (0.2, 0.5, 0.8):
        bound = int(least + fraction * (most - least))
        heuristic = min_cut.least_recompute_under(problem, bound, "bound")
        best = optimal.solve_optimum(problem, max_bytes=bound)
        assert best.proven and best.cut.bytes <= bound and heuristic.bytes <= bound
        assert best.cut.recompute <= heuristic.recompute


def test_min_cut_is_optimal_on_the_attention_block_hull():
    """Each hull vertex is optimal for its own bytes (the hull is exact, not just an upper bound)."""
    problem = problem_of(*_graph_and_args("attention_block"))
    for cut in min_cut.hull_cuts(problem):
        assert optimal.solve_optimum(problem, max_bytes=cut.bytes).cut.recompute == cut.recompute


@pytest.mark.parametrize("name", list(ALL))
def test_budget_one_is_optimal_at_its_bytes_and_recomputes_no_matmul_or_attention(name):
    problem = problem_of(*_graph_and_args(name))
    top = min_cut.choose_cut(problem, 1.0, None)
    assert optimal.solve_optimum(problem, max_bytes=top.bytes).cut.recompute == top.recompute
    assert optimal.solve_optimum(problem, max_recompute=top.recompute).cut.bytes == top.bytes
    twice = set(problem.forward_required) & set(problem.schedule(top.saved).nodes)
    assert not [n for n in twice if cost.is_compute_bound(n)]


@pytest.mark.parametrize("budget", [0.5, 0.25])
def test_budgeted_cuts_are_optimal_at_their_bytes(budget):
    problem = problem_of(*_graph_and_args("attention_block"))
    cut = min_cut.choose_cut(problem, budget, None)
    assert optimal.solve_optimum(problem, max_bytes=cut.bytes).cut.recompute == cut.recompute


@pytest.mark.parametrize("name", ["residual_block", "dropout_chain", "attention_block"])
def test_optimal_partition_gives_eager_gradients(name):
    fn, make_args = ALL[name]
    problem = problem_of(fn, make_args())
    bound = min_cut.hull_cuts(problem)[-1].bytes          # the tightest: recompute the most
    compiled = aotgrad.aot_function(fn, aotgrad.nop, partition_fn=functools.partial(
        optimal.optimal_partition, max_bytes=bound))
    assert_same_as_eager(fn, make_args(), compiled=compiled, atol=1e-4, rtol=1e-4)


def _graph_and_args(name):
    fn, make_args = ALL[name]
    return fn, make_args()
