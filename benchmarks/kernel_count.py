"""The kernels Inductor generates for a zoo model's first training step, per backend.

A cold first step on the CPU is mostly Inductor compiling C++ kernels (about 0.5-1 s each on
this machine's two compile workers), so the count of kernels decides it more than anything
aotgrad does itself. For each backend, one fresh process with an empty Inductor cache (and
aotgrad's disk cache off) compiles a small MLP first (one-time costs such as Inductor's probe
of the CPU's vector instructions, paid before timing), then runs the model's first step; the
kernels are read from the output code Inductor wrote for each graph.

    python benchmarks/kernel_count.py --models phi,convnext            # counts per graph
    python benchmarks/kernel_count.py --models phi --names             # and each kernel's name

A kernel's name lists the ops fused into it (`cpp_fused_add_mul_tanh_3`). PyTorch names them
after the ops before decomposition (`native_layer_norm`), aotgrad's graphs after the decomposed
ones (`var_mean`, `rsqrt`): compare counts, and names only loosely. The MLP's own graphs are
counted too (the same for both backends).
"""
from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    print("| model | backend | first step | kernels | per graph |\n|---|---|---|---|---|")
    for model in args.models.split(","):
        for backend in BACKENDS:
            seconds, graphs = measure(model, backend)
            counts = " + ".join(str(len(g)) for g in graphs)
            print(f"| {model} | {backend} | {seconds:.1f} s | {sum(map(len, graphs))} | {counts} |", flush=True)
            if args.names:
                for graph in graphs:
                    print("\n".join(["", *(f"    {name}" for name in graph)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
