"""Errors aotgrad raises, worded about the user's program: what, why, what to do.

In: an exception raised while tracing, or a fact about a graph we cannot
handle. Out: an exception whose first sentence keeps PyTorch's wording where
PyTorch's tests pin it, followed by the cause, the cure and the user's line.
"""
from __future__ import annotations

import difflib
import inspect
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch



class AotgradError(RuntimeError):
    """Base class of aotgrad's own errors (a RuntimeError, as PyTorch's are)."""


class TraceError(AotgradError):
    """The user's code cannot be traced as written."""


class UnsupportedError(AotgradError):
    """A valid PyTorch program that aotgrad does not support (yet); says the workaround."""


class CompilerSignatureError(AotgradError, TypeError):
    """A compiler function that cannot be called as its entry point calls it (also a TypeError,
    what calling it would have raised)."""


class UnknownOptionError(AotgradError, TypeError):
    """An entry point called with a keyword argument it does not take (also a TypeError, what
    Python raises for an unexpected keyword argument; the first sentence is Python's)."""


# Options of PyTorch's AOTAutograd entry points that aotgrad's do not have (ported code passes them)
_PYTORCH_ONLY_OPTIONS = frozenset({
    "num_params_buffers", "keep_inference_input_mutations", "enable_log", "disable_functionalization",
    "compiler_config_extra", "ignore_shape_env", "pre_grad_passes", "compile_region_name", "cudagraphs",
    "boxed_forward_device_index"})


