"""aot_autograd_check: does a function give eager's outputs and gradients under aotgrad?

In: func, args, kwargs. Out: nothing, or an AssertionError / RuntimeError that says
what differs. Semantics of PyTorch's optests.aot_autograd_check: tensors in
args/kwargs become inputs, everything else is baked in; random ops are compared with
the same seed; gradients of `sum(|out|)` over all tensor outputs are compared; if eager
gives no gradient at all and some input is a non-leaf, the compiled function must raise
eager's complaint (with only leaf inputs, the all-None gradients are compared).
"""
from __future__ import annotations

import re
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
from torch.testing._comparison import assert_close
from torch.testing._utils import wrapper_set_seed

from aotgrad.api import aot_function, nop
from aotgrad.partition import min_cut_rematerialization_partition

OUTPUTS_MESSAGE = ("Outputs of the operator are different in eager-mode PyTorch vs aotgrad. This means "
                   "the operator will have incorrect output under torch.compile(backend='aotgrad').")
GRADIENTS_MESSAGE = ("Gradients of the operator are different in eager-mode PyTorch vs aotgrad. This means "
                     "the operator will have incorrect gradients under torch.compile(backend='aotgrad').")


def aot_autograd_check(func: Callable, args, kwargs, dynamic: bool = False, check_gradients: Any = True,
                       assert_equals_fn: Callable = assert_close, partition_fn: Callable | None = None) -> None:
    """Compare func(*args, **kwargs) in eager and under aot_function(nop, min-cut partition)."""
    flat_args, spec = pytree.tree_flatten((args, kwargs))
    tensors = [a for a in flat_args if isinstance(a, torch.Tensor)]

    def func_of_tensors(*ts):
        it = iter(ts)
        values = [next(it) if isinstance(a, torch.Tensor) else a for a in flat_args]
        c_args, c_kwargs = pytree.tree_unflatten(values, spec)
        return func(*c_args, **c_kwargs)

    compiled = aot_function(func_of_tensors, nop, nop, dynamic=dynamic,
                            partition_fn=partition_fn or min_cut_rematerialization_partition)
    expected = wrapper_set_seed(func_of_tensors, *tensors)
    if check_gradients == "auto":
        check_gradients = (any(t.requires_grad for t in tensors)
                           and pytree.tree_any_only(torch.Tensor, lambda t: t.requires_grad, expected))
    if not check_gradients:
        actual = wrapper_set_seed(compiled, *tensors)
        assert_equals_fn(actual, expected, msg=OUTPUTS_MESSAGE)
        return
    _check_forward_and_backward(func_of_tensors, compiled, tensors, assert_equals_fn)


def _forward_and_grads(f: Callable, tensors):
    diff = [t for t in tensors if t.requires_grad]
    out = wrapper_set_seed(f, *tensors)
    total = 0
    for o in pytree.tree_leaves(out):
        if isinstance(o, torch.Tensor):
            total = total + o.sum().abs()
    assert isinstance(total, torch.Tensor), "the function returned no tensor"
    return out, torch.autograd.grad(total, diff, allow_unused=True)


def _check_forward_and_backward(f, compiled, tensors, assert_equals_fn) -> None:
    expected_out, expected_grads = _forward_and_grads(f, tensors)
    any_non_leaves = any(t.grad_fn is not None for t in tensors)
    if all(g is None for g in expected_grads) and any_non_leaves:
        try:
            _forward_and_grads(compiled, tensors)
        except RuntimeError as e:
            if re.search("does not require grad and does not have a grad_fn", str(e)):
                return
            raise
        raise AssertionError("eager raised 'does not require grad' but aotgrad computed gradients")
    actual_out, actual_grads = _forward_and_grads(compiled, tensors)
    assert_equals_fn(actual_out, expected_out, msg=OUTPUTS_MESSAGE)
    assert_equals_fn(actual_grads, expected_grads, msg=GRADIENTS_MESSAGE)
