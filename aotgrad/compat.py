"""The one place where aotgrad meets the differences between the torch releases it supports.

aotgrad runs on torch 2.11 through 2.14 (pyproject.toml). Each helper here names what changed
in which release and gives the rest of the package one spelling for it, found by feature
detection rather than by version strings, so code elsewhere reads as if there were one torch.
docs/compatibility.md lists the releases tested and how.
"""
from __future__ import annotations

from typing import Callable

import torch


def function_apply_impl() -> Callable:
    """The function behind `torch.autograd.Function.apply`, called as `impl(cls, *args, **kwargs)`.

    Up to 2.13 `Function.apply` is a Python classmethod (its `__func__` is the function).
    2.14 moved it to C++: `Function.apply` is `_C._FunctionBase`'s classmethod descriptor, which
    has no `__func__` but takes the class as its first argument when called itself.
    """
    apply = torch.autograd.Function.__dict__["apply"]
    if isinstance(apply, classmethod):
        return apply.__func__
    return apply


def split_module_tuple_return() -> dict:
    """Keyword arguments that make `torch.fx.passes.split_module` return a tuple from every
    piece. `tuple_return=` is new in torch 2.12; on 2.11 a one-output piece returns its value
    bare, and the parent graph uses it bare, which is as consistent (no option is passed)."""
    import inspect
    from torch.fx.passes.split_module import split_module
    return {"tuple_return": True} if "tuple_return" in inspect.signature(split_module).parameters else {}
