"""The fuzz oracle: one program, eager against every aotgrad entry point.

In: `f` and `make_inputs() -> (args, leaves)` (fresh inputs on every call). For eager
and each backend (aot_function with the default and the min-cut partitioner,
torch.compile(backend="aotgrad")) it records, on fresh inputs:

  * outputs: values, dtype, shape; strides and storage offset of every output that
    aliases an input or another output (there they are contractual);
  * requires_grad and grad_fn presence of every output;
  * aliasing: which inputs each output shares memory with, which outputs share memory,
    which outputs *are* an input or another output;
  * the final value, shape and strides of every input, and whether it was written to;
  * the .grad of every leaf after backward of a fixed random weighting of the outputs
    that require grad;
  * then each output in turn is mutated (add_ under no_grad) and every input and output
    is compared again, so a returned alias must behave as eager's does.

Eager raising anywhere means the program is invalid: `EagerRejected`. aotgrad raising its
own clear error (`aotgrad.errors.AotgradError`) is accepted and reported in the `Report`.
Anything else that differs raises a `FuzzFailure` subclass named for what differs.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import aotgrad
from aotgrad.errors import AotgradError

ATOL = RTOL = 1e-4


class EagerRejected(Exception):
    """Eager PyTorch raised: the program is not a valid test case."""


class FuzzFailure(AssertionError):
    """aotgrad differs from eager; subclasses name what differs (hypothesis tracks each apart)."""

    category = "unknown"

    @property
    def backend(self) -> str:
        return str(self).split("]", 1)[0].lstrip("[")


def failure_type(category: str) -> type:
    """The FuzzFailure subclass for one kind of difference ("values" -> ValuesMismatch)."""
    if category not in _FAILURE_TYPES:
        name = "".join(w.capitalize() for w in category.split("_")) + "Mismatch"
        _FAILURE_TYPES[category] = type(name, (FuzzFailure,), {"__module__": __name__, "category": category})
    return _FAILURE_TYPES[category]


_FAILURE_TYPES: dict[str, type] = {}


# -- backends -------------------------------------------------------------------

def _aot(partition_fn):
    return lambda f: aotgrad.aot_function(f, aotgrad.nop, partition_fn=partition_fn)


def _torch_compile(f):
    torch._dynamo.reset()
    return torch.compile(f, backend="aotgrad")


def _dynamo_eager(f):
    torch._dynamo.reset()
    return torch.compile(f, backend="eager")


BACKENDS: dict[str, Callable] = {
    "default": _aot(aotgrad.partition.default_partition),
    "min_cut": _aot(aotgrad.partition.min_cut_rematerialization_partition),
    "compile": _torch_compile,
    "dynamo_eager": _dynamo_eager,  # torch.compile's front end alone: what it changes is not aotgrad's
}


# -- one run, recorded --------------------------------------------------------------

@dataclass
class Record:
    """Everything the oracle compares, from one run on fresh inputs."""

    outputs: list = field(default_factory=list)       # (value, dtype, shape, stride, offset, rg, has_grad_fn)
    # per output: (inputs sharing memory, outputs sharing, is-input, is-output)
    aliasing: list = field(default_factory=list)
    inputs_after: list = field(default_factory=list)  # (value, shape, stride, offset, written)
    grads: list = field(default_factory=list)
    input_grads: list | None = None                   # .grad of leaves after also backpropagating the non-leaf inputs
    after_mutation: list = field(default_factory=list)  # (output index, inputs, outputs) after mutating it


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _tensor_state(t: torch.Tensor) -> tuple:
    return t.detach().clone(), t.dtype, tuple(t.shape), t.stride(), t.storage_offset()


def _record_call(args: list, outs: tuple, versions: list[int]) -> Record:
    rec = Record()
    for i, o in enumerate(outs):
        rec.outputs.append((*_tensor_state(o), o.requires_grad, o.grad_fn is not None))
        rec.aliasing.append((
            tuple(k for k, a in enumerate(args) if _storage(a) == _storage(o)),
            tuple(j for j, p in enumerate(outs) if j != i and _storage(p) == _storage(o)),
            tuple(k for k, a in enumerate(args) if a is o),
            tuple(j for j, p in enumerate(outs) if j < i and p is o),
        ))
    rec.inputs_after = [(*_tensor_state(a), a._version != v, a.requires_grad, a.grad_fn is not None)
                        for a, v in zip(args, versions)]
    return rec


def _backward(tensors: list, leaves: list, weights: list | None, seed: int = 1) -> tuple[list, list]:
    """Backward of sum(w * t) over the tensors that require grad; the leaves' .grad after."""
    diff = [t for t in tensors if t.requires_grad]
    if weights is None:
        gen = torch.Generator().manual_seed(seed)
        weights = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in diff]
    if diff:  # clones: AccumulateGrad may keep a grad tensor as .grad and add into it later
        torch.autograd.backward(diff, [w.clone() for w in weights], retain_graph=True)
    with warnings.catch_warnings():  # a leaf the program mutated with a grad is no longer a leaf
        warnings.simplefilter("ignore")
        return [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves], weights


