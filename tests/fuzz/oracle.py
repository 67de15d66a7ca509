"""The fuzz oracle: one program, eager against every aotgrad entry point.

In: `f` and `make_inputs() -> (args, leaves)` (fresh inputs on every call). For eager
and each backend (aot_function with the default and the min-cut partitioner,
torch.compile(backend="aotgrad")) it records, on fresh inputs:

  * outputs: values, dtype, shape; strides and storage offset of every output that
    aliases an input or another output (there they are contractual);
  * requires_grad and grad_fn presence of every output;
  * aliasing: which inputs each output shares memory with, which outputs share memory
    (`shares_memory`: one storage, both with elements), which outputs *are* an input or
    another output;
  * the final value, shape and strides of every input, and whether it was written to;
  * the .grad of every leaf after backward of a fixed random weighting of the outputs
    that require grad;
  * then each output in turn is mutated (add_ under no_grad) and every input and output
    is compared again, so a returned alias must behave as eager's does;
  * then a second call on fresh inputs (compared as the first), and the .grad of every
    leaf after backward through a non-empty proper subset of the outputs that require grad
    (`grad_subset`), None-ness exactly: eager leaves .grad None where no gradient reaches.

Eager raising anywhere means the program is invalid: `EagerRejected`. aotgrad raising its
own clear error (`aotgrad.errors.AotgradError`) is accepted and reported in the `Report`.
Anything else that differs raises a `FuzzFailure` subclass named for what differs.
"""
from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

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
    grads_after_mutation: list | None = None  # .grad after a backward through the mutated outputs


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The oracle's one rule for "a and b share memory", the same for eager and every backend
    (and for `known.py` and `pytorch_oracle.py`): both have elements and they use the same
    storage (StorageImpl identity, never data pointers, which are 0 for empty tensors).

    A tensor with no elements shares memory with nothing: no write through it can change
    what another tensor reads, nor the other way round, so its storage is not observable
    through values. Which storage it sits on is not stable either: PyTorch's FakeTensor
    cache can give `view` of an empty tensor a storage of its own (finding 34), and then
    the same program returns an empty view of an input in one process and a fresh empty
    tensor in another. Non-empty tensors on one storage share memory even where their
    elements do not overlap (`x[0]`, `x[1]`): the alias relation, not the ranges, is what
    eager's views promise.
    """
    if a.numel() == 0 or b.numel() == 0:
        return False
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata


def _tensor_state(t: torch.Tensor) -> tuple:
    return t.detach().clone(), t.dtype, tuple(t.shape), t.stride(), t.storage_offset()


def _record_call(args: list, outs: tuple, versions: list[int]) -> Record:
    rec = Record()
    for i, o in enumerate(outs):
        rec.outputs.append((*_tensor_state(o), o.requires_grad, o.grad_fn is not None))
        rec.aliasing.append((
            tuple(k for k, a in enumerate(args) if shares_memory(a, o)),
            tuple(j for j, p in enumerate(outs) if j != i and shares_memory(p, o)),
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


def grad_subset(outs, seed: int = 0) -> tuple[int, ...] | None:
    """A non-empty proper subset of the outputs that require grad (by index, one index per
    distinct tensor); None when fewer than two distinct outputs require grad.

    Drawn from `seed`, the number of outputs and the number of candidates only, so that eager
    and every backend pick the same subset, on every run, and a shrunk program keeps it
    while those counts stay. Which outputs that leaves out still varies from program to
    program: the grammar draws the outputs in random order."""
    first_index: dict[int, int] = {}
    for i, o in enumerate(outs):
        if o.requires_grad:
            first_index.setdefault(id(o), i)
    candidates = list(first_index.values())
    if len(candidates) < 2:
        return None
    rng = random.Random(f"{seed}:{len(outs)}:{len(candidates)}")
    return tuple(sorted(rng.sample(candidates, rng.randint(1, len(candidates) - 1))))


def _non_leaf_inputs(args: list) -> list:
    """Inputs with history after the call (mutated non-leaves among them): their grads
    must reach the leaves as eager's do."""
    unique = list({id(a): a for a in args}.values())
    return [a for a in unique if a.requires_grad and a.grad_fn is not None]


def _writes_untracked_by_autograd(args: list, outs) -> bool:
    """Does an output share memory with an input or another output without sharing its
    version counter (`x.data`)? A write through it changes what autograd saved without
    autograd knowing, and which values the backward then reads depends on what each
    implementation chose to save (eager's own docs call it unsafe): the grads after writing
    into the outputs are not compared then."""
    tensors = list({id(t): t for t in [*args, *outs]}.values())
    for o in outs:
        for t in tensors:
            if t is not o and shares_memory(o, t):
                before = o._version
                torch.autograd.graph.increment_version(t)
                shared = o._version != before
                torch._C._autograd._unsafe_set_version_counter((t,), (t._version - 1,))
                if not shared:
                    return True
    return False


def mutate_output(o: torch.Tensor, i: int) -> None:
    """Write into output i in place, with grad mode on: autograd's rules for in-place writes
    apply as in eager (a write through a view rewrites its base's history; one into a
    leaf that requires grad, or a view of it, raises)."""
    o.add_(i + 1)


