"""The joint forward+backward program, traced in one pass.

In: a flat function `fn(*primals) -> flat outputs` and fake primals.
Out: a `TracedJoint`: one non-functional graph
    joint(*primals, *tangents) -> (*forward_outputs, *mutated_inputs, *grads)
and the facts the later stages need (what each output is, which inputs were
mutated, which forward outputs have tangents, which primals get a grad).

The forward runs once under the recorder with autograd on; then the autograd
engine itself runs the backward (`torch.autograd.grad`) under the same
recorder, so the backward ops are recorded with the forward op they
differentiate. With `trace_joint=False` only the forward is traced (the
inference graph). Views and in-place ops are still in the graph; the
functionalize stage removes them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from aotgrad.analysis import (ForwardAnalysis, InputInfo, InputState, analyse_inputs, analyse_outputs,
                              is_dense_layout, is_new_leaf, overlaps_itself)
from aotgrad.errors import UnsupportedError, reject_sparse_outputs, translate_trace_error
from aotgrad.trace import GraphRecorder


@dataclass
class TracedJoint:
    gm: fx.GraphModule
    analysis: ForwardAnalysis
    num_primals: int
    num_forward_outputs: int         # forward_outputs + mutated inputs
    tangent_sources: list[int]       # forward output index of each tangent
    tangent_strides: list[tuple]     # layout each tangent was traced with
    grad_inputs: list[int]           # primal index of each grad output
    grad_mode_after: bool            # grad mode the traced code leaves behind
    traced_backward: bool
    # forward output index -> eager's error, for mutated inputs whose backward autograd cannot
    # run (it reads a value the mutation overwrote); raised only if a gradient reaches them
    backward_errors: dict[int, str] = field(default_factory=dict)
    gradless_inputs: list[int] = field(default_factory=list)  # require grad, but the backward gives None


def _is_differentiable(t: torch.Tensor) -> bool:
    return t.requires_grad and not is_new_leaf(t) and (t.is_floating_point() or t.is_complex())


def _dense_strides(t: torch.Tensor) -> tuple:
    """t's strides if they describe a dense, non-overlapping layout; else contiguous ones."""
    if is_dense_layout(t.shape, t.stride()):
        return tuple(t.stride())
    strides, expected = [], 1
    for size in reversed(t.shape):
        strides.append(expected)
        expected *= max(int(size), 1)
    return tuple(reversed(strides))


def _non_leaf_like(leaf: torch.Tensor) -> torch.Tensor:
    """A non-leaf equal to `leaf`, differentiable to it, laid out like it (sizes, strides
    and storage offset: code may read them, e.g. through `as_strided`).

    A compact tensor at offset 0 is cloned; another non-overlapping one is copied into a
    fresh storage of the same size with the same layout (not a view of it); an overlapping one (an expanded input)
    cannot be written anyway, so the leaf itself stands in for it.
    """
    if leaf.storage_offset() == 0 and is_dense_layout(leaf.shape, leaf.stride()):
        return leaf.clone()
    if overlaps_itself(leaf):
        return leaf
    storage = torch.empty(leaf.untyped_storage().nbytes() // leaf.element_size(), dtype=leaf.dtype,
                          device=leaf.device)
    value = storage.as_strided(leaf.shape, leaf.stride(), leaf.storage_offset()).detach()  # not a view
    value.copy_(leaf)
    return value


def _prepare_primals(recorder: GraphRecorder, primals: Sequence[torch.Tensor], trace_backward: bool):
    """Placeholders for the primals, and the values the traced code sees.

    A primal that requires grad is traced as a fake leaf so autograd can
    differentiate with respect to it. If the real input is not a leaf, the
    code sees a hidden clone of that leaf: in-place ops on non-leaf inputs are
    legal in eager, and the clone keeps them legal without entering the graph.
    """
    leaves, values = [], []
    for i, p in enumerate(primals):
        if trace_backward and p.requires_grad:
            with recorder.fake_mode, torch.enable_grad():
                leaf = p.detach().requires_grad_(True)
                value = leaf if p.is_leaf else _non_leaf_like(leaf)
        else:
            leaf = value = p
        node = recorder.placeholder(f"primals_{i + 1}", value)
        recorder.bind(leaf, node)
        leaves.append(leaf)
        values.append(value)
    return leaves, values


def _backward_errors(forward_outputs: Sequence[torch.Tensor], candidates: Sequence[int],
                     leaves: Sequence[torch.Tensor], fake_mode: FakeTensorMode) -> dict[int, str]:
    """Which of the candidate outputs (mutated inputs' new values) autograd cannot
    differentiate, e.g. after `a.mul_(a)` (mul_'s backward needs the overwritten `a`).

    Eager raises only if a gradient flows there later, so the joint gives them no
    tangent and the runtime raises eager's error if one does.
    """
    errors = {}
    for j in candidates:
        out = forward_outputs[j]
        try:
            with fake_mode:
                torch.autograd.grad([out], leaves, [torch.ones_like(out)], retain_graph=True, allow_unused=True)
        except RuntimeError as e:
            errors[j] = str(e)
    return errors


