"""CompiledFunction's backward as steps: refuse gradients eager refuses, choose the backward
for the gradients given, put the tangents in the traced layout, call the compiled backward,
hand each input its gradient.

In: a RuntimePlan (runtime/function.py) and the incoming gradients. Out: `backward_function(plan)`,
`run_backward(ctx, grads)` for `CompiledFunction.backward`, and `general_backward(ctx, grads)`,
the steps interpreted. The steps run on a `BackwardEnv`; compiled autograd's capture runs the
same steps on one of its own (`BackwardEnv`'s methods are where the two differ: where the saved
values come from and how the graph is called), so the backward is said once.

The lowered code is the straight path, taken when every output got a gradient, the layouts
are static and no graph of the backward is being recorded (create_graph); other calls take
`general_backward`. A backward of two outputs lowers to:

    def run_backward(ctx, grads):
        if grad_enabled() or grads[0] is None or grads[1] is None:
            return general_backward(ctx, grads)
        t0 = grads[0]
        if t0.stride() != c0 and t0.numel() > 1:
            t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
        t1 = ...
        args = [*ctx.saved_tensors, t0, t1]
        del t0, t1
        ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
        results = backward(args)
        return (None, results[0], None)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import fx

from aotgrad import compat
from aotgrad.analysis import is_dense_layout
from aotgrad.runtime.boxed import as_boxed
from aotgrad.runtime.lower import Code, describe, lower, tuple_of

DOUBLE_BACKWARD_MESSAGE = (
    "torch.compile with aot_autograd does not currently support double backward. "
    "aotgrad compiled this backward ahead of time as one opaque graph, so it cannot be "
    "differentiated again. To continue: compute higher-order gradients outside the compiled "
    "function (run the function eagerly for that step), or use torch.func transforms eagerly.")


# -- the variants for missing gradients -------------------------------------------------

@dataclass(frozen=True)
class BackwardVariant:
    """A backward compiled for one pattern of missing tangents, and which of its inputs
    (saved values first, in order) it reads: eager's engine skips the backward of an
    output that got no gradient, so a saved tensor only that backward reads may have been
    modified in place since the forward without an error."""

    run: Callable
    reads: tuple[bool, ...]


@dataclass
class BackwardVariants:
    """The backward graph and its variants for calls where some outputs got no gradient:
    `graph_without(absent)`, the graph that runs only what the given tangents reach (made by
    `surgery`, which the pipeline gives: the runtime does no partitioning), and
    `compiled_without(absent)`, that graph compiled by `compiler`, on first use."""

    graph: fx.GraphModule
    surgery: Callable[[fx.GraphModule, set], fx.GraphModule | None]
    compiler: Callable
    _compiled: dict = field(default_factory=dict)

    def graph_without(self, absent: tuple[int, ...]) -> fx.GraphModule | None:
        return self.surgery(self.graph, set(absent))

    def compiled_without(self, absent: tuple[int, ...]) -> BackwardVariant | None:
        """None if there is no such variant (the whole backward runs, with zeros)."""
        if absent not in self._compiled:
            variant = None
            gm = self.graph_without(absent)
            if gm is not None:
                placeholders = list(gm.graph.find_nodes(op="placeholder"))
                vals = [n.meta.get("val") for n in placeholders]
                reads = tuple(bool(n.users) for n in placeholders)
                variant = BackwardVariant(as_boxed(self.compiler(gm, vals)), reads)
            self._compiled[absent] = variant
        return self._compiled[absent]


# -- where the steps run -----------------------------------------------------------------

class BackwardEnv:
    """The backward's values for one call of a real backward, named as the generated code's
    locals, and what the steps ask of where they run: `refuse` (eager's error), `choose` (the
    backward for the absent tangents), `read_saved`, `call`."""

    __slots__ = ("ctx", "grads", "plan", "absent", "backward", "reads", "tangents", "results", "input_grads")

    def __init__(self, ctx, grads: tuple):
        self.ctx, self.grads, self.plan = ctx, grads, ctx.plan
        self.absent: tuple[int, ...] = ()
        self.backward: Callable = self.plan.backward
        self.reads: tuple[bool, ...] | None = None  # a variant's: which saved tensors it reads
        self.tangents: list | None = None
        self.results: Any = None
        self.input_grads: list | None = None

    def refuse(self, message: str) -> None:
        raise RuntimeError(message)

    def choose(self, absent: tuple[int, ...]) -> None:
        """The variant that runs only what the given gradients reach; without one, the whole
        backward with zeros for the absent tangents."""
        variants = self.plan.variants
        variant = variants.compiled_without(absent) if absent and variants is not None else None
        if variant is not None:
            self.backward, self.absent, self.reads = variant.run, absent, variant.reads

    def read_saved(self) -> tuple:
        return self.ctx.saved_tensors if self.reads is None else saved_tensors_read(self.ctx, self.reads)

    def call(self, args: list) -> Any:
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in args):
            return BackwardOnce.apply(self.backward, *args)  # create_graph: the backward's own graph is recorded
        self.ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
        return self.backward(args)


# -- the steps -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RefuseGradients:
    """A gradient into an output that cannot take one raises eager's error (`messages`:
    output index -> message)."""

    messages: dict[int, str]

    def run(self, env: BackwardEnv) -> None:
        for j, message in self.messages.items():
            if env.grads[j] is not None:
                env.refuse(message)

    def emit(self, code: Code) -> bool:
        for j, message in self.messages.items():
            code(f"    if grads[{j}] is not None:")
            code(f"        raise RuntimeError({code.const(message)})")
        return True


@dataclass(frozen=True)
class ChooseVariant:
    """Which tangents are absent (`sources`: the output each tangent is the gradient of; one
    with no gradient is absent), and the backward for them (`BackwardEnv.choose`). The
    straight code takes the whole backward: a call with a gradient missing, or recording the
    backward's graph (create_graph), is interpreted instead (`general_backward`)."""

    sources: tuple[int, ...]

    def run(self, env: BackwardEnv) -> None:
        absent = tuple(k for k, j in enumerate(self.sources) if env.grads[j] is None)
        if absent:
            env.choose(absent)

    def emit(self, code: Code) -> bool:
        code.const(general_backward, "general_backward")
        code.const(torch.is_grad_enabled, "grad_enabled")
        missing = " or ".join(f"grads[{j}] is None" for j in self.sources)
        code(f"    if grad_enabled(){' or ' + missing if missing else ''}:")
        code("        return general_backward(ctx, grads)")
        return True


