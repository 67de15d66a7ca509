"""DDP training steps on --ranks ranks (gloo, this machine): eager, PyTorch's splitter, aotgrad whole, aotgrad split.

Each rank is a process (spawned) with 1 intra-op thread; --ranks N (default 2) of them, so the
machine needs N cores for the ranks not to share them.

Configurations, each its own DDP module over a copy of one model (same seed):
  eager             DistributedDataParallel, no compile
  pytorch_split     torch.compile(backend="aot_eager") with PyTorch's DDP splitter
                    (torch._dynamo.config.optimize_ddp on while it compiles)
  aotgrad_whole     torch.compile(backend="aotgrad") with aotgrad.config.optimize_ddp off
  aotgrad_split     torch.compile(backend="aotgrad"), aotgrad's splitter (PyTorch's flag off while it compiles)
Each is compiled and warmed up first (DDP's buckets form after the first step); then the
configurations take turns for --rounds rounds of --steps steps (forward, backward, SGD
step), and the median step time is reported with its ratio to eager.

Network: on this machine the all-reduce is gloo over loopback, which uses the same cores
as the backward, so hiding it behind compute cannot save time. `--link-gbps G` adds, after
each bucket's real all-reduce, the time its bytes take on a G Gbit/s link as wire time that
uses no CPU (a timer completes the bucket's future; the link carries one bucket at a time),
as a network between machines does: the setting where overlap pays. Every configuration gets the same hook.

Overlap: a DDP comm hook records when each bucket's all-reduce is launched and when it
completes; a post-hook on every node of the autograd graph except AccumulateGrad records
when it finished computing. The hidden fraction of one step is |(union of all-reduce
intervals) before the last such node finished| / |union of all-reduce intervals|: the
share of communication that ran while the backward was still computing (accumulating into
`.grad` does not count). Reported as the median over the timed steps.

    python benchmarks/ddp.py --layers 8 --width 1024 --batch 64 --bucket-mb 4 --steps 20 --rounds 3
    python benchmarks/ddp.py --ranks 4 --layers 8 --width 1024 --batch 64 --bucket-mb 4 --steps 20 --rounds 3
    python benchmarks/ddp.py ... --link-gbps 2
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import threading
import time
import types
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

CONFIGS = ["eager", "pytorch_split", "aotgrad_whole", "aotgrad_split"]


class Net(nn.Module):
    def __init__(self, layers: int, width: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def own_class(model: nn.Module, name: str) -> nn.Module:
    """`model` with a forward whose code object is its own: Dynamo keeps compiled code per
    code object, and one configuration must not run another's (same backend, other split)."""
    code = Net.forward.__code__.replace(co_name=f"forward_{name}")
    forward = types.FunctionType(code, Net.forward.__globals__, f"forward_{name}")
    model.__class__ = type(f"Net_{name}", (Net,), {"forward": forward})
    return model


class _Link:
    """The simulated link of this rank: busy until `free_at`."""

    def __init__(self):
        self.lock = threading.Lock()
        self.free_at = 0.0


_LINK = _Link()


class Timeline:
    """One step's all-reduce intervals and the times its computing nodes finished."""

    def __init__(self, link_gbps: float | None = None):
        self.comm: list[list[float]] = []
        self.computed: list[float] = []
        self.link_gbps = link_gbps

    def watch(self, loss: torch.Tensor) -> None:
        """Record when each computing node of `loss`'s backward finishes."""
        stack, seen = [loss.grad_fn], set()
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if node.name() != "torch::autograd::AccumulateGrad":
                node.register_hook(lambda *_: self.computed.append(time.perf_counter()))
            stack.extend(child for child, _ in node.next_functions)

    def hook(self, state, bucket):
        interval = [time.perf_counter(), None]
        self.comm.append(interval)
        buffer = bucket.buffer()
        future = dist.all_reduce(buffer.div_(dist.get_world_size()), async_op=True).get_future()
        if self.link_gbps is None:
            def done(f):
                interval[1] = time.perf_counter()
                return f.value()[0]
            return future.then(done)
        wire = buffer.numel() * buffer.element_size() * 8 / (self.link_gbps * 1e9)
        result = torch.futures.Future()

        def on_the_wire(f):  # the link's time: one transfer at a time, a timer, no CPU
            with _LINK.lock:
                start = max(time.perf_counter(), _LINK.free_at)
                _LINK.free_at = start + wire

            def arrive():
                interval[1] = time.perf_counter()
                result.set_result(f.value()[0])
            threading.Timer(start + wire - time.perf_counter(), arrive).start()
        future.add_done_callback(on_the_wire)
        return result

    def hidden_fraction(self) -> float | None:
        intervals = sorted(i for i in self.comm if i[1] is not None)
        if not intervals or not self.computed:
            return None
        end = max(self.computed)
        merged: list[list[float]] = []
        for a, b in intervals:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        total = sum(b - a for a, b in merged)
        hidden = sum(max(0.0, min(b, end) - a) for a, b in merged)
        return hidden / total if total > 0 else None