def _mutate_outputs(args: list, outs: tuple, skip: set[int]) -> tuple[list, set[int]]:
    """Mutate each output in turn; record every input and output after each. Returns the
    states and the outputs whose mutation raised (eager's set is passed to the others)."""
    states, raised = [], set()
    for i, o in enumerate(outs):
        if i in skip:
            continue
        try:
            mutate_output(o, i)
        except RuntimeError:
            raised.add(i)
            continue
        states.append((i, [a.detach().clone() for a in args], [p.detach().clone() for p in outs]))
    return states, raised


@dataclass
class PartialBackward:
    """Eager's second call, on fresh inputs, then backward through some of its outputs only."""

    outputs: tuple[int, ...]   # the outputs backpropagated (see `grad_subset`)
    weights: list              # one per output in `outputs`
    record: Record             # the second call: outputs, aliasing, inputs after
    grads: list                # .grad of every leaf after (None where no gradient reached)

    @property
    def what(self) -> str:
        """"backward through outputs 0, 2 only", for messages."""
        return f"backward through output{'s' * (len(self.outputs) > 1)} {', '.join(map(str, self.outputs))} only"


@dataclass
class Outcome:
    record: Record | None = None
    clear_error: str | None = None
    weights: list | None = None
    input_weights: list | None = None
    mutation_raised: set = field(default_factory=set)
    mutation_weights: list | None = None
    partial: PartialBackward | None = None


