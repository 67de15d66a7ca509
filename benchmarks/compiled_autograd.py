"""Backward time under compiled autograd: aotgrad against eager and PyTorch's own, in one process.

Models (from compile_and_step.py, each forward ends in its loss): the MLP, the 2-block GPT and
the CNN. The forward runs eagerly (not timed); the timed part is `loss.backward()`, with
`.grad` set to None before each step so every backward has the same graph. Configurations:
  eager               PyTorch's engine
  aotgrad+inductor    aotgrad.compiled_autograd.enable(lambda gm: torch.compile(gm, backend="inductor"))
  aotgrad+nop         aotgrad.compiled_autograd.enable(lambda gm: gm)
  pytorch+inductor    torch._dynamo.compiled_autograd._enable(same compiler)
  pytorch+nop         torch._dynamo.compiled_autograd._enable(lambda gm: gm)
Each configuration is warmed up (capture, compile), then the configurations take turns for
--rounds rounds of --iters backwards; the median per configuration is reported, with its ratio
to eager. Gradients are checked against eager's after the timed steps.

Overhead on a cache hit: with the no-op compiler, the compiled graph is wrapped in a timer; the
overhead is the backward's time minus the time inside the graph (walking the autograd graph,
collecting saved tensors and hooks, computing the key, calling), in microseconds per backward
and per autograd node (the number of nodes the engine would run).

Where an Inductor backward's time goes: for aotgrad+inductor and pytorch+inductor, the time
inside the callable compiler_fn returned (Dynamo's frame and guards, then Inductor's graph) and
inside Inductor's graph alone (the callable Inductor's compile_fx returned to Dynamo), medians
per backward. When the compiled callable alone takes as long as eager's whole backward, no
reduction of compiled autograd's own overhead can make that backward faster than eager's.

Activation memory: before one backward, the storages every node saved are noted (with their
bytes; parameters excluded) and a post-hook on every node records the bytes of those still
alive; their mean over the backward, eager against aotgrad's compiled autograd (its graph frees
each saved tensor after its last use), with the forward's total for scale.

    python benchmarks/compiled_autograd.py --models mlp,gpt,cnn --iters 20 --rounds 5
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from typing import Callable

import torch
from torch._dynamo import compiled_autograd as pytorch_compiled_autograd  # the reference, not aotgrad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_and_step import make_model  # noqa: E402

import aotgrad  # noqa: E402
from aotgrad import compiled_autograd  # noqa: E402
from aotgrad.compiled_autograd.walk import gradient_edge, walk  # noqa: E402

CONFIGS = ["eager", "aotgrad+inductor", "aotgrad+nop", "pytorch+inductor", "pytorch+nop"]


class Timed:
    """A compiled graph that adds up the time spent inside it."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.seconds = 0.0

    def __call__(self, *args):
        start = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            self.seconds += time.perf_counter() - start


class Config:
    def __init__(self, name: str):
        self.name = name
        self.timed: list[Timed] = []         # what compiler_fn returned
        self.inductor: list[Timed] = []      # Inductor's graphs inside them
        self.compiler = self._compiler()

    def _compiler(self) -> Callable | None:
        if self.name == "eager":
            return None
        if self.name.endswith("inductor"):
            from torch._inductor.compile_fx import compile_fx  # what backend="inductor" calls

            def inductor(gm, example_inputs):
                timed = Timed(compile_fx(gm, example_inputs))
                self.inductor.append(timed)
                return timed

            def compile_with_inductor(gm):
                timed = Timed(torch.compile(gm, backend=inductor))
                self.timed.append(timed)
                return timed
            return compile_with_inductor

        def nop(gm):
            timed = Timed(gm)
            self.timed.append(timed)
            return timed
        return nop

    def context(self):
        if self.compiler is None:
            return contextlib.nullcontext()
        if self.name.startswith("aotgrad"):
            return compiled_autograd.enable(self.compiler)
        return pytorch_compiled_autograd._enable(self.compiler)

    def graph_seconds(self) -> float:
        return sum(t.seconds for t in self.timed)

    def inductor_seconds(self) -> float:
        return sum(t.seconds for t in self.inductor)