def _non_leaf_inputs(args: list) -> list:
    """Inputs with history after the call (mutated non-leaves among them): their grads
    must reach the leaves as eager's do."""
    unique = list({id(a): a for a in args}.values())
    return [a for a in unique if a.requires_grad and a.grad_fn is not None]


def _mutate_outputs(args: list, outs: tuple, skip: set[int]) -> tuple[list, set[int]]:
    """Mutate each output in turn; record every input and output after each. Returns the
    states and the outputs whose mutation raised (eager's set is passed to the others)."""
    states, raised = [], set()
    for i, o in enumerate(outs):
        if i in skip:
            continue
        try:
            with torch.no_grad():
                o.add_(i + 1)
        except RuntimeError:
            raised.add(i)
            continue
        states.append((i, [a.detach().clone() for a in args], [p.detach().clone() for p in outs]))
    return states, raised


@dataclass
class Outcome:
    record: Record | None = None
    clear_error: str | None = None
    weights: list | None = None
    input_weights: list | None = None
    mutation_raised: set = field(default_factory=set)


def run_eager(f: Callable, make_inputs: Callable) -> Outcome:
    """Eager's record; EagerRejected if eager raises anywhere (forward, backward)."""
    args, leaves = make_inputs()
    versions = [a._version for a in args]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = f(*args)
            rec = _record_call(args, outs, versions)
            rec.grads, weights = _backward(outs, leaves, None)
    except Exception as e:
        raise EagerRejected(f"{type(e).__name__}: {e}") from e
    input_weights = None
    try:  # eager may refuse (an input's saved value was overwritten): then it is not compared
        rec.input_grads, input_weights = _backward(_non_leaf_inputs(args), leaves, None, seed=2)
    except RuntimeError:
        pass
    rec.after_mutation, raised = _mutate_outputs(args, outs, skip=set())
    return Outcome(rec, weights=weights, input_weights=input_weights, mutation_raised=raised)


def _aotgrad_error(e: BaseException) -> AotgradError | None:
    while e is not None:
        if isinstance(e, AotgradError):
            return e
        e = e.__cause__ or e.__context__
    return None


def _dynamo_own_error(e: BaseException, f: Callable, make_inputs: Callable) -> bool:
    """An error of torch.compile itself, not aotgrad's: torch.compile(backend="eager")
    raises too."""
    from torch._dynamo.exc import BackendCompilerFailed

    if isinstance(e, BackendCompilerFailed):
        return False
    torch._dynamo.reset()
    args, _ = make_inputs()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.compile(f, backend="eager")(*args)
    except Exception:  # noqa: BLE001
        return True
    return False


def run_backend(name: str, f: Callable, make_inputs: Callable, eager: Outcome) -> Outcome:
    try:
        return _run_backend(name, f, make_inputs, eager)
    except FuzzFailure as e:
        if name == "compile" and _dynamo_differs_too(e, f, make_inputs, eager):
            return Outcome(clear_error="torch.compile's front end differs from eager (backend='eager' too): "
                                       f"{e.category}")
        raise


