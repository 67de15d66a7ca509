"""The rank side of the 2-process gloo tests (test_ddp_gloo.py), and the runner that starts them.

`run_ranks(directory, names)` (in the pytest process) starts 2 ranks on 127.0.0.1 and waits
for them, within a deadline. Each rank joins a gloo process group through a TCPStore, runs
every named scenario in `SCENARIOS`, and writes `<name>.rank<r>.json` per scenario: a JSON
dict of what it saw, or {"error": the traceback} (one failure does not hide the others).
The tests then assert on both ranks' dicts. Spawning costs ~20 s (imports), so one pair of
processes runs all the scenarios.

Every DDP scenario trains a model twice on each rank, eagerly and compiled, both wrapped the
same way (`Pair`), on data that differs per rank so the all-reduce matters, and records each
difference between the two (`mismatches`) and what aotgrad split (`history`).
"""
from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from tests.distributed.models import (  # noqa: F401 (the scenarios use them)
    CallMethodForward, Checkpointed, Contexts, FakeDDP, GradModeRegions, Layers, NoParameters)

WORLD_SIZE = 2


# -- the pytest side -------------------------------------------------------------

def run_ranks(directory: Path, names: list[str], timeout_s: float = 420) -> str | None:
    """Run the scenarios `names` on 2 spawned ranks, results under `directory`. Returns None
    when both ranks finished, else what went wrong (a rank's traceback, or the timeout);
    the children are killed on a timeout or a failure and never outlive this call."""
    server = dist.TCPStore("127.0.0.1", 0, WORLD_SIZE + 1, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=60))  # port 0: a free port, no race
    context = torch.multiprocessing.start_processes(
        worker, args=(server.port, str(directory), names), nprocs=WORLD_SIZE, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                return f"the ranks did not finish within {timeout_s} s and were killed"
        return None
    except Exception as e:  # ProcessRaisedException / ProcessExitedException: a rank died outside a scenario
        return f"a rank failed: {type(e).__name__}: {e}"
    finally:
        for process in context.processes:  # only our own children, by object
            if process.is_alive():
                process.kill()
        for process in context.processes:
            process.join()
        del server  # (kept alive until the ranks are gone)


def read_result(directory: Path, name: str, rank: int) -> dict | None:
    path = Path(directory) / f"{name}.rank{rank}.json"
    return json.loads(path.read_text()) if path.exists() else None


# -- the rank side -----------------------------------------------------------------

def worker(rank: int, port: int, directory: str, names: list[str]) -> None:
    torch.set_num_threads(1)  # 2 ranks on 2 cores
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    from torch._inductor import config as inductor_config
    inductor_config.compile_threads = 1
    import aotgrad  # noqa: F401 (registers the backends, turns PyTorch's DDP splitter off)

    store = dist.TCPStore("127.0.0.1", port, WORLD_SIZE + 1, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=60))
    try:
        for name in names:
            started = time.perf_counter()
            try:
                result = SCENARIOS[name](rank)
            except Exception:
                result = {"error": traceback.format_exc()}
            result["seconds"] = round(time.perf_counter() - started, 2)
            path = Path(directory) / f"{name}.rank{rank}.json"
            path.with_suffix(".tmp").write_text(json.dumps(result))
            path.with_suffix(".tmp").rename(path)  # whole files only, even if killed mid-write
    finally:
        dist.destroy_process_group()


def fresh_start() -> None:
    """Every scenario starts from the same state: no compiled frames, no recorded splits."""
    import aotgrad
    from aotgrad.distributed import ddp

    torch._dynamo.reset()
    ddp.history.clear()
    aotgrad.config.optimize_ddp = True
    torch._dynamo.config.optimize_ddp = False  # aotgrad's splitter runs where PyTorch's is off


