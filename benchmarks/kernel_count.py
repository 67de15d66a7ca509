"""The kernels Inductor generates for a zoo model's first training step, per backend.

A cold first step on the CPU is mostly Inductor compiling C++ kernels (about 0.5-1 s each on
this machine's two compile workers), so the count of kernels decides it more than anything
aotgrad does itself. For each backend, one fresh process with an empty Inductor cache (and
aotgrad's disk cache off) compiles a small MLP first (one-time costs such as Inductor's probe
of the CPU's vector instructions, paid before timing), then runs the model's first step; the
kernels are read from the output code Inductor wrote for each graph.

    python benchmarks/kernel_count.py --models phi,convnext            # counts per graph
    python benchmarks/kernel_count.py --models phi --names             # and each kernel's name
    python benchmarks/kernel_count.py --models phi --processes 3       # first step: median of 3

One cold process's first step varies by about 15% on this machine: `--processes N` runs N cold
processes per backend, the backends taking turns, and gives the median (and range) and the
ratio aotgrad_inductor / inductor of the medians.

A kernel's name lists the ops fused into it (`cpp_fused_add_mul_tanh_3`). PyTorch names them
after the ops before decomposition (`native_layer_norm`), aotgrad's graphs after the decomposed
ones (`var_mean`, `rsqrt`): compare counts, and names only loosely. The MLP's own graphs are
counted too (the same for both backends).
"""
from __future__ import annotations

import argparse
import json
import statistics
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("inductor", "aotgrad_inductor")
_KERNEL = re.compile(r"^(\w+) = async_compile\.(?:cpp_pybinding|cpp|triton)\(", re.MULTILINE)


def kernels_by_graph(cache_dir: str) -> list[list[str]]:
    """The kernel names of each compiled graph's output code under `cache_dir` (an Inductor
    cache folder), largest graph first."""
    graphs = []
    for root, _, files in os.walk(cache_dir):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(root, name)) as f:
                    source = f.read()
                if "def call(" in source:
                    graphs.append(_KERNEL.findall(source))
    return sorted(graphs, key=len, reverse=True)


def child(model: str, backend: str) -> None:
    """In a fresh process: the MLP, then the model's first step; prints seconds as JSON."""
    sys.path.insert(0, HERE)
    import torch
    import zoo
    import aotgrad

    aotgrad.config.cache_dir = None
    torch.set_num_threads(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    torch.compile(mlp, backend=backend)(torch.randn(4, 8)).sum().backward()
    module, batch = zoo.build(model)
    run = zoo.make_run(module, batch, backend)
    start = time.perf_counter()
    zoo.train_step(run, autocast=False)
    print(json.dumps({"seconds": time.perf_counter() - start}))


def measure(model: str, backend: str) -> tuple[float, list[list[str]]]:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        command = [sys.executable, os.path.abspath(__file__), "--child", model, backend]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{model} under {backend} failed:\n{done.stderr[-3000:]}")
        seconds = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
        return seconds, kernels_by_graph(cache)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="phi")
    parser.add_argument("--names", action="store_true", help="list each graph's kernels")
    parser.add_argument("--processes", type=int, default=1, help="cold processes per backend (median)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    print("| model | backend | first step | kernels | per graph |\n|---|---|---|---|---|")
    for model in args.models.split(","):
        seconds, graphs = first_steps(model, args.processes)
        for backend in BACKENDS:
            counts = " + ".join(str(len(g)) for g in graphs[backend])
            print(f"| {model} | {backend} | {_seconds(seconds[backend])} | {sum(map(len, graphs[backend]))} "
                  f"| {counts} |", flush=True)
            if args.names:
                for graph in graphs[backend]:
                    print("\n".join(["", *(f"    {name}" for name in graph)]))
        if args.processes > 1:
            ratio = statistics.median(seconds["aotgrad_inductor"]) / statistics.median(seconds["inductor"])
            print(f"| {model} | ratio of medians | {ratio:.2f} | | |", flush=True)
    return 0


def first_steps(model: str, processes: int) -> tuple[dict, dict]:
    """Each backend's first-step seconds over `processes` cold processes (the backends taking
    turns, so a load drift hits both), and the kernels of its first process."""
    seconds: dict = {b: [] for b in BACKENDS}
    graphs: dict = {}
    for i in range(processes):
        for backend in BACKENDS if i % 2 == 0 else BACKENDS[::-1]:
            took, kernels = measure(model, backend)
            seconds[backend].append(took)
            graphs.setdefault(backend, kernels)
    return seconds, graphs


def _seconds(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f} s"
    return f"{statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"


if __name__ == "__main__":
    sys.exit(main())
