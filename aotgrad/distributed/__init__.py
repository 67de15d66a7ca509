"""DDP-aware graph splitting: gradients all-reduced while the backward still runs.

DistributedDataParallel all-reduces gradients in buckets as soon as each bucket's gradients
are ready. A graph compiled whole produces every gradient at the end of its backward, so
nothing overlaps. `DDPOptimizer` cuts the graph where DDP's buckets end and compiles each
piece on its own: each piece's backward ends with its bucket's gradients, and DDP's hooks
start that all-reduce while the earlier pieces' backwards run.

    opt = aotgrad.distributed.DDPOptimizer(ddp.bucket_bytes_cap, aotgrad.backends.aotgrad_backend)
    compiled = opt.compile_fn(gm, example_inputs)     # opt.buckets: what went where

buckets.py    which nodes and parameters go into which bucket (DDP's arithmetic)
split.py      the cut (torch.fx split_module) and the compile of each piece
optimizer.py  DDPOptimizer: plan the buckets, cut, compile the pieces
ddp.py        automatic use by the aotgrad backends inside a DDP module's forward
explain.py    `explain(ddp_model, *inputs)`: the buckets and why each split is where it is
"""
from aotgrad.distributed.buckets import Bucket
from aotgrad.distributed.explain import DDPExplanation, explain
from aotgrad.distributed.optimizer import DEFAULT_FIRST_BUCKET_BYTES, DDPOptimizer

__all__ = ["Bucket", "DDPExplanation", "DDPOptimizer", "DEFAULT_FIRST_BUCKET_BYTES", "explain"]