def batch(rank: int, step: int, shape: tuple) -> torch.Tensor:
    """Data of this rank and step: different on each rank, the same for both of its models."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(1000 * rank + step))


def _difference(what: str, a, b, tol: float) -> str | None:
    if a is None or b is None:
        return None if a is None and b is None else f"{what}: one is None ({a is None}, {b is None})"
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{what}: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
    if not torch.allclose(a, b, rtol=tol, atol=tol):
        return f"{what}: max difference {(a.float() - b.float()).abs().max().item():.3g} (tolerance {tol})"
    return None


class Pair:
    """One model trained twice with SGD, eagerly and through torch.compile, each inside
    `wrap` (DDP, FSDP); `step` compares outputs, gradients and parameters."""

    def __init__(self, make: Callable[[], nn.Module], wrap: Callable[[nn.Module], nn.Module],
                 backend: str = "aotgrad", tol: float = 1e-5, ignore: tuple = ()):
        torch.manual_seed(0)
        model = make()
        self.eager_model, self.compiled_model = model, copy.deepcopy(model)
        if ignore:
            for m in (self.eager_model, self.compiled_model):
                DDP._set_params_and_buffers_to_ignore_for_model(m, list(ignore))
        self.eager = wrap(self.eager_model)
        self.wrapped = wrap(self.compiled_model)
        self.compiled = torch.compile(self.wrapped, backend=backend)
        self.eager_opt = torch.optim.SGD(self.eager.parameters(), lr=0.01)
        self.compiled_opt = torch.optim.SGD(self.wrapped.parameters(), lr=0.01)
        self.tol = tol
        self.mismatches: list[str] = []
        self.output_sums: list[float] = []

    def step(self, x: torch.Tensor, observe: Callable | None = None) -> None:
        """One training step of both; `observe(output)` sees the compiled output before its backward."""
        n = len(self.output_sums)
        self.eager_opt.zero_grad()
        self.compiled_opt.zero_grad()
        out_e, out_c = self.eager(x), self.compiled(x)
        if observe is not None:
            observe(out_c)
        self._note(_difference(f"step {n}: output", out_e, out_c, self.tol))
        out_e.float().pow(2).mean().backward()
        out_c.float().pow(2).mean().backward()
        pairs = list(zip(self.eager.named_parameters(), self.wrapped.parameters()))
        for (name, p), q in pairs:
            self._note(_difference(f"step {n}: gradient of {name}", p.grad, q.grad, self.tol))
        self.eager_opt.step()
        self.compiled_opt.step()
        for (name, p), q in pairs:
            self._note(_difference(f"step {n}: parameter {name} after the SGD step", p.detach(), q.detach(), self.tol))
        self.output_sums.append(float(out_c.detach().float().sum()))

    def _note(self, difference: str | None) -> None:
        if difference is not None:
            self.mismatches.append(difference)

    def summary(self) -> dict:
        """What both ranks report: the differences, the sums that tell ranks apart (outputs)
        or must agree across them (all-reduced gradients), and aotgrad's splits."""
        from aotgrad.distributed import ddp

        return {
            "mismatches": self.mismatches,
            "output_sums": self.output_sums,
            "grad_sums": {name: None if p.grad is None else float(p.grad.sum())
                          for name, p in self.compiled_model.named_parameters()},
            "history": [[{"size": b.size, "params": b.params, "param_ids": b.param_ids} for b in opt.buckets]
                        for opt in ddp.history],
        }


def train(make, shape: tuple, rank: int, *, wrap, steps: int = 3, **pair_kwargs) -> dict:
    """`Pair(make, wrap).step` for `steps` steps on this rank's data; its summary."""
    pair = Pair(make, wrap, **pair_kwargs)
    for step in range(steps):
        pair.step(batch(rank, step, shape))
    return pair.summary()


def in_ddp(**kwargs) -> Callable[[nn.Module], nn.Module]:
    return lambda module: DDP(module, **kwargs)


# -- scenarios: rank -> JSON-able dict ---------------------------------------------------

def pieces(rank: int, n: int) -> dict:
    fresh_start()
    return train(lambda: Layers(n), (8, 512), rank, wrap=in_ddp(bucket_cap_mb=1))


def one_bucket(rank: int) -> dict:
    fresh_start()
    return train(lambda: Layers(3), (8, 512), rank, wrap=in_ddp(bucket_cap_mb=250))


IGNORED = ("layers.1.weight", "layers.2.bias")


def ignored_parameters(rank: int) -> dict:
    fresh_start()
    pair = Pair(lambda: Layers(3), in_ddp(bucket_cap_mb=1), ignore=IGNORED)
    for step in range(3):
        pair.step(batch(rank, step, (8, 512)))
    result = pair.summary()
    named = dict(pair.compiled_model.named_parameters())
    result["ignored_in_a_bucket"] = sorted(name for name in IGNORED for opt in result["history"] for b in opt
                                           if id(named[name]) in b["param_ids"])
    result["ddp_ignores"] = sorted(pair.wrapped.parameters_to_ignore)
    return result


def contexts(rank: int, kind: str) -> dict:
    fresh_start()
    # no_grad / enable_grad-in-no_grad leave layers without gradients: DDP needs to be told, as in eager
    return train(lambda: Contexts(kind), (8, 512), rank, tol=1e-2 if kind == "autocast" else 1e-5,
                 wrap=in_ddp(bucket_cap_mb=1, find_unused_parameters=kind != "autocast"))


