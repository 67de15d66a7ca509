"""Compile time, first-call time and training-step time: aotgrad against PyTorch, in one process.

Configurations: eager, torch.compile with backend "aot_eager", "aotgrad", "inductor" and
"aotgrad_inductor". Models: an MLP 64-64-64 (batch 32), a GPT (d_model 256, 4 heads, seq 128,
batch 8) with 2 blocks ("gpt"), 6 ("gpt6") or 12 ("gpt12"), and a 3-block conv-bn-relu CNN
(32x32 images, batch 16); each model's forward ends in its loss, so forward + loss is one graph.

Three measurements per model:
  aot compile  the ahead-of-time step alone, on the graph torch.compile captured (its
               example inputs, inside a tracing context with dynamo's fake mode, as
               torch.compile calls a backend; --fresh-fake-mode: without it, so each
               compiler makes a fake mode of its own, without a ShapeEnv):
               aotgrad.aot_module_simplified(gm, example_inputs, nop, nop) against
               torch._functorch.aot_autograd.aot_module_simplified(..., nop, nop);
               median of --compile-repeats after one untimed call each, the two taking
               turns (each goes first equally often), each after an untimed gc.collect();
               aotgrad's disk cache off (a cold compile: benchmarks/disk_cache.py times a warm one).
               With several GPTs, the growth per added block between consecutive sizes
               (linear growth: the same figure each time).
  first call   torch._dynamo.reset(), then one forward + loss + backward, with fresh
               Inductor caches (so Inductor's numbers include its C++ compile); its loss,
               parameter grads and buffers are checked against eager's.
  step         median forward + loss + backward (no optimizer) after warmup; the
               configurations take turns in --rounds rounds so load on a shared machine
               falls on all of them alike.

With --dynamic, torch.compile(..., dynamic=True) and one graph for five sizes per model (the
batch; batch and sequence length for the GPT; the static size first):
  aot compile  the same, on the graph captured with dynamic=True: symbolic sizes (SymInt
               inputs, example tensors whose symbolic contexts dynamo keeps), compiled in a
               TracingContext with dynamo's fake mode and those contexts (their compiles
               share its ShapeEnv, so the turns matter more).
  first call   the same, then one step at each further size: each step's loss, grads and
               buffers are checked against eager's, and the graphs compiled for all of them
               counted (the bar: 1, no recompile).
  step         an iteration is one step at each size in turn; the median per size, and their
               sum (one step at each size) for the ratios. After the first step no
               configuration may recompile (error_on_recompile).

With --only-compile, the aot compile alone (configurations aot_eager and aotgrad; no first
call or steps, so no checks against eager either).

    python benchmarks/compile_and_step.py --models mlp,gpt,cnn --iters 100 --markdown
    python benchmarks/compile_and_step.py --only-compile --models mlp,gpt,gpt6,gpt12,cnn --compile-repeats 5 --markdown
    python benchmarks/compile_and_step.py --dynamic --models mlp,gpt,cnn --iters 50 --rounds 10 --threads 1 --markdown
    python benchmarks/compile_and_step.py --device cuda --models mlp,gpt,cnn --iters 100 --markdown

--device cuda: models and inputs on the GPU (the inputs made on the CPU, then moved); the first
call and each step call torch.cuda.synchronize() before reading the clock, at start and end.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import functools
import gc
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
from unittest import mock

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


# "gpt6" is the GPT with 6 blocks: the inputs and sizes of "gpt", its family.
GPT_BLOCKS = {"gpt": 2, "gpt6": 6, "gpt12": 12}


def family(name: str) -> str:
    """The model kind that fixes the inputs and sizes: "gpt" for every GPT."""
    return "gpt" if name in GPT_BLOCKS else name


SIZES = {"mlp": 32, "gpt": (8, 128), "cnn": 16}  # the batch; (batch, seq) for the GPT
# --dynamic: the static size first (the one graph is captured and compiled there), then four around it.
# None is 0 or 1, sizes torch.compile never makes symbolic; the GPT's seq stays within its 128 positions.
# The CNN's batches stay >= 16: PyTorch's CPU convolution chooses its backend by batch size and
# its fake kernel guards on that (`16 <= images.size()[0]`), so below 16 every backend recompiles.
DYNAMIC_SIZES = {"mlp": (32, 16, 24, 40, 48), "gpt": ((8, 128), (4, 96), (6, 128), (12, 112), (16, 64)),
                 "cnn": (16, 20, 24, 28, 40)}
MODELS = {"mlp": (MLP, "MLP 64-64-64"),
          **{name: (functools.partial(GPT, blocks=blocks), f"GPT {blocks} blocks, d256, 4 heads")
             for name, blocks in GPT_BLOCKS.items()},
          "cnn": (CNN, "CNN 3x conv-bn-relu, 32x32")}


def size_text(name: str, size) -> str:
    return f"seq {size[1]}, batch {size[0]}" if family(name) == "gpt" else f"batch {size}"


def make_inputs(name: str, size) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    if family(name) == "mlp":
        return torch.randn(size, 64, generator=g), torch.randn(size, 64, generator=g)
    if family(name) == "gpt":
        batch, seq = size
        tokens = torch.randint(0, 512, (batch, seq + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return torch.randn(size, 3, 32, 32, generator=g), torch.randint(0, 10, (size,), generator=g)


def make_model(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...], str]:
    """The model (seeded), its inputs at the static size, and a description."""
    if name not in MODELS:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    model_class, text = MODELS[name]
    torch.manual_seed(0)
    size = SIZES[family(name)]
    return model_class(), make_inputs(name, size), f"{text}, {size_text(name, size)}"


# -- measurements ---------------------------------------------------------------

@dataclass
class Result:
    aot_compile_s: float | None = None
    first_call_s: float | None = None
    step_s: list[list[float]] = field(default_factory=list)  # seconds per step, a list per size
    compiles: int | None = None  # graphs the backend compiled for the first call at every size
    loss_matches: bool = True
    state_matches: bool = True  # parameter grads and buffers after the first step (at each size)
    error: str | None = None  # the first failure, shortened

    def step_medians_s(self, sizes: int) -> list[float | None]:
        """The median step at each size; None for each of `sizes` where nothing was timed."""
        return [statistics.median(s) if s else None for s in self.step_s] or [None] * sizes

    @property
    def step_median_s(self) -> float | None:
        """The median step; with several sizes, the sum of their medians (one step at each size)."""
        medians = self.step_medians_s(1)
        return None if None in medians else sum(medians)

    @property
    def step_iqr_s(self) -> float | None:
        if len(self.step_s) != 1 or len(self.step_s[0]) < 2:
            return None
        q = statistics.quantiles(self.step_s[0], n=4)
        return q[2] - q[0]


def _short(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:100] if lines else ''}"


def _rotated(items: list, r: int) -> list:
    """The r-th rotation: taking turns this way, each item runs equally often in each position."""
    shift = r % max(1, len(items))
    return items[shift:] + items[:shift]


@dataclass
class Capture:
    """What torch.compile hands a backend: the graph and its example inputs (real tensors; SymInts
    where sizes are symbolic), dynamo's fake mode (in the TracingContext it calls the backend
    in) and, for a dynamic graph, the symbolic context dynamo traced each example tensor with
    (TracingContext.tensor_to_context)."""
    gm: torch.fx.GraphModule
    example_inputs: list
    fake_mode: object = None  # dynamo's FakeTensorMode
    symbolic_contexts: dict | None = None  # example tensor -> its symbolic context, for a dynamic graph

    def tracing_context(self, fresh_fake_mode: bool = False):
        """A fresh TracingContext for one compile, as dynamo opens one per graph, with dynamo's fake
        mode: both aot_module_simplifieds fake the real example inputs in it (as under torch.compile;
        a dynamic graph's ShapeEnv holds its symbols) and look up the symbolic contexts. With
        `fresh_fake_mode` (static graphs), no fake mode: each makes its own, without a ShapeEnv
        (PyTorch's AOTAutograd is 2-4x faster so; docs/benchmarks.md before session 9 measured this)."""
        from torch._guards import TracingContext

        fresh = fresh_fake_mode and self.symbolic_contexts is None
        context = TracingContext(None if fresh else self.fake_mode)
        context.tensor_to_context.update(self.symbolic_contexts or {})
        return context

    def symbolic_inputs(self) -> list[str]:
        """The graph inputs with symbolic sizes, e.g. ["s77", "l_x_[s77, 64]"]."""
        names = []
        for node in self.gm.graph.find_nodes(op="placeholder"):
            value = node.meta.get("example_value")
            if isinstance(value, torch.SymInt):
                names.append(node.name)
            elif isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in value.shape):
                names.append(f"{node.name}[{', '.join(map(str, value.shape))}]")
        return names


def capture_graph(model: nn.Module, inputs, dynamic: bool | None = None) -> Capture:
    """The FX graph and example inputs torch.compile hands a backend.

    With dynamic=True the graph then goes to aot_eager: where PyTorch's AOTAutograd cannot
    keep a float input symbolic (LayerNorm's eps, BatchNorm's momentum) it has dynamo trace
    again with the float specialised (TensorifyScalarRestartAnalysis), and the graph kept is
    that last one, which both compilers take."""
    from torch._guards import TracingContext
    from torch.utils.weak import WeakTensorKeyDictionary

    aot_eager = torch._dynamo.lookup_backend("aot_eager")
    captured = []

    def keep(gm, example_inputs):
        compiled_fn = aot_eager(gm, example_inputs) if dynamic else gm.forward
        context = TracingContext.get()
        capture = Capture(gm, list(example_inputs), context.fake_mode)
        if dynamic:
            capture.symbolic_contexts = WeakTensorKeyDictionary()
            capture.symbolic_contexts.update(context.tensor_to_context)
        captured.append(capture)
        return compiled_fn

    torch._dynamo.reset()
    torch.compile(model, backend=keep, dynamic=dynamic)(*inputs)
    assert len(captured) == 1, f"expected one graph, dynamo produced {len(captured)} (a graph break?)"
    assert not dynamic or captured[0].symbolic_inputs(), "torch.compile(dynamic=True) captured only static sizes"
    return captured[0]


def time_aot_compile(capture: Capture, repeats: int, fresh_fake_mode: bool = False) -> dict[str, float]:
    """Median seconds of aot_module_simplified with nop compilers, ours and PyTorch's, taking turns.

    A dynamic graph's compiles all share dynamo's ShapeEnv, whose guards accumulate; the
    untimed first round adds them, and the turns put each compiler first equally often.
    Each compile starts from a collected heap: Python's full collection (0.2-0.4 s here, a
    heap of ~400k objects, most of them torch's) falls due once the objects that survived
    younger collections since the last one pass a quarter of the heap, so without it the
    debt one compile leaves lands on the next one timed, usually the other compiler's
    (measured on the 12-block GPT: a full collection in 5 of 6 aotgrad compiles that ran
    after PyTorch's, none after gc.collect())."""
    from functorch.compile import nop
    from torch._functorch.aot_autograd import aot_module_simplified as torch_aot_module_simplified
    from torch._guards import tracing

    gm, example_inputs = capture.gm, capture.example_inputs
    compilers = {
        "aot_eager": lambda: torch_aot_module_simplified(gm, example_inputs, fw_compiler=nop, bw_compiler=nop),
        "aotgrad": lambda: aotgrad.aot_module_simplified(gm, example_inputs, aotgrad.nop, aotgrad.nop),
    }
    seconds: dict[str, list[float]] = {name: [] for name in compilers}
    # every compile but the first would otherwise load the graphs from aotgrad's disk cache
    with mock.patch.object(aotgrad.config, "cache_dir", None):
        for repeat in range(repeats + 1):  # repeat 0 is the untimed warmup
            for name in _rotated(list(compilers), repeat):
                gc.collect()
                with tracing(capture.tracing_context(fresh_fake_mode)):
                    start = time.perf_counter()
                    compilers[name]()
                    elapsed = time.perf_counter() - start
                if repeat:
                    seconds[name].append(elapsed)
    return {name: statistics.median(s) for name, s in seconds.items()}


def compiled(model: nn.Module, config: str, dynamic: bool | None = None) -> Callable:
    return model if config == "eager" else torch.compile(model, backend=config, dynamic=dynamic)


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


def _copies(inputs_by_size: list) -> list:
    """Each configuration's own inputs, as it would have its own data. Dynamo remembers the
    tensors it traced with symbolic sizes, even across torch._dynamo.reset(): traced again, each
    gets symbols of its own (equal sizes no longer share one), a graph other than the one compared."""
    return [tuple(t.clone() for t in inputs) for inputs in inputs_by_size]


def _eager_steps(model: nn.Module, inputs_by_size: list) -> list[tuple[torch.Tensor, list]]:
    """Eager's loss and state after one step at each size in turn (BatchNorm's running
    statistics carry over from one size to the next, in eager as in the compiled twins)."""
    reference = copy.deepcopy(model)
    params = list(reference.parameters())
    steps = []
    for inputs in inputs_by_size:
        loss = train_step(reference, inputs, params).detach()
        steps.append((loss, [None if t is None else t.clone() for t in _state(reference)]))
    return steps


def _synchronizer(inputs_by_size: list) -> Callable[[], None]:
    """torch.cuda.synchronize where the inputs are on cuda, else nothing to wait for."""
    return torch.cuda.synchronize if inputs_by_size[0][0].is_cuda else (lambda: None)


def time_first_calls(model: nn.Module, inputs_by_size: list, results: dict[str, Result],
                     dynamic: bool | None = None) -> None:
    """Seconds of the first forward + loss + backward after a dynamo reset, cold Inductor caches,
    then one step at each further size; whether each step's loss, grads and buffers (BatchNorm's
    running stats) match eager's, and how many graphs the backend compiled for them all."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import fresh_cache

    expected = _eager_steps(model, inputs_by_size)
    sync = _synchronizer(inputs_by_size)
    for config, result in results.items():
        twin, inputs_of_twin = copy.deepcopy(model), _copies(inputs_by_size)
        params = list(twin.parameters())
        torch._dynamo.reset()
        graphs_before = counters["stats"]["unique_graphs"]
        try:
            with fresh_cache():
                fn = compiled(twin, config, dynamic)
                for inputs, (expected_loss, expected_state) in zip(inputs_of_twin, expected):
                    sync()
                    start = time.perf_counter()
                    loss = train_step(fn, inputs, params)
                    sync()
                    if result.first_call_s is None:
                        result.first_call_s = time.perf_counter() - start
                    result.loss_matches &= torch.allclose(loss.detach(), expected_loss, rtol=1e-4, atol=1e-5)
                    result.state_matches &= _states_match(_state(twin), expected_state)
        except Exception as e:  # a failing configuration is reported in the table, not fatal
            result.error = result.error or _short(e)
        if config != "eager":
            result.compiles = counters["stats"]["unique_graphs"] - graphs_before


def _warm_up(model: nn.Module, inputs_by_size: list, results: dict[str, Result], warmup: int,
             dynamic: bool | None) -> dict[str, tuple]:
    """Each configuration's twin, compiled and run `warmup` steps (at least one at each size)."""
    runs = {}
    for config, result in results.items():
        twin, inputs_of_twin = copy.deepcopy(model), _copies(inputs_by_size)
        fn, params = compiled(twin, config, dynamic), list(twin.parameters())
        try:
            for i in range(max(warmup, len(inputs_of_twin))):
                train_step(fn, inputs_of_twin[i % len(inputs_of_twin)], params)
        except Exception as e:  # a failing configuration is reported in the table, not fatal
            result.error = _short(e)
            continue
        runs[config] = (fn, params, inputs_of_twin)
        result.step_s = [[] for _ in inputs_by_size]
    return runs


def time_steps(model: nn.Module, inputs_by_size: list, results: dict[str, Result], iters: int, rounds: int,
               warmup: int, dynamic: bool | None = None) -> None:
    """Per-iteration seconds of forward + loss + backward, configurations taking turns.

    Round r starts with the r-th configuration (a rotation), so each one runs equally
    often in each position: what one configuration leaves behind in the allocator or
    the caches would otherwise always land on the one after it (measured: 3-8%).
    With several sizes an iteration is one step at each size in turn, so every step
    changes the shapes, as in training on batches of varying size. Recompiles are counted
    in time_first_calls; here the warmup may recompile, the timed steps may not."""
    torch._dynamo.reset()
    sync = _synchronizer(inputs_by_size)
    per_round = max(1, iters // rounds)
    # every twin's graphs go to the cache of one code object (forward), where past dynamo's
    # limit of 8 entries it would silently run eager: each configuration gets 8, and an error
    with torch._dynamo.config.patch(recompile_limit=8 * len(results), fail_on_recompile_limit_hit=True):
        runs = _warm_up(model, inputs_by_size, results, warmup, dynamic)
        with torch._dynamo.config.patch(error_on_recompile=True):
            for r in range(rounds):
                for config, (fn, params, inputs_of_twin) in _rotated(list(runs.items()), r):
                    for _ in range(per_round):
                        for seconds, inputs in zip(results[config].step_s, inputs_of_twin):
                            sync()
                            start = time.perf_counter()
                            train_step(fn, inputs, params)
                            sync()
                            seconds.append(time.perf_counter() - start)


@dataclass
class Benchmark:
    name: str
    description: str
    sizes: tuple  # one size, or several with one graph for all (--dynamic)
    results: dict[str, Result]
    symbolic_inputs: list[str] = field(default_factory=list)  # --dynamic: the captured graph's
    only_compile: bool = False  # --only-compile: no first call, no steps

    @property
    def dynamic(self) -> bool:
        return len(self.sizes) > 1


def benchmark_model(name: str, configs: list[str], args, only_compile: bool = False) -> Benchmark:
    dynamic = True if args.dynamic else None
    device = torch.device(getattr(args, "device", "cpu"))
    model, _, description = make_model(name)
    model.to(device)
    sizes = DYNAMIC_SIZES[family(name)] if dynamic else (SIZES[family(name)],)
    if dynamic:
        description = f"{MODELS[name][1]}, dynamic=True"
    inputs_by_size = [tuple(t.to(device) for t in make_inputs(name, size)) for size in sizes]
    benchmark = Benchmark(name, description, sizes, {config: Result() for config in configs},
                          only_compile=only_compile)
    results = benchmark.results
    if any(c in AOT_CONFIGS for c in configs):
        capture = capture_graph(copy.deepcopy(model), inputs_by_size[0], dynamic)
        benchmark.symbolic_inputs = capture.symbolic_inputs()
        for config, seconds in time_aot_compile(capture, args.compile_repeats, args.fresh_fake_mode).items():
            if config in results:
                results[config].aot_compile_s = seconds
    if only_compile:
        return benchmark
    time_steps(model, inputs_by_size, results, args.iters, args.rounds, args.warmup, dynamic)
    time_first_calls(model, inputs_by_size, results, dynamic)
    return benchmark


# -- printing -------------------------------------------------------------------

def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}" if seconds >= 0.1 else f"{seconds * 1e3:.3f}"


def _ratio(numerator: Result | None, denominator: Result | None, attribute: str) -> str:
    if numerator is None or denominator is None:
        return "-"
    a, b = getattr(numerator, attribute), getattr(denominator, attribute)
    return "-" if a is None or b is None else f"{a / b:.2f}"


def ratios(benchmark: Benchmark) -> list[tuple[str, str]]:
    get = benchmark.results.get
    compile_ratio = ("aotgrad/aot_eager compile", _ratio(get("aotgrad"), get("aot_eager"), "aot_compile_s"))
    if benchmark.only_compile:
        return [compile_ratio]
    return [
        compile_ratio,
        ("aotgrad/aot_eager step", _ratio(get("aotgrad"), get("aot_eager"), "step_median_s")),
        ("aotgrad_inductor/inductor step", _ratio(get("aotgrad_inductor"), get("inductor"), "step_median_s")),
        ("aotgrad/aot_eager first call", _ratio(get("aotgrad"), get("aot_eager"), "first_call_s")),
        ("aotgrad_inductor/inductor first call",
         _ratio(get("aotgrad_inductor"), get("inductor"), "first_call_s")),
    ]


HEADER = ["config", "aot compile ms", "first call ms", "step ms (median)", "step IQR ms", "loss = eager",
          "grads, buffers = eager"]


def header(benchmark: Benchmark) -> list[str]:
    if benchmark.only_compile:
        return HEADER[:2]
    if not benchmark.dynamic:
        return HEADER
    return ["config", "aot compile ms", "first call ms", "compiles",
            *[f"step ms, {size_text(benchmark.name, size)}" for size in benchmark.sizes],
            "step ms, all sizes (sum)", "loss = eager (each size)", "grads, buffers = eager (each size)"]


def rows(benchmark: Benchmark) -> list[list[str]]:
    table = []
    for config, r in benchmark.results.items():
        checks = ["error" if r.error else "yes" if matches else "NO" for matches in (r.loss_matches, r.state_matches)]
        if benchmark.only_compile:
            table.append([config, _ms(r.aot_compile_s)])
        elif benchmark.dynamic:
            steps = [*map(_ms, r.step_medians_s(len(benchmark.sizes))), _ms(r.step_median_s)]
            compiles = "-" if r.compiles is None else str(r.compiles)
            table.append([config, _ms(r.aot_compile_s), _ms(r.first_call_s), compiles, *steps, *checks])
        else:
            table.append([config, _ms(r.aot_compile_s), _ms(r.first_call_s), _ms(r.step_median_s),
                          _ms(r.step_iqr_s), *checks])
    return table


def errors(benchmark: Benchmark) -> list[str]:
    lines = [f"{config} failed: {r.error}" for config, r in benchmark.results.items() if r.error]
    return lines + [f"{config} recompiled: {r.compiles} graphs for {len(benchmark.sizes)} sizes"
                    for config, r in benchmark.results.items() if r.compiles and r.compiles > 1]


def block_growth(benchmarks: list[Benchmark]) -> list[str]:
    """Aot compile ms per added block between consecutive GPT sizes, per configuration: e.g.
    "aotgrad: 2->6 blocks 31.0 ms/block, 6->12 blocks 30.5 ms/block" (equal figures: linear)."""
    gpts = sorted((b for b in benchmarks if b.name in GPT_BLOCKS), key=lambda b: GPT_BLOCKS[b.name])
    lines = []
    for config in AOT_CONFIGS:
        seconds = [(GPT_BLOCKS[b.name], b.results[config].aot_compile_s) for b in gpts if config in b.results]
        steps = [f"{blocks_a}->{blocks_b} blocks {(b - a) / (blocks_b - blocks_a) * 1e3:.1f} ms/block"
                 for (blocks_a, a), (blocks_b, b) in zip(seconds, seconds[1:]) if blocks_b > blocks_a]
        if steps:
            lines.append(f"{config}: " + ", ".join(steps))
    return lines


def print_text(benchmark: Benchmark) -> None:
    table = [header(benchmark), *rows(benchmark)]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    print(f"\n{benchmark.description}")
    if benchmark.symbolic_inputs:
        print("  captured graph's inputs with symbolic sizes: " + ", ".join(benchmark.symbolic_inputs))
    for row in table:
        print("  " + "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    print("  " + ", ".join(f"{label} {value}" for label, value in ratios(benchmark)))
    for line in errors(benchmark):
        print("  " + line)


def _markdown_table(header: list[str], rows: list[list[str]]) -> None:
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def print_markdown(benchmarks: list[Benchmark], command: str) -> None:
    """A table of every configuration (one per model with --dynamic: the sizes differ), then the ratios."""
    print(f"\n```bash\n{command}\n```")
    if benchmarks[0].dynamic and not benchmarks[0].only_compile:
        for b in benchmarks:
            print(f"\n{b.description}")
            _markdown_table(header(b), rows(b))
    else:
        _markdown_table(["model", *header(benchmarks[0])],
                        [[b.description, *row] for b in benchmarks for row in rows(b)])
    labels = [label for label, _ in ratios(benchmarks[0])]
    _markdown_table(["model", *labels], [[b.description, *(value for _, value in ratios(b))] for b in benchmarks])
    for b in benchmarks:
        for line in errors(b):
            print(f"\n{b.description}: {line}")
    growth = block_growth(benchmarks)
    if growth:
        print("\nGPT aot compile, growth per added block:\n\n" + "\n".join(f"- {line}" for line in growth))


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
    parser.add_argument("--models", default="mlp,gpt,cnn", help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ", ".join(CONFIGS))
    parser.add_argument("--iters", type=int, default=100,
                        help="timed steps per configuration and model (and size, with --dynamic)")
    parser.add_argument("--rounds", type=int, default=5, help="turns the configurations take (default 5)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before timing")
    parser.add_argument("--compile-repeats", type=int, default=5, help="timed ahead-of-time compiles")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--markdown", action="store_true", help="also print markdown tables")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where models and inputs live")
    parser.add_argument("--dynamic", action="store_true",
                        help="torch.compile(dynamic=True): one graph for 5 sizes per model, timed at each")
    parser.add_argument("--fresh-fake-mode", action="store_true",
                        help="aot compile of static graphs without dynamo's fake mode (each compiler makes its own)")
    parser.add_argument("--only-compile", action="store_true",
                        help="time the aot compile alone (aot_eager and aotgrad; no first call, no steps)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configs {sorted(unknown)}")
    if args.only_compile:
        configs = [c for c in configs if c in AOT_CONFIGS]
        if not configs:
            parser.error(f"--only-compile times {' and '.join(AOT_CONFIGS)}; --configs has neither")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda: torch.cuda.is_available() is False (CUDA build {torch.version.cuda})")
    machine = platform.processor() or platform.machine()
    if args.device == "cuda":
        machine += f", cuda: {torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    print(f"torch {torch.__version__}, aotgrad {aotgrad.__version__} ({_commit()}), {machine}, "
          f"{torch.get_num_threads()} threads, {datetime.date.today()}, load average {_load()}")
    benchmarks = []
    for name in args.models.split(","):
        benchmarks.append(benchmark_model(name, configs, args, args.only_compile))
        print_text(benchmarks[-1])
    for line in block_growth(benchmarks):
        print("GPT aot compile, growth per added block, " + line)
    print(f"\nload average at the end {_load()}")
    if args.markdown:
        print_markdown(benchmarks, " ".join(["python", *map(shlex.quote, sys.argv)]))


if __name__ == "__main__":
    main()
