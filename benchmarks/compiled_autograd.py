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

--device cuda: the models and inputs on the GPU; every timed region (the backward, and the
compiled graphs' Timed wrappers) calls torch.cuda.synchronize() before it reads the clock, at
its start and its end. Synchronizing inside the backward stops the CPU from running ahead of
the GPU there, so on cuda the iterations alternate: the whole-backward times come from
iterations whose Timed wrappers do not synchronize, the times inside the graph (and the
overhead) from the others (eager's come from all). Gradients are compared with a tolerance
relative to each tensor's largest element (1e-3 on cuda, 2e-2 with --bf16; rtol 1e-4 and
atol 1e-5 on the CPU in float32). --bf16: torch.autocast(device, torch.bfloat16) around the
forward and the backward, in every configuration alike.

    python benchmarks/compiled_autograd.py --models mlp,gpt,cnn --iters 20 --rounds 5
    python benchmarks/compiled_autograd.py --device cuda --models mlp,gpt,cnn --iters 20 --rounds 5
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import traceback
from typing import Callable

import torch
from torch._dynamo import compiled_autograd as pytorch_compiled_autograd  # the reference, not aotgrad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_and_step import make_model  # noqa: E402

import aotgrad  # noqa: E402
from aotgrad import compiled_autograd  # noqa: E402  # noqa: E402
from aotgrad.compiled_autograd.walk import gradient_edge, walk  # noqa: E402

CONFIGS = ["eager", "aotgrad+inductor", "aotgrad+nop", "pytorch+inductor", "pytorch+nop"]


class Device:
    """Where the models run (--device) and whether under bfloat16 autocast (--bf16)."""
    name = "cpu"
    bf16 = False
    sync_inside = True  # whether Timed synchronizes (cuda: alternates between timed iterations)

    @classmethod
    def cuda(cls) -> bool:
        return cls.name == "cuda"

    @classmethod
    def synchronize(cls) -> None:
        if cls.name == "cuda":
            torch.cuda.synchronize()

    @classmethod
    def autocast(cls):
        if not cls.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=cls.name, dtype=torch.bfloat16)


class Timed:
    """A compiled graph that adds up the time spent inside it."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.seconds = 0.0

    def __call__(self, *args):
        sync = Device.cuda() and Device.sync_inside
        if sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            if sync:
                torch.cuda.synchronize()
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
    with Device.autocast():
        loss = model(*inputs)
        with config.context():
            Device.synchronize()  # the forward's kernels are not the backward's time
            start = time.perf_counter()
            loss.backward()
            Device.synchronize()
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
    with Device.autocast():
        loss = model(*inputs)
    storages = _saved_storages(loss)
    root = loss
    total = sum(storages.values())
    samples = []

    def sample(*_):
        samples.append(sum(n for ref, n in storages.items() if not ref.expired()))

    handles = [node.register_hook(sample) for node in _nodes(loss)]
    del loss
    with Device.autocast(), config.context():
        root.backward()
    Device.synchronize()
    for handle in handles:  # AccumulateGrad nodes outlive the graph: leave no hook on them for what runs next
        handle.remove()
    return total, statistics.mean(samples)


def grads(model) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def grad_error(got: list[torch.Tensor], expected: list[torch.Tensor]) -> tuple[bool, float]:
    """(whether `got` matches `expected`, the largest error relative to its tensor's largest element)."""
    worst, ok = 0.0, len(got) == len(expected)
    for a, b in zip(got, expected):
        if a.shape != b.shape:
            return False, float("inf")
        scale = max(b.abs().max().item(), 1e-12) if b.numel() else 1.0
        worst = max(worst, (a.float() - b.float()).abs().max().item() / scale if b.numel() else 0.0)
        if Device.bf16:
            ok &= torch.allclose(a, b, rtol=2e-2, atol=2e-2 * scale)
        elif Device.cuda():
            ok &= torch.allclose(a, b, rtol=1e-3, atol=1e-3 * scale)
        else:
            ok &= torch.allclose(a, b, rtol=1e-4, atol=1e-5)
    return ok, worst


def to_device(model, inputs):
    """The model and its inputs on --device; on cuda, every parameter and input checked there."""
    device = torch.device(Device.name)
    model = model.to(device)
    inputs = tuple(t.to(device) for t in inputs)
    if Device.cuda():
        misplaced = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if not t.is_cuda]
        misplaced += [f"input {i}" for i, t in enumerate(inputs) if not t.is_cuda]
        if misplaced:
            raise RuntimeError(f"not on cuda after .to('cuda'): {misplaced}")
    return model, inputs