def _run_eager_partial(f: Callable, make_inputs: Callable, seed: int) -> PartialBackward | None:
    """Eager on fresh inputs, backward through a subset of the outputs (`grad_subset`); None
    when there is no such subset or eager refuses this backward."""
    args, leaves = make_inputs()
    versions = [a._version for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = f(*args)
    subset = grad_subset(outs, seed)
    if subset is None:
        return None
    record = _record_call(args, outs, versions)
    try:
        grads, weights = _backward([outs[i] for i in subset], leaves, None, seed=3)
    except RuntimeError:
        return None
    return PartialBackward(subset, weights, record, grads)


def _offsets(t: torch.Tensor) -> set[int]:
    """The storage elements a (small) tensor covers."""
    offsets = {t.storage_offset()}
    for size, stride in zip(t.shape, t.stride()):
        offsets = {o + i * stride for o in offsets for i in range(size)}
    return offsets if t.numel() else set()


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.storage_offset() == b.storage_offset() and a.shape == b.shape and a.stride() == b.stride()


class _PartialOverlapCheck(TorchDispatchMode):
    """Rejects a program whose in-place op reads memory that it writes, other than as the
    very same view (`a.mul_(a)` is fine): `a.mul_(a.chunk(3, -1)[0])` reads elements the
    kernel may already have written, so eager's values depend on the kernel's order."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = func._schema
        values = list(args) + [kwargs.get(a.name) for a in schema.arguments[len(args):]]
        written = [v for a, v in zip(schema.arguments, values)
                   if isinstance(v, torch.Tensor) and a.alias_info is not None and a.alias_info.is_write]
        for w in written:
            for r in pytree.tree_leaves(values):
                if not isinstance(r, torch.Tensor) or r is w or w.numel() > 4096 or r.numel() > 4096:
                    continue
                if r.untyped_storage().data_ptr() != w.untyped_storage().data_ptr() or _same_view(r, w):
                    continue
                if _offsets(r) & _offsets(w):
                    raise EagerRejected(f"{func} reads part of the memory it writes: eager's values depend on "
                                        "the kernel's order")
        return func(*args, **kwargs)


def run_eager(f: Callable, make_inputs: Callable, seed: int = 0) -> Outcome:
    """Eager's record; EagerRejected if eager raises anywhere (forward, backward), or if its
    values are not defined (an in-place op reading part of what it writes). `seed` picks the
    outputs of the partial backward (`grad_subset`)."""
    args, leaves = make_inputs()
    versions = [a._version for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with _PartialOverlapCheck():
                f(*make_inputs()[0])
        except EagerRejected:
            raise
        except Exception as e:
            raise EagerRejected(f"{type(e).__name__}: {e}") from e
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
    untracked = _writes_untracked_by_autograd(args, outs)
    rec.after_mutation, raised = _mutate_outputs(args, outs, skip=set())
    mutation_weights = None
    try:  # the grads now flow through the writes into the outputs (and into what they view)
        if not untracked:
            rec.grads_after_mutation, mutation_weights = _backward(outs, leaves, None, seed=4)
    except RuntimeError:
        pass
    try:
        partial = _run_eager_partial(f, make_inputs, seed)
    except Exception as e:
        raise EagerRejected(f"second call: {type(e).__name__}: {e}") from e
    return Outcome(rec, weights=weights, input_weights=input_weights, mutation_raised=raised, partial=partial,
                   mutation_weights=mutation_weights)


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


def _fresh_call(fn: Callable, make_inputs: Callable) -> tuple[list, list, list[int], tuple]:
    """fn on fresh inputs: (inputs, leaves, the inputs' versions before, outputs)."""
    args, leaves = make_inputs()
    versions = [a._version for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = fn(*args)
    return args, leaves, versions, outs


def _run_backend(name: str, f: Callable, make_inputs: Callable, eager: Outcome) -> Outcome:
    compiled = BACKENDS[name](f)
    try:
        args, leaves, versions, outs = _fresh_call(compiled, make_inputs)
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
    rec.after_mutation, raised = _mutate_outputs(args, outs, skip=eager.mutation_raised)
    if raised:
        _fail("alias_mutation", name, f"writing into outputs {sorted(raised)} raised; eager's write did not")
    _compare_after_mutation(name, eager.record.after_mutation, rec.after_mutation)
    if eager.record.grads_after_mutation is not None:
        try:
            rec.grads_after_mutation, _ = _backward(outs, leaves, eager.mutation_weights)
        except Exception as e:
            raise failure_type("backward_crash")(
                f"[{name}] backward after writing into the outputs raised {type(e).__name__}: {e}") from e
        _compare_grads(name, eager.record.grads_after_mutation, rec.grads_after_mutation,
                       " (after writing into the outputs)")
    if eager.partial is not None:
        return Outcome(rec, clear_error=_check_partial_backward(name, compiled, make_inputs, eager.partial))
    return Outcome(rec)


def _check_partial_backward(name: str, compiled: Callable, make_inputs: Callable,
                            partial: PartialBackward) -> str | None:
    """A second call of the compiled function on fresh inputs, compared with eager's second
    call, then backward through the same outputs as eager's only. Returns aotgrad's clear
    error, if it raised one."""
    try:
        args, leaves, versions, outs = _fresh_call(compiled, make_inputs)
    except Exception as e:
        clear = _aotgrad_error(e)
        if clear is not None:
            return f"second call: {type(clear).__name__}: {str(clear).splitlines()[0]}"
        raise failure_type("crash")(f"[{name}] the second call (fresh inputs) raised {type(e).__name__}: {e}") from e
    compare_second_call(name, partial, args, outs, versions)
    try:
        grads, _ = _backward([outs[i] for i in partial.outputs], leaves, partial.weights)
    except Exception as e:
        clear = _aotgrad_error(e)
        if clear is not None:
            return f"partial backward: {type(clear).__name__}: {str(clear).splitlines()[0]}"
        raise failure_type("backward_crash")(
            f"[{name}] {partial.what} raised {type(e).__name__}: {e}") from e
    compare_partial_grads(name, partial, grads)
    return None


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


def _compare_grads(backend: str, expected: list, actual: list, what: str = "", none_is_zero: bool = True) -> None:
    """Each leaf's .grad. With `none_is_zero`, None (no gradient reached the leaf) and zeros
    count as equal; without, None-ness must match eager's exactly."""
    for k, (e, a) in enumerate(zip(expected, actual)):
        if e is None and a is None:
            continue
        if not none_is_zero and (e is None or a is None):
            _fail("grad_presence", backend, f"grad of leaf l{k}{what} is {'None' if a is None else 'a tensor'}, "
                                            f"eager's is {'None' if e is None else 'a tensor'}:\n"
                                            f"  eager {e}\n  {backend} {a}")
        e = torch.zeros_like(a) if e is None else e
        a = torch.zeros_like(e) if a is None else a
        if not _close(a, e):
            _fail("grads", backend, f"grad of leaf l{k}{what} differs:\n  eager {e}\n  {backend} {a}")


def compare_second_call(backend: str, partial: PartialBackward, args: list, outs, versions: list[int]) -> None:
    """The second call (fresh inputs) against eager's second call, as `_compare_call` does."""
    try:
        _compare_call(backend, partial.record, _record_call(args, outs, versions))
    except FuzzFailure as e:
        raise type(e)(f"{e} (second call, fresh inputs)") from None


def compare_partial_grads(backend: str, partial: PartialBackward, grads: list) -> None:
    """The leaves' .grad after the partial backward, None-ness exactly as eager's."""
    _compare_grads(backend, partial.grads, grads, f" ({partial.what})", none_is_zero=False)


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


def check_program(f: Callable, make_inputs: Callable, backends=("default", "min_cut", "compile"),
                  seed: int = 0) -> Report:
    """Compare f under every backend with eager; raise EagerRejected or a FuzzFailure. `seed`
    picks the outputs of the partial backward (`grad_subset`)."""
    eager = run_eager(f, make_inputs, seed)
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
    inference = torch.is_inference_mode_enabled()
    for _ in modes:
        _pop_mode()
    torch.set_grad_enabled(True)
    if inference:  # a guard entered and never left: hold one turning it off for the process
        _INFERENCE_MODE_REPAIRS.append(torch._C._InferenceMode(False))
    if modes or not grad_enabled or inference:
        _fail("state_leak", backend, f"left behind: dispatch modes {[type(m).__name__ for m in modes]}, "
                                     f"grad mode {'on' if grad_enabled else 'off'}"
                                     f"{', inference mode on' if inference else ''}")


_INFERENCE_MODE_REPAIRS: list = []  # guards against leaked inference mode (see _check_global_state)
