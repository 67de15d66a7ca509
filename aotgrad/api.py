"""The entry points: aot_function, aot_module, aot_module_simplified (aot_export_joint is
front/export.py's), each checking its options and handing the rest to front/.

The pipeline each compile runs is pipeline.py (`compile_flat`); the compiled function, its
cache of entries and the keys are front/functions.py's and front/keys.py's.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from aotgrad.errors import unknown_option_error
from aotgrad.front.functions import AotFunction, AotModule
from aotgrad.front.simplified import compile_graph_module
from aotgrad.pipeline import Options
from aotgrad.runtime.boxed import boxed_graph


def nop(gm: fx.GraphModule, example_inputs) -> Callable:
    """The identity graph compiler: run the graph as traced (boxed: see runtime/boxed.py)."""
    return boxed_graph(gm)


OPTIONS = ("partition_fn", "decompositions", "inference_compiler", "dynamic")
SIMPLIFIED_OPTIONS = (*OPTIONS, "inputs_guarded")


def _options(entry_point: Callable, fw_compiler, bw_compiler, options: dict, accepted=OPTIONS) -> Options:
    """The Options of an entry point's call; an option it does not take raises UnknownOptionError
    (were it dropped, a misspelt `partiton_fn` would compile with the default partitioner)."""
    for name in options:
        if name not in accepted:
            raise unknown_option_error(entry_point, name, accepted)
    return Options(fw_compiler, bw_compiler, **options)


def _names_unknown_options(entry_point: Callable) -> Callable:
    """`entry_point` (whose options are keyword parameters) raising UnknownOptionError, with the
    closest name, for a keyword argument it does not take, where Python's TypeError names none."""
    parameters = frozenset(inspect.signature(entry_point).parameters)

    @functools.wraps(entry_point)
    def checked(*args, **kwargs):
        for name in kwargs:
            if name not in parameters:
                raise unknown_option_error(entry_point, name, OPTIONS)
        return entry_point(*args, **kwargs)
    return checked


@_names_unknown_options
def aot_function(fn: Callable, fw_compiler: Callable, bw_compiler: Callable | None = None, *,
                 partition_fn: Callable | None = None, decompositions: dict | None = None,
                 inference_compiler: Callable | None = None, dynamic: bool = False) -> AotFunction:
    """Compile fn's forward and backward ahead of time, on first call per input signature.

        f = aotgrad.aot_function(lambda x, y: (x * y).sin(), aotgrad.nop)
        out = f(x, y); out.sum().backward()      # same values and grads as eager

    fw_compiler(gm, example_inputs) -> callable compiles the forward graph; bw_compiler
    (default: fw_compiler) the backward; inference_compiler the graph used when no grad
    is needed. partition_fn(joint_gm, joint_inputs, num_fwd_outputs=n) -> (fw_gm, bw_gm).
    A keyword argument it does not take raises UnknownOptionError naming the closest one.
    """
    return AotFunction(fn, _options(aot_function, fw_compiler, bw_compiler, dict(
        partition_fn=partition_fn, decompositions=decompositions, inference_compiler=inference_compiler,
        dynamic=dynamic)))


def aot_module(module: torch.nn.Module, fw_compiler: Callable, bw_compiler: Callable | None = None,
               **options) -> AotModule:
    """aot_function for a module: parameters and buffers are traced as inputs, so
    gradients reach `param.grad` and buffer updates (BatchNorm running stats) are written back.
    `options` are aot_function's (OPTIONS); another raises UnknownOptionError."""
    return AotModule(module, _options(aot_module, fw_compiler, bw_compiler, options))


def aot_module_simplified(gm: torch.nn.Module, example_inputs: Sequence[Any], fw_compiler: Callable,
                          bw_compiler: Callable | None = None, **options) -> Callable:
    """Compile a torch.compile FX graph (or any nn.Module: its parameters and buffers become
    inputs); returns a callable over the same flat inputs. `options` are aot_function's and
    inputs_guarded (SIMPLIFIED_OPTIONS); another raises UnknownOptionError."""
    return compile_graph_module(gm, example_inputs, _options(aot_module_simplified, fw_compiler, bw_compiler,
                                                             options, SIMPLIFIED_OPTIONS))
