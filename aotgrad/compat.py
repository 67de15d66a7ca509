"""The one place where aotgrad meets the differences between the torch releases it supports.

aotgrad runs on torch 2.11 through 2.14 (pyproject.toml). Each helper here names what changed
in which release and gives the rest of the package one spelling for it, found by feature
detection rather than by version strings, so code elsewhere reads as if there were one torch.
docs/compatibility.md lists the releases tested and how.
"""
from __future__ import annotations

import inspect
import operator
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


def split_module_into_tuples(gm, root_m, split_callback, **options):
    """torch.fx's `split_module(..., tuple_return=True)`: every piece returns a tuple, unpacked
    by `getitem` in the split graph, also a piece with one output.

    2.13 has the option; 2.11's `split_module` lacks it and returns a piece's only output bare.
    There the pieces with one output are rewritten to the same form:

        before: submod_1 = self.submod_1(x);          add = submod_1 + 1     (returns y)
        after:  submod_1 = self.submod_1(x);  getitem = submod_1[0];  add = getitem + 1   (returns (y,))
    """
    from torch.fx.passes.split_module import split_module

    if "tuple_return" in inspect.signature(split_module).parameters:
        return split_module(gm, root_m, split_callback, tuple_return=True, **options)
    split_gm = split_module(gm, root_m, split_callback, **options)
    for node in split_gm.graph.find_nodes(op="call_module"):
        piece = split_gm.get_submodule(node.target)
        output = piece.graph.find_nodes(op="output")[0]
        if isinstance(output.args[0], (tuple, list)):
            continue
        output.args = ((output.args[0],),)
        piece.recompile()
        with split_gm.graph.inserting_after(node):
            first = split_gm.graph.call_function(operator.getitem, (node, 0))
        node.replace_all_uses_with(first, delete_user_cb=lambda user: user is not first)
    split_gm.recompile()
    return split_gm


def unpack_saved(entry, saved_tensors_error: RuntimeError) -> torch.Tensor:
    """One of a ctx's raw saved tensors (`ctx._raw_saved_tensors[i]`), with autograd's check that
    it was not modified in place since it was saved, and autograd's message if it was.

    2.13 has `SavedTensor.unpack()`. 2.11 has only `.data`, unchecked, and no way to check one
    saved tensor alone; `saved_tensors_error`, what `ctx.saved_tensors` raised (it checks them
    all), is raised instead. So on 2.11 a backward that reads a saved input fails when any saved
    tensor of the node was modified, where eager fails only if a read one was
    (docs/compatibility.md).
    """
    if hasattr(entry, "unpack"):
        return entry.unpack()
    raise saved_tensors_error


def _eager_unused_input_message() -> str:
    used, unused = torch.zeros((), requires_grad=True), torch.zeros((), requires_grad=True)
    with torch.inference_mode(False), torch.enable_grad():
        try:
            torch.autograd.grad(used * 2, (used, unused))
        except RuntimeError as error:
            return str(error).replace("index 1", "index {index}")
    raise AssertionError("eager autograd.grad accepted an input the outputs do not reach")


# What eager's `autograd.grad` raises for an input the outputs do not reach, `{index}` where it
# names the input. 2.13 names it ("The differentiated Tensor at index 1 appears to not have
# been used in the graph. ..."); 2.11 does not ("One of the differentiated Tensors appears ...").
# Read from eager once, at import, before compiled autograd can intercept the engine.
UNUSED_INPUT_MESSAGE = _eager_unused_input_message()
