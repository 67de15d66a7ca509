"""PyTorch's own AOTAutograd through the fuzz oracle, set beside aotgrad's results.

In: a program's `f`, `make_inputs` and eager's `Outcome` (`oracle.run_eager`). Out: for each
PyTorch backend -- `aot_function` with a no-op compiler and the default or the min-cut
partitioner, `torch.compile(backend="aot_eager")` -- a `Verdict`: "right"; "silent" (outputs,
gradients, input state, aliasing or requires_grad differ from eager and nothing was raised;
these are programs where aotgrad must be right); or "error" (PyTorch raised where eager ran).

The comparisons are the oracle's own (its memory-sharing rule `oracle.shares_memory`
included), in `oracle.run_backend`'s order, ending with the partial backward on a second
call; only the reading of errors differs. PyTorch has no clear-error type, so whatever it
raises is an "error", named by `error_kind`; mutating an output that eager lets be mutated
and PyTorch does not is an error too. Benchmark and test code only: aotgrad never imports this module.
"""
from __future__ import annotations

import re
import signal
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch._functorch.aot_autograd import aot_function
from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

from tests.fuzz import oracle
from tests.fuzz.oracle import EagerRejected, FuzzFailure, Outcome


def _nop(gm, example_inputs):
    return gm


def _aot(partition_fn):
    return lambda f: aot_function(f, fw_compiler=_nop, partition_fn=partition_fn)


def _aot_eager(f):
    torch._dynamo.reset()  # a fresh cache per program: no recompile limits, no growth over a campaign
    return torch.compile(f, backend="aot_eager")


PYTORCH_BACKENDS: dict[str, Callable] = {
    "pytorch_default": _aot(default_partition),
    "pytorch_min_cut": _aot(min_cut_rematerialization_partition),
    "aot_eager": _aot_eager,
}


@dataclass(frozen=True)
class Verdict:
    """One PyTorch backend on one program. `what` is the FuzzFailure category (silent) or
    the error kind (error); `message` the oracle's message or the error's first lines."""

    backend: str
    kind: str             # "right" | "silent" | "error"
    what: str = ""
    message: str = ""


class PyTorchRaised(Exception):
    """PyTorch raised at one step of the oracle's run (eager did not)."""

    def __init__(self, step: str, error: BaseException, kind: str | None = None):
        super().__init__(step)
        self.step, self.error = step, error
        self.kind = kind or f"{step}: {error_kind(error)}"


class PyTorchHang(BaseException):
    """The PyTorch backends ran past the campaign's time limit (a BaseException, so that
    PyTorch's own `except Exception` cannot swallow it)."""


def unwrapped(error: BaseException) -> BaseException:
    """The error inside dynamo's BackendCompilerFailed wrapper (the wrapper's first line only
    names the backend)."""
    from torch._dynamo.exc import BackendCompilerFailed

    if isinstance(error, BackendCompilerFailed) and error.inner_exception is not None:
        return error.inner_exception
    return error


def error_kind(error: BaseException) -> str:
    """A short, stable name for an error: its type and first line, numbers as N (so the
    same error on different shapes counts once); dynamo's wrapper is looked through."""
    error = unwrapped(error)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = re.sub(r"\d+", "N", lines[0] if lines else "")
    return f"{type(error).__name__}: {first[:120]}"


@contextmanager
def _step(name: str):
    try:
        yield
    except (FuzzFailure, PyTorchRaised):
        raise
    except Exception as e:  # noqa: BLE001 - any raise by PyTorch is what this records
        raise PyTorchRaised(name, e) from e


def _mutate_each_output(args: list, outs, skip: set[int]) -> list:
    """oracle._mutate_outputs, except that a raise where eager's mutation ran is an error."""
    states = []
    for i, o in enumerate(outs):
        if i in skip:
            continue
        with _step(f"mutating output {i}"):
            oracle.mutate_output(o, i)
        states.append((i, [a.detach().clone() for a in args], [p.detach().clone() for p in outs]))
    return states


