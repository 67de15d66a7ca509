"""Training steps under torch.compile(mode="reduce-overhead") (CUDA graphs): `inductor` against
`aotgrad_inductor`, and `aotgrad_inductor` without static inputs (no `static_input_idxs` for
Inductor: each parameter and buffer is then an input a CUDA graph copies into memory of its
own at each replay; saved values the forward's graph makes live in that graph's memory
anyway), per zoo model in fp32: the first step (Inductor's caches empty), the steady step
(a fresh copy of the batch each step; the variants take turns over --rounds rounds; median
of the rounds' means), the CUDA memory a variant holds after its first four steps (its
model copy, gradients, and the CUDA graphs' memory and input copies), and the first step's
loss and gradients against eager's.

    python benchmarks/reduce_overhead.py --device cuda --models resnet18,gpt2 --iters 20

On the CPU the mode changes nothing (CUDA graphs are CUDA's); the run checks the script.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402

import aotgrad  # noqa: E402
import aotgrad.backends as backends  # noqa: E402

VARIANTS = ("inductor", "aotgrad_inductor", "aotgrad_inductor_nostatic")
_STATIC = (backends._static_primals, backends._static_backward_inputs)


def nostatic(gm, example_inputs, **kwargs):
    """aotgrad_inductor as a backend object of its own (dynamo compiles for it again)."""
    return backends.aotgrad_inductor_backend(gm, example_inputs, **kwargs)


@contextlib.contextmanager
def selected(variant: str):
    """The backend for `variant`, with aotgrad's static inputs off inside for the _nostatic one
    (its backward compiles at the first backward, so every step runs inside this)."""
    off = variant.endswith("_nostatic")
    if off:
        backends._static_primals = lambda gm: []
        backends._static_backward_inputs = lambda gm, forward_partitioned: []
    try:
        yield nostatic if off else variant
    finally:
        backends._static_primals, backends._static_backward_inputs = _STATIC


def allocated(device: str) -> float:
    zoo._synchronize(device)
    return torch.cuda.memory_allocated() / 2**20 if device == "cuda" else float("nan")


def step(run: dict, batch: dict) -> torch.Tensor:
    """One training step on a fresh copy of the batch (new memory each step, as a data loader's)."""
    run["optimizer"].zero_grad(set_to_none=True)
    loss = run["fn"]({k: v.clone() for k, v in batch.items()})
    loss.backward()
    run["optimizer"].step()
    return loss.detach()


def first_step(module, batch: dict, variant: str, device: str, expected: list, eager_loss: float) -> dict:
    """The variant's compiled twin after its first step (timed, compared with eager's) and
    three more (CUDA graph trees record at the first ones); the memory it then holds."""
    before = allocated(device)
    twin = copy.deepcopy(module)
    with selected(variant) as backend, zoo._cold_cache():
        run = {"fn": torch.compile(twin, backend=backend, mode="reduce-overhead"),
               "optimizer": torch.optim.SGD(twin.parameters(), lr=1e-3), "times": []}
        zoo._synchronize(device)
        start = time.perf_counter()
        loss = run["fn"](batch)
        loss.backward()
        zoo._synchronize(device)
        run["first"] = time.perf_counter() - start
    run["loss"] = abs(float(loss.detach()) - eager_loss)
    top = max(float(e.abs().max()) for e in expected if e is not None)
    run["error"] = max((float((p.grad - e).abs().max()) / max(float(e.abs().max()), 1e-2 * top)
                        for p, e in zip(twin.parameters(), expected) if e is not None and p.grad is not None),
                       default=0.0)
    with selected(variant):
        for _ in range(3):
            step(run, batch)
    run["held"] = allocated(device) - before
    return run


def measure(name: str, device: str, iters: int, rounds: int) -> list[str]:
    torch._dynamo.reset()
    module, batch = zoo.build(name, device=device)
    eager = copy.deepcopy(module)
    eager_loss = eager(batch)
    eager_loss.backward()
    expected = [p.grad for p in eager.parameters()]
    runs = {v: first_step(module, batch, v, device, expected, float(eager_loss.detach())) for v in VARIANTS}
    for r in range(rounds):
        for variant in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:
            run = runs[variant]
            with selected(variant):
                zoo._synchronize(device)
                start = time.perf_counter()
                for _ in range(iters):
                    step(run, batch)
                zoo._synchronize(device)
            run["times"].append((time.perf_counter() - start) / iters)
    base = statistics.median(runs["inductor"]["times"])
    rows = []
    for variant, run in runs.items():
        median = statistics.median(run["times"])
        rows.append(f"| {name} | {variant} | {run['first']:.1f} s | {median * 1e3:.2f} ms | {median / base:.3f} "
                    f"| {run['held']:.1f} MiB | {run['loss']:.1e} | {run['error']:.1e} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,gpt2")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--iters", type=int, default=20, help="steps per variant per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    aotgrad.config.cache_dir = None
    print("| model | variant | first step | step | / inductor | held after 4 steps | |loss - eager| "
          "| grad error |\n|---|---|---|---|---|---|---|---|", flush=True)
    with zoo._dynamo_limits(list(VARIANTS)):
        for name in args.models.split(","):
            for row in measure(name, args.device, args.iters, args.rounds):
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
