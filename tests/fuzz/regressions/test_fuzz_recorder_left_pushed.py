"""Fuzz regression: after a compile fails inside the tracer's `__exit__`, aotgrad's
GraphRecorder stays pushed on the dispatch-mode stack for the rest of the process.
Every later compile then fails at random ("aotgrad's tracer met a fake tensor it did
not create ... may come from another fake mode or from a tensor cached across
compilations"), and eager code in the same process runs under the stale recorder
(eager itself started raising in the fuzz campaign). One failure poisons the process.

Stage: trace (`GraphRecorder.__exit__`). It calls `_resolve_autograd_nodes()` before
popping the mode; when that raises (here: bug `test_fuzz_grad_fn_of_no_grad_view`), the
pop never happens. Pop first (try/finally), then resolve.

Fixed: trace/tracer.py GraphRecorder.__exit__ leaves the dispatch stack even when resolving
autograd nodes fails.
"""
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

import aotgrad


def f(a):
    with torch.no_grad():
        v0 = a.chunk(1, -1)[0]
        v1 = v0.detach()
        v0.masked_fill_(v0 > 0, 2)
    return (a, v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3,), dtype=torch.float64, requires_grad=True)
    a = l0
    return [a], [l0]


def test_failed_compile_leaves_no_dispatch_mode_behind():
    args, _ = make_inputs()
    try:
        aotgrad.aot_function(f, aotgrad.nop)(*args)
    except Exception:  # noqa: BLE001, S110 - whether it compiles is the other regression's business
        pass
    leaked = _get_current_dispatch_mode_stack()
    for _ in leaked:
        _pop_mode()
    assert not leaked, f"dispatch modes left pushed: {leaked}"