def _run(name: str, f: Callable, make_inputs: Callable, eager: Outcome) -> None:
    """oracle.run_backend's steps for a PyTorch backend: raises FuzzFailure (silent) or
    PyTorchRaised (error)."""
    args, leaves = make_inputs()
    versions = [a._version for a in args]
    compiled = PYTORCH_BACKENDS[name](f)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = compiled(*args)
    except Exception as e:  # noqa: BLE001
        if name == "aot_eager" and oracle._dynamo_own_error(e, f, make_inputs):
            raise PyTorchRaised("forward", e, f"forward: dynamo (before AOTAutograd): {error_kind(e)}") from e
        raise PyTorchRaised("forward", e) from e
    rec = oracle._record_call(args, outs, versions)
    oracle._compare_call(name, eager.record, rec)
    with _step("backward"):
        rec.grads, _ = oracle._backward(outs, leaves, eager.weights)
    oracle._compare_grads(name, eager.record.grads, rec.grads)
    if eager.record.input_grads is not None:
        with _step("backward through the inputs"):
            rec.input_grads, _ = oracle._backward(oracle._non_leaf_inputs(args), leaves, eager.input_weights)
        oracle._compare_grads(name, eager.record.input_grads, rec.input_grads, " (outputs and non-leaf inputs)")
    rec.after_mutation = _mutate_each_output(args, outs, skip=eager.mutation_raised)
    oracle._compare_after_mutation(name, eager.record.after_mutation, rec.after_mutation)
    if eager.record.grads_after_mutation is not None:
        with _step("backward after writing into the outputs"):
            grads, _ = oracle._backward(outs, leaves, eager.mutation_weights)
        oracle._compare_grads(name, eager.record.grads_after_mutation, grads, " (after writing into the outputs)")
    if eager.partial is not None:
        _run_partial_backward(name, compiled, make_inputs, eager.partial)


def _run_partial_backward(name: str, compiled: Callable, make_inputs: Callable,
                          partial: oracle.PartialBackward) -> None:
    """oracle._check_partial_backward's steps: a second call on fresh inputs, then backward
    through eager's subset of the outputs only."""
    args, leaves = make_inputs()
    versions = [a._version for a in args]
    with _step("second call"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = compiled(*args)
    oracle.compare_second_call(name, partial, args, outs, versions)
    with _step("partial backward"):
        grads, _ = oracle._backward([outs[i] for i in partial.outputs], leaves, partial.weights)
    oracle.compare_partial_grads(name, partial, grads)


def run_pytorch_backend(name: str, f: Callable, make_inputs: Callable, eager: Outcome) -> Verdict:
    """One PyTorch backend against eager's outcome; never raises (but PyTorchHang)."""
    verdict = Verdict(name, "right")
    try:
        _run(name, f, make_inputs, eager)
    except FuzzFailure as e:
        verdict = Verdict(name, "silent", e.category, str(e))
    except PyTorchRaised as r:
        error = unwrapped(r.error)
        message = "\n".join(str(error).splitlines()[:4])
        verdict = Verdict(name, "error", r.kind, f"[{name}] {r.step} raised {type(error).__name__}: {message}")
    try:
        oracle._check_global_state(name)
    except FuzzFailure as e:
        verdict = Verdict(name, "silent", e.category, str(e))
    return verdict


def check_pytorch(f: Callable, make_inputs: Callable, backends=tuple(PYTORCH_BACKENDS)) -> list[Verdict]:
    """Every PyTorch backend against eager: one Verdict each. Raises EagerRejected if eager
    raises (the program is not a test case)."""
    eager = oracle.run_eager(f, make_inputs)
    return [run_pytorch_backend(name, f, make_inputs, eager) for name in backends]


def raise_hang(signum, frame):
    """A SIGALRM handler: the PyTorch backends have run too long."""
    raise PyTorchHang("PyTorch's backends ran past the time limit")


def silent_like(verdict: Verdict, timeout_s: int = 120) -> Callable:
    """The predicate 'this PyTorch backend is still silently wrong in the same way' (same
    FuzzFailure category), for `shrink.shrink`."""
    def still_silent(program) -> bool:
        signal.signal(signal.SIGALRM, raise_hang)
        signal.alarm(timeout_s)
        try:
            f, make_inputs = program.compile()
            (now,) = check_pytorch(f, make_inputs, (verdict.backend,))
        except (EagerRejected, Exception, PyTorchHang):  # noqa: BLE001 - a broken candidate is not the bug
            return False
        finally:
            signal.alarm(0)
        return now.kind == "silent" and now.what == verdict.what
    return still_silent