def node_count(loss: torch.Tensor) -> int:
    return len(walk([gradient_edge(loss)], None, True).steps)


def backward_seconds(model, inputs, config: Config) -> float:
    for p in model.parameters():
        p.grad = None
    loss = model(*inputs)
    with config.context():
        start = time.perf_counter()
        loss.backward()
        return time.perf_counter() - start


def _nodes(loss: torch.Tensor) -> list:
    """Every node of the autograd graph behind `loss`."""
    stack, seen = [loss.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.append(node)
        stack.extend(child for child, _ in node.next_functions)
    return seen


def _saved_storages(loss: torch.Tensor) -> dict:
    """StorageWeakRef -> bytes of every tensor the autograd graph's nodes saved."""
    from torch.multiprocessing.reductions import StorageWeakRef
    found: dict = {}
    for node in _nodes(loss):
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            value = getattr(node, attr)
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor) and not (t.is_leaf and t.requires_grad):  # not a parameter
                    storage = t.untyped_storage()
                    found[StorageWeakRef(storage)] = storage.nbytes()
    return found


def saved_bytes_alive(model, inputs, config: Config) -> tuple[int, float]:
    """(bytes saved by the forward, mean of them still alive after each node of the backward)."""
    for p in model.parameters():
        p.grad = None
    loss = model(*inputs)
    storages = _saved_storages(loss)
    root = loss
    total = sum(storages.values())
    samples = []

    def sample(*_):
        samples.append(sum(n for ref, n in storages.items() if not ref.expired()))

    handles = [node.register_hook(sample) for node in _nodes(loss)]
    del loss
    with config.context():
        root.backward()
    for handle in handles:  # AccumulateGrad nodes outlive the graph: leave no hook on them for what runs next
        handle.remove()
    return total, statistics.mean(samples)


def grads(model) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def benchmark(name: str, iters: int, rounds: int) -> dict:
    model, inputs, text = make_model(name)
    configs = [Config(c) for c in CONFIGS]
    torch._dynamo.reset()
    compiled_autograd.reset()
    backward_seconds(model, inputs, configs[0])
    expected = grads(model)
    nodes = node_count(model(*inputs))
    times: dict[str, list[float]] = {c.name: [] for c in configs}
    overhead: dict[str, list[float]] = {c.name: [] for c in configs if c.name.endswith("nop")}
    inside: dict[str, list[float]] = {c.name: [] for c in configs if c.name.endswith("inductor")}
    inside_inductor: dict[str, list[float]] = {c.name: [] for c in configs if c.name.endswith("inductor")}
    correct = {}
    # PyTorch's compiled autograd keeps one cache for every compiler: its two configurations
    # are timed in turn with the others in two phases, its cache reset in between
    by_name = {c.name: c for c in configs}
    for phase in (["eager", "aotgrad+inductor", "aotgrad+nop", "pytorch+inductor"], ["eager", "pytorch+nop"]):
        pytorch_compiled_autograd.reset()
        group = [by_name[n] for n in phase]
        for config in group[1:]:  # warm up: capture and compile
            for _ in range(3):
                backward_seconds(model, inputs, config)
        for r in range(rounds):
            for config in group[r % len(group):] + group[:r % len(group)]:
                for _ in range(iters):
                    graph_before, inductor_before = config.graph_seconds(), config.inductor_seconds()
                    seconds = backward_seconds(model, inputs, config)
                    times[config.name].append(seconds)
                    if config.name in overhead:
                        overhead[config.name].append(seconds - (config.graph_seconds() - graph_before))
                    if config.name in inside:
                        inside[config.name].append(config.graph_seconds() - graph_before)
                        inside_inductor[config.name].append(config.inductor_seconds() - inductor_before)
        for config in group:
            backward_seconds(model, inputs, config)
            got = grads(model)
            correct[config.name] = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(got, expected))
    captures = aotgrad.counters["compiled_autograd"]["captures"]
    memory = {c.name: saved_bytes_alive(model, inputs, c) for c in (configs[0], configs[2])}
    return {"model": text, "nodes": nodes, "median": {k: statistics.median(v) for k, v in times.items()},
            "overhead": {k: statistics.median(v) for k, v in overhead.items()}, "correct": correct,
            "inside": {k: statistics.median(v) for k, v in inside.items()},
            "inside_inductor": {k: statistics.median(v) for k, v in inside_inductor.items()},
            "aotgrad_captures": captures, "memory": memory}


