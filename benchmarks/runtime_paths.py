"""Per-call time of the runtime's interpreted paths, in one process: the steps the generated
code hands over (issue 25: the runtime rebuilt as steps). Run it from two checkouts in turn to
compare commits (each prints one line):

    for r in 1 2 3 4 5 6; do for d in ../old ../new; do (cd $d && PYTHONPATH=$PWD python benchmarks/runtime_paths.py $d); done; done

- alias epilogue: `x.view(-1), (x * w).sum()`: the generated call runs the epilogue's steps
  interpreted (an output viewing an input), then the backward;
- absent tangent: `x.sin(), x.cos()` with a gradient into the first only: the backward's
  steps interpreted (the variant without the second tangent);
- dynamic step: a torch.compile(dynamic=True) MLP's forward and backward (the backward's
  tangent layout is made per call: interpreted).
Each figure is the median over rounds of the mean step, in microseconds, one thread.
"""
from __future__ import annotations

import statistics
import sys
import time

import torch

import aotgrad


def _view_of_input(x, w):
    return x.view(-1), (x * w).sum()


def _two_outputs(x):
    return x.sin(), x.cos()


def _median_us(step, iters: int = 2000, rounds: int = 9) -> float:
    for _ in range(200):
        step()
    means = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iters):
            step()
        means.append((time.perf_counter() - start) / iters * 1e6)
    return statistics.median(means)


def main(label: str) -> str:
    torch.set_num_threads(1)
    x, w = torch.randn(2, 3), torch.randn(3, requires_grad=True)
    aliasing = aotgrad.aot_function(_view_of_input, aotgrad.nop)
    two = aotgrad.aot_function(_two_outputs, aotgrad.nop)
    xa = torch.randn(3, requires_grad=True)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    dynamic = torch.compile(mlp, backend="aotgrad", dynamic=True)
    batches = [torch.randn(n, 8) for n in (3, 5)]
    for b in batches:
        dynamic(b).sum().backward()

    def alias_step():
        _, s = aliasing(x, w)
        s.backward()

    def absent_step():
        a, _ = two(xa)
        a.sum().backward()

    def dynamic_step():
        dynamic(batches[1]).sum().backward()
    return (f"{label}: alias epilogue {_median_us(alias_step):.1f} us; absent tangent {_median_us(absent_step):.1f} us; "
            f"dynamic step {_median_us(dynamic_step, 1000):.1f} us")


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "this checkout"))
