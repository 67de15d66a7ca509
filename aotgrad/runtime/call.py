"""A call of a compiled entry as steps: prepare the inputs, run the compiled Function (or the
inference graph), run the epilogue.

In: the compiled pieces (a RuntimePlan or an inference graph, the Epilogue, what the trace
learned about the inputs). Out: a `CompiledCall`, `call(flat inputs) -> flat user outputs`,
which interprets its steps; `training_call` and `inference_call` build them. The front's
generated call for an entry (front/functions.py) writes the same steps out, after its input
checks (front/keys.py), where each has straight code.

In generated code, input i is the local `a{i}`, the compiled forward's outputs `outs` and the
user outputs `return_values`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from aotgrad.runtime.boxed import as_boxed
from aotgrad.runtime.epilogue import Epilogue
from aotgrad.runtime.function import CompiledFunction, RuntimePlan, fast_apply
from aotgrad.runtime.lower import Code, emit_all, interpret


class CallEnv:
    """A call's values: its inputs (`args`), the compiled forward's outputs, the user outputs."""

    __slots__ = ("args", "outs", "return_values")

    def __init__(self, args: Sequence[torch.Tensor]):
        self.args = args
        self.outs: Any = None
        self.return_values: list = []


class CompiledCall:
    """`call(args) -> flat user outputs`: the steps interpreted. `plan` (training) and
    `epilogue` are kept for tools and tests."""

    def __init__(self, steps: tuple, epilogue: Epilogue, plan: RuntimePlan | None = None):
        self.steps, self.epilogue, self.plan = steps, epilogue, plan

    def __call__(self, args: Sequence[torch.Tensor]) -> list[Any]:
        return interpret(self.steps, CallEnv(args)).return_values


# -- the steps -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequireGrad:
    """`requires_grad_()` on the inputs the function calls it on (which did not require grad):
    the Function then routes their gradients to them, as eager's ops after the call did."""

    inputs: tuple[int, ...]

    def run(self, env: CallEnv) -> None:
        for i in self.inputs:
            env.args[i].requires_grad_()

    def emit(self, code: Code) -> bool:
        return False


@dataclass(frozen=True)
class InnerLeaves:
    """A fresh stand-in for each leaf the function makes itself (`joint.InnerLeaf`), after the
    caller's inputs, so that their gradients accumulate there, as in eager."""

    leaves: tuple

    def run(self, env: CallEnv) -> None:
        env.args = [*env.args, *(leaf.stand_in() for leaf in self.leaves)]

    def emit(self, code: Code) -> bool:
        return False


@dataclass(frozen=True)
class Apply:
    """The compiled Function on the inputs, those at `detached` detached (they require grad
    but get none: no edge to them); `enable_grad`: the function was traced under no_grad and
    turns grad mode on inside, so its outputs join the autograd graph under no_grad too. The
    generated call skips `autograd.Function.apply`'s Python layer (`fast_apply`) when no
    functorch transform is active and compiled autograd may inline the backward."""

    plan: RuntimePlan
    count: int
    detached: tuple[int, ...]
    enable_grad: bool

    def run(self, env: CallEnv) -> None:
        applied = env.args
        if self.detached:
            applied = list(applied)
            for i in self.detached:
                applied[i] = applied[i].detach()
        if self.enable_grad and not torch.is_grad_enabled():
            with torch.enable_grad():
                env.outs = CompiledFunction.apply(self.plan, *applied)
        else:
            env.outs = CompiledFunction.apply(self.plan, *applied)

    def emit(self, code: Code) -> bool:
        applied = [f"a{i}" for i in range(self.count)]
        for i in self.detached:
            applied[i] = f"d{i}"
            code(f"    d{i} = a{i}.detach()  # requires grad, gets none: no edge to it")
        arguments = f"({code.const(self.plan, 'plan')}{''.join(', ' + a for a in applied)})"
        code.const(CompiledFunction.apply, "apply")
        if self.plan.backward_inlinable:  # (else compiled autograd calls its backward as a custom Function's)
            code.const(fast_apply, "fast_apply")
            code.const(torch._C._are_functorch_transforms_active, "functorch_active")
            call = f"(apply if functorch_active() else fast_apply){arguments}"
        else:
            call = f"apply{arguments}"
        if self.enable_grad:
            code.const(torch.is_grad_enabled, "grad_enabled")
            code("    if not grad_enabled():  # the function turns grad mode on inside")
            code(f"        with {code.const(torch.enable_grad, 'enable_grad')}():")
            code(f"            outs = {call}")
            code("    else:")
            code(f"        outs = {call}")
        else:
            code(f"    outs = {call}")
        return True


