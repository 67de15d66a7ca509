"""Exact maximum flow (partition/flow.py): values against networkx, capacities past 64 bits,
the residual graph's sides, and closed steps that are each a minimum cut."""
import random

import networkx as nx
import pytest

from aotgrad.partition.flow import FlowNetwork


def _random_graph(seed: int, n: int = 30, m: int = 90):
    rng = random.Random(seed)
    edges, capacities = [], []
    for _ in range(m):
        u, v = rng.randrange(n), rng.randrange(n)
        if u != v:
            edges.append((u, v))
            capacities.append(rng.choice([0, 1, 2, 3, 5, 8, 10 ** 20]))
    return n, edges, capacities


def _networkx_value(n, edges, capacities, source, sink) -> int:
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for (u, v), c in zip(edges, capacities):
        if graph.has_edge(u, v):
            graph[u][v]["capacity"] += c
        else:
            graph.add_edge(u, v, capacity=c)
    return nx.maximum_flow_value(graph, source, sink)


@pytest.mark.parametrize("seed", range(8))
def test_flow_value_equals_networkx_on_random_graphs(seed):
    n, edges, capacities = _random_graph(seed)
    assert FlowNetwork(n, edges).solve(capacities, 0, n - 1).value == _networkx_value(n, edges, capacities, 0, n - 1)


def test_capacities_past_64_bits_stay_exact():
    # SciPy's maximum_flow reads int64 capacities as int32; the min-cut prices need more
    big = 3 ** 50 + 1
    residual = FlowNetwork(4, [(0, 1), (1, 3), (0, 2), (2, 3)]).solve([big, big + 7, 5, 2 ** 70], 0, 3)
    assert residual.value == big + 5


@pytest.mark.parametrize("seed", range(4))
def test_source_side_is_a_minimum_cut_and_every_closed_prefix_is_one_too(seed):
    n, edges, capacities = _random_graph(seed)
    residual = FlowNetwork(n, edges).solve(capacities, 0, n - 1)

    def cut_value(side):
        return sum(c for (u, v), c in zip(edges, capacities) if u in side and v not in side)

    side = residual.source_side()
    assert 0 in side and n - 1 not in side and cut_value(side) == residual.value
    for step in residual.closed_steps({v: v for v in range(n)}):
        side |= set(step)
        assert cut_value(side) == residual.value
    assert n - 1 not in side


def test_closed_steps_go_in_rank_order_when_free_to():
    # 0 -> {1, 2} -> 3, every edge saturated: 1 and 2 may each join the source side alone
    network = FlowNetwork(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    residual = network.solve([1, 1, 1, 1], 0, 3)
    assert residual.source_side() == {0}
    assert residual.closed_steps({0: 0, 1: 2, 2: 1, 3: 3}) == [[2], [1]]
