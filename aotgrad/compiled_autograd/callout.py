"""Calls out of a captured graph (calls.py), made so that torch.compile keeps each one whole.

In, at capture: a function of calls.py, its arguments (fake tensors, SymInts, `Object(i)` for
the backward call's objects, constants) and what it returns. Out: a `Site` (the call with holes)
and one FX node `call(site, state, tensors, sizes, promise, keep)` returning the call's tensors
as a list. At run time `Program` (compiler_fn's result and the sites) fills the holes. Run as
Python, `call` runs the site; traced by Dynamo (`torch.compiler.is_compiling()`), it records the
op `aotgrad::call_out`, whose kernel runs the site on the real tensors and whose fake kernel
only makes the results it promised: no user code runs or is traced while compiling.
"""
# What keeps eager's semantics inside a compiled graph (Dynamo, AOTAutograd, Inductor):
# - order: each call_out takes the token the previous one returned (`state[0]`) and the last
#   token is an output of the graph, so no compiler drops or reorders a call (accumulation into
#   `.grad` has no other result); capture._order_around_call_outs makes each call also take the
#   tensors computed before it and used after it, so none is computed after a hook that changed
#   what it reads (an optimizer step in a post-accumulate hook).
# - lifetime: the tensors a call gets that the graph computed (`keep`) and those it returns are
#   outputs of the graph too: no compiler reuses their memory while user code may hold them (a
#   hook that keeps its gradient, or returns its argument).
# - layout: a call's results are contiguous, as their fakes are (Inductor asserts strides).
# - aliasing: a call's results share no memory with its arguments or with each other (a hook
#   that returns None keeps its argument, a custom backward may return `g` twice): such a
#   result is copied, as compilers assume of an op that declares no aliases (PyTorch's
#   AOTAutograd checks it at the first run: a warning today, an error later).
# - None and sparse: a compiled graph cannot carry None, or a tensor without strides, where its
#   fake was a dense tensor; a call returning one there (a custom backward's None into `.grad`,
#   its sparse gradient into a result) gives a placeholder, which later calls and the graph's
#   results read as the value it stands for.
# - `.grad`: accumulation copies the graph's tensor instead of taking it as `.grad` (a compiler
#   may hand one tensor to several calls, or hand over a graph input), as eager does for a tensor
#   held elsewhere (WhenRunAsPython).
# - errors: an exception raised in a call (a hook's, eager's checks) does not travel through the
#   compiled code (under fullgraph, Dynamo would try to trace FX's error reporting: "Attempt to
#   trace generator" replaced the user's error); the call keeps it, later calls do nothing, and
#   Program raises it when the graph returns: as in eager, nothing visible runs after it.
# - dispatch: Inductor calls the op with every dispatch key above its kernel excluded (autograd
#   too: a custom backward calling torch.autograd.grad under enable_grad found nothing requiring
#   grad); the site runs with the keys of the backward call instead (_Call.dispatch_keys).
from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import torch

from aotgrad.compiled_autograd import calls

_running = threading.local()  # .call: the _Call of the Program running on this thread

_lib = torch.library.Library("aotgrad", "FRAGMENT")
_lib.define("call_out(int site, Tensor? token, Tensor?[] tensors, SymInt[] sizes, str promise) -> Tensor[]")


class Object:
    """A hole for the backward call's `objects[index]` (a leaf, ctx, node or hook dict)."""
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"objects[{self.index}]"


class WhenRunAsPython:
    """A flag that is `value` when the graph runs as Python and False inside a compiled graph
    (accumulate_grad's `may_steal`: see the module docstring)."""
    __slots__ = ("value",)

    def __init__(self, value: bool):
        self.value = value

    def __repr__(self):
        return f"WhenRunAsPython({self.value})"


class _Tensor:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"tensors[{self.index}]"


class _Size(_Tensor):
    __slots__ = ()

    def __repr__(self):
        return f"sizes[{self.index}]"


class Site:
    """One call out of the graph: `function(*args)` with holes in `args`, and which of its
    results are tensors (`results`: None for none, True for one value, a tuple of bools for a
    list, True where the capture got a tensor). `fill(objects, tensors, sizes, compiled)` makes
    the arguments: generated from `args` when they are set (one expression, as `filled` would
    make them: on a cache hit every call out pays for it)."""
    __slots__ = ("function", "_args", "results", "fill")

    def __init__(self, function: Callable, args: tuple, results):
        self.function = function
        self.args = args
        self.results = results

    @property
    def args(self) -> tuple:
        return self._args

    @args.setter
    def args(self, args: tuple) -> None:
        self._args = args
        constants: list = []
        source = f"lambda o, t, s, c: ({''.join(_expression(a, constants) + ', ' for a in args)})"
        self.fill = eval(source, {"k": constants})  # noqa: S307 - our own expression, from `args`

    def __repr__(self):
        return f"{self.function.__name__}{self.args!r}"

    def flatten(self, value) -> list:
        """The function's result as the graph gets it: its tensors (and Nones where it returned
        None for one), in order."""
        results = self.results
        if results is None:
            return []
        if results is True:
            return [value]
        return [v for v, is_tensor in zip(value, results) if is_tensor]