def grad_mode_regions(rank: int, kind: str) -> dict:
    fresh_start()
    return train(lambda: GradModeRegions(kind), (8, 512), rank, wrap=in_ddp(bucket_cap_mb=1))


def checkpointed(rank: int) -> dict:
    fresh_start()
    return train(Checkpointed, (8, 512), rank, wrap=in_ddp(bucket_cap_mb=1))


def no_parameters(rank: int) -> dict:
    """DDP refuses a module without parameters, so the seed's model runs inside a DDP
    stand-in in this rank, as PyTorch's own test (test_issue90375) does."""
    from aotgrad.distributed import ddp as aotgrad_ddp

    fresh_start()
    result = {}
    try:
        DDP(NoParameters())
        result["ddp_refusal"] = None
    except Exception as e:
        result["ddp_refusal"] = {"type": type(e).__name__, "message": str(e)}
    out = torch.compile(FakeDDP(NoParameters()), backend="aotgrad")()
    result["output"] = out.tolist()
    result["expected"] = NoParameters()().tolist()
    result["buckets"] = [len(opt.buckets) for opt in aotgrad_ddp.history]
    return result


def call_method_forward(rank: int) -> dict:
    fresh_start()
    return train(CallMethodForward, (2, 5, 10, 96), rank, tol=1e-4, wrap=in_ddp(bucket_cap_mb=0.05))


class Timeline:
    """When each DDP bucket's all-reduce is launched and done (a comm hook) and when each
    compiled piece's backward starts and ends (hooks on the grad_fn of a piece's output)."""

    def __init__(self):
        self.events: list[tuple[str, int, float]] = []

    def record(self, kind: str, index: int) -> None:
        self.events.append((kind, index, time.perf_counter()))

    def comm_hook(self, state, bucket):
        """DDP's default all-reduce (average), timed."""
        index = bucket.index()
        self.record("launch", index)
        future = dist.all_reduce(bucket.buffer().div_(WORLD_SIZE), async_op=True).get_future()

        def done(fut):
            self.record("done", index)
            return fut.value()[0]
        return future.then(done)

    def watch_backward(self, index: int, outputs) -> None:
        for output in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
            if isinstance(output, torch.Tensor) and output.grad_fn is not None:
                output.grad_fn.register_prehook(lambda grad_outputs: self.record("backward_start", index))
                output.grad_fn.register_hook(lambda grad_inputs, grad_outputs: self.record("backward_end", index))
                return

    def report(self) -> dict:
        start = min(t for _, _, t in self.events)
        events = [[kind, index, round((t - start) * 1e3, 3)] for kind, index, t in self.events]
        launches = [t for kind, _, t in events if kind == "launch"]
        ends = [t for kind, _, t in events if kind == "backward_end"]
        return {"events": events,
                "first_launch_ms": min(launches) if launches else None,
                "last_backward_end_ms": max(ends) if ends else None,
                "pieces_timed": sorted({i for kind, i, _ in events if kind == "backward_end"})}


def overlap_timeline(rank: int, split: bool, steps: int = 4) -> dict:
    """Train 4 layers under DDP (1 MiB buckets) and time the last step; DDP's buckets
    follow the gradients' order only from the second step on."""
    import aotgrad
    from aotgrad.distributed import ddp as aotgrad_ddp

    fresh_start()
    aotgrad.config.optimize_ddp = split
    pair = Pair(lambda: Layers(4), in_ddp(bucket_cap_mb=1))
    timeline = Timeline()
    pair.wrapped.register_comm_hook(None, timeline.comm_hook)

    def observe(out):
        timeline.events.clear()  # the step's backward starts next
        if not split:  # one graph: its output's grad_fn is its whole backward
            timeline.watch_backward(0, out)
        elif aotgrad_ddp.history and aotgrad_ddp.history[-1].on_piece_call is None:
            aotgrad_ddp.history[-1].on_piece_call = timeline.watch_backward  # from the next forward on
    for step in range(steps):
        pair.step(batch(rank, step, (64, 512)), observe)
    result = pair.summary()
    result.update(timeline.report())
    return result


def overlap(rank: int) -> dict:
    import aotgrad

    try:
        return {"split": overlap_timeline(rank, split=True), "whole": overlap_timeline(rank, split=False)}
    finally:
        aotgrad.config.optimize_ddp = True


