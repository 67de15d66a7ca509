"""The aotgrad backends inside a DDP module's forward: split at its buckets, once.

Dynamo compiles the frames under `DistributedDataParallel.forward` with the DDP module
marked active (`DistributedDataParallel._get_active_ddp_module()`). When
`aotgrad.config.optimize_ddp` is on, the `aotgrad` and `aotgrad_inductor` backends then
split with that module's bucket caps, leaving out the parameters it ignores.

PyTorch's own splitter (`torch._dynamo.config.optimize_ddp`, on by default) splits first,
before any backend runs, and hands the backend its pieces. aotgrad never sets that flag (it
is the user's, and other backends read it too), so aotgrad's splitter runs where it is off; a
piece PyTorch's splitter made is compiled as it is, never split again. Dynamo offers a
backend no way to turn it off for its own frames only: it decides per frame, before the
backend is called, and `torch.compile` drops a backend's `backend_ctx_ctor`.
`aotgrad.counters["ddp"]` counts both kinds.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from aotgrad import config
from aotgrad.distributed.optimizer import DEFAULT_FIRST_BUCKET_BYTES, DDPOptimizer
from aotgrad.observe.counting import counters

log = logging.getLogger("aotgrad.distributed")

_PYTORCH_PIECE = "DDPOptimizer intentional graph-break"
_warned = False


def active_ddp_module():
    from torch.nn.parallel import DistributedDataParallel
    return DistributedDataParallel._get_active_ddp_module()


def split_by_pytorch(gm: fx.GraphModule) -> bool:
    """Is `gm` a piece PyTorch's DDP splitter cut?"""
    reason = getattr(getattr(gm, "compile_subgraph_reason", None), "reason", "") or ""
    if reason.startswith(_PYTORCH_PIECE):
        return True
    context = torch._guards.TracingContext.try_get()
    return context is not None and getattr(context, "ddp_optimizer_ctx", None) is not None


def first_bucket_cap(ddp) -> int:
    """DDP's first bucket cap: 1 MiB when `bucket_cap_mb` was not given, else the cap."""
    bucket_config = getattr(ddp, "_bucket_config", None)
    first = getattr(bucket_config, "first_bucket_bytes_cap", None)
    if first is None:
        first = DEFAULT_FIRST_BUCKET_BYTES if getattr(ddp, "bucket_bytes_cap_default", False) else ddp.bucket_bytes_cap
    return min(first, ddp.bucket_bytes_cap)


def optimizer_for(ddp, backend_compile_fn: Callable) -> DDPOptimizer:
    """A DDPOptimizer with the caps and parameters of the DDP module `ddp` (or of anything
    with its `module` and `bucket_bytes_cap`, as tests' stand-ins have)."""
    module = getattr(ddp, "module", ddp)
    ignored = set(getattr(ddp, "parameters_to_ignore", ()))
    names = {id(p): name for name, p in module.named_parameters()}
    managed = {id(p) for name, p in module.named_parameters() if p.requires_grad and name not in ignored}
    return DDPOptimizer(ddp.bucket_bytes_cap, backend_compile_fn, first_bucket_cap(ddp),
                        parameters_to_ignore=ignored, managed=managed, names=names)


def compile_in_ddp(gm: fx.GraphModule, example_inputs: Sequence[Any], compile_whole: Callable):
    """What an aotgrad backend compiles: split at DDP's buckets when inside a DDP module's
    forward and `config.optimize_ddp` is on; the whole graph otherwise."""
    global _warned
    if split_by_pytorch(gm):
        counters["ddp"]["pieces_from_pytorch_splitter"] += 1
        if not _warned:  # (PyTorch's default: said once, at INFO)
            _warned = True
            log.info("PyTorch's DDP graph splitter cut this graph at DDP's buckets "
                     "(torch._dynamo.config.optimize_ddp is on, PyTorch's default); aotgrad compiles each piece "
                     "as it is and does not split it again. To have aotgrad's splitter cut it instead, set "
                     "torch._dynamo.config.optimize_ddp = False, or compile and run the model inside "
                     "torch._dynamo.config.patch(optimize_ddp=False).")
        return compile_whole(gm, example_inputs)
    ddp = active_ddp_module() if config.optimize_ddp else None
    if ddp is None:  # the graph dynamo hands over: dynamo guards its inputs
        return compile_whole(gm, example_inputs, inputs_guarded=True)
    opt = optimizer_for(ddp, compile_whole)
    compiled = opt.compile_fn(gm, example_inputs)
    counters["ddp"]["graphs_split"] += len(opt.buckets) > 1
    counters["ddp"]["pieces"] += len(opt.buckets)
    log.debug("DDP: %d bucket(s), %s", len(opt.buckets), [b.size for b in opt.buckets])
    history.append(opt)
    del history[:-32]
    return compiled


history: list[DDPOptimizer] = []   # the latest DDPOptimizers the backends used (the last 32), for people and tests
