"""Fake example inputs: reuse the fake mode torch.compile set up, or make one.

In: real tensors, or fake tensors handed over by torch.compile.
Out: fake tensors of one FakeTensorMode, with the same sizes, strides, dtype,
requires_grad and storage sharing as the inputs.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from aotgrad import compat


def fake_mode_for(example_inputs: Sequence[Any], dynamic: bool = False) -> FakeTensorMode:
    """The fake mode of the example inputs if they are fake, else a fresh one (with a
    ShapeEnv when `dynamic`: sizes become symbols, and what the trace assumes about them
    is recorded as guards).

    A fresh mode's tensors raise on `data_ptr()` (PyTorch's default only warns), as
    torch.compile's fake mode does: tracing cannot answer it."""
    mode = detect_fake_mode(list(example_inputs))
    if mode is not None:
        return mode
    mode = FakeTensorMode(allow_non_fake_inputs=False, shape_env=ShapeEnv() if dynamic else None)
    mode._allow_unsafe_data_ptr_access = False
    return mode


def to_fake(fake_mode: FakeTensorMode, value: Any, dynamic: bool = False) -> Any:
    if isinstance(value, FakeTensor) or not isinstance(value, torch.Tensor):
        return value
    return compat.fake_from_real(fake_mode, value, static_shapes=not (dynamic and fake_mode.shape_env is not None))


def shares_version_counter(t: torch.Tensor, base: torch.Tensor) -> bool:
    """Does a write to `base` bump `t`'s version (a view, `detach()`), or has `t` a counter of
    its own (`.data`)? Tried on the fake values: bump `base`'s version, then restore it."""
    before = t._version
    torch.autograd.graph.increment_version(base)
    shared = t._version != before
    torch._C._autograd._unsafe_set_version_counter((base,), (base._version - 1,))
    return shared