def markdown(results: list[dict]) -> str:
    lines = ["| model (autograd nodes) | " + " | ".join(CONFIGS) + " |", "|---" * (len(CONFIGS) + 1) + "|"]
    for res in results:
        eager = res["median"]["eager"]
        cells = []
        for c in CONFIGS:
            ms = res["median"][c] * 1e3
            ok = "" if res["correct"][c] else " **WRONG**"
            cells.append(f"{ms:.3f} ms" + ("" if c == "eager" else f" ({res['median'][c] / eager:.2f}x)") + ok)
        lines.append(f"| {res['model']} ({res['nodes']}) | " + " | ".join(cells) + " |")
    lines += ["", "Overhead on a cache hit (no-op compiler; backward time minus time inside the graph):", "",
              "| model | aotgrad us/backward | us/node | PyTorch us/backward | us/node | aotgrad / PyTorch |",
              "|---|---|---|---|---|---|"]
    for res in results:
        ours, theirs = res["overhead"]["aotgrad+nop"] * 1e6, res["overhead"]["pytorch+nop"] * 1e6
        n = res["nodes"]
        lines.append(f"| {res['model']} | {ours:.0f} | {ours / n:.1f} | {theirs:.0f} | {theirs / n:.1f} | "
                     f"{ours / theirs:.2f} |")
    lines += ["", "Inductor backwards: the whole backward, inside the callable compiler_fn returned (Dynamo + "
              "Inductor's graph), inside Inductor's graph alone; medians per backward, ratios to eager's whole "
              "backward:", "", "| model | eager | aotgrad+inductor: whole | compiled callable | Inductor's graph | "
              "pytorch+inductor: whole | compiled callable | Inductor's graph |", "|---|---|---|---|---|---|---|---|"]
    for res in results:
        eager = res["median"]["eager"]
        cells = [f"{eager * 1e3:.3f} ms"]
        for c in ("aotgrad+inductor", "pytorch+inductor"):
            for value in (res["median"][c], res["inside"][c], res["inside_inductor"][c]):
                cells.append(f"{value * 1e3:.3f} ms ({value / eager:.2f}x)")
        lines.append(f"| {res['model']} | " + " | ".join(cells) + " |")
    lines += ["", "Saved activations during the backward (mean still alive after each node; the forward saved the "
              "total):", "", "| model | saved by the forward | alive, eager | alive, aotgrad compiled autograd |",
              "|---|---|---|---|"]
    for res in results:
        total, eager = res["memory"]["eager"]
        _, ours = res["memory"]["aotgrad+nop"]
        lines.append(f"| {res['model']} | {total / 2**20:.2f} MiB | {eager / 2**20:.2f} MiB | "
                     f"{ours / 2**20:.2f} MiB ({ours / max(eager, 1):.2f}x) |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,gpt,cnn")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = [benchmark(name, args.iters, args.rounds) for name in args.models.split(",")]
    print(f"torch {torch.__version__}, {args.threads} thread(s), median of {args.iters * args.rounds} backwards")
    print(markdown(results))


if __name__ == "__main__":
    main()
