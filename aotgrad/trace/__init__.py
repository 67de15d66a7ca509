"""Capture: run a function on fake tensors and record the aten ops it issues.

In: a Python callable (or a torch.compile FX graph) and fake example inputs.
Out: a non-functional `fx.Graph` (views and in-place ops as they ran) with
`val` and `stack_trace` on every node, and `seq_nr` on every op that made an
autograd node. See tracer.py; grad_mode_ops.py holds the ops recorded in place of
aten ops whose kernels read grad mode.
"""
from aotgrad.trace.fake import fake_mode_for, to_fake
from aotgrad.trace.tracer import GraphRecorder, UserGraphRunner, call_recorded, user_stack_trace

__all__ = ["GraphRecorder", "UserGraphRunner", "call_recorded", "fake_mode_for", "to_fake", "user_stack_trace"]