@dataclass(frozen=True)
class PrepareTangents:
    """Each present tangent in the layout the backward was traced with (`coerce_tangent`),
    zeros for an absent one the chosen backward still takes."""

    sources: tuple[int, ...]
    layouts: tuple  # per tangent: strides, or a DenseOrder when they are symbolic

    def run(self, env: BackwardEnv) -> None:
        out_meta, grads, absent = env.ctx.out_meta, env.grads, env.absent
        env.tangents = [coerce_tangent(grads[j], out_meta[j], layout)
                        for k, (j, layout) in enumerate(zip(self.sources, self.layouts)) if k not in absent]

    def emit(self, code: Code) -> bool:
        if not all(isinstance(layout, tuple) for layout in self.layouts):
            return False  # symbolic layouts (dynamic shapes): made per call
        for k, (j, stride) in enumerate(zip(self.sources, self.layouts)):
            code(f"    t{k} = grads[{j}]")
            code(f"    if t{k}.stride() != {code.const(stride)} and t{k}.numel() > 1:")
            code(f"        t{k} = {code.const(coerce_tangent, 'coerce_tangent')}(t{k}, ctx.out_meta[{j}], "
                 f"{code.const(stride)})")
        return True


@dataclass(frozen=True)
class CallBackward:
    """The backward on the saved tensors, the saved sizes and the tangents; nothing here keeps
    them alive through the call, so the graph frees each after its last use."""

    backward: Callable
    tangents: int
    sizes: bool  # the forward saved sizes (dynamic shapes)

    def run(self, env: BackwardEnv) -> None:
        args = [*env.read_saved(), *env.ctx.saved_sizes, *env.tangents]
        env.tangents = None
        env.results = env.call(args)

    def emit(self, code: Code) -> bool:
        tangents = [f"t{k}" for k in range(self.tangents)]
        sizes = ", *ctx.saved_sizes" if self.sizes else ""
        code(f"    args = [*ctx.saved_tensors{sizes}{''.join(', ' + t for t in tangents)}]")
        if tangents:
            code(f"    del {', '.join(tangents)}")
        code("    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes")
        code(f"    results = {code.const(self.backward, 'backward')}(args)")
        return True


