"""CompiledFunction's forward as steps: run the compiled forward graph, hand out its outputs,
save what the backward reads on the autograd context.

In: a RuntimePlan (runtime/function.py). Out: `forward_function(plan)`, the function
`run_forward(ctx, args) -> outputs` that `CompiledFunction.forward` calls: the steps lowered
to straight-line code (runtime/lower.py), or interpreted. The context attributes the
backward and compiled autograd read (`ctx.plan`, `ctx.output_versions`, `ctx.saved_sizes`,
`ctx.out_meta`) are set by the steps below, in both forms.

A plain forward lowers to (`(x @ w + b).relu()`, one output, the second result saved):

    def run_forward(ctx, args):  # outputs: 1
        results = forward(list(args))
        o0 = results[0]
        if isinstance(o0, Tensor) and o0._base is not None:
            o0 = not_a_view(o0, args)
        ctx.plan = plan
        ctx.save_for_backward(*results[1:len(results)])
        ctx.output_versions = ()
        ctx.saved_sizes = ()
        ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None]
        ctx.set_materialize_grads(False)
        return (o0,)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from aotgrad.runtime.lower import Code, describe, interpret, lower, tuple_of


@dataclass
class ForwardEnv:
    """The forward's values, named as the generated code's locals (`o0, o1, ...` there are
    `outs` here)."""

    ctx: Any
    plan: Any
    args: tuple
    results: list | None = None  # the graph's results: outputs, then saved tensors, then saved sizes
    outs: list | None = None


def _outs(n: int) -> list[str]:
    return [f"o{j}" for j in range(n)]


@dataclass(frozen=True)
class CallGraph:
    """Run the compiled forward graph (called boxed) on the inputs."""

    forward: Callable

    def run(self, env: ForwardEnv) -> None:
        env.results = self.forward(list(env.args))

    def emit(self, code: Code) -> bool:
        code(f"    results = {code.const(self.forward, 'forward')}(list(args))")
        return True


@dataclass(frozen=True)
class OwnCounters:
    """Results eager holds through `.data`, and saved values that are a written input's new
    value: a version counter of their own, or the input's memory (`own_counters`)."""

    results: tuple[int, ...]
    from_inputs: tuple[tuple[int, int, int | None], ...]

    def run(self, env: ForwardEnv) -> None:
        env.results = own_counters(env.results, env.args, self.results, self.from_inputs)

    def emit(self, code: Code) -> bool:
        code(f"    results = {code.const(own_counters, 'own_counters')}(results, args, "
             f"{code.const(self.results)}, {code.const(self.from_inputs)})")
        return True


@dataclass(frozen=True)
class TakeOutputs:
    """The first `count` results are the outputs; one that views a value made inside the
    graph becomes a plain tensor on the same memory (`not_a_view`)."""

    count: int

    def run(self, env: ForwardEnv) -> None:
        env.outs = [not_a_view(r, env.args) for r in env.results[:self.count]]

    def emit(self, code: Code) -> bool:
        for j, name in enumerate(_outs(self.count)):
            code(f"    {name} = results[{j}]")
            code(f"    if isinstance({name}, Tensor) and {name}._base is not None:")
            code(f"        {name} = {code.const(not_a_view, 'not_a_view')}({name}, args)")
        return True


@dataclass(frozen=True)
class Apart:
    """Outputs autograd must tell apart get distinct tensors (`apart`)."""

    differentiable: Sequence[bool]
    repeated: frozenset[int]

    def run(self, env: ForwardEnv) -> None:
        env.outs = list(apart(tuple(env.outs), self.differentiable, self.repeated))

    def emit(self, code: Code) -> bool:
        outs = tuple_of(_outs(len(self.differentiable)))
        code(f"    {outs} = {code.const(apart, 'apart')}({outs}, "
             f"{code.const(self.differentiable)}, {code.const(self.repeated)})")
        return True