def _dynamo_differs_too(e: FuzzFailure, f: Callable, make_inputs: Callable, eager: Outcome) -> bool:
    """Does torch.compile(backend="eager") differ from eager the same way? Then dynamo changed
    the program before any backend saw it (e.g. it returns one `a.data` twice as one tensor)."""
    try:
        _run_backend("dynamo_eager", f, make_inputs, eager)
    except FuzzFailure as again:
        return again.category == e.category
    except Exception:  # noqa: BLE001
        return False
    return False


def _run_backend(name: str, f: Callable, make_inputs: Callable, eager: Outcome) -> Outcome:
    compiled = BACKENDS[name](f)
    args, leaves = make_inputs()
    versions = [a._version for a in args]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = compiled(*args)
    except Exception as e:
        clear = _aotgrad_error(e)
        if clear is not None:
            return Outcome(clear_error=f"{type(clear).__name__}: {str(clear).splitlines()[0]}")
        if name == "compile" and _dynamo_own_error(e, f, make_inputs):
            return Outcome(clear_error=f"torch.compile (dynamo, before aotgrad): {type(e).__name__}: "
                                       f"{str(e).splitlines()[0]}")
        raise failure_type("crash")(f"[{name}] forward raised {type(e).__name__}: {e}") from e
    rec = _record_call(args, outs, versions)
    _compare_call(name, eager.record, rec)
    try:
        rec.grads, _ = _backward(outs, leaves, eager.weights)
    except Exception as e:
        clear = _aotgrad_error(e)
        if clear is not None:
            return Outcome(clear_error=f"backward: {type(clear).__name__}: {str(clear).splitlines()[0]}")
        raise failure_type("backward_crash")(f"[{name}] backward raised {type(e).__name__}: {e}") from e
    _compare_grads(name, eager.record.grads, rec.grads)
    if eager.record.input_grads is not None:
        try:
            rec.input_grads, _ = _backward(_non_leaf_inputs(args), leaves, eager.input_weights)
        except Exception as e:
            raise failure_type("backward_crash")(
                f"[{name}] backward through the inputs raised {type(e).__name__}: {e}") from e
        _compare_grads(name, eager.record.input_grads, rec.input_grads, " (outputs and non-leaf inputs)")
    rec.after_mutation, _ = _mutate_outputs(args, outs, skip=eager.mutation_raised)
    _compare_after_mutation(name, eager.record.after_mutation, rec.after_mutation)
    return Outcome(rec)


# -- comparisons ------------------------------------------------------------------

def _close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    return torch.allclose(actual, expected, atol=ATOL, rtol=RTOL, equal_nan=True)


def _fail(category: str, backend: str, message: str):
    raise failure_type(category)(f"[{backend}] {message}")