def site(function: Callable, args: tuple, out: Any) -> tuple[Site, list, list, str]:
    """A site for `function(*args)` returning `out` (fakes), with the tensors and sizes its holes
    stand for, and the promise for the fake kernel: per tensor result, `=k` (like tensor k) or
    `dtype@device#i.j` (sizes i and j)."""
    tensors: list = []
    sizes: list = []

    def hole(value):
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return _Tensor(len(tensors) - 1)
        if isinstance(value, torch.SymInt):
            sizes.append(value)
            return _Size(len(sizes) - 1)
        if isinstance(value, (list, tuple)):
            return type(value)(hole(v) for v in value)
        return value

    holes = hole(tuple(args))
    if out is None:
        results, flat = None, []
    elif isinstance(out, torch.Tensor):
        results, flat = True, [out]
    else:
        results, flat = tuple(isinstance(v, torch.Tensor) for v in out), [v for v in out if v is not None]
    promise = ";".join(_promise_of(fake, tensors, sizes) for fake in flat)
    return Site(function, holes, results), tensors, sizes, promise


def _shape_key(t: torch.Tensor) -> tuple:
    # (str of each dim: comparing SymInts themselves would add guards to the trace)
    return tuple(str(d) for d in t.shape), t.dtype, t.device


def _promise_of(fake: torch.Tensor, tensors: list, sizes: list) -> str:
    key = _shape_key(fake)
    for k, t in enumerate(tensors):
        if _shape_key(t) == key:
            return f"={k}"
    dims = []
    for d in fake.shape:
        sizes.append(d)
        dims.append(str(len(sizes) - 1))
    return f"{str(fake.dtype).removeprefix('torch.')}@{fake.device}#{'.'.join(dims)}"


@functools.lru_cache(maxsize=4096)
def _promised(promise: str) -> tuple:
    """`promise` parsed: per result (like: tensor index or None, dtype, device, size indices)."""
    out = []
    for item in promise.split(";") if promise else ():
        if item.startswith("="):
            out.append((int(item[1:]), None, None, ()))
        else:
            dtype, rest = item.split("@")
            device, dims = rest.split("#")
            out.append((None, getattr(torch, dtype), torch.device(device),
                        tuple(int(i) for i in dims.split(".")) if dims else ()))
    return tuple(out)


def filled(value, objects: list, tensors: list, sizes: list, compiled: bool):
    """`value` with its holes filled: what a site's generated `fill` computes, one argument at a
    time (the reference the tests hold the generated code to)."""
    kind = type(value)
    if kind is _Tensor:
        return tensors[value.index]
    if kind is Object:
        return objects[value.index]
    if kind is _Size:
        return sizes[value.index]
    if kind is WhenRunAsPython:
        return value.value and not compiled
    if kind is tuple or kind is list:
        return kind([filled(v, objects, tensors, sizes, compiled) for v in value])
    return value


def _expression(value, constants: list) -> str:
    """Python for `filled(value, o, t, s, c)`; other values are read from `constants` (k)."""
    kind = type(value)
    if kind is _Tensor:
        return f"t[{value.index}]"
    if kind is Object:
        return f"o[{value.index}]"
    if kind is _Size:
        return f"s[{value.index}]"
    if kind is WhenRunAsPython:
        return "(not c)" if value.value else "False"
    if kind is list:
        return f"[{', '.join(_expression(v, constants) for v in value)}]"
    if kind is tuple:
        return f"({''.join(_expression(v, constants) + ', ' for v in value)})"
    if value is None or kind is bool or kind is int:
        return repr(value)
    constants.append(value)
    return f"k[{len(constants) - 1}]"


class _Call:
    """The backward call a Program is running: its sites, its objects, its placeholders."""
    __slots__ = ("sites", "objects", "stand_ins", "error", "ran", "dispatch_keys")

    def __init__(self, sites: list, objects: list):
        self.sites = sites
        self.objects = objects
        self.stand_ins: list = []  # (placeholder, the None or non-strided value it stands for): compiled graphs only
        self.error: Exception | None = None  # the exception a call raised in a compiled graph
        self.ran = 0  # calls started
        # the thread's dispatch keys (included, excluded) when the backward call started
        self.dispatch_keys = (torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set())

    def run(self, index: int, tensors: list, sizes: list, compiled: bool = False) -> list:
        self.ran += 1
        site = self.sites[index]
        return site.flatten(site.function(*site.fill(self.objects, tensors, sizes, compiled)))

    def real(self, value):
        """What a tensor of the compiled graph stands for: itself, or the value its placeholder holds."""
        if value is not None:
            for placeholder, held in self.stand_ins:
                if value is placeholder:
                    return held
        return value


def _current() -> _Call:
    call = getattr(_running, "call", None)
    if call is None:
        raise RuntimeError(
            "a compiled-autograd graph was called outside the backward call that runs it: its calls out "
            "(hooks, custom backwards, accumulation into .grad) need that call's objects. Call the callable "
            "compiler_fn returned only through compiled autograd (inside enable(), by backward()).")
    return call


