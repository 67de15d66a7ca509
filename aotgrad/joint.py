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

Inner leaves: a leaf requiring grad that fn makes itself (`torch.ones(3).requires_grad_()`)
gets gradients in eager from every output computed from it. For the runtime, each one a
gradient can reach becomes one more primal after fn's own (an `InnerLeaf`: the runtime
passes a fresh stand-in leaf there), with its grad among the grads.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef

from aotgrad.analysis import (ForwardAnalysis, InputInfo, InputState, OutputKind, analyse_inputs, analyse_outputs,
                              is_dense_layout, is_new_leaf, overlaps_itself)
from aotgrad.errors import UnsupportedError, reject_sparse_outputs, translate_trace_error
from aotgrad.trace import GraphRecorder
from aotgrad.trace.symbolic import free_symbols


@dataclass(frozen=True)
class InnerLeaf:
    """A leaf requiring grad made inside the traced function, that a gradient reaches.

    The compiled Function takes a stand-in for it (a fresh leaf laid out like it) as one
    more input, after the caller's, and the backward returns the leaf's grad there, so
    `out.backward()` works and accumulates where eager's does. If the function returns the
    leaf (or views of it), the stand-in is returned, holding the leaf's value.
    """

    size: tuple
    stride: tuple
    storage_offset: int
    storage_size: int  # elements
    dtype: torch.dtype
    device: torch.device

    @staticmethod
    def of(t: torch.Tensor) -> "InnerLeaf":
        return InnerLeaf(tuple(t.shape), tuple(t.stride()), t.storage_offset(),
                         t.untyped_storage().nbytes() // t.element_size(), t.dtype, t.device)

    def stand_in(self) -> torch.Tensor:
        """A fresh leaf laid out like the inner leaf (a leaf view, `torch.ones(4)[1:]`, keeps its offset)."""
        if self.storage_offset == 0 and is_dense_layout(self.size, self.stride):
            value = torch.empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device)
        else:
            storage = torch.empty(self.storage_size, dtype=self.dtype, device=self.device)
            value = storage.as_strided(self.size, self.stride, self.storage_offset).detach()  # not a view
        return value.requires_grad_()


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
    inner_leaves: list[InnerLeaf] = field(default_factory=list)  # primals after fn's own, in order
    symbol_sources: dict = field(default_factory=dict)  # dynamic shapes: symbol -> where inputs carry it
    scalar_outputs: list[int] = field(default_factory=list)  # symbolic numbers fn returns (0-d tensors here)
    made_to_require_grad: tuple[int, ...] = ()  # inputs fn calls `requires_grad_()` on (they did not)


def _is_differentiable(t: torch.Tensor) -> bool:
    return t.requires_grad and not is_new_leaf(t) and (t.is_floating_point() or t.is_complex())


