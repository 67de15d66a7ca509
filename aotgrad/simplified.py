"""aot_module_simplified: compile the FX graph torch.compile hands a backend.

In: a GraphModule (parameters lifted as inputs, or still attributes), or any nn.Module,
and example inputs (fake tensors of torch.compile's fake mode, maybe ints). Out: a callable over
the same flat inputs. The graph is run node by node under the recorder so every aten
op keeps the user's source line and module path. Graphs with symbolic sizes are, until
dynamic shapes land, specialised per concrete shape at run time (logged at debug).
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils._python_dispatch import _get_current_dispatch_mode

from aotgrad.api import AotFunction, Options
from aotgrad.trace import GraphRecorder, UserGraphRunner

log = logging.getLogger("aotgrad")


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))
    return False


class _ModuleAsFunction:
    """Calls module(*inputs) with its parameters and buffers replaced by the leading
    values (lifted as graph inputs). Under the recorder a GraphModule is run node by
    node, so its aten ops keep the user's source lines; any other module just runs."""

    def __init__(self, module: torch.nn.Module, attr_names: list[str]):
        self.module, self.attr_names = module, attr_names
        self.__name__ = "torch.compile graph" if isinstance(module, fx.GraphModule) else type(module).__name__

    def __call__(self, *values):
        attrs = dict(zip(self.attr_names, values[: len(self.attr_names)]))
        inputs = values[len(self.attr_names):]
        recorder = _get_current_dispatch_mode()
        if isinstance(self.module, fx.GraphModule) and isinstance(recorder, GraphRecorder):
            return UserGraphRunner(self.module, recorder, attrs).run(*inputs)
        with torch.nn.utils.stateless._reparametrize_module(self.module, attrs):
            return self.module(*inputs)


def compile_graph_module(gm: torch.nn.Module, example_inputs: Sequence[Any], options: Options):
    """aot_module_simplified's work: `gm` is usually torch.compile's GraphModule, but any
    nn.Module is accepted, as in PyTorch (a backend may wrap the graph it was handed);
    its parameters and buffers become leading inputs so their grads reach `.grad`."""
    state = {**dict(gm.named_parameters(remove_duplicate=False)),
             **dict(gm.named_buffers(remove_duplicate=False))}
    names = list(state)
    compiled = AotFunction(_ModuleAsFunction(gm, names), options)
    params = list(state.values())
    if any(_is_symbolic(v) for v in example_inputs):
        log.debug("aotgrad: the graph has symbolic sizes, which aotgrad does not trace yet; "
                  "specialising it per concrete input shape at run time")
    else:
        compiled.precompile(*params, *example_inputs)

    def run(*args):
        return compiled(*params, *args)

    run.compiled = compiled
    return run
