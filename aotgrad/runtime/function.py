"""The autograd.Function that runs a compiled forward/backward pair, and the runtimes.

`RuntimePlan` is the data: compiled graphs (called boxed: one list of arguments,
see boxed.py), how many forward outputs, which get tangents (and in what layout),
which inputs get grads. `CompiledFunction` is one
module-level Function for every plan; `TrainingRuntime` / `InferenceRuntime`
call it (or the inference graph) and then the epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from aotgrad import compat
from aotgrad.analysis import is_dense_layout
from aotgrad.runtime.boxed import as_boxed
from aotgrad.runtime.epilogue import Epilogue
from aotgrad.runtime.forward import forward_function

DOUBLE_BACKWARD_MESSAGE = (
    "torch.compile with aot_autograd does not currently support double backward. "
    "aotgrad compiled this backward ahead of time as one opaque graph, so it cannot be "
    "differentiated again. To continue: compute higher-order gradients outside the compiled "
    "function (run the function eagerly for that step), or use torch.func transforms eagerly.")


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
    # the backward graph and its compiler, for the variants of calls where some outputs get no grad
    backward_graph: Any = None
    backward_compiler: Callable | None = None
    saved_outputs: tuple[int, ...] = ()  # saved tensors the forward also returns as outputs
    repeated_outputs: tuple[int, ...] = ()  # forward outputs the graph returns an earlier one's value for
    # forward results (outputs, then saved) eager holds through `.data`: a version counter of
    # their own (see forward.own_counters); and saved ones that are a written input's new value read
    # through `.data` in eager, or views of one: (result index, input index, None or the new
    # value's result index), saved as that input's memory or the same view of it
    own_counter_results: tuple[int, ...] = ()
    saved_from_inputs: tuple[tuple[int, int, int | None], ...] = ()
    _partial: dict = field(default_factory=dict)

    def backward_without(self, absent: tuple[int, ...]) -> BackwardVariant | None:
        """The compiled backward for calls where the tangents at `absent` are missing (their
        outputs got no gradient), built on first use; None if there is no such variant."""
        if absent not in self._partial:
            from aotgrad.partition.absent_tangents import without_tangents  # graph surgery, once per pattern
            variant = None
            if self.backward_graph is not None and self.backward_compiler is not None:
                gm = without_tangents(self.backward_graph, set(absent))
                if gm is not None:
                    placeholders = list(gm.graph.find_nodes(op="placeholder"))
                    vals = [n.meta.get("val") for n in placeholders]
                    reads = tuple(bool(n.users) for n in placeholders)
                    variant = BackwardVariant(as_boxed(self.backward_compiler(gm, vals)), reads)
            self._partial[absent] = variant
        return self._partial[absent]

    def __post_init__(self):
        from aotgrad.runtime.wrapper import backward_code

        self.tangent_strides = [_layout(stride) for stride in self.tangent_strides]
        self.forward = as_boxed(self.forward)
        self.backward = as_boxed(self.backward) if self.backward is not None else None
        # the backward graph's aten ops can go into a compiled-autograd graph: not if it calls out
        # (a `trace_wrapped` hook, whose function must run on every backward)
        graph = self.backward_graph
        self.backward_inlinable = graph is not None and not any(
            type(n.target).__name__ == "TraceWrapped" for n in graph.graph.nodes)
        self.run_forward = forward_function(self)  # CompiledFunction.forward's body, for this plan
        self.run_backward = backward_code(self)  # and its backward's


@dataclass(frozen=True)
class BackwardVariant:
    """A backward compiled for one pattern of missing tangents, and which of its inputs
    (saved values first, in order) it reads: eager's engine skips the backward of an
    output that got no gradient, so a saved tensor only that backward reads may have been
    modified in place since the forward without an error."""

    run: Callable
    reads: tuple[bool, ...]


@dataclass(frozen=True)
class DenseOrder:
    """A dense layout given by its dims from innermost to outermost, for traced strides that
    are symbolic (dynamic shapes): the strides follow from each call's real sizes."""

    inner_to_outer: tuple[int, ...]

    def strides(self, shape) -> tuple[int, ...]:
        strides = [0] * len(shape)
        step = 1
        for d in self.inner_to_outer:
            strides[d] = step
            step *= max(shape[d], 1)
        return tuple(strides)


