"""Functionalize: views and mutations -> a pure graph, plus what was written.

In: the non-functional joint graph from joint.py. Out: a graph with no
in-place, out= or metadata-mutating ops, whose outputs read final values, and a
`FunctionalizePlan`. Per-op knowledge lives in rules.py; the pass in rewrite.py.
"""
from aotgrad.functionalize.rewrite import (
    FunctionalizePlan,
    functionalize,
    remove_dead_nodes,
)

__all__ = ["FunctionalizePlan", "functionalize", "remove_dead_nodes"]
