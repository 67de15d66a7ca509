"""Eager PyTorch as the oracle: run a function eagerly and compiled on equal copies of the
inputs, then compare outputs, gradients, the final state of every input, which outputs
alias which inputs, and requires_grad / grad_fn presence."""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.utils._pytree as pytree

import aotgrad


def clone_inputs(args: Sequence) -> list:
    """Equal copies; leaves stay leaves, non-leaves stay non-leaves (x * 1 of a fresh leaf),
    and an argument repeated by identity stays repeated."""
    memo: dict[int, object] = {}
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        if id(a) not in memo:
            c = a.detach().clone()
            if a.requires_grad:
                c.requires_grad_(True)
                if not a.is_leaf:
                    c = c * 1
            memo[id(a)] = c
        out.append(memo[id(a)])
    return out


def _leaves(tensors):
    return [t if t.is_leaf else None for t in tensors]


def _aliases(outs, inputs):
    result = []
    for o in outs:
        if isinstance(o, torch.Tensor):
            result.append(tuple(i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)
                                and o.untyped_storage()._cdata == x.untyped_storage()._cdata))
        else:
            result.append(None)
    return result


def assert_same_as_eager(fn: Callable, args: Sequence, compiled: Callable | None = None, *,
                         backward: bool = True, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    compiled = compiled if compiled is not None else aotgrad.aot_function(fn, aotgrad.nop)
    eager_args, aot_args = clone_inputs(args), clone_inputs(args)
    torch.manual_seed(0)
    expected = fn(*eager_args)
    torch.manual_seed(0)
    actual = compiled(*aot_args)
    exp_flat, exp_spec = pytree.tree_flatten(expected)
    act_flat, act_spec = pytree.tree_flatten(actual)
    assert exp_spec == act_spec, f"output structure {act_spec} != eager {exp_spec}"
    for k, (e, a) in enumerate(zip(exp_flat, act_flat)):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol, msg=lambda m: f"output {k}: {m}")
            assert a.requires_grad == e.requires_grad, f"output {k} requires_grad {a.requires_grad}"
            assert (a.grad_fn is None) == (e.grad_fn is None), f"output {k} grad_fn presence differs"
        else:
            assert a == e
    assert _aliases(act_flat, aot_args) == _aliases(exp_flat, eager_args), "output aliasing differs"
    for i, (e, a) in enumerate(zip(eager_args, aot_args)):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol, msg=lambda m: f"input {i} after call: {m}")
    if not backward:
        return
    exp_diff = [o for o in exp_flat if isinstance(o, torch.Tensor) and o.requires_grad]
    act_diff = [o for o in act_flat if isinstance(o, torch.Tensor) and o.requires_grad]
    if not exp_diff:
        return
    torch.manual_seed(1)
    grads = [torch.randn_like(o) for o in exp_diff]
    torch.autograd.backward(exp_diff, grads)
    torch.autograd.backward(act_diff, grads)
    for i, (e, a) in enumerate(zip(eager_args, aot_args)):
        if isinstance(e, torch.Tensor) and e.is_leaf and e.requires_grad:
            if e.grad is None:
                assert a.grad is None or not a.grad.any(), f"input {i}: eager has no grad"
            else:
                torch.testing.assert_close(a.grad, e.grad, atol=atol, rtol=rtol,
                                           msg=lambda m: f"grad of input {i}: {m}")