def _layout(stride: tuple) -> tuple | DenseOrder:
    if not any(isinstance(s, torch.SymInt) for s in stride):
        return stride
    # order by the example's strides (a dense layout's order does not depend on the sizes)
    hints = [s.node.hint if isinstance(s, torch.SymInt) else s for s in stride]
    if any(h is None for h in hints):
        return DenseOrder(tuple(reversed(range(len(stride)))))
    return DenseOrder(tuple(sorted(range(len(stride)), key=lambda d: (hints[d], -d))))


def _coerce_tangent(grad: torch.Tensor | None, meta: tuple, stride: tuple | DenseOrder) -> torch.Tensor:
    """The incoming grad in the layout the backward was traced with (zeros if None)."""
    shape, dtype, device = meta
    if isinstance(stride, DenseOrder):
        stride = stride.strides(shape)
    if grad is None:
        return torch.zeros(shape, dtype=dtype, device=device).as_strided(shape, stride) \
            if is_dense_layout(shape, stride) else torch.zeros(shape, dtype=dtype, device=device)
    if tuple(grad.stride()) == tuple(stride) or grad.numel() <= 1:
        return grad
    dense = torch.empty_strided(grad.shape, stride, dtype=grad.dtype, device=grad.device)
    dense.copy_(grad)
    return dense


class CompiledFunction(torch.autograd.Function):
    """forward: run the compiled forward, save what the backward needs.
    backward: run the compiled backward on saved values and tangents.

    The forward runs the plan's forward steps (runtime/forward.py), lowered to code or
    interpreted; the backward runs code generated for the plan (runtime/wrapper.py: only
    what that graph needs), and `general_backward` is the backward for every case, taken when
    a tangent is missing or the backward's own graph is recorded (create_graph)."""

    @staticmethod
    def forward(ctx, plan: RuntimePlan, *args):
        return plan.run_forward(ctx, args)

    @staticmethod
    def backward(ctx, *grads):
        return ctx.plan.run_backward(ctx, grads)

    @staticmethod
    def general_backward(ctx, grads: tuple):
        plan: RuntimePlan = ctx.plan
        for j, message in plan.backward_errors.items():
            if grads[j] is not None:
                raise RuntimeError(message)
        absent = tuple(k for k, j in enumerate(plan.tangent_sources) if grads[j] is None)
        variant = plan.backward_without(absent) if absent else None  # only what the given grads reach
        if variant is None:
            backward, absent, saved = plan.backward, (), ctx.saved_tensors  # missing grads become zeros
        else:
            backward, saved = variant.run, _saved_tensors_read(ctx, variant.reads)
        tangents = [_coerce_tangent(grads[j], ctx.out_meta[j], stride)
                    for k, (j, stride) in enumerate(zip(plan.tangent_sources, plan.tangent_strides))
                    if k not in absent]
        args = [*saved, *ctx.saved_sizes, *tangents]
        del saved
        del tangents
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in args):
            results = _BackwardOnce.apply(backward, *args)
        else:
            ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
            results = backward(args)
        input_grads: list[Any] = [None] * plan.num_inputs
        for k, i in enumerate(plan.grad_inputs):
            input_grads[i] = results[k]
        return (None, *input_grads)


# autograd.Function.apply without its Python layer (argument binding for setup_context,
# functorch's unwrapping, aotgrad's compiled-autograd bookkeeping): the generated wrappers
# call it when no functorch transform is active
fast_apply = super(torch.autograd.Function, CompiledFunction).apply


