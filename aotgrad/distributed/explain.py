"""`explain(ddp_model, *inputs)`: where aotgrad would split a DDP model's graphs, and why.

Compiles the DDP module's inner module with a backend that plans the buckets (with the DDP
module's caps and ignored parameters) and compiles nothing; the forward runs eagerly, without
DDP's collectives. Out: a report with, per graph Dynamo captured, its buckets (bytes,
parameters, nodes) and each split point with its reason; `print(report)` shows it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx as fx

from aotgrad.distributed.buckets import Bucket


@dataclass
class GraphSplit:
    """One captured graph: its buckets in forward order."""
    graph: fx.GraphModule
    buckets: list[Bucket]
    bucket_bytes_cap: int
    first_bucket_cap: int

    @property
    def split_points(self) -> list[tuple[str, str]]:
        """(the first node of each piece after the first, why the split is there)."""
        return [(b.nodes[0].name if b.nodes else "?", b.reason) for b in self.buckets[1:]]

    def __str__(self) -> str:
        lines = [f"{len(self.buckets)} bucket(s), cap {self.bucket_bytes_cap} bytes, first bucket cap "
                 f"{self.first_bucket_cap} bytes ({len(self.buckets)} piece(s) compiled)"]
        for i, b in enumerate(self.buckets):
            nodes = f"{b.nodes[0].name} .. {b.nodes[-1].name}" if b.nodes else "no nodes"
            lines.append(f"  bucket {i}: {b.size} bytes, {len(b.params)} parameter(s) {b.params}, "
                         f"{len(b.nodes)} node(s) ({nodes})")
        for name, reason in self.split_points:
            lines.append(f"  split before {name}: the bucket after it closed because {reason}")
        return "\n".join(lines)


@dataclass
class DDPExplanation:
    graphs: list[GraphSplit] = field(default_factory=list)

    @property
    def buckets(self) -> list[Bucket]:
        return [b for g in self.graphs for b in g.buckets]

    @property
    def split_points(self) -> list[tuple[str, str]]:
        return [p for g in self.graphs for p in g.split_points]

    def __str__(self) -> str:
        if not self.graphs:
            return "aotgrad.distributed.explain: Dynamo captured no graph (nothing to split)"
        parts = [f"aotgrad.distributed.explain: {len(self.graphs)} graph(s)"]
        parts += [f"graph {i}: {g}" for i, g in enumerate(self.graphs)]
        return "\n".join(parts)


def explain(ddp_model, *inputs, **kwargs) -> DDPExplanation:
    """The buckets and split points aotgrad's backends would use for `ddp_model(*inputs)`."""
    from aotgrad.distributed.ddp import optimizer_for

    if not (hasattr(ddp_model, "module") and hasattr(ddp_model, "bucket_bytes_cap")):
        raise TypeError(f"aotgrad.distributed.explain takes a DistributedDataParallel module, got "
                        f"{type(ddp_model).__name__}; wrap the model in DDP first")
    report = DDPExplanation()

    def planning_backend(gm: fx.GraphModule, example_inputs):
        opt = optimizer_for(ddp_model, None)
        buckets = opt.plan(gm, example_inputs)
        report.graphs.append(GraphSplit(gm, buckets, opt.bucket_bytes_cap, opt.first_bucket_cap))
        return gm.forward

    compiled = torch.compile(ddp_model.module, backend=planning_backend)
    compiled(*inputs, **kwargs)
    return report