def benchmark(name: str, iters: int, rounds: int) -> dict:
    model, inputs, text = make_model(name)
    model, inputs = to_device(model, inputs)
    configs = [Config(c) for c in CONFIGS]
    torch._dynamo.reset()
    compiled_autograd.reset()
    backward_seconds(model, inputs, configs[0])
    expected = grads(model)
    with Device.autocast():
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
                for i in range(iters):
                    # cuda: Timed synchronizes on odd iterations only, and the whole backward is timed on
                    # the even ones (and on all of eager's, which has no Timed); the CPU: both on each
                    inner = not Device.cuda() or i % 2 == 1
                    whole = not Device.cuda() or i % 2 == 0 or config.name == "eager"
                    Device.sync_inside = inner
                    graph_before, inductor_before = config.graph_seconds(), config.inductor_seconds()
                    seconds = backward_seconds(model, inputs, config)
                    Device.sync_inside = True
                    if whole:
                        times[config.name].append(seconds)
                    if inner and config.name in overhead:
                        overhead[config.name].append(seconds - (config.graph_seconds() - graph_before))
                    if inner and config.name in inside:
                        inside[config.name].append(config.graph_seconds() - graph_before)
                        inside_inductor[config.name].append(config.inductor_seconds() - inductor_before)
        for config in group:
            backward_seconds(model, inputs, config)
            correct[config.name] = grad_error(grads(model), expected)
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
            matches, error = res["correct"][c]
            ok = "" if matches else f" **WRONG** (error {error:.1e})"
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
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU ops; also on cuda)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--bf16", action="store_true",
                        help="torch.autocast(device, torch.bfloat16) around forward and backward, every configuration")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            parser.error(f"--device cuda: torch.cuda.is_available() is False (torch {torch.__version__}, "
                         f"CUDA build {torch.version.cuda})")
        if args.iters < 2:
            parser.error("--device cuda needs --iters >= 2 (whole and inside times alternate)")
        torch.cuda.init()
    Device.name, Device.bf16 = args.device, args.bf16
    torch.set_num_threads(args.threads)
    where = (f"cuda: {torch.cuda.get_device_name()} (CUDA {torch.version.cuda})" if args.device == "cuda"
             else "cpu")
    per = args.iters * args.rounds
    counted = (f"median of {per} backwards" if args.device == "cpu" else
               f"medians of {(args.iters + 1) // 2 * args.rounds} (whole; eager {per}) and "
               f"{args.iters // 2 * args.rounds} (inside, overhead) backwards")
    print(f"torch {torch.__version__}, {where}, {'bfloat16 autocast' if args.bf16 else 'float32'}, "
          f"{args.threads} thread(s), {counted}", flush=True)
    results, failed = [], []
    for name in args.models.split(","):  # a line per model as it finishes: a run cut short still tells something
        try:
            res = benchmark(name, args.iters, args.rounds)
        except Exception:  # the traceback now, the other models still run, and the exit status says so
            Device.sync_inside = True
            traceback.print_exc()
            print(f"{name}: FAILED (traceback above)", flush=True)
            failed.append(name)
            continue
        results.append(res)
        print(f"{res['model']}: " + ", ".join(
            f"{c} {res['median'][c] * 1e3:.3f} ms" + ("" if res["correct"][c][0] else " WRONG") for c in CONFIGS),
            flush=True)
    if results:
        print(markdown(results))
    if failed:
        sys.exit(f"benchmarks/compiled_autograd.py: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