@dataclass(frozen=True)
class CallInference:
    """The compiled forward alone, under no_grad: no input requires grad, no gradient reaches
    a leaf."""

    forward: Callable
    count: int

    def run(self, env: CallEnv) -> None:
        with torch.no_grad():
            env.outs = self.forward(list(env.args))

    def emit(self, code: Code) -> bool:
        code(f"    with {code.const(torch.no_grad, 'no_grad')}():")
        code(f"        outs = {code.const(self.forward, 'forward')}([{', '.join(f'a{i}' for i in range(self.count))}])")
        return True


@dataclass(frozen=True)
class DeadEnds:
    """Forward outputs that require grad in eager anyway, with a grad_fn whose backward
    reaches nothing (an op on a view taken under no_grad of a leaf made inside: autograd gives
    such a view no edge). They get one too (`_DeadEnd`)."""

    outputs: tuple[int, ...]

    def run(self, env: CallEnv) -> None:
        outs = list(env.outs)
        with torch.enable_grad():
            for j in self.outputs:
                outs[j] = _DeadEnd.apply(_DEAD_END_ANCHOR, outs[j])
        env.outs = outs

    def emit(self, code: Code) -> bool:
        return False


@dataclass(frozen=True)
class RunEpilogue:
    """The epilogue (runtime/epilogue.py): write back mutated inputs, rebuild outputs. Written
    out where its steps have straight code, else one line running them."""

    epilogue: Epilogue
    count: int

    def run(self, env: CallEnv) -> None:
        env.return_values = self.epilogue.run(env.args, env.outs)

    def emit(self, code: Code) -> bool:
        if not emit_all(code, self.epilogue.steps):
            inputs = ", ".join(f"a{i}" for i in range(self.count))
            code(f"    return_values = {code.const(self.epilogue, 'epilogue')}.run([{inputs}], outs)")
        return True


def training_call(plan: RuntimePlan, epilogue: Epilogue, enable_grad: bool = False,
                  inner_leaves: Sequence = (), made_to_require_grad: Sequence[int] = ()) -> CompiledCall:
    """A call of the compiled forward and backward behind `CompiledFunction` (which takes
    `plan.num_inputs` inputs: the caller's, then the inner leaves' stand-ins)."""
    steps: list = [RequireGrad(tuple(made_to_require_grad))] if made_to_require_grad else []
    if inner_leaves:
        steps.append(InnerLeaves(tuple(inner_leaves)))
    steps += [Apply(plan, plan.num_inputs, tuple(plan.detached_inputs), enable_grad),
              RunEpilogue(epilogue, plan.num_inputs)]
    return CompiledCall(tuple(steps), epilogue, plan)


def inference_call(forward: Callable, epilogue: Epilogue, count: int, dead_ends: Sequence[int] = ()) -> CompiledCall:
    """A call of the compiled forward alone; `count` inputs."""
    steps: list = [CallInference(as_boxed(forward), count)]
    if dead_ends:
        steps.append(DeadEnds(tuple(dead_ends)))
    steps.append(RunEpilogue(epilogue, count))
    return CompiledCall(tuple(steps), epilogue)


class _DeadEnd(torch.autograd.Function):
    """`out` requiring grad, with a backward that sends nothing anywhere."""

    @staticmethod
    def forward(ctx, anchor, out):
        return out.detach()  # (an alias, not a view: in-place writes into it stay allowed)

    @staticmethod
    def backward(ctx, grad):
        return None, None


_DEAD_END_ANCHOR = torch.zeros((), requires_grad=True)  # makes _DeadEnd's output require grad