def pytorch_splitter(rank: int) -> dict:
    """PyTorch's DDPOptimizer on (its flag read when the frame is converted): it splits,
    aotgrad compiles its pieces as they are. Its piece count comes from its own buckets."""
    import aotgrad
    from torch._dynamo.backends.distributed import DDPOptimizer as PyTorchDDPOptimizer

    fresh_start()
    pytorch_pieces = []
    original = PyTorchDDPOptimizer.compile_fn

    def counting_compile_fn(self, gm, example_inputs, **kwargs):
        compiled = original(self, gm, example_inputs, **kwargs)
        pytorch_pieces.append(len(self.buckets))
        return compiled
    before = aotgrad.counters["ddp"]["pieces_from_pytorch_splitter"]
    torch._dynamo.config.optimize_ddp = True
    PyTorchDDPOptimizer.compile_fn = counting_compile_fn
    try:
        result = train(lambda: Layers(3), (8, 512), rank, wrap=in_ddp(bucket_cap_mb=1))
    finally:
        PyTorchDDPOptimizer.compile_fn = original
        torch._dynamo.config.optimize_ddp = False
        torch._dynamo.reset()
    result["pytorch_pieces"] = pytorch_pieces
    result["pieces_from_pytorch_splitter"] = aotgrad.counters["ddp"]["pieces_from_pytorch_splitter"] - before
    return result


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)
        self.c = nn.Linear(64, 4)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def fsdp(rank: int) -> dict:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    fresh_start()
    cpu = torch.device("cpu")  # FSDP wants an accelerator unless told the device
    result = train(Small, (8, 64), rank, wrap=lambda m: FSDP(m, use_orig_params=True, device_id=cpu), tol=1e-5)
    torch._dynamo.reset()
    torch.manual_seed(0)
    flat = FSDP(Small(), use_orig_params=False, device_id=cpu)
    try:
        torch.compile(flat, backend="aotgrad", fullgraph=True)(batch(rank, 0, (8, 64)))
        result["flat_parameters_error"] = None
    except Exception as e:
        result["flat_parameters_error"] = {"type": type(e).__name__, "message": str(e)}
    return result


def explain_real_ddp(rank: int) -> dict:
    from aotgrad.distributed import explain

    fresh_start()
    torch.manual_seed(0)
    report = explain(DDP(Layers(3), bucket_cap_mb=1), batch(rank, 0, (4, 512)))
    return {"text": str(report), "buckets": [b.params for b in report.buckets],
            "split_points": [list(p) for p in report.split_points]}


def inductor(rank: int) -> dict:
    fresh_start()
    return train(lambda: Layers(2), (8, 512), rank, backend="aotgrad_inductor", tol=1e-4,
                 wrap=in_ddp(bucket_cap_mb=1))


def _compiled_autograd_start() -> None:
    """fresh_start, the DDP modules of earlier scenarios collected, no captured graphs."""
    import gc

    from aotgrad import compiled_autograd

    fresh_start()
    gc.collect()
    compiled_autograd.reset()
    torch.manual_seed(0)


def _nop_compiler(gm):  # (one compiler for every step: compiled autograd's cache is per compiler)
    return gm


def _against_averaged(model, reference, step: int) -> list[str]:
    """How `model`'s gradients differ from `reference`'s averaged over the ranks (eager DDP's)."""
    found = []
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        averaged = q.grad.clone()
        dist.all_reduce(averaged)
        averaged /= WORLD_SIZE
        found.append(_difference(f"step {step}: gradient of {name}", averaged, p.grad, 1e-5))
    return [d for d in found if d is not None]


def compiled_autograd_ddp(rank: int, python_reducer: bool) -> dict:
    """DDP trained for 3 SGD steps with every backward inside aotgrad.compiled_autograd.enable,
    against the same model trained without DDP whose gradients are averaged over the ranks by
    hand (eager DDP's result; an eager DDP module would itself be a live C++ reducer). With
    DDP's C++ reducer, whose hooks a compiled backward cannot run, the backwards run on
    PyTorch's engine; built with optimize_ddp = "python_reducer" they are captured."""
    import aotgrad
    from aotgrad import compiled_autograd

    _compiled_autograd_start()
    model = Layers(2, width=64)
    reference = copy.deepcopy(model)
    torch._dynamo.config.optimize_ddp = "python_reducer" if python_reducer else False
    try:
        ddp = DDP(model, bucket_cap_mb=1)
    finally:
        torch._dynamo.config.optimize_ddp = False
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)
    mismatches, output_sums = [], []
    for step in range(3):
        x = batch(rank, step, (8, 64))
        opt.zero_grad()
        ref_opt.zero_grad()
        out = ddp(x)
        with compiled_autograd.enable(_nop_compiler):
            out.pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
        mismatches += _against_averaged(model, reference, step)
        opt.step()
        ref_opt.step()
        output_sums.append(float(out.detach().sum()))
    return {"mismatches": mismatches, "output_sums": output_sums,
            "grad_sums": {name: float(p.grad.sum()) for name, p in model.named_parameters()},
            "uses_python_reducer": ddp._use_python_reducer,
            "counters": dict(aotgrad.counters["compiled_autograd"])}


