"""The graph cut into one piece per bucket, each piece compiled on its own.

In: a torch.compile FX graph, its example inputs, the bucket of each node, and the backend.
Out: a GraphModule that calls the compiled pieces in turn. `torch.fx`'s `split_module` makes
the pieces (it repeats autocast and grad-mode changes at the start of every piece they span,
and keeps each higher-order op, e.g. a checkpointed region, whole in one piece). Each piece
is compiled with example inputs of its own: the first pieces get the graph's (fake where
Dynamo made fakes), later ones the fake values the pieces before them produce.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch._guards import TracingContext, detect_fake_mode

from aotgrad import compat
from aotgrad.errors import UnsupportedError
from aotgrad.front.simplified import symbolic_examples
from aotgrad.runtime.boxed import is_boxed


class CompiledPiece(torch.nn.Module):
    """One compiled piece, called as the split graph calls its submodules."""

    def __init__(self, compiled: Callable, index: int, on_call: Callable | None = None):
        super().__init__()
        self.compiled = compiled
        self.index = index
        self.on_call = on_call   # called with (index, outputs) after each run (tests, explain)

    def forward(self, *args):
        outputs = self.compiled(list(args)) if is_boxed(self.compiled) else self.compiled(*args)
        if self.on_call is not None:
            self.on_call(self.index, outputs)
        return outputs


def split(gm: fx.GraphModule, partition: dict) -> fx.GraphModule:
    """`gm` cut into `submod_<k>` pieces by `partition` (node -> bucket index, in forward order)."""
    try:
        return compat.split_module_into_tuples(gm, None, lambda node: partition[node], keep_original_order=True)
    except AssertionError as e:
        raise UnsupportedError(
            f"DDP graph splitting: torch.fx could not cut this graph at the bucket boundaries ({e}). "
            "Make the bucket cap larger so the region that cannot be cut fits one bucket, or turn "
            "splitting off with aotgrad.config.optimize_ddp = False.") from e


def compile_pieces(split_gm: fx.GraphModule, example_inputs: Sequence[Any], original: fx.GraphModule,
                   compile_fn: Callable, on_call: Callable | None = None) -> fx.GraphModule:
    """Compile every piece of `split_gm` with `compile_fn(piece, its example inputs)`, the
    inputs propagated through the uncompiled pieces under the graph's fake mode."""
    context = TracingContext.try_get()
    fake_mode = context.fake_mode if context is not None else detect_fake_mode(list(example_inputs))
    inputs = symbolic_examples(original, example_inputs)  # the fakes Dynamo made symbolic sizes for
    env: dict = {}
    grad_mode = torch.is_grad_enabled()
    try:
        for node in split_gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = inputs[len(env)]
            elif node.op == "call_module":
                piece = getattr(split_gm, node.target)
                args = [env[a] if isinstance(a, fx.Node) else a for a in node.args]
                fakes = [_fake(fake_mode, a) for a in args]  # (static: symbolic ones are fakes already)
                compiled = compile_fn(piece, fakes)
                with fake_mode if fake_mode is not None else contextlib.nullcontext():
                    env[node] = piece(*fakes)
                setattr(split_gm, node.target, CompiledPiece(compiled, int(node.target.split("_")[-1]), on_call))
            elif node.op == "call_function":  # getitem of a piece's outputs
                env[node] = node.target(*[env[a] if isinstance(a, fx.Node) else a for a in node.args])
    finally:
        torch._C._set_grad_enabled(grad_mode)  # the pieces' fake runs set grad mode for real
    split_gm.recompile()
    return split_gm


def _fake(fake_mode, value):
    if fake_mode is None or not isinstance(value, torch.Tensor) or isinstance(value, torch._subclasses.FakeTensor):
        return value
    return compat.fake_from_real(fake_mode, value, static_shapes=True)

