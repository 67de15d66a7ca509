"""Graphs called with one list of arguments that they empty: "boxed" calls.

A backward graph's saved activations are its arguments. Called as `f(*args)`, the
argument tuple keeps every one of them alive until the graph returns, so the
backward's peak memory holds all activations and all gradients at once. A boxed
graph takes a list, moves the values into locals and clears the list; FX's code
already drops each local after its last use, so each activation is freed as soon
as the graph is done with it, as eager's engine frees them. That lets the
allocator hand the freed blocks to the gradients computed next instead of asking
the system for new pages (measured on the CNN benchmark: fewer page faults and a
faster step).

A compiled graph says it takes one list with `fn._boxed_call = True`, the
convention torch's graph compilers share (Inductor's compiled graphs do). The
runtime calls every compiled graph boxed; `as_boxed` adapts the others.

    def forward(self, primals_1, relu, tangents_1):        # FX's code for the backward
    def forward(self, args):                               # its boxed twin
        primals_1, relu, tangents_1, = args
        args.clear()
"""
from __future__ import annotations

import inspect
import linecache
import re
from typing import Callable

import torch
import torch.fx as fx


def is_boxed(fn: Callable) -> bool:
    return getattr(fn, "_boxed_call", False) is True


def as_boxed(fn: Callable) -> Callable:
    """`fn` called with one list of arguments."""
    if is_boxed(fn):
        return fn

    def boxed(args: list):
        return fn(*args)
    boxed._boxed_call = True
    return boxed


def boxed_graph(gm: fx.GraphModule) -> Callable:
    """`gm`'s generated code, taking one list that it clears (the same code otherwise).

    Built from the code FX already generated (one `exec`; regenerating it from the
    graph costs ~30 ms on a GPT backward). Falls back to `as_boxed(gm)` if the code
    does not start the way FX writes it."""
    forward = type(gm).forward
    code = forward.__code__
    names = code.co_varnames[1:code.co_argcount]
    head = f"def forward(self, {', '.join(names)}):" if names else "def forward(self):"
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS) or gm.code.count(head) != 1:
        return as_boxed(gm)
    unpack = f"\n    {', '.join(names)}, = args\n    args.clear()" if names else ""
    namespace = dict(forward.__globals__)
    src = _direct_op_calls(gm.code.replace(head, "def forward(self, args):" + unpack), namespace)
    filename = f"<aotgrad boxed graph {hash(src) & 0xFFFFFFFFFFFF:x}>"  # one entry per distinct code
    linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
    exec(compile(src, filename, "exec", dont_inherit=True), namespace)
    function = namespace["forward"]
    function._boxed_call = True
    return function.__get__(gm)  # a bound method; `_boxed_call` reads through to the function


_OP_CALL = re.compile(r"torch\.ops\.(\w+)\.(\w+)\.(\w+)\(")


def _direct_op_calls(src: str, namespace: dict) -> str:
    """`torch.ops.aten.mm.default(a, b)` -> `aten_mm_default(a, b)`, the name bound to the
    overload's C++ callable (`OpOverload.__call__` only forwards to it): no attribute chain
    and no Python frame per op (about 1 us per op on this CPU)."""
    def direct(match: re.Match) -> str:
        namespace_name, op_name, overload_name = match.groups()
        try:
            overload = getattr(getattr(getattr(torch.ops, namespace_name), op_name), overload_name)
        except (AttributeError, RuntimeError):
            return match.group(0)
        if not isinstance(overload, torch._ops.OpOverload):
            return match.group(0)
        name = f"{namespace_name}_{op_name}_{overload_name}"
        namespace[name] = overload._op
        return name + "("
    return _OP_CALL.sub(direct, src)
