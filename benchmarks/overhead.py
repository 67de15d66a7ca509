"""Per-call overhead of the compiled training step over eager, in one process.

The step is forward + loss + backward (no optimizer) of the MLP 64-64-64 at batch 32 from
compile_and_step.py (or its GPT / CNN). Configurations: eager, torch.compile with backend
"aot_eager" (PyTorch's AOTAutograd, graphs run as traced) and "aotgrad" (the same role).
Each round times --iters steps of each configuration in turn (the order rotates each
round, so load falls on all alike); a round's figure is its median step, and the report
gives the median over rounds and, as load only adds time, the fastest round. Overhead =
step time - eager's step time, in microseconds, and aotgrad's overhead as a fraction of
aot_eager's (the bar: at most 0.5).

    python benchmarks/overhead.py --models mlp --iters 300 --rounds 15 --threads 1
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_and_step import make_model  # noqa: E402

CONFIGS = ("eager", "aot_eager", "aotgrad")


def _step(fn, inputs) -> None:
    fn(*inputs).backward()


def measure(name: str, iters: int, rounds: int, warmup: int) -> dict[str, list[float]]:
    model, inputs, _ = make_model(name)
    fns = {c: model if c == "eager" else torch.compile(model, backend=c, dynamic=False) for c in CONFIGS}
    for fn in fns.values():
        for _ in range(warmup):
            _step(fn, inputs)
    samples: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for r in range(rounds):
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
        for config in order:
            fn, times = fns[config], []
            for _ in range(iters):
                start = time.perf_counter()
                _step(fn, inputs)
                times.append(time.perf_counter() - start)
            samples[config].append(statistics.median(times))
    for p in model.parameters():
        p.grad = None
    return {c: [s * 1e6 for s in v] for c, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp", help="comma-separated: mlp, gpt, cnn")
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"command: python benchmarks/overhead.py {' '.join(sys.argv[1:])}")
    print("| model | statistic | eager us | aot_eager us | aotgrad us | aot_eager overhead us "
          "| aotgrad overhead us | aotgrad / aot_eager overhead |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        samples = measure(name, args.iters, args.rounds, args.warmup)
        for statistic, reduce in (("median of rounds", statistics.median), ("fastest round", min)):
            t = {c: reduce(v) for c, v in samples.items()}
            theirs, ours = t["aot_eager"] - t["eager"], t["aotgrad"] - t["eager"]
            print(f"| {name} | {statistic} | {t['eager']:.1f} | {t['aot_eager']:.1f} | {t['aotgrad']:.1f} "
                  f"| {theirs:.1f} | {ours:.1f} | {ours / theirs:.2f} |", flush=True)

if __name__ == "__main__":
    main()
