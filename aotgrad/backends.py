"""The torch.compile backends: `aotgrad` (graphs run as traced) and `aotgrad_inductor`.

Registered when aotgrad is imported and through the `torch_dynamo_backends`
entry-point group (pyproject.toml), so `torch.compile(m, backend="aotgrad")` works
in a fresh process.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch.fx as fx

from aotgrad import config
from aotgrad.api import aot_module_simplified, nop
from aotgrad.partition import default_partition, min_cut_rematerialization_partition


def _partitioner(default: str):
    name = config.partitioner if config.partitioner != "default" else default
    return min_cut_rematerialization_partition if name == "min_cut" else default_partition


def aotgrad_backend(gm: fx.GraphModule, example_inputs: Sequence[Any]):
    """Forward and backward traced ahead of time, run as traced (like "aot_eager")."""
    return aot_module_simplified(gm, example_inputs, fw_compiler=nop, bw_compiler=nop,
                                 partition_fn=_partitioner("default"))


def _inductor_compiler(is_backward: bool):
    def compile_with_inductor(gm: fx.GraphModule, example_inputs):
        from torch._inductor.compile_fx import compile_fx_inner

        compiled = compile_fx_inner(gm, list(example_inputs), is_backward=is_backward)

        def run(*args):  # Inductor's compiled graphs take one list (its "boxed" convention)
            return compiled(list(args))
        return run
    return compile_with_inductor


def aotgrad_inductor_backend(gm: fx.GraphModule, example_inputs: Sequence[Any]):
    """Forward and backward traced by aotgrad, each compiled by Inductor's graph compiler."""
    from torch._inductor.decomposition import select_decomp_table

    return aot_module_simplified(gm, example_inputs, fw_compiler=_inductor_compiler(False),
                                 bw_compiler=_inductor_compiler(True),
                                 inference_compiler=_inductor_compiler(False),
                                 partition_fn=_partitioner("min_cut"),
                                 decompositions=select_decomp_table())


def register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    for name, fn in (("aotgrad", aotgrad_backend), ("aotgrad_inductor", aotgrad_inductor_backend)):
        if name not in _BACKENDS or _BACKENDS[name] is None:
            register_backend(fn, name=name)
