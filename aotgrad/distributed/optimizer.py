"""DDPOptimizer: a torch.compile graph cut at DDP's bucket boundaries, each piece compiled on
its own (buckets.py says where, split.py cuts and compiles)."""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from aotgrad.distributed.buckets import Bucket, assign
from aotgrad.distributed.split import compile_pieces, split

DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024  # DDP's first bucket when bucket_cap_mb is not given


class DDPOptimizer:
    """Split a torch.compile graph at DDP bucket boundaries and compile each piece with
    `backend_compile_fn(gm, example_inputs)`.

    `bucket_bytes_cap`: DDP's bucket size in bytes; `first_bucket_cap`: the first bucket's
    (the one whose gradients are ready first), DDP's 1 MiB default when None, at most the
    cap. `parameters_to_ignore`: names of parameters DDP does not all-reduce (they are in no
    bucket); `managed`: if given, the ids of the parameters DDP all-reduces (the others are
    left out too); `names`: id(parameter) -> name, for the buckets. After `compile_fn`,
    `buckets` lists the buckets in forward order."""

    def __init__(self, bucket_bytes_cap: int, backend_compile_fn: Callable, first_bucket_cap: int | None = None,
                 parameters_to_ignore: Sequence[str] = (), managed: set | None = None, names: dict | None = None):
        if bucket_bytes_cap <= 0:
            raise ValueError(f"DDPOptimizer: bucket_bytes_cap must be positive, got {bucket_bytes_cap}")
        self.bucket_bytes_cap = bucket_bytes_cap
        self.first_bucket_cap = min(DEFAULT_FIRST_BUCKET_BYTES if first_bucket_cap is None else first_bucket_cap,
                                    bucket_bytes_cap)
        self.backend_compile_fn = backend_compile_fn
        self.parameters_to_ignore = set(parameters_to_ignore)
        self.managed = managed
        self.names = names or {}   # id(parameter) -> its name (else read from Dynamo's source)
        self.buckets: list[Bucket] = []
        self.on_piece_call: Callable | None = None  # (piece index, outputs) after each piece runs

    def parameters(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> dict:
        """The placeholders that are parameters DDP all-reduces: node -> (name, tensor)."""
        found = {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, example_inputs):
            real = _real(node, value)
            if not isinstance(real, torch.nn.Parameter) or not real.requires_grad:
                continue
            name = self.names.get(id(real)) or _param_name(node)
            if getattr(real, "_ddp_ignored", False) or name in self.parameters_to_ignore:
                continue
            if self.managed is not None and id(real) not in self.managed:
                continue
            found[node] = (name, real)
        return found

    def plan(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[Bucket]:
        """The buckets of `gm`, without compiling anything (`explain` uses this)."""
        self.buckets = assign(gm, self.parameters(gm, example_inputs), self.bucket_bytes_cap, self.first_bucket_cap)
        return self.buckets

    def compile_fn(self, gm: fx.GraphModule, example_inputs: Sequence[Any]):
        """The graph compiled piece by piece (the whole graph, compiled once, when it fits one bucket)."""
        buckets = self.plan(gm, example_inputs)
        if len(buckets) == 1:
            return self.backend_compile_fn(gm, example_inputs)
        partition = {node: i for i, bucket in enumerate(buckets) for node in bucket.nodes}
        return compile_pieces(split(gm, partition), example_inputs, gm, self.backend_compile_fn, self._piece_called)

    def _piece_called(self, index: int, outputs) -> None:
        if self.on_piece_call is not None:
            self.on_piece_call(index, outputs)


def _real(node: fx.Node, value):
    """The real tensor behind a placeholder (Dynamo records it; `value` may be a fake)."""
    grapharg = node.meta.get("grapharg")
    example = getattr(grapharg, "example", None) if grapharg is not None else None
    return example if isinstance(example, torch.Tensor) else value


def _param_name(node: fx.Node) -> str:
    """A parameter's name as its module path (`layers.0.weight`), from Dynamo's source
    (`L['self']._modules['layers']._modules['0']._parameters['weight']`): the keys after the
    local variable's; the placeholder's name if the source says something else."""
    source = getattr(node, "_dynamo_source", None)
    name = getattr(source, "name", None)
    name = name() if callable(name) else name
    keys = re.findall(r"\['([^']*)'\]", name) if isinstance(name, str) else []
    return ".".join(keys[1:]) if len(keys) > 1 and "._parameters[" in name else node.target
