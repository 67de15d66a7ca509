"""Where one zoo model's training step spends its time, per backend: torch.profiler's view.

For each backend the model is built from the same weights, compiled, stepped a few times, then
profiled over --steps steps (forward, loss, backward, SGD step). Printed per backend, per step:
kernels launched on the device and their time, host-device synchronisations and copies (a
sync per step serialises the host's launches with the device's work: a small model then takes
their sum, not the larger of the two), aten calls outside the compiled graphs, and the ops
with the most self time on the host and on the device. The two backends' lines side by side
say whether a slower step is in the generated kernels, in launches, in syncs or in Python.

    python benchmarks/zoo_profile.py --model resnet18 --device cuda --variant bf16
    python benchmarks/zoo_profile.py --model convnext_atto          # CPU: kernel self times

On the CPU, Inductor's kernels show in the profile only with kernel profiling on
(torch._inductor.config.cpp.enable_kernel_profile, set here), as `cpp_fused_*` (or
`graph_0_cpp_fused_*`) events.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402  (benchmarks/zoo.py: the models and the training step)

SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "aten::_local_scalar_dense",
              "aten::item", "aten::is_nonzero")
COPY_CALLS = ("cudaMemcpy", "cudaMemcpyAsync", "Memcpy DtoH", "Memcpy HtoD")


def profile_backend(name: str, backend: str, device: str, variant: str, steps: int, trace: str | None = None,
                    python_top: int = 0) -> dict:
    """One backend's run: per-step counters and the top ops (a dict of printable facts). With
    `trace`, the profiled steps are also written as a Chrome trace to `trace`; with `python_top`,
    that many Python functions with the most own time over another `steps` steps (cProfile)."""
    if backend.startswith("aotgrad"):
        import aotgrad  # noqa: F401  (registers its backends where it is on the path, not installed)
    torch.manual_seed(0)
    module, batch = zoo.build(name, variant, device)
    run = zoo.make_run(module, batch, backend)
    autocast = variant == "bf16"
    for _ in range(3):
        zoo.train_step(run, autocast)
    zoo._synchronize(device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            zoo.train_step(run, autocast)
        zoo._synchronize(device)
    if trace:
        prof.export_chrome_trace(trace)
    result = summarize(prof.key_averages(), steps, device)
    if python_top:
        result["python"] = _python_profile(lambda: zoo.train_step(run, autocast), steps, device, python_top)
    return result


def _python_profile(step, steps: int, device: str, top: int) -> str:
    """The `top` Python functions with the most own time over `steps` steps, as pstats prints them."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    zoo._synchronize(device)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def summarize(averages, steps: int, device: str) -> dict:
    host = collections.Counter()
    on_device = collections.Counter()
    calls = collections.Counter()
    for event in averages:
        host[event.key] += event.self_cpu_time_total / steps
        on_device[event.key] += _device_time(event) / steps
        calls[event.key] += event.count / steps
    kernels = {k for k in calls if k.startswith(("cpp_fused", "graph_0_cpp_fused", "triton_"))} if device == "cpu" \
        else {k for k, t in on_device.items() if t > 0 and not k.startswith(("aten::", "Memcpy", "Memset"))}
    return {
        "host self ms": sum(host.values()) / 1000,
        "kernels": sum(calls[k] for k in kernels),
        "kernel ms": sum((on_device[k] if device != "cpu" else host[k]) for k in kernels) / 1000,
        "device ms": sum(on_device.values()) / 1000,
        "syncs": sum(calls[k] for k in calls if k.startswith(SYNC_CALLS)),
        "copies": sum(calls[k] for k in calls if k.startswith(COPY_CALLS)),
        "aten calls": sum(c for k, c in calls.items() if k.startswith("aten::")),
        "top host": host.most_common(12),
        "top device": on_device.most_common(12) if device != "cpu" else [],
        "calls": calls,
    }


def _device_time(event) -> float:
    for attribute in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, attribute, None)
        if value is not None:
            return value
    return 0.0


def print_side_by_side(results: dict[str, dict]) -> None:
    backends = list(results)
    print("per step".ljust(16) + "".join(b.rjust(20) for b in backends))
    for key in ("host self ms", "kernels", "kernel ms", "device ms", "syncs", "copies", "aten calls"):
        print(key.ljust(16) + "".join(f"{results[b][key]:20.2f}" for b in backends))
    for backend in backends:
        for title in ("top host", "top device"):
            rows = results[backend][title]
            if rows:
                print(f"\n{backend}: {title} (ms per step, calls per step)")
                for op, us in rows:
                    print(f"  {us / 1000:8.3f}  x{results[backend]['calls'][op]:6.0f}  {op[:100]}")
        if "python" in results[backend]:
            print(f"\n{backend}: Python functions by own time over the profiled steps\n{results[backend]['python']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18", help="a zoo name (benchmarks/zoo.py --list)")
    parser.add_argument("--backends", default="inductor,aotgrad_inductor")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--variant", default="none", choices=zoo.VARIANTS)
    parser.add_argument("--steps", type=int, default=5, help="profiled steps")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads on CPU")
    parser.add_argument("--trace", help="write each backend's profiled steps as a Chrome trace, TRACE-<backend>.json")
    parser.add_argument("--python-top", type=int, default=0, help="also print this many Python functions by own time")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import torch._inductor.config as inductor_config

    inductor_config.cpp.enable_kernel_profile = True
    results = {b: profile_backend(args.model, b, args.device, args.variant, args.steps,
                                  f"{args.trace}-{b}.json" if args.trace else None, args.python_top)
               for b in args.backends.split(",")}
    print(f"{args.model} on {args.device}, variant {args.variant}, {args.steps} profiled steps, torch {torch.__version__}")
    print_side_by_side(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