def start() -> list:
    """The graph's `state`: the token of the last call_out, then the tensors kept alive (empty
    when the graph runs as Python)."""
    return []


def call(site: int, state: list, tensors: list, sizes: list, promise: str, keep: tuple) -> list:
    """The FX target of every call out of a captured graph (see the module docstring)."""
    if not torch.compiler.is_compiling():
        return _current().run(site, tensors, sizes)
    results = torch.ops.aotgrad.call_out(site, state[0] if state else None, tensors, sizes, promise)
    if state:
        state[0] = results[0]
    else:
        state.append(results[0])
    state.extend([tensors[k] for k in keep])
    state.extend(results[1:])
    return results[1:]


def _standard_strides(t: torch.Tensor) -> bool:
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if stride != expected:
            return False
        expected *= size
    return True


def _call_out_kernel(site: int, token, tensors: list, sizes: list, promise: str) -> list:
    call = _current()
    promised = _promised(promise)
    outputs: list = [None] * len(promised)
    if call.error is None:  # (after an error nothing runs: the graph only goes on to its end)
        values = [call.real(t) for t in tensors] if call.stand_ins else tensors
        try:
            with torch._C._ForceDispatchKeyGuard(*call.dispatch_keys):
                outputs = call.run(site, values, sizes, compiled=True)
        except Exception as e:  # noqa: BLE001 - raised again by Program, outside the compiled code
            call.error = e
    results = [torch.empty(0)]
    storages = {t.untyped_storage()._cdata for t in tensors if t is not None}
    for value, (like, dtype, device, dims) in zip(outputs, promised):
        if value is None or value.layout is not torch.strided:
            # a placeholder: what the graph's compiler expects, read as `value` again
            if like is not None:
                like_tensor = tensors[like]
                shape, dtype, device = like_tensor.shape, like_tensor.dtype, like_tensor.device
            else:
                shape = [sizes[i] for i in dims]
            placeholder = torch.zeros(shape, dtype=dtype, device=device)
            call.stand_ins.append((placeholder, value))
            value = placeholder
        elif not _standard_strides(value) or value.untyped_storage()._cdata in storages:
            value = value.clone(memory_format=torch.contiguous_format)
        storages.add(value.untyped_storage()._cdata)
        results.append(value)
    return results


def _call_out_fake(site: int, token, tensors: list, sizes: list, promise: str) -> list:
    results = [torch.empty(0)]
    for like, dtype, device, dims in _promised(promise):
        if like is not None:
            t = tensors[like]
            results.append(torch.empty(t.shape, dtype=t.dtype, device=t.device))
        else:
            results.append(torch.empty([sizes[i] for i in dims], dtype=dtype, device=device))
    return results


_lib.impl("call_out", _call_out_kernel, "CompositeExplicitAutograd")
torch.library.register_fake("aotgrad::call_out", _call_out_fake, lib=_lib)


class NothingRan(Exception):
    """The callable compiler_fn returned failed (`error`) before the graph started: no call out
    ran and its inputs are untouched (torch.compile compiles at the first call, and an error
    there, a backend's or Dynamo's, comes before anything runs). The backward had no effect
    yet, so PyTorch's engine can still run it."""

    def __init__(self, error: Exception):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


class Program:
    """What `compiler_fn` returned for a graph, with the graph's sites: called as the engine
    calls a graph, `(inputs, sizes, objects) -> results` (None where a compiled graph gave a
    placeholder). With `first` (the graph's first run), a failure before the graph started is
    NothingRan."""
    __slots__ = ("compiled", "sites", "leaves", "may_steal", "as_python")

    def __init__(self, compiled: Callable, sites: list, accumulated_after: tuple = ((), ())):
        self.compiled = compiled
        self.sites = sites
        # the objects (leaves) whose gradients the graph returns to accumulate, and whether each
        # may become a fresh `.grad` as is (capture._accumulate_after_graph)
        self.leaves, self.may_steal = accumulated_after
        self.as_python = isinstance(compiled, torch.fx.GraphModule)  # (it returns no input as a result)

    def __call__(self, inputs: list, sizes: list, objects: list, first: bool = False) -> list:
        previous = getattr(_running, "call", None)
        call = _running.call = _Call(self.sites, objects)
        count = len(inputs)
        # (a compiler may return an input as a gradient)
        inputs_at = {} if self.as_python or not self.leaves else calls.input_addresses(inputs)
        try:
            results, _, grads = self.compiled(inputs, sizes)
        except Exception as e:
            if first and call.ran == 0 and len(inputs) == count:  # (run as Python, the graph's first node empties it)
                raise NothingRan(e) from e
            raise
        finally:
            _running.call = previous
        if call.error is not None:
            raise call.error
        if grads:
            calls.accumulate_after_graph([objects[i] for i in self.leaves], grads, self.may_steal, inputs_at, results)
        if call.stand_ins:
            return [call.real(r) for r in results]
        return list(results)
