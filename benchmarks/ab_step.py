"""A/B of training-step time between torch.compile backends, in one process.

    python benchmarks/ab_step.py --model cnn --configs aot_eager,aotgrad,aotgrad_unboxed --rounds 30 --steps 20

Each round runs `--steps` steps of every configuration, the order rotating by one each
round (so no configuration always follows the same one). Prints each configuration's
median step time, its ratio to the first configuration, and page faults per step (the
kernel's minor-fault count: fresh pages the allocator asked for). `aotgrad_unboxed` is
aotgrad with a compiler that returns the graph module unchanged, so the runtime calls it
with unpacked arguments (the calling convention before runtime/boxed.py).
"""
from __future__ import annotations

import argparse
import copy
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compile_and_step as cs  # noqa: E402

import aotgrad  # noqa: E402


def _unboxed(gm, example_inputs):
    def plain(g, _):
        return g
    return aotgrad.aot_module_simplified(gm, example_inputs, plain, plain)


def compiled(model, config: str):
    backend = _unboxed if config == "aotgrad_unboxed" else config
    return model if config == "eager" else torch.compile(model, backend=backend)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", help="mlp, gpt or cnn")
    parser.add_argument("--configs", default="aot_eager,aotgrad")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, inputs, description = cs.make_model(args.model)
    runs = []
    for config in args.configs.split(","):
        twin = copy.deepcopy(model)
        fn, params = compiled(twin, config), list(twin.parameters())
        for _ in range(5):
            cs.train_step(fn, inputs, params)
        runs.append((config, fn, params))
    seconds = {config: [] for config, *_ in runs}
    faults = dict.fromkeys(seconds, 0)
    for r in range(args.rounds):
        shift = r % len(runs)
        for config, fn, params in runs[shift:] + runs[:shift]:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(args.steps):
                start = time.perf_counter()
                cs.train_step(fn, inputs, params)
                seconds[config].append(time.perf_counter() - start)
            faults[config] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    first = statistics.median(seconds[runs[0][0]])
    print(f"{description}; {args.rounds} rounds of {args.steps} steps, {args.threads} thread(s), "
          f"load average {os.getloadavg()[0]:.1f}")
    for config in seconds:
        median = statistics.median(seconds[config])
        print(f"  {config:16s} median {median * 1e3:9.3f} ms  ratio {median / first:5.3f}  "
              f"page faults/step {faults[config] / (args.rounds * args.steps):8.1f}")


if __name__ == "__main__":
    main()