def unknown_option_error(entry_point: Callable, name: str, options: Sequence[str]) -> UnknownOptionError:
    """The error for `entry_point(..., name=...)` where `name` is none of its parameters or
    `options`: the closest name and the options it takes."""
    fn = entry_point.__name__
    parameters = [p.name for p in inspect.signature(entry_point).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    close = difflib.get_close_matches(name, [*parameters, *options], n=1)
    why = (f" {name!r} is an option of PyTorch's AOTAutograd that aotgrad does not have."
           if name in _PYTORCH_ONLY_OPTIONS else "")
    return UnknownOptionError(
        f"{fn}() got an unexpected keyword argument {name!r}" + (f"; did you mean {close[0]!r}?" if close else ".")
        + why + f" {fn}'s options are {', '.join(options[:-1])} and {options[-1]}. "
        "To continue: " + (f"drop {name!r}." if why else "use one of those names."))


class MutatedAliasedInputsError(UnsupportedError):
    """Inputs share memory and one is mutated; `group` lists them (retried with a synthetic base)."""

    def __init__(self, message: str, group: list[int]):
        super().__init__(message)
        self.group = group


_TORCH_DIR = os.path.dirname(torch.__file__)
_AOTGRAD_DIR = os.path.dirname(os.path.abspath(__file__))
_STDLIB_DIR = os.path.dirname(os.__file__)


def is_library_file(filename: str) -> bool:
    """Is `filename` torch's, aotgrad's, the standard library's or generated code (`<...>`), not
    the user's? Errors and graph nodes point at the innermost user frame."""
    return (
        filename.startswith(_TORCH_DIR)
        or filename.startswith(_AOTGRAD_DIR)
        or filename.startswith(_STDLIB_DIR)
        or filename.startswith("<")
    )


def user_line_of(exc: BaseException) -> str | None:
    """The innermost user frame of an exception's traceback, as 'file:line  code'."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not is_library_file(f.filename)]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno}   {f.line}"


def _with_line(message: str, line: str | None) -> str:
    return message + (f"\n  at {line}" if line else "")


_FRIENDLY_OP_NAMES = {
    "aten._local_scalar_dense.default": "`Tensor.item()` (aten._local_scalar_dense)",
    "aten.nonzero.default": "`nonzero` (aten.nonzero)",
    "aten.is_nonzero.default": "`bool(tensor)` (aten.is_nonzero)",
}


_TO_DENSE = ("aotgrad supports only dense (strided) tensors: tracing, the aliasing analysis and "
             "functionalization read every tensor's storage, which sparse tensors do not have.")


def reject_sparse_inputs(tensors: Sequence[Any], fn_name: str) -> None:
    """Raise a clear UnsupportedError if an input of `fn_name` is sparse (or any non-strided layout).

    Without it the first storage read fails with "Cannot access storage of SparseCsrTensorImpl".
    """
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and t.layout != torch.strided:
            raise UnsupportedError(
                f"aotgrad cannot compile `{fn_name}`: input {i} is a sparse tensor ({t.layout}, shape "
                f"{tuple(t.shape)}). {_TO_DENSE} To continue: pass `t.to_dense()`, or run the sparse "
                "ops outside the compiled function.")


def reject_sparse_outputs(outs: Sequence[Any], node_of: Callable[[Any], Any], fn_name: str) -> None:
    """Raise a clear UnsupportedError, naming the op and the user's line, if `fn_name` returns a
    sparse tensor (made by `to_sparse`, say). `node_of` maps a traced tensor to its graph node."""
    for k, out in enumerate(outs):
        if isinstance(out, torch.Tensor) and out.layout != torch.strided:
            node = node_of(out)
            op = getattr(node, "target", None)
            made_by = f"`{op}`" if op is not None else "an op"
            trace = getattr(node, "meta", {}).get("stack_trace")
            raise UnsupportedError(
                f"aotgrad cannot compile `{fn_name}`: output {k} is a sparse tensor ({out.layout}) made by "
                f"{made_by}. {_TO_DENSE} To continue: return `.to_dense()` of it, or make the sparse "
                "tensor outside the compiled function." + (f"\n{trace.rstrip()}" if trace else ""))


def translate_trace_error(e: Exception, fn_name: str, in_backward: bool = False) -> Exception:
    """Turn a tracing failure into an error about the user's program, or return e as is."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    where = f"the backward of `{fn_name}`" if in_backward else f"`{fn_name}`"
    line = user_line_of(e)
    text = str(e)
    if "Cannot access data pointer" in text:
        return TraceError(_with_line(
            f"Cannot access data pointer of a tensor while aotgrad traces {where}. "
            "Tracing runs on fake tensors, which have no memory, so `data_ptr()` has no answer. "
            "To continue: do not read data pointers inside compiled code (for a custom op, register a "
            "fake kernel with torch.library.register_fake that does not touch data).", line))
    if "data is not allocated yet" in text:
        # An op read a fake tensor's values in C++ before dispatch, where no aten op is recorded
        # (`tensor_split` with a tensor of indices). PyTorch, whose python dispatcher runs the
        # Python decomposition, fails in `.item()` with DataDependentOutputException.
        return TraceError(_with_line(
            f"aotgrad cannot trace {where}: an op reads the values of a tensor argument "
            "(e.g. `torch.tensor_split` with a tensor `indices_or_sections`, which it turns into Python "
            "ints), so it needs real tensor values, but tracing runs on fake tensors, so there are none "
            "yet. To continue: pass such arguments as Python ints or lists (`indices.tolist()` outside "
            "the compiled function).", line))
    if "Cannot access storage of Sparse" in text:
        return UnsupportedError(_with_line(
            f"aotgrad cannot trace {where}: a sparse tensor reached it. {_TO_DENSE} To continue: "
            "convert it with `.to_dense()`, or run the sparse ops outside the compiled function.", line))
    if isinstance(e, (DataDependentOutputException, DynamicOutputShapeException)) or (
            "data-dependent" in text.lower() and "GuardOnDataDependentSymNode" in type(e).__name__):
        op = getattr(e, "func", None)
        op_name = _FRIENDLY_OP_NAMES.get(str(op), f"`{op}`") if op is not None else "an op"
        return TraceError(_with_line(
            f"aotgrad cannot trace {where}: {op_name} needs real tensor values (its result or its "
            "output shape depends on the data), but tracing runs on fake tensors, so there are none yet. "
            "To continue: compute that value outside the compiled function and pass it in, or use "
            "torch.compile(backend=\"aotgrad\"), which splits the graph at that call.", line))
    return e
