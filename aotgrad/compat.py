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


def fake_from_real(fake_mode, real: torch.Tensor, **options) -> torch.Tensor:
    """`fake_mode.from_tensor(real, **options)`, knowing nothing of `real`'s values.

    2.14: a fake made from a real 0-d integer or float64 tensor by a mode without a ShapeEnv
    (aotgrad's static traces), outside a TracingContext, remembers the real value, and
    `.item()` on it returns that value instead of raising. A graph traced that way would serve
    other values of the input with the first one baked in (`x.narrow(0, start_tensor, 2)`
    returned the slice at the traced start). Up to 2.13 `.item()` raised there, and aotgrad
    says the function needs real values; forgetting the value keeps that on every release.
    """
    fake = fake_mode.from_tensor(real, **options)
    if getattr(fake, "item_memo", None) is not None and fake_mode.shape_env is None:
        fake.item_memo = None
    return fake


def aten_overloads(*names: str) -> frozenset:
    """The aten overloads among `names` ("packet.overload") that this torch has: the op set
    grows and shrinks between releases."""
    found = set()
    for name in names:
        packet, overload = name.split(".")
        try:
            found.add(getattr(getattr(torch.ops.aten, packet), overload))
        except (AttributeError, RuntimeError):
            continue
    return frozenset(found)


# In-place ops besides `set_` that give a tensor another tensor's storage and geometry.
# 2.14 added `aten.shallow_copy_data_(self, source)`: Dynamo records `x.data = y` with it, where
# up to 2.13 it recorded `set_`. No functional graph can express either.
STORAGE_REPLACING_OPS = aten_overloads("shallow_copy_data_.default")


def custom_backward_fn(ctx) -> Callable:
    """The user's `backward` (or `vjp`) that a custom Function's node calls, `fn(ctx, *grads)`.

    2.13 and later ask the node (`BackwardCFunction._get_user_fn`, added with `boxed_grads_call`);
    2.11 chooses inside `BackwardCFunction.apply`, which cannot be called with another ctx. The
    choice is the same: `vjp` if the class defines it, else `backward`, and never both.
    """
    if hasattr(ctx, "_get_user_fn"):
        return ctx._get_user_fn()
    cls, base = ctx._forward_cls, torch.autograd.Function
    if cls.vjp is not base.vjp and cls.backward is not base.backward:
        raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom Function is not allowed. "
                           "You should only implement one of them.")
    return cls.vjp if cls.vjp is not base.vjp else cls.backward
