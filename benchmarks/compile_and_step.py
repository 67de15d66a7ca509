"""Compile time, first-call time and training-step time: aotgrad against PyTorch, in one process.

Configurations: eager, torch.compile with backend "aot_eager", "aotgrad", "inductor" and
"aotgrad_inductor". Models: an MLP 64-64-64 (batch 32), a 2-block GPT (d_model 256,
4 heads, seq 128, batch 8) and a 3-block conv-bn-relu CNN (32x32 images, batch 16); each
model's forward ends in its loss, so forward + loss is one graph.

Three measurements per model:
  aot compile  the ahead-of-time step alone, on the graph torch.compile captured (its
               fake example inputs, inside its fake mode's tracing context):
               aotgrad.aot_module_simplified(gm, example_inputs, nop, nop) against
               torch._functorch.aot_autograd.aot_module_simplified(..., nop, nop);
               median of --compile-repeats after one untimed call each.
  first call   torch._dynamo.reset(), then one forward + loss + backward, with fresh
               Inductor caches (so Inductor's numbers include its C++ compile); its loss,
               parameter grads and buffers are checked against eager's.
  step         median forward + loss + backward (no optimizer) after warmup; the
               configurations take turns in --rounds rounds so load on a shared machine
               falls on all of them alike.

    python benchmarks/compile_and_step.py --models mlp,gpt,cnn --iters 100 --markdown
"""
from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import aotgrad

CONFIGS = ["eager", "aot_eager", "aotgrad", "inductor", "aotgrad_inductor"]
AOT_CONFIGS = ("aot_eager", "aotgrad")  # the ones with an ahead-of-time compile time


# -- models: each forward(inputs..., target) returns the loss ------------------

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))

    def forward(self, x, target):
        return F.mse_loss(self.net(x), target)


class GPTBlock(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def attention(self, x):
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(x).split(d_model, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, d_model // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, d_model))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 512, seq: int = 128, d_model: int = 256, heads: int = 4, blocks: int = 2):
        super().__init__()
        self.token, self.position = nn.Embedding(vocab, d_model), nn.Embedding(seq, d_model)
        self.blocks = nn.Sequential(*[GPTBlock(d_model, heads) for _ in range(blocks)])
        self.ln_f, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens, target):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.blocks(self.token(tokens) + self.position(positions))
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())


class CNN(nn.Module):
    def __init__(self, channels=(3, 16, 32, 64), classes: int = 10):
        super().__init__()
        layers = []
        for i, (c_in, c_out) in enumerate(zip(channels, channels[1:])):
            layers += [nn.Conv2d(c_in, c_out, 3, stride=1 if i == 0 else 2, padding=1, bias=False),
                       nn.BatchNorm2d(c_out), nn.ReLU()]
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(channels[-1], classes)

    def forward(self, images, target):
        return F.cross_entropy(self.head(self.body(images)), target)


def make_model(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...], str]:
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if name == "mlp":
        return MLP(), (torch.randn(32, 64, generator=g), torch.randn(32, 64, generator=g)), "MLP 64-64-64, batch 32"
    if name == "gpt":
        tokens = torch.randint(0, 512, (8, 129), generator=g)
        return GPT(), (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()), \
            "GPT 2 blocks, d256, 4 heads, seq 128, batch 8"
    if name == "cnn":
        return CNN(), (torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)), \
            "CNN 3x conv-bn-relu, 32x32, batch 16"
    raise SystemExit(f"unknown model {name!r}; choose from mlp, gpt, cnn")


# -- measurements ---------------------------------------------------------------

@dataclass
class Result:
    aot_compile_s: float | None = None
    first_call_s: float | None = None
    step_s: list[float] = field(default_factory=list)
    loss_matches: bool = True
    state_matches: bool = True  # parameter grads and buffers after the first step
    error: str | None = None  # the first failure, shortened

    @property
    def step_median_s(self) -> float | None:
        return statistics.median(self.step_s) if self.step_s else None

    @property
    def step_iqr_s(self) -> float | None:
        if len(self.step_s) < 2:
            return None
        q = statistics.quantiles(self.step_s, n=4)
        return q[2] - q[0]


def _short(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:100] if lines else ''}"


def capture_graph(model: nn.Module, inputs) -> tuple[torch.fx.GraphModule, list]:
    """The FX graph and (fake) example inputs torch.compile hands a backend."""
    captured = []

    def keep(gm, example_inputs):
        captured.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=keep)(*inputs)
    assert len(captured) == 1, f"expected one graph, dynamo produced {len(captured)} (a graph break?)"
    return captured[0]


