"""DistributedDataParallel modules whose gradient all-reduce a compiled backward would skip.

DDP's default (C++) reducer all-reduces from C++ hooks on the AccumulateGrad nodes, which
Python cannot see: under compiled autograd each rank would silently keep its own gradients.
DDP modules are recorded as they are built (a global module-registration hook: DDP's
constructor sets `self.module`); while one with the C++ reducer is alive and syncing,
`reason()` sends backwards to PyTorch's engine. DDP built with
`torch._dynamo.config.optimize_ddp = "python_reducer"` all-reduces from Python hooks: compiled.
"""
from __future__ import annotations

import gc
import logging
import weakref

import torch
from torch.nn.modules import module as nn_module

log = logging.getLogger("aotgrad.compiled_autograd")

_ddp_modules: weakref.WeakSet = weakref.WeakSet()
_warned: weakref.WeakSet = weakref.WeakSet()
_handle = None


def _ddp_class():
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # a build without torch.distributed
        return None
    return DistributedDataParallel


_DDP = _ddp_class()


def _record(module, name, submodule):
    if _DDP is not None and isinstance(module, _DDP):
        _ddp_modules.add(module)
    return None


def install() -> None:
    """Record every DDP module built from now on, and those alive already."""
    global _handle
    if _handle is not None:
        return
    _handle = nn_module.register_module_module_registration_hook(_record)
    if _DDP is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        for obj in gc.get_objects():  # (a DDP module needs a process group: none, none to find)
            if isinstance(obj, _DDP):
                _ddp_modules.add(obj)


def _bypassed(ddp) -> bool:
    """Would a compiled backward skip this module's all-reduce?"""
    return (not getattr(ddp, "_use_python_reducer", False) and getattr(ddp, "reducer", None) is not None
            and getattr(ddp, "require_backward_grad_sync", True))


def reason() -> str | None:
    """Why backward calls must run on PyTorch's engine now (a live DDP module with the C++
    reducer), or None. Warns once per such module."""
    if not _ddp_modules:
        return None
    for ddp in list(_ddp_modules):
        if not _bypassed(ddp):
            continue
        message = ("a DistributedDataParallel module with the C++ reducer is alive: it all-reduces gradients from "
                   "C++ autograd hooks that a compiled backward cannot run, so backward calls run on PyTorch's "
                   "engine (gradients are all-reduced as in eager). To compile them, build the DDP module after "
                   "setting torch._dynamo.config.optimize_ddp = 'python_reducer' (its all-reduce then runs from "
                   "Python hooks), or call backward outside aotgrad.compiled_autograd.enable")
        if ddp not in _warned:
            _warned.add(ddp)
            log.warning("compiled autograd: %s", message)
        return message
    return None