def _saved_tensors_read(ctx, reads: tuple[bool, ...]) -> tuple:
    """ctx's saved tensors, with autograd's check that none was modified in place since the
    forward made only for those the backward reads (`reads[i]`), as eager's engine checks
    only the nodes it runs. Unread ones are passed unchecked (the graph ignores them)."""
    try:
        return ctx.saved_tensors  # the common case: nothing was modified
    except RuntimeError as e:
        if "modified by an inplace operation" not in str(e) or torch.is_grad_enabled():
            raise  # freed by an earlier backward; or create_graph, where tensors need their history
        error = e
    raw = ctx._raw_saved_tensors
    output_versions = dict(zip(ctx.plan.saved_outputs, ctx.output_versions))
    saved = []
    for i, entry in enumerate(raw):
        if not reads[i]:
            saved.append(entry.data)
        elif i in output_versions:  # autograd unpacks a saved output only with its node at hand
            tensor = entry.data
            if tensor._version != output_versions[i]:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: an output of the compiled function of shape {list(tensor.shape)} is at version "
                    f"{tensor._version}; expected version {output_versions[i]} instead.")
            saved.append(tensor)
        else:
            saved.append(compat.unpack_saved(entry, error))  # autograd's own check and message
    return tuple(saved)


class _BackwardOnce(torch.autograd.Function):
    """Runs a compiled backward under create_graph=True; differentiating it again raises."""

    @staticmethod
    def forward(ctx, backward: Callable, *inputs):
        return tuple(backward(list(inputs)))

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(DOUBLE_BACKWARD_MESSAGE)


class TrainingRuntime:
    """The compiled forward and backward behind `CompiledFunction`. `enable_grad`: the function
    was traced under no_grad and turns grad mode on inside, so its outputs are connected to
    the autograd graph even when it is called under no_grad."""

    def __init__(self, plan: RuntimePlan, epilogue: Epilogue, enable_grad: bool = False):
        self.plan, self.epilogue, self.enable_grad = plan, epilogue, enable_grad

    def __call__(self, args: Sequence[torch.Tensor]) -> list[Any]:
        applied = args
        if self.plan.detached_inputs:
            applied = list(args)
            for i in self.plan.detached_inputs:
                applied[i] = applied[i].detach()
        if self.enable_grad and not torch.is_grad_enabled():
            with torch.enable_grad():
                outs = CompiledFunction.apply(self.plan, *applied)
        else:
            outs = CompiledFunction.apply(self.plan, *applied)
        return self.epilogue.run(args, outs)


class InferenceRuntime:
    """The compiled forward alone: no input requires grad, no gradient reaches a leaf.

    `dead_ends`: forward outputs that require grad in eager anyway, with a grad_fn whose
    backward reaches nothing (an op on a view taken under no_grad of a leaf made inside:
    autograd gives such a view no edge). They get one too (`_DeadEnd`)."""

    def __init__(self, forward: Callable, epilogue: Epilogue, dead_ends: Sequence[int] = ()):
        self.forward, self.epilogue, self.dead_ends = as_boxed(forward), epilogue, list(dead_ends)

    def __call__(self, args: Sequence[torch.Tensor]) -> list[Any]:
        with torch.no_grad():
            outs = self.forward(list(args))
        if self.dead_ends:
            outs = list(outs)
            with torch.enable_grad():
                for j in self.dead_ends:
                    outs[j] = _DeadEnd.apply(_DEAD_END_ANCHOR, outs[j])
        return self.epilogue.run(args, outs)


class _DeadEnd(torch.autograd.Function):
    """`out` requiring grad, with a backward that sends nothing anywhere."""

    @staticmethod
    def forward(ctx, anchor, out):
        return out.detach()  # (an alias, not a view: in-place writes into it stay allowed)

    @staticmethod
    def backward(ctx, grad):
        return None, None


_DEAD_END_ANCHOR = torch.zeros((), requires_grad=True)  # makes _DeadEnd's output require grad