def time_aot_compile(gm, example_inputs, repeats: int) -> dict[str, float]:
    """Median seconds of aot_module_simplified with nop compilers, ours and PyTorch's."""
    from functorch.compile import nop
    from torch._functorch.aot_autograd import aot_module_simplified as torch_aot_module_simplified
    from torch._guards import TracingContext, detect_fake_mode, tracing

    compilers = {
        "aot_eager": lambda: torch_aot_module_simplified(gm, example_inputs, fw_compiler=nop, bw_compiler=nop),
        "aotgrad": lambda: aotgrad.aot_module_simplified(gm, example_inputs, aotgrad.nop, aotgrad.nop),
    }
    fake_mode = detect_fake_mode(example_inputs)
    seconds: dict[str, list[float]] = {name: [] for name in compilers}
    for repeat in range(repeats + 1):  # repeat 0 is the untimed warmup
        for name, compile_ in compilers.items():
            with tracing(TracingContext(fake_mode)):
                start = time.perf_counter()
                compile_()
                elapsed = time.perf_counter() - start
            if repeat:
                seconds[name].append(elapsed)
    return {name: statistics.median(s) for name, s in seconds.items()}


def compiled(model: nn.Module, config: str) -> Callable:
    return model if config == "eager" else torch.compile(model, backend=config)


def train_step(fn: Callable, inputs, params: list[torch.Tensor]) -> torch.Tensor:
    for p in params:
        p.grad = None
    loss = fn(*inputs)
    loss.backward()
    return loss


def _state(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in model.parameters()] + list(model.buffers())


def _states_match(actual: list, expected: list) -> bool:
    """Equal up to 1e-3 of each tensor's largest value (Inductor's fused reductions round
    differently from eager's; a BatchNorm gradient's small elements carry the rounding
    error of its large ones)."""
    def close(a, e):
        if a is None or e is None:
            return a is e
        scale = max(e.abs().max().item(), 1.0) if e.is_floating_point() and e.numel() else 1.0
        return a.shape == e.shape and torch.allclose(a.to(e.dtype), e, rtol=1e-3, atol=1e-3 * scale)
    return len(actual) == len(expected) and all(close(a, e) for a, e in zip(actual, expected))


def time_first_calls(model: nn.Module, inputs, results: dict[str, Result]) -> None:
    """Seconds of the first forward + loss + backward after a dynamo reset, cold Inductor caches;
    and whether that first loss, the grads and the buffers (BatchNorm's running stats) match eager's."""
    from torch._inductor.utils import fresh_cache

    reference = copy.deepcopy(model)
    expected = train_step(reference, inputs, []).detach()
    expected_state = _state(reference)
    for config, result in results.items():
        twin = copy.deepcopy(model)
        params = list(twin.parameters())
        torch._dynamo.reset()
        try:
            with fresh_cache():
                start = time.perf_counter()
                loss = train_step(compiled(twin, config), inputs, params)
                result.first_call_s = time.perf_counter() - start
        except Exception as e:  # a failing configuration is reported in the table, not fatal
            result.error = result.error or _short(e)
            continue
        result.loss_matches = torch.allclose(loss.detach(), expected, rtol=1e-4, atol=1e-5)
        result.state_matches = _states_match(_state(twin), expected_state)


def time_steps(model: nn.Module, inputs, results: dict[str, Result], iters: int, rounds: int,
               warmup: int) -> None:
    """Per-iteration seconds of forward + loss + backward, configurations taking turns.

    Round r starts with the r-th configuration (a rotation), so each one runs equally
    often in each position: what one configuration leaves behind in the allocator or
    the caches would otherwise always land on the one after it (measured: 3-8%)."""
    torch._dynamo.reset()
    runs = {}
    for config, result in results.items():
        twin = copy.deepcopy(model)
        fn, params = compiled(twin, config), list(twin.parameters())
        try:
            for _ in range(warmup):
                train_step(fn, inputs, params)
        except Exception as e:  # a failing configuration is reported in the table, not fatal
            result.error = _short(e)
            continue
        runs[config] = (fn, params)
    per_round = max(1, iters // rounds)
    with torch._dynamo.config.patch(error_on_recompile=True):
        order = list(runs.items())
        for r in range(rounds):
            shift = r % max(1, len(order))
            for config, (fn, params) in order[shift:] + order[:shift]:
                for _ in range(per_round):
                    start = time.perf_counter()
                    train_step(fn, inputs, params)
                    results[config].step_s.append(time.perf_counter() - start)


def benchmark_model(name: str, configs: list[str], args) -> tuple[str, dict[str, Result]]:
    model, inputs, description = make_model(name)
    results = {config: Result() for config in configs}
    if any(c in AOT_CONFIGS for c in configs):
        gm, example_inputs = capture_graph(copy.deepcopy(model), inputs)
        for config, seconds in time_aot_compile(gm, example_inputs, args.compile_repeats).items():
            if config in results:
                results[config].aot_compile_s = seconds
    time_steps(model, inputs, results, args.iters, args.rounds, args.warmup)
    time_first_calls(model, inputs, results)
    return description, results


# -- printing -------------------------------------------------------------------

def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}" if seconds >= 0.1 else f"{seconds * 1e3:.3f}"