def compiled_autograd_no_sync(rank: int) -> dict:
    """Gradient accumulation with DDP's C++ reducer under compiled autograd: two micro-batches
    inside `no_sync()` (nothing to all-reduce: compiled), then one synced (PyTorch's engine:
    its reducer all-reduces everything accumulated), twice; against the model trained without
    DDP, its accumulated gradients averaged over the ranks by hand."""
    import aotgrad
    from aotgrad import compiled_autograd

    _compiled_autograd_start()
    model = Layers(2, width=64)
    reference = copy.deepcopy(model)
    ddp = DDP(model, bucket_cap_mb=1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)
    mismatches = []
    for step in range(2):
        opt.zero_grad()
        ref_opt.zero_grad()
        for micro in range(3):
            x = batch(rank, 3 * step + micro, (8, 64))
            with ddp.no_sync() if micro < 2 else contextlib.nullcontext():
                loss = ddp(x).pow(2).mean()
                with compiled_autograd.enable(_nop_compiler):
                    loss.backward()
            reference(x).pow(2).mean().backward()
        mismatches += _against_averaged(model, reference, step)
        opt.step()
        ref_opt.step()
    return {"mismatches": mismatches, "counters": dict(aotgrad.counters["compiled_autograd"])}


def compiled_autograd_fsdp(rank: int) -> dict:
    """FSDP (flat parameters) trained for 3 SGD steps with every backward inside
    aotgrad.compiled_autograd.enable: its reduce-scatter runs from Python hooks on the flat
    parameter's AccumulateGrad node, which the captured graph calls. Compared with the same
    model trained without FSDP, its gradients averaged over the ranks by hand."""
    import aotgrad
    from aotgrad import compiled_autograd
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    _compiled_autograd_start()
    model = Small()
    reference = copy.deepcopy(model)
    sharded = FSDP(model, device_id=torch.device("cpu"))
    opt = torch.optim.SGD(sharded.parameters(), lr=0.01)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)
    for step in range(3):
        x = batch(rank, step, (8, 64))
        opt.zero_grad()
        ref_opt.zero_grad()
        with compiled_autograd.enable(_nop_compiler):
            sharded(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
        for q in reference.parameters():
            dist.all_reduce(q.grad)
            q.grad /= WORLD_SIZE
        opt.step()
        ref_opt.step()
    with FSDP.summon_full_params(sharded):
        mismatches = [_difference(f"parameter {name} after 3 steps", q.detach(), p.detach(), 1e-5)
                      for (name, p), q in zip(sharded.named_parameters(), reference.parameters())]
    return {"mismatches": [m for m in mismatches if m is not None],
            "counters": dict(aotgrad.counters["compiled_autograd"])}


SCENARIOS: dict[str, Callable[[int], dict]] = {
    **{f"pieces_{n}": functools.partial(pieces, n=n) for n in (1, 2, 3, 4)},
    "one_bucket": one_bucket,
    "ignored_parameters": ignored_parameters,
    **{f"contexts_{kind}": functools.partial(contexts, kind=kind) for kind in ("autocast", "no_grad", "enable_grad")},
    **{f"grad_mode_{kind}": functools.partial(grad_mode_regions, kind=kind) for kind in ("no_grad", "enable_grad")},
    "checkpointed": checkpointed,
    "no_parameters": no_parameters,
    "call_method_forward": call_method_forward,
    "overlap": overlap,
    "pytorch_splitter": pytorch_splitter,
    "explain": explain_real_ddp,
    "fsdp": fsdp,
    "inductor": inductor,
    "compiled_autograd_cpp_reducer": functools.partial(compiled_autograd_ddp, python_reducer=False),
    "compiled_autograd_python_reducer": functools.partial(compiled_autograd_ddp, python_reducer=True),
    "compiled_autograd_fsdp": compiled_autograd_fsdp,
    "compiled_autograd_no_sync": compiled_autograd_no_sync,
}