def _compare_call(backend: str, expected: Record, actual: Record) -> None:
    if len(actual.outputs) != len(expected.outputs):
        _fail("outputs", backend, f"{len(actual.outputs)} outputs, eager has {len(expected.outputs)}")
    for i, (e, a, ea, aa) in enumerate(zip(expected.outputs, actual.outputs, expected.aliasing, actual.aliasing)):
        (ev, edt, esh, est, eoff, erg, egf), (av, adt, ash, ast, aoff, arg, agf) = e, a
        if (adt, ash) != (edt, esh):
            _fail("metadata", backend, f"output {i} is {adt}{list(ash)}, eager's is {edt}{list(esh)}")
        if not _close(av, ev):
            _fail("values", backend, f"output {i} differs:\n  eager {ev}\n  {backend} {av}")
        if arg != erg:
            _fail("requires_grad", backend, f"output {i} requires_grad={arg}, eager's {erg}")
        if agf != egf:
            _fail("grad_fn", backend, f"output {i} has grad_fn: {agf}, eager's: {egf}")
        if aa[:2] != ea[:2]:
            _fail("aliasing", backend, f"output {i} shares memory with inputs {aa[0]} and outputs {aa[1]}; "
                                       f"eager's with inputs {ea[0]} and outputs {ea[1]}")
        if aa[2:] != ea[2:]:
            _fail("identity", backend, f"output {i} is inputs {aa[2]} / earlier outputs {aa[3]}; "
                                       f"eager's is {ea[2]} / {ea[3]}")
        if (ea[0] or ea[1]) and (ast, aoff) != (est, eoff):
            _fail("strides", backend, f"output {i} (an alias) has stride {ast} offset {aoff}, "
                                      f"eager's {est} offset {eoff}")
    for k, (e, a) in enumerate(zip(expected.inputs_after, actual.inputs_after)):
        if a[2:5] != e[2:5]:
            _fail("input_metadata", backend, f"input {k} is {list(a[2])} stride {a[3]} offset {a[4]} after "
                                             f"the call, eager's {list(e[2])} stride {e[3]} offset {e[4]}")
        if not _close(a[0], e[0]):
            _fail("input_state", backend, f"input {k} after the call differs:\n  eager {e[0]}\n  {backend} {a[0]}")
        if a[5] != e[5]:
            _fail("input_written", backend, f"input {k} was {'' if a[5] else 'not '}written to, "
                                            f"eager's was {'' if e[5] else 'not '}(version counter)")
        if a[6:] != e[6:]:
            _fail("input_autograd", backend, f"input {k} after the call: requires_grad={a[6]}, has grad_fn: "
                                             f"{a[7]}; eager's {e[6]}, {e[7]}")


def _compare_grads(backend: str, expected: list, actual: list, what: str = "") -> None:
    for k, (e, a) in enumerate(zip(expected, actual)):
        if e is None and a is None:
            continue
        e = torch.zeros_like(a) if e is None else e
        a = torch.zeros_like(e) if a is None else a
        if not _close(a, e):
            _fail("grads", backend, f"grad of leaf l{k}{what} differs:\n  eager {e}\n  {backend} {a}")


def _compare_after_mutation(backend: str, expected: list, actual: list) -> None:
    for (i, e_in, e_out), (_, a_in, a_out) in zip(expected, actual):
        for k, (e, a) in enumerate(zip(e_in, a_in)):
            if not _close(a, e):
                _fail("alias_mutation", backend, f"after mutating output {i}, input {k} differs:\n"
                                                 f"  eager {e}\n  {backend} {a}")
        for j, (e, a) in enumerate(zip(e_out, a_out)):
            if not _close(a, e):
                _fail("alias_mutation", backend, f"after mutating output {i}, output {j} differs:\n"
                                                 f"  eager {e}\n  {backend} {a}")


# -- the check ------------------------------------------------------------------------

@dataclass
class Report:
    clear_errors: dict = field(default_factory=dict)   # backend -> first line of aotgrad's error


def check_program(f: Callable, make_inputs: Callable, backends=("default", "min_cut", "compile")) -> Report:
    """Compare f under every backend with eager; raise EagerRejected or a FuzzFailure."""
    eager = run_eager(f, make_inputs)
    report = Report()
    for name in backends:
        try:
            outcome = run_backend(name, f, make_inputs, eager)
        finally:
            _check_global_state(name)
        if outcome.clear_error is not None:
            report.clear_errors[name] = outcome.clear_error
    return report


def _check_global_state(backend: str) -> None:
    """A compile, failed or not, leaves no dispatch mode pushed and grad mode on; a leak is
    repaired (so later programs run clean) and reported, superseding any other failure."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

    modes = _get_current_dispatch_mode_stack()
    grad_enabled = torch.is_grad_enabled()
    for _ in modes:
        _pop_mode()
    torch.set_grad_enabled(True)
    if modes or not grad_enabled:
        _fail("state_leak", backend, f"left behind: dispatch modes {[type(m).__name__ for m in modes]}, "
                                     f"grad mode {'on' if grad_enabled else 'off'}")