def _ratio(numerator: Result | None, denominator: Result | None, attribute: str) -> str:
    if numerator is None or denominator is None:
        return "-"
    a, b = getattr(numerator, attribute), getattr(denominator, attribute)
    return "-" if a is None or b is None else f"{a / b:.2f}"


def ratios(results: dict[str, Result]) -> list[tuple[str, str]]:
    get = results.get
    return [
        ("aotgrad/aot_eager compile", _ratio(get("aotgrad"), get("aot_eager"), "aot_compile_s")),
        ("aotgrad/aot_eager step", _ratio(get("aotgrad"), get("aot_eager"), "step_median_s")),
        ("aotgrad_inductor/inductor step", _ratio(get("aotgrad_inductor"), get("inductor"), "step_median_s")),
        ("aotgrad/aot_eager first call", _ratio(get("aotgrad"), get("aot_eager"), "first_call_s")),
        ("aotgrad_inductor/inductor first call",
         _ratio(get("aotgrad_inductor"), get("inductor"), "first_call_s")),
    ]


HEADER = ["config", "aot compile ms", "first call ms", "step ms (median)", "step IQR ms", "loss = eager",
          "grads, buffers = eager"]


def rows(results: dict[str, Result]) -> list[list[str]]:
    return [[config, _ms(r.aot_compile_s), _ms(r.first_call_s), _ms(r.step_median_s), _ms(r.step_iqr_s),
             "error" if r.error else "yes" if r.loss_matches else "NO",
             "error" if r.error else "yes" if r.state_matches else "NO"] for config, r in results.items()]


def errors(results: dict[str, Result]) -> list[str]:
    return [f"{config} failed: {r.error}" for config, r in results.items() if r.error]


def print_text(description: str, results: dict[str, Result]) -> None:
    table = [HEADER, *rows(results)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    print(f"\n{description}")
    for row in table:
        print("  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    print("  " + ", ".join(f"{label} {value}" for label, value in ratios(results)))
    for line in errors(results):
        print("  " + line)


def print_markdown(all_results: list[tuple[str, dict[str, Result]]]) -> None:
    print("\n| model | " + " | ".join(HEADER) + " |")
    print("|" + "---|" * (len(HEADER) + 1))
    for description, results in all_results:
        for row in rows(results):
            print(f"| {description} | " + " | ".join(row) + " |")
    labels = [label for label, _ in ratios(all_results[0][1])]
    print("\n| model | " + " | ".join(labels) + " |")
    print("|" + "---|" * (len(labels) + 1))
    for description, results in all_results:
        print(f"| {description} | " + " | ".join(value for _, value in ratios(results)) + " |")
    for description, results in all_results:
        for line in errors(results):
            print(f"\n{description}: {line}")


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,gpt,cnn", help="comma-separated: mlp, gpt, cnn")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ", ".join(CONFIGS))
    parser.add_argument("--iters", type=int, default=100, help="timed steps per configuration and model")
    parser.add_argument("--rounds", type=int, default=5, help="turns the configurations take (default 5)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before timing")
    parser.add_argument("--compile-repeats", type=int, default=5, help="timed ahead-of-time compiles")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--markdown", action="store_true", help="also print markdown tables")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configs {sorted(unknown)}")
    machine = platform.processor() or platform.machine()
    print(f"torch {torch.__version__}, aotgrad {aotgrad.__version__} ({_commit()}), {machine}, "
          f"{torch.get_num_threads()} threads, {datetime.date.today()}, load average {_load()}")
    all_results = []
    for name in args.models.split(","):
        description, results = benchmark_model(name, configs, args)
        print_text(description, results)
        all_results.append((description, results))
    print(f"\nload average at the end {_load()}")
    if args.markdown:
        print_markdown(all_results)


if __name__ == "__main__":
    main()