@dataclass(frozen=True)
class SaveForBackward:
    """On the context: the plan, the saved tensors (results after the `outputs` outputs, up to
    the `sizes` saved sizes), the versions of saved tensors that are also outputs (a write
    into such an output must trip the backward's check), and the saved sizes."""

    outputs: int
    sizes: int
    saved_outputs: tuple[int, ...]

    def run(self, env: ForwardEnv) -> None:
        ctx, results, n = env.ctx, env.results, self.outputs
        k = len(results) - self.sizes
        ctx.plan = env.plan
        ctx.save_for_backward(*results[n:k])
        ctx.output_versions = [results[n + i]._version for i in self.saved_outputs] if self.saved_outputs else ()
        ctx.saved_sizes = results[k:] if self.sizes else ()

    def emit(self, code: Code) -> bool:
        n = self.outputs
        k = f"len(results) - {self.sizes}" if self.sizes else "len(results)"
        code("    ctx.plan = plan")
        code(f"    ctx.save_for_backward(*results[{n}:{k}])")
        if self.saved_outputs:
            versions = ", ".join(f"results[{n + i}]._version" for i in self.saved_outputs)
            code(f"    ctx.output_versions = [{versions}]")
        else:
            code("    ctx.output_versions = ()")
        code(f"    ctx.saved_sizes = results[{k}:]" if self.sizes else "    ctx.saved_sizes = ()")
        return True


@dataclass(frozen=True)
class RecordOutputMeta:
    """Each output's shape, dtype and device (`ctx.out_meta`): the backward makes a missing
    gradient's zeros, and a tangent's layout, from them."""

    count: int

    def run(self, env: ForwardEnv) -> None:
        env.ctx.out_meta = [(o.shape, o.dtype, o.device) if isinstance(o, torch.Tensor) else None for o in env.outs]

    def emit(self, code: Code) -> bool:
        meta = ", ".join(f"({o}.shape, {o}.dtype, {o}.device) if isinstance({o}, Tensor) else None"
                         for o in _outs(self.count))
        code(f"    ctx.out_meta = [{meta}]")
        return True


@dataclass(frozen=True)
class MarkNonDifferentiable:
    """The outputs at `outputs` take no gradient (integer results, values written into inputs
    under no_grad, ...)."""

    outputs: tuple[int, ...]

    def run(self, env: ForwardEnv) -> None:
        env.ctx.mark_non_differentiable(*[env.outs[j] for j in self.outputs if isinstance(env.outs[j], torch.Tensor)])

    def emit(self, code: Code) -> bool:
        code(f"    ctx.mark_non_differentiable(*[o for o in {tuple_of([f'o{j}' for j in self.outputs])} "
             "if isinstance(o, Tensor)])")
        return True


@dataclass(frozen=True)
class GradsMayBeNone:
    """The backward gets None for an output no gradient reached, not zeros: it then runs only
    what the given gradients reach, or makes the zeros itself in the traced layout."""

    def run(self, env: ForwardEnv) -> None:
        env.ctx.set_materialize_grads(False)

    def emit(self, code: Code) -> bool:
        code("    ctx.set_materialize_grads(False)")
        return True


def forward_steps(plan) -> tuple:
    """The forward's steps for `plan`, only those it needs."""
    n = plan.num_forward_outputs
    steps: list = [CallGraph(plan.forward)]
    if plan.own_counter_results or plan.saved_from_inputs:
        steps.append(OwnCounters(plan.own_counter_results, plan.saved_from_inputs))
    steps.append(TakeOutputs(n))
    if not all(plan.differentiable) or plan.repeated_outputs:
        steps.append(Apart(plan.differentiable, frozenset(plan.repeated_outputs)))
    steps += [SaveForBackward(n, plan.num_saved_sizes, tuple(plan.saved_outputs)), RecordOutputMeta(n)]
    fixed = tuple(j for j, d in enumerate(plan.differentiable) if not d)
    if fixed:
        steps.append(MarkNonDifferentiable(fixed))
    steps.append(GradsMayBeNone())
    return tuple(steps)