def _reject_metadata_mutations(inputs: Sequence[InputInfo], fn_name: str) -> None:
    for info in inputs:
        if info.mutates_metadata:
            raise UnsupportedError(
                f"aotgrad cannot compile `{fn_name}`: it changes the shape, strides or requires_grad of "
                f"input {info.index} in place (e.g. `x.t_()`, `x.resize_()`, `x.detach_()`, "
                "`x.requires_grad_()`); the compiled code cannot do that to the caller's tensor. To continue: "
                "return the new tensor (`x.t()`, `x.detach()`) instead of changing the input's metadata, or "
                "do it outside the compiled function.")


def _reraise(e: Exception, fn_name: str, in_backward: bool):
    translated = translate_trace_error(e, fn_name, in_backward=in_backward)
    if translated is e:
        raise e
    raise translated from e


def trace_joint(fn: Callable, primals: Sequence[torch.Tensor], *, fake_mode: FakeTensorMode,
                trace_backward: bool, decompositions: dict | None = None,
                fn_name: str = "fn", outputs_as_returned: bool = False) -> TracedJoint:
    """Trace fn's forward, and its backward if `trace_backward`, into one graph.

    With `outputs_as_returned` (export), the forward outputs are fn's tensor outputs
    exactly as returned, aliases included, instead of the runtime's choice.
    """
    recorder = GraphRecorder(fake_mode, decompositions)
    leaves, values = _prepare_primals(recorder, primals, trace_backward)
    before = [InputState.of(v) for v in values]
    grad_mode = torch.is_grad_enabled()
    try:
        with fake_mode, recorder:
            outs = list(fn(*values))
    except Exception as e:
        _reraise(e, fn_name, in_backward=False)
    finally:
        grad_mode_after = torch.is_grad_enabled()
        torch.set_grad_enabled(grad_mode)

    inputs = analyse_inputs(values, before, [p.is_leaf for p in primals], recorder.written_storages,
                            recorder.unbumped_storages)
    _reject_metadata_mutations(inputs, fn_name)  # before the outputs: their grad_fns would replay views
    reject_sparse_outputs(outs, recorder.node_of, fn_name)
    analysis = analyse_outputs(values, outs, recorder.node_of)
    if outputs_as_returned:
        analysis.forward_outputs = [o for o in outs if isinstance(o, torch.Tensor)]
    analysis.inputs = inputs
    mutated = [info.index for info in analysis.mutated_inputs]
    forward_outputs = analysis.forward_outputs + [values[i] for i in mutated]
    graph_outputs: list[Any] = list(forward_outputs)

    tangent_sources, tangent_strides, grad_inputs, backward_errors, gradless_inputs = [], [], [], {}, []
    if trace_backward:
        differentiable = [
            j for j, t in enumerate(forward_outputs)
            if _is_differentiable(t)
            and (j < len(analysis.forward_outputs)
                 or analysis.inputs[mutated[j - len(analysis.forward_outputs)]].mutation_visible_to_autograd)
        ]
        grad_inputs = [i for i, p in enumerate(primals) if p.requires_grad]
        backward_errors = _backward_errors(forward_outputs, differentiable[len(analysis.forward_outputs):],
                                           [leaves[i] for i in grad_inputs], fake_mode)
        differentiable = [j for j in differentiable if j not in backward_errors]
        tangents = []
        for n, j in enumerate(differentiable):
            out = forward_outputs[j]
            stride = _dense_strides(out)
            with fake_mode:
                tangent = torch.empty_strided(out.shape, stride, dtype=out.dtype, device=out.device)
            recorder.placeholder(f"tangents_{n + 1}", tangent)
            tangents.append(tangent)
            tangent_sources.append(j)
            tangent_strides.append(stride)
        grads: Sequence[Any] = [None] * len(grad_inputs)
        if differentiable and grad_inputs:
            recorder.in_backward = True
            try:
                with fake_mode, recorder:
                    grads = torch.autograd.grad(
                        [forward_outputs[j] for j in differentiable], [leaves[i] for i in grad_inputs],
                        tangents, allow_unused=True)
            except Exception as e:
                _reraise(e, fn_name, in_backward=True)
            finally:
                recorder.in_backward = False
        graph_outputs += list(grads)
        gradless_inputs = [i for i, g in zip(grad_inputs, grads) if g is None]

    recorder.graph.output(tuple(recorder.node_of(o) if o is not None else None for o in graph_outputs))
    root = torch.nn.Module()
    for name, value in recorder.constants.items():
        setattr(root, name, value)
    gm = fx.GraphModule(root, recorder.graph)
    return TracedJoint(gm, analysis, len(primals), len(forward_outputs), tangent_sources, tangent_strides,
                       grad_inputs, grad_mode_after, trace_backward, backward_errors, gradless_inputs)
