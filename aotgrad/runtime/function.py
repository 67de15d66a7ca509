"""The autograd.Function that runs a compiled forward/backward pair.

`RuntimePlan` is the data: compiled graphs (called boxed: one list of arguments,
see boxed.py), how many forward outputs, which get tangents (and in what layout),
which inputs get grads, and the forward's and backward's steps. `CompiledFunction` is one
module-level Function for every plan; a training call (call.py) applies it, then runs the
epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import fx

from aotgrad.runtime.backward import BackwardVariants, backward_function, backward_steps, tangent_layout
from aotgrad.runtime.boxed import as_boxed
from aotgrad.runtime.forward import forward_function


@dataclass
class RuntimePlan:
    forward: Callable
    backward: Callable | None
    num_forward_outputs: int
    num_inputs: int
    tangent_sources: list[int]
    tangent_strides: list[tuple]
    grad_inputs: list[int]
    differentiable: list[bool]  # per forward output: can a gradient flow into it
    backward_errors: dict[int, str] = field(default_factory=dict)  # output -> eager's error if a grad comes
    detached_inputs: tuple[int, ...] = ()  # require grad but get none: no edge to them
    num_saved_sizes: int = 0  # the last saved values are sizes (ints; dynamic shapes), not tensors
    # the backward graph and its variants for calls where some outputs get no grad
    variants: BackwardVariants | None = None
    saved_outputs: tuple[int, ...] = ()  # saved tensors the forward also returns as outputs
    repeated_outputs: tuple[int, ...] = ()  # forward outputs the graph returns an earlier one's value for
    # forward results (outputs, then saved) eager holds through `.data`: a version counter of
    # their own (see forward.own_counters); and saved ones that are a written input's new value read
    # through `.data` in eager, or views of one: (result index, input index, None or the new
    # value's result index), saved as that input's memory or the same view of it
    own_counter_results: tuple[int, ...] = ()
    saved_from_inputs: tuple[tuple[int, int, int | None], ...] = ()

    def __post_init__(self):
        self.tangent_strides = [tangent_layout(stride) for stride in self.tangent_strides]
        self.forward = as_boxed(self.forward)
        self.backward = as_boxed(self.backward) if self.backward is not None else None
        # the backward graph's aten ops can go into a compiled-autograd graph: not if it calls out
        # (a `trace_wrapped` hook, whose function must run on every backward)
        graph = self.backward_graph
        self.backward_inlinable = graph is not None and not any(
            type(n.target).__name__ == "TraceWrapped" for n in graph.graph.nodes)
        self.backward_steps = backward_steps(self)
        self.run_forward = forward_function(self)  # CompiledFunction.forward's body, for this plan
        self.run_backward = backward_function(self)  # and its backward's

    @property
    def backward_graph(self) -> fx.GraphModule | None:
        return self.variants.graph if self.variants is not None else None


class CompiledFunction(torch.autograd.Function):
    """forward: run the compiled forward, save what the backward needs.
    backward: run the compiled backward on saved values and tangents.

    Each runs the plan's steps (runtime/forward.py, runtime/backward.py), lowered to
    straight-line code where they have it, else interpreted; the lowered backward covers
    calls where every output got a gradient and no graph of the backward is recorded, and
    hands the others to `backward.general_backward`."""

    @staticmethod
    def forward(ctx, plan: RuntimePlan, *args):
        return plan.run_forward(ctx, args)

    @staticmethod
    def backward(ctx, *grads):
        return ctx.plan.run_backward(ctx, grads)


# autograd.Function.apply without its Python layer (argument binding for setup_context,
# functorch's unwrapping, aotgrad's compiled-autograd bookkeeping): the generated wrappers
# call it when no functorch transform is active
fast_apply = super(torch.autograd.Function, CompiledFunction).apply
