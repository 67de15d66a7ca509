"""Where compiled autograd's per-backward time goes: aotgrad+nop against pytorch+nop (the no-op
compiler, so what remains is the capture's cache check, the calls and the graph's aten ops), per
model: the time per backward, torch.profiler's top ops (kernel launches, copies, syncs on cuda)
and cProfile's top Python functions, each over 5 backwards whose forwards were made first.

    python benchmarks/compiled_autograd_profile.py cuda cnn,mlp
    python benchmarks/compiled_autograd_profile.py cpu cnn,gpt
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compiled_autograd as bench  # noqa: E402  (the models, configurations and device of that benchmark)

BACKWARDS = 5


def forwards(model, inputs) -> list:
    losses = [model(*inputs) for _ in range(BACKWARDS)]
    bench.Device.synchronize()
    return losses


def backwards(losses: list, params: list, config, around=None) -> None:
    """Each loss's backward under `config`, `.grad` cleared before each; `around` (a
    cProfile.Profile) enabled only around the backward calls."""
    with config.context():
        for loss in losses:
            for p in params:
                p.grad = None
            if around is not None:
                around.enable()
            loss.backward()
            if around is not None:
                around.disable()
    bench.Device.synchronize()


def report(name: str, config_name: str, model, inputs) -> None:
    params = list(model.parameters())
    torch._dynamo.reset()
    bench.compiled_autograd.reset()
    bench.pytorch_compiled_autograd.reset()
    config = bench.Config(config_name)
    for _ in range(4):  # capture, compile, then cache hits
        bench.backward_seconds(model, inputs, config)
    losses = forwards(model, inputs)
    start = time.perf_counter()
    backwards(losses, params, config)
    per_backward = (time.perf_counter() - start) / BACKWARDS
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if bench.Device.cuda() else [])
    losses = forwards(model, inputs)
    with profile(activities=activities) as prof:
        backwards(losses, params, config)
    print(f"\n=== {name} {config_name}: {per_backward * 1e3:.3f} ms per backward")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
    python = cProfile.Profile()
    backwards(forwards(model, inputs), params, config, around=python)
    text = io.StringIO()
    pstats.Stats(python, stream=text).sort_stats("tottime").print_stats(22)
    print("\n".join(text.getvalue().splitlines()[:40]))


def main() -> None:
    bench.Device.name = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    bench.Device.sync_inside = False  # (the Timed wrappers must not synchronize inside the backward)
    for model_name in (sys.argv[2] if len(sys.argv) > 2 else "cnn,mlp").split(","):
        model, inputs, name = bench.make_model(model_name)
        model, inputs = bench.to_device(model, inputs)
        for config_name in ("aotgrad+nop", "pytorch+nop"):
            report(name, config_name, model, inputs)


if __name__ == "__main__":
    main()