class Config:
    def __init__(self, name: str, model: nn.Module, bucket_mb: float, link_gbps: float | None):
        import aotgrad
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.name = name
        self.ddp = DDP(own_class(copy.deepcopy(model), name), bucket_cap_mb=bucket_mb)
        self.link_gbps = link_gbps
        self.timeline = Timeline(link_gbps)
        self.ddp.register_comm_hook(None, lambda state, bucket: self.timeline.hook(state, bucket))
        self.opt = torch.optim.SGD(self.ddp.parameters(), lr=1e-3)
        self.times: list[float] = []
        self.hidden: list[float] = []
        if name == "eager":
            self.fn = self.ddp
        else:
            backend = "aot_eager" if name == "pytorch_split" else "aotgrad"
            self.fn = torch.compile(self.ddp, backend=backend)
        self.aotgrad = aotgrad

    def step(self, x, record: bool) -> None:
        torch_flag, aotgrad_flag = torch._dynamo.config.optimize_ddp, self.aotgrad.config.optimize_ddp
        torch._dynamo.config.optimize_ddp = self.name == "pytorch_split"  # read when a frame compiles
        self.aotgrad.config.optimize_ddp = self.name == "aotgrad_split"
        try:
            self.timeline = Timeline(self.link_gbps)
            start = time.perf_counter()
            self.opt.zero_grad(set_to_none=True)
            loss = self.fn(x).pow(2).mean()
            self.timeline.watch(loss)
            loss.backward()
            self.opt.step()
            seconds = time.perf_counter() - start
        finally:
            torch._dynamo.config.optimize_ddp, self.aotgrad.config.optimize_ddp = torch_flag, aotgrad_flag
        if record:
            self.times.append(seconds)
            hidden = self.timeline.hidden_fraction()
            if hidden is not None:
                self.hidden.append(hidden)


def worker(rank: int, world: int, port: int, args) -> None:
    torch.set_num_threads(1)
    # generous: with more ranks than free cores, spawning (importing torch) can be slow
    store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timedelta(seconds=300))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=300))
    import aotgrad  # noqa: F401 - registers the backends (each step sets both DDP flags)
    torch.manual_seed(0)
    model = Net(args.layers, args.width)
    configs = [Config(name, model, args.bucket_mb, args.link_gbps) for name in CONFIGS]
    torch.manual_seed(rank + 1)
    x = torch.randn(args.batch, args.width)
    for config in configs:  # compile, and let DDP build its buckets
        for _ in range(3):
            config.step(x, record=False)
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for config in order:
            for _ in range(args.steps):
                config.step(x, record=True)
    if rank == 0:
        eager = statistics.median(configs[0].times)
        splits = aotgrad.distributed.ddp.history
        pieces = len(splits[-1].buckets) if splits else 1  # (only aotgrad_split's compile records one)
        print(f"torch {torch.__version__}, {world} ranks (gloo, 127.0.0.1), 1 thread each; {args.layers} x "
              f"Linear({args.width}, {args.width}), batch {args.batch} per rank, bucket_cap_mb={args.bucket_mb} "
              f"(aotgrad split: {pieces} pieces); median of {args.rounds * args.steps} steps; "
              + (f"simulated {args.link_gbps} Gbit/s link after each all-reduce\n" if args.link_gbps else
                 "all-reduce over loopback only\n"))
        print("| configuration | step (ms) | vs eager | all-reduce hidden behind backward (median) |")
        print("|---|---|---|---|")
        for config in configs:
            median = statistics.median(config.times)
            hidden = f"{statistics.median(config.hidden):.0%}" if config.hidden else "n/a"
            print(f"| {config.name} | {median * 1e3:.1f} | {median / eager:.2f}x | {hidden} |")
        whole = statistics.median(configs[2].times)
        split = statistics.median(configs[3].times)
        theirs = statistics.median(configs[1].times)
        print(f"\naotgrad split / aotgrad whole = {split / whole:.3f}; aotgrad split / PyTorch's splitter = "
              f"{split / theirs:.3f}")
    dist.destroy_process_group()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2, help="processes, 1 thread each (default 2)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bucket-mb", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--link-gbps", type=float, default=None,
                        help="add each bucket's wire time on a link this fast, using no CPU (module docstring)")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    if args.ranks < 1:
        parser.error("--ranks must be at least 1")
    world = args.ranks
    if world > (os.cpu_count() or 1):
        print(f"benchmarks/ddp.py: {world} ranks on {os.cpu_count()} cores: ranks share cores", file=sys.stderr)
    server = dist.TCPStore("127.0.0.1", 0, world + 1, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=300))
    context = torch.multiprocessing.start_processes(worker, args=(world, server.port, args), nprocs=world,
                                                    join=False, start_method="spawn")
    deadline = time.time() + args.timeout
    while not context.join(timeout=1):
        if time.time() > deadline:
            for p in context.processes:
                p.kill()
            for p in context.processes:
                p.join()
            sys.exit(f"benchmarks/ddp.py: timed out after {args.timeout:.0f} s")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