def _dense_strides(t: torch.Tensor) -> tuple:
    """t's strides if they describe a dense, non-overlapping layout; else contiguous ones."""
    if is_dense_layout(t.shape, t.stride()):
        return tuple(t.stride())
    strides, expected = [], 1
    for size in reversed(t.shape):
        strides.append(expected)
        expected *= torch.sym_max(size, 1)  # (a symbolic size stays a symbol: no guard on its value)
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

    A primal that does not require grad is traced as a `detach()` of the fake input
    (same storage, not recorded), so what the code does to its autograd state in place
    (`b.copy_(a)` makes `b` require grad) stays off the fake input itself: torch.compile's
    fake mode hands back that same fake for the same real tensor when the graph is traced
    again (with a synthetic base, say), and it must come back as the caller's tensor was.
    """
    leaves, values = [], []
    for i, p in enumerate(primals):
        if trace_backward and p.requires_grad:
            with recorder.fake_mode, torch.enable_grad():
                leaf = p.detach().requires_grad_(True)
                value = leaf if p.is_leaf else _non_leaf_like(leaf)
        elif not p.requires_grad:
            with recorder.fake_mode:
                leaf = value = p.detach()
            memo = getattr(p, "item_memo", None)  # a float input's value, known to torch.compile
            if memo is not None:
                value.item_memo = memo
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


def _reject_requires_grad_on_shared_memory(indices: Sequence[int], primals: Sequence[torch.Tensor],
                                           fn_name: str) -> None:
    """`b.requires_grad_()` on an input whose memory another input views (`a = b[1:]`): eager's
    `a` then requires grad too (a view follows its base); the trace holds the two apart."""
    for i in indices:
        storage = primals[i].untyped_storage()._cdata
        others = [j for j, p in enumerate(primals) if j != i and p.untyped_storage()._cdata == storage]
        if others:
            raise UnsupportedError(
                f"aotgrad cannot compile `{fn_name}`: it calls `requires_grad_()` on input {i}, which shares "
                f"memory with input(s) {others}; in eager a view of it then requires grad too, which aotgrad "
                "does not follow. To continue: call `requires_grad_()` before calling the compiled function.")


def _placeholders_keep_their_geometry(recorder: GraphRecorder, values: Sequence[torch.Tensor],
                                      before: Sequence[InputState], inputs: Sequence[InputInfo]) -> None:
    """The recorder keeps live fakes: an input's in-place metadata ops changed its placeholder's
    value too. Give the placeholder the input's geometry (and storage size) as the caller passes
    it: the layout functionalization works from, where sizes are read for dynamic shapes."""
    for info in inputs:
        if info.metadata_steps:
            state, value = before[info.index], values[info.index]
            with recorder.fake_mode, torch.no_grad():
                if info.grows_storage:  # (a storage of the size it had, where the trace resized it)
                    storage = torch.empty(state.storage_nbytes // value.element_size(), dtype=value.dtype,
                                          device=value.device)
                else:
                    storage = value.detach()
                original = storage.as_strided(state.size, state.stride, state.storage_offset)
            recorder.node_of(value).meta["val"] = original


def _original_geometry(value: torch.Tensor, state: InputState) -> torch.Tensor:
    """A mutated input's new value in the geometry the caller's tensor has when the runtime
    writes it back (before it replays the input's metadata ops): eager's elements of the
    input's original view, all of them, also those a later `as_strided_`/`resize_` left out."""
    return value.as_strided(state.size, state.stride, state.storage_offset)


def _reject_writes_into_overlapping_non_leaves(e: Exception, primals, values, fn_name: str) -> None:
    """An expanded non-leaf input (its elements share memory) is traced as its leaf stand-in
    (`_non_leaf_like`), so an in-place write into it fails as a write into a leaf: say so."""
    if "leaf Variable that requires grad is being used in an in-place operation" not in str(e):
        return
    stand_ins = [i for i, (p, v) in enumerate(zip(primals, values))
                 if p.requires_grad and not p.is_leaf and v.is_leaf and overlaps_itself(v)]
    if stand_ins:
        raise UnsupportedError(
            f"aotgrad cannot compile `{fn_name}`: it writes in place into input {stand_ins[0]} (or a view "
            "of it), a tensor that requires grad, is not a leaf, and whose elements share memory (made "
            "by `expand`, say). aotgrad cannot trace writes into such an input. To continue: pass "
            "`.clone()` of it, or write into a clone inside the function.") from e


def _reraise(e: Exception, fn_name: str, in_backward: bool):
    translated = translate_trace_error(e, fn_name, in_backward=in_backward)
    if translated is e:
        raise e
    raise translated from e


def _grad_fn(t: torch.Tensor) -> Any:
    """t.grad_fn, or None where reading it raises, as eager does for a view made under no_grad
    whose base was then modified (nothing can backpropagate through it)."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def _inner_leaves(roots: Sequence[torch.Tensor], known: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The leaves requiring grad that autograd reaches from `roots`, other than `known` (the
    primals' leaves): those the traced function made itself, in the order met."""
    known_ids = {id(t) for t in known}
    found: dict[int, torch.Tensor] = {}
    seen: set = set()
    stack = [_grad_fn(t) for t in roots if t.requires_grad]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # AccumulateGrad: the end of the path to a leaf
        if leaf is None:
            stack.extend(fn for fn, _ in node.next_functions)
        elif id(leaf) not in known_ids:
            found.setdefault(id(leaf), leaf)
    return list(found.values())


def _inner_leaf_info(index: int, leaf: torch.Tensor, analysis: ForwardAnalysis, primals: Sequence[torch.Tensor],
                     fn_name: str) -> InputInfo:
    """The inner leaf as the primal its stand-in is: "mutated" (its value written into the
    stand-in after the forward, unseen by autograd) when the function returns it or a view
    of it. Raises if such an output could not be rebuilt from the stand-in: the leaf shares
    memory with an input (`x.detach().requires_grad_()`), or an output in its memory is not
    reached from it by recorded view ops (`y.detach().requires_grad_()`, `y` returned)."""
    observed = [info for info in analysis.outputs
                if info.kind in (OutputKind.INPUT, OutputKind.ALIAS_OF_INPUT) and info.index == index]
    storage = StorageWeakRef(leaf.untyped_storage())
    if observed and (any(StorageWeakRef(p.untyped_storage()) == storage for p in primals)
                     or any(info.kind is OutputKind.ALIAS_OF_INPUT and info.replay is None for info in observed)):
        raise UnsupportedError(
            f"aotgrad cannot compile `{fn_name}`: it makes a leaf that requires grad from the memory of another "
            "tensor (e.g. `y.detach().requires_grad_()`), computes outputs from that leaf, and returns it or "
            "the other tensor; the compiled code gives such a leaf memory of its own, so the two would no "
            "longer share it. To continue: make the leaf from a copy (`y.detach().clone().requires_grad_()`), "
            "or make it outside the function and pass it in.")
    return InputInfo(index, requires_grad=True, is_leaf=True, mutates_data=bool(observed), mutates_metadata=False,
                     mutation_visible_to_autograd=False, bumps_version=False)


@dataclass
class _TracedBackward:
    tangent_sources: list[int] = field(default_factory=list)
    tangent_strides: list[tuple] = field(default_factory=list)
    grad_inputs: list[int] = field(default_factory=list)
    grads: list[Any] = field(default_factory=list)
    backward_errors: dict[int, str] = field(default_factory=dict)
    gradless_inputs: list[int] = field(default_factory=list)


def _autocast_off() -> contextlib.ExitStack:
    """Autocast off for the backward's trace, on every device where the caller has it on: a
    function compiled under `torch.autocast` has its forward traced with autocast's casts, and
    its backward as eager's runs when `.backward()` is called after the autocast region, as
    PyTorch recommends (the ops of autograd's formulas in the dtypes the forward left; a
    checkpointed region's recompute still enters the autocast it saved). PyTorch's AOTAutograd
    traces it under the forward's autocast by default (`backward_pass_autocast`), which differs
    from that eager backward by bf16 roundings. A backward called inside the autocast region
    differs the other way (docs/limitations.md)."""
    stack = contextlib.ExitStack()
    for device in ("cpu", "cuda", "xpu", "mps", "hpu"):
        try:
            enabled = torch.is_autocast_enabled(device)
        except (RuntimeError, TypeError):  # a device type this build does not know
            continue
        if enabled:
            stack.enter_context(torch.autocast(device_type=device, enabled=False))
    return stack


def _trace_backward(recorder: GraphRecorder, analysis: ForwardAnalysis, forward_outputs: Sequence[torch.Tensor],
                    targets: dict[int, torch.Tensor], fn_name: str) -> _TracedBackward:
    """Tangent placeholders for the differentiable forward outputs, then autograd's backward
    from them to `targets` (primal index -> the leaf standing for it), recorded."""
    fake_mode = recorder.fake_mode
    n_user, mutated = len(analysis.forward_outputs), [info.index for info in analysis.mutated_inputs]
    differentiable = [
        j for j, t in enumerate(forward_outputs)
        if _is_differentiable(t)
        and (j < n_user or analysis.inputs[mutated[j - n_user]].mutation_visible_to_autograd)]
    result = _TracedBackward(grad_inputs=list(targets))
    # a primal's leaf that the function detached in place (`detach_()`, `requires_grad_(False)`)
    # gets no gradient: eager's AccumulateGrad skips a tensor that no longer requires grad
    alive = [k for k, leaf in enumerate(targets.values()) if leaf.requires_grad and leaf.grad_fn is None]
    leaves = [list(targets.values())[k] for k in alive]
    result.backward_errors = _backward_errors(forward_outputs, [j for j in differentiable if j >= n_user],
                                              leaves, fake_mode)
    differentiable = [j for j in differentiable if j not in result.backward_errors]
    tangents = []
    for n, j in enumerate(differentiable):
        out = forward_outputs[j]
        stride = _dense_strides(out)
        with fake_mode:
            tangent = torch.empty_strided(out.shape, stride, dtype=out.dtype, device=out.device)
        recorder.placeholder(f"tangents_{n + 1}", tangent)
        tangents.append(tangent)
        result.tangent_sources.append(j)
        result.tangent_strides.append(stride)
    result.grads = [None] * len(targets)
    if differentiable and leaves:
        recorder.in_backward = True
        try:
            with fake_mode, recorder, _autocast_off():
                grads = torch.autograd.grad(
                    [forward_outputs[j] for j in differentiable], leaves, tangents, allow_unused=True)
        except Exception as e:
            _reraise(e, fn_name, in_backward=True)
        finally:
            recorder.in_backward = False
        for k, grad in zip(alive, grads):
            result.grads[k] = grad
    result.gradless_inputs = [i for i, g in zip(result.grad_inputs, result.grads) if g is None]
    return result


def _run_forward(recorder: GraphRecorder, fn: Callable, values: Sequence[torch.Tensor], fn_name: str,
                 primals: Sequence[torch.Tensor] = ()):
    """fn(*values) under the recorder; its flat outputs and the grad mode it leaves behind
    (restored to the caller's here)."""
    grad_mode = torch.is_grad_enabled()
    try:
        with recorder.fake_mode, recorder:
            outs = list(fn(*values))
            scalars = [k for k, out in enumerate(outs) if _is_symbolic_scalar(out)]
            for k in scalars:  # computed in the graph, returned as a 0-d tensor, `.item()`ed after
                outs[k] = torch.scalar_tensor(outs[k], dtype=_SCALAR_DTYPES[type(outs[k])])
    except Exception as e:
        _reject_writes_into_overlapping_non_leaves(e, primals, values, fn_name)
        _reraise(e, fn_name, in_backward=False)
    finally:
        grad_mode_after = torch.is_grad_enabled()
        torch.set_grad_enabled(grad_mode)
    return outs, grad_mode_after, scalars


def _return_symbols_the_epilogue_needs(recorder: GraphRecorder, analysis: ForwardAnalysis) -> None:
    """The epilogue rebuilds outputs that view inputs or intermediates from recorded sizes
    and view arguments; a symbol there that neither an input nor a forward output's size
    carries (`x.narrow(0, start.item(), 2)`) is returned by the forward as a 0-d tensor."""
    needed = set()
    for info in analysis.outputs:
        steps = [(s.args, s.kwargs) for s in info.replay or ()]
        needed |= free_symbols((info.size, info.stride, info.storage_offset, steps))
    carried = set(recorder.symbolic.input_sources(
        [n for n in recorder.graph.nodes if n.op == "placeholder"]))
    carried |= free_symbols([(tuple(o.shape), o.stride()) for o in analysis.forward_outputs])
    for symbol in sorted(needed - carried, key=str):
        value = recorder.symbolic.value_of(symbol)
        if value is None:
            continue  # the epilogue reports it, naming the symbol
        with recorder.fake_mode, recorder:
            out = torch.scalar_tensor(value, dtype=_SCALAR_DTYPES[type(value)])
        analysis.symbol_outputs[symbol] = len(analysis.forward_outputs)
        analysis.forward_outputs.append(out)
        analysis.forward_output_strides.append(())


_SCALAR_DTYPES = {torch.SymInt: torch.int64, torch.SymFloat: torch.float64, torch.SymBool: torch.bool}


def _is_symbolic_scalar(value: Any) -> bool:
    """A Python number that depends on symbolic sizes or tensor values (dynamic shapes)."""
    return type(value) in _SCALAR_DTYPES and bool(value.node.expr.free_symbols)


def trace_joint(fn: Callable, primals: Sequence[torch.Tensor], *, fake_mode: FakeTensorMode,
                trace_backward: bool, decompositions: dict | None = None,
                fn_name: str = "fn", outputs_as_returned: bool = False,
                inner_leaf_grads: bool = False) -> TracedJoint:
    """Trace fn's forward, and its backward if `trace_backward`, into one graph.

    With `outputs_as_returned` (export), the forward outputs are fn's tensor outputs
    exactly as returned, aliases included, instead of the runtime's choice. With
    `inner_leaf_grads` (the runtime), leaves fn makes itself get grads (`InnerLeaf`), and
    the backward is traced when grad mode is on and a gradient reaches one, even if no
    input requires grad.
    """
    # With symbolic sizes, composite ops run PyTorch's Python kernels (C++ ones want ints)
    python_kernels = enable_python_dispatcher() if fake_mode.shape_env is not None else contextlib.nullcontext()
    with python_kernels:
        return _trace_joint(fn, primals, fake_mode, trace_backward, decompositions, fn_name,
                            outputs_as_returned, inner_leaf_grads)


def _trace_joint(fn, primals, fake_mode, trace_backward, decompositions, fn_name, outputs_as_returned,
                 inner_leaf_grads) -> TracedJoint:
    recorder = GraphRecorder(fake_mode, decompositions)
    leaves, values = _prepare_primals(recorder, primals, trace_backward)
    before = [InputState.of(v) for v in values]
    outs, grad_mode_after, scalar_outputs = _run_forward(recorder, fn, values, fn_name, primals)

    inputs = analyse_inputs(values, before, [p.is_leaf for p in primals], recorder.written_storages,
                            recorder.unbumped_storages, recorder.metadata_ops)
    made_to_require_grad = tuple(info.index for info in inputs if info.autograd_change == "requires_grad")
    _reject_requires_grad_on_shared_memory(made_to_require_grad, primals, fn_name)
    if made_to_require_grad and inner_leaf_grads and torch.is_grad_enabled():
        trace_backward = True  # their gradients reach the caller's tensors
    _placeholders_keep_their_geometry(recorder, values, before, inputs)
    recorder.check_stale_outputs(outs)
    reject_sparse_outputs(outs, recorder.node_of, fn_name)
    inner: list[torch.Tensor] = []
    if inner_leaf_grads and torch.is_grad_enabled():
        roots = [o for o in outs if isinstance(o, torch.Tensor)] + [values[i.index] for i in inputs if i.mutates_data]
        inner = _inner_leaves(roots, leaves)
        trace_backward = trace_backward or bool(inner)
    values = [*values, *inner]
    analysis = analyse_outputs(values, outs, recorder.node_of)
    if outputs_as_returned:
        analysis.forward_outputs = [o for o in outs if isinstance(o, torch.Tensor)]
    analysis.inputs = inputs + [_inner_leaf_info(len(primals) + k, leaf, analysis, values[:len(primals)], fn_name)
                                for k, leaf in enumerate(inner)]
    for k, leaf in enumerate(inner):
        with fake_mode:
            recorder.placeholder(f"primals_{len(primals) + k + 1}", InnerLeaf.of(leaf).stand_in())
    _return_symbols_the_epilogue_needs(recorder, analysis)
    with recorder.fake_mode, recorder:
        written = [_original_geometry(values[info.index], before[info.index])
                   if info.metadata_steps and not info.grows_storage else values[info.index]
                   for info in analysis.mutated_inputs]
    forward_outputs = analysis.forward_outputs + written

    backward = _TracedBackward()
    if trace_backward:
        targets = {i: leaves[i] for i, p in enumerate(primals) if p.requires_grad or i in made_to_require_grad}
        targets.update({len(primals) + k: leaf for k, leaf in enumerate(inner)})
        backward = _trace_backward(recorder, analysis, forward_outputs, targets, fn_name)
    graph_outputs = [*forward_outputs, *backward.grads]
    recorder.graph.output(tuple(recorder.node_of(o) if o is not None else None for o in graph_outputs))
    root = torch.nn.Module()
    for name, value in recorder.constants.items():
        setattr(root, name, value)
    gm = fx.GraphModule(root, recorder.graph)
    primal_nodes = [n for n in recorder.graph.nodes if n.op == "placeholder" and n.target.startswith("primals")]
    return TracedJoint(gm, analysis, len(values), len(forward_outputs), backward.tangent_sources,
                       backward.tangent_strides, backward.grad_inputs, grad_mode_after, trace_backward,
                       backward.backward_errors, backward.gradless_inputs, [InnerLeaf.of(t) for t in inner],
                       recorder.symbolic.input_sources(primal_nodes), scalar_outputs,
                       made_to_require_grad if trace_backward else ())