@dataclass(frozen=True)
class ScatterGrads:
    """The backward's results are the gradients of the inputs at `grad_inputs`; the others get
    None. (The Function's backward answers None first, for its plan argument.)"""

    inputs: int
    grad_inputs: tuple[int, ...]

    def run(self, env: BackwardEnv) -> None:
        input_grads: list[Any] = [None] * self.inputs
        for k, i in enumerate(self.grad_inputs):
            input_grads[i] = env.results[k]
        env.input_grads = input_grads

    def emit(self, code: Code) -> bool:
        grads = ["None"] * (self.inputs + 1)  # the plan's slot first
        for k, i in enumerate(self.grad_inputs):
            grads[i + 1] = f"results[{k}]"
        code(f"    return {tuple_of(grads)}")
        return True


def backward_steps(plan) -> tuple:
    """The backward's steps for `plan`."""
    sources = tuple(plan.tangent_sources)
    steps: list = [RefuseGradients(dict(plan.backward_errors))] if plan.backward_errors else []
    steps += [ChooseVariant(sources), PrepareTangents(sources, tuple(plan.tangent_strides)),
              CallBackward(plan.backward, len(sources), bool(plan.num_saved_sizes)),
              ScatterGrads(plan.num_inputs, tuple(plan.grad_inputs))]
    return tuple(steps)


def general_backward(ctx, grads: tuple) -> tuple:
    """The backward for every call: `ctx.plan`'s steps interpreted (lower.interpret's loop,
    written out: this runs on every backward the straight code hands over)."""
    env = BackwardEnv(ctx, grads)
    for step in ctx.plan.backward_steps:
        step.run(env)
    return (None, *env.input_grads)


def backward_function(plan) -> Callable:
    """`run_backward(ctx, grads) -> (None, *input grads)` for `plan`: the steps lowered (the
    straight path, falling back to `general_backward`), else interpreted."""
    steps = plan.backward_steps
    lowered = lower("run_backward", "def run_backward(ctx, grads):", steps, None)
    if lowered is not None:
        return lowered

    def run_backward(ctx, grads):
        return general_backward(ctx, grads)
    run_backward.source = describe("run_backward", steps)
    return run_backward


# -- what the steps call ----------------------------------------------------------------

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


def tangent_layout(stride: tuple) -> tuple | DenseOrder:
    """A traced tangent's strides, or their dense order when they are symbolic."""
    if not any(isinstance(s, torch.SymInt) for s in stride):
        return stride
    # order by the example's strides (a dense layout's order does not depend on the sizes)
    hints = [s.node.hint if isinstance(s, torch.SymInt) else s for s in stride]
    if any(h is None for h in hints):
        return DenseOrder(tuple(reversed(range(len(stride)))))
    return DenseOrder(tuple(sorted(range(len(stride)), key=lambda d: (hints[d], -d))))


def coerce_tangent(grad: torch.Tensor | None, meta: tuple, stride: tuple | DenseOrder) -> torch.Tensor:
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


def saved_tensors_read(ctx, reads: tuple[bool, ...]) -> tuple:
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


class BackwardOnce(torch.autograd.Function):
    """Runs a compiled backward under create_graph=True; differentiating it again raises."""

    @staticmethod
    def forward(ctx, backward: Callable, *inputs):
        return tuple(backward(list(inputs)))

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(DOUBLE_BACKWARD_MESSAGE)