def forward_function(plan) -> Callable:
    """`run_forward(ctx, args) -> outputs` for `plan`: the steps lowered, else interpreted."""
    steps = forward_steps(plan)
    n = plan.num_forward_outputs
    lowered = lower("run_forward", f"def run_forward(ctx, args):  # outputs: {n}", steps,
                    f"    return {tuple_of(_outs(n))}", {"plan": plan, "Tensor": torch.Tensor})
    if lowered is not None:
        return lowered

    def run_forward(ctx, args):
        return tuple(interpret(steps, ForwardEnv(ctx, plan, args)).outs)
    run_forward.source = describe("run_forward", steps)
    return run_forward


# -- what the steps call ----------------------------------------------------------------

def apart(outs: tuple, differentiable: Sequence[bool], repeated: Sequence[int] = ()) -> tuple:
    """outs, where one tensor is returned at two places autograd must tell apart: as a
    differentiable output and as one that is not (a user output that is also a mutated input's
    new value, `a.data.copy_(b)`), or at the `repeated` places, where the graph returns one
    value for two outputs with histories of their own (an alias written through `detach()`
    and the input it aliases, both returned). The second place gets an alias (`detach()`):
    marking it non-differentiable would mark both, and autograd gives one tensor one output
    number, so one output's gradient would arrive as the other's (and the first get none)."""
    wanted = {id(o) for o, d in zip(outs, differentiable) if d and isinstance(o, torch.Tensor)}
    outs = tuple(o.detach() if not d and id(o) in wanted else o for o, d in zip(outs, differentiable))
    if repeated:
        outs = tuple(o.detach() if j in repeated and isinstance(o, torch.Tensor) else o for j, o in enumerate(outs))
    return outs


def own_counters(results: Sequence[Any], args: tuple, own: Sequence[int],
                 from_inputs: Sequence[tuple[int, int, int | None]]) -> list:
    """results, where eager holds a value through `.data` (`v = a.data`, saved by `v * w` or
    returned): the same memory with a version counter of its own, so that a write the caller
    makes after the call into the tensor it came from trips no version check of the
    backward, which reads the written values unchecked, as eager's does. One result returned
    at two flagged places (saved and returned) gets one counter: a write into the output
    trips the saved one's check, as in eager. A saved `.data` of a written input's new value
    is that input's own memory (eager's alias of it), and a saved view of one the same view of
    that memory, when the layouts agree."""
    results = list(results)
    made: dict[int, torch.Tensor] = {}
    for r in own:
        t = results[r]
        if isinstance(t, torch.Tensor):
            if id(t) not in made:
                made[id(t)] = t.data
            results[r] = made[id(t)]
    for r, i, viewed in from_inputs:
        t, x = results[r], args[i]
        if viewed is None:
            if x.shape == t.shape and x.stride() == t.stride() and x.dtype == t.dtype:
                results[r] = x.data
            continue
        # a view of the new value (`a.data[1:]`): the same view of the input's own memory
        new = results[viewed]
        if (x.shape == new.shape and x.stride() == new.stride() and x.dtype == new.dtype == t.dtype
                and t.untyped_storage().data_ptr() == new.untyped_storage().data_ptr()):
            offset = x.storage_offset() + t.storage_offset() - new.storage_offset()
            results[r] = x.data.as_strided(t.shape, t.stride(), offset)
    return results


def not_a_view(out: Any, inputs: tuple) -> Any:
    """An output that views a value made inside the graph (a written intermediate comes out
    as `t(add(t(v), 1))`) as a plain tensor on the same memory: autograd would mark a view
    returned by a Function as made inside it and reject in-place writes through it, and
    through views of it, that eager accepts. `detach()` keeps the version counter, so a
    write to the output still trips the check of a saved value that shares its memory."""
    if isinstance(out, torch.Tensor) and out._base is not None and not any(out._base is a for a in inputs):
        return out.detach()
    return out
