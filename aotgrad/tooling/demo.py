"""`aotgrad demo`: what aotgrad does, on a small transformer and a small CNN, in a minute or two.

In: nothing (options choose the models, backends, steps and memory budgets). Each model
trains from the same weights on the same batches under eager and under torch.compile with
aot_eager, aotgrad, inductor and aotgrad_inductor, in rounds (step i of every backend, then
step i + 1), so that a busy machine slows them alike. Out, printed per model: each backend's
first step (which compiles), median step time, activation bytes saved for backward (seen by
saved_tensors_hooks) and largest difference from eager; then aotgrad at a few activation
memory budgets (aotgrad.config.activation_memory_budget): bytes saved, step time, still
exact. Last, PASS or FAIL: every run matches eager within its backend's tolerance (exit 1).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

# Each aotgrad backend compiles just before the PyTorch one it is compared with, so that a cache
# the first warms (Inductor's compiled C++ kernels, keyed by their source) favours PyTorch's.
BACKENDS = ("eager", "aotgrad", "aot_eager", "aotgrad_inductor", "inductor")
# Worst per-tensor error, max|a - e| / max|e|, allowed against eager (benchmarks/zoo.py's fp32
# tolerances): aot_eager and aotgrad run eager's kernels, so they agree to rounding (usually
# bitwise); Inductor generates its own kernels, which fuse and reorder float arithmetic.
TOLERANCES = {"eager": 0.0, "aotgrad": 1e-5, "aot_eager": 1e-5, "aotgrad_inductor": 1e-3, "inductor": 1e-3}
BUDGETS = (1.0, 0.5, 0.1)
MEASURED_STEP = 1  # step 0 compiles; saved_tensors_hooks are active only in this one
LEARNING_RATE = 0.01


# -- the models -----------------------------------------------------------------------------

class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a GELU MLP, each residual."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(self.norm1(x)).split(c, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """A GPT: token and position embeddings, `layers` blocks, a final norm, next-token loss
    (part of forward, so forward + loss is one compiled graph)."""

    def __init__(self, vocab: int = 64, context: int = 32, width: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(0.02 * torch.randn(context, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return F.cross_entropy(self.head(self.norm(x)).flatten(0, 1), targets.flatten())


class TinyCNN(nn.Module):
    """conv-bn-relu twice, global average pool, linear, cross-entropy loss (BatchNorm's
    running statistics are buffers the compiled graph writes back). The convolutions have
    no bias: BatchNorm subtracts it again, so its gradient is zero up to rounding, and any
    reordering of that rounding (Inductor's) is a large relative error of nothing."""

    def __init__(self, channels: int = 16, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, channels // 2, 3, padding=1, bias=False), nn.BatchNorm2d(channels // 2), nn.ReLU(),
            nn.Conv2d(channels // 2, channels, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes))

    def forward(self, x, y):
        return F.cross_entropy(self.body(x), y)


@dataclass
class Workload:
    """A model and its batches: `build()` makes the model (the caller seeds), `batch(g)` one batch."""
    name: str
    description: str
    build: Callable[[], nn.Module]
    batch: Callable[[torch.Generator], tuple[torch.Tensor, ...]]

    def batches(self, steps: int, seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
        g = torch.Generator().manual_seed(seed)
        return [self.batch(g) for _ in range(steps)]


def gpt(batch: int = 8, vocab: int = 64, context: int = 32, width: int = 64, heads: int = 4,
        layers: int = 2) -> Workload:
    def tokens(g):
        text = torch.randint(0, vocab, (batch, context + 1), generator=g)
        return text[:, :-1].contiguous(), text[:, 1:].contiguous()
    return Workload("TinyGPT", f"{layers}-layer transformer (width {width}, {heads} heads, context {context}, "
                               f"vocab {vocab}), batch {batch}",
                    lambda: TinyGPT(vocab, context, width, heads, layers), tokens)


def cnn(batch: int = 16, image: int = 16, channels: int = 16, classes: int = 10) -> Workload:
    def images(g):
        return torch.randn(batch, 3, image, image, generator=g), torch.randint(0, classes, (batch,), generator=g)
    return Workload("TinyCNN", f"2 conv-bn-relu layers ({channels} channels), batch {batch}x3x{image}x{image}",
                    lambda: TinyCNN(channels, classes), images)


WORKLOADS = {"gpt": gpt, "cnn": cnn}


# -- training ------------------------------------------------------------------------------

class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Sums the bytes of the distinct storages saved for backward while active, leaving out
    storages in `exclude` (parameters, buffers, the batch). Compiled forwards save with
    ctx.save_for_backward, so these hooks see what they save too."""

    def __init__(self, exclude: list[torch.Tensor]):
        self.excluded = {t.untyped_storage().data_ptr() for t in exclude}
        self.storages: dict[int, int] = {}
        super().__init__(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.excluded:
            self.storages[storage.data_ptr()] = storage.nbytes()
        return t

    @property
    def nbytes(self) -> int:
        return sum(self.storages.values())


@dataclass
class Run:
    """One model training under one backend: its step function and what each step recorded."""
    label: str                 # the backend's name, or "aotgrad, budget 0.5"
    model: nn.Module
    step_fn: Callable
    optimizer: torch.optim.Optimizer
    tolerance: float           # against eager (TOLERANCES)
    step_seconds: list[float] = field(default_factory=list)
    losses: list[torch.Tensor] = field(default_factory=list)
    grads: list[torch.Tensor] = field(default_factory=list)   # every step's, in order
    saved_bytes: int = 0
    final_state: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def start(cls, label: str, model: nn.Module) -> "Run":
        backend, budget = label.partition(", budget ")[::2]
        if backend == "eager":
            step_fn = model
        else:
            step_fn = torch.compile(model, backend=aotgrad_at_budget(float(budget)) if budget else backend)
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
        return cls(label, model, step_fn, optimizer, TOLERANCES[backend])

    def step(self, batch: tuple[torch.Tensor, ...], measure_saved: bool = False) -> None:
        """zero_grad, forward + loss, backward, SGD step; timed, loss and gradients kept."""
        params = list(self.model.parameters())
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        if measure_saved:  # not in step 0: aotgrad's trace calls active pack hooks on fake tensors
            saved = SavedBytes(exclude=[*params, *self.model.buffers(), *batch])
            with saved:
                loss = self.step_fn(*batch)
            self.saved_bytes = saved.nbytes
        else:
            loss = self.step_fn(*batch)
        loss.backward()
        self.optimizer.step()
        self.step_seconds.append(time.perf_counter() - start)
        self.losses.append(loss.detach())
        self.grads += [p.grad.detach().clone() for p in params]

    def finish(self) -> None:
        self.final_state = [v.detach().clone() for v in self.model.state_dict().values()]

    @property
    def first_step_seconds(self) -> float:
        return self.step_seconds[0]

    @property
    def median_step_seconds(self) -> float:
        timed = [s for i, s in enumerate(self.step_seconds) if i not in (0, MEASURED_STEP)]
        return statistics.median(timed or self.step_seconds)


def aotgrad_at_budget(budget: float) -> Callable:
    """The `aotgrad` backend compiling under activation_memory_budget=`budget`. A backend of
    its own, so that Dynamo compiles the model again for it rather than reuse the graph it
    compiled under another budget (its cache entries are per backend)."""
    import aotgrad
    from aotgrad.backends import aotgrad_backend

    def backend(gm, example_inputs):
        with aotgrad.config.patch(activation_memory_budget=budget):
            return aotgrad_backend(gm, example_inputs)
    backend.__name__ = f"aotgrad_at_budget_{budget:g}"
    return backend


def labels(backends: list[str], budgets: list[float]) -> list[str]:
    """One run per backend, eager first, then aotgrad at each budget below 1 (1 is aotgrad's
    default: the `aotgrad` run)."""
    return ["eager", *(b for b in backends if b != "eager"),
            *(f"aotgrad, budget {b:g}" for b in budgets if b != 1.0)]


def warm_up(backends: list[str], progress=None) -> float:
    """Pay torch.compile's once-per-process costs (imports, Dynamo's first frame, Inductor's
    compile workers) on a two-op function under each backend, so that no model's first step
    carries them; returns the seconds it took."""
    started = time.perf_counter()
    compiled = [b for b in backends if b != "eager"]
    if progress and compiled:
        progress(f"warming up torch.compile under {', '.join(compiled)} ...")
    for backend in compiled:
        x = torch.randn(4, requires_grad=True)
        torch.compile(lambda t: (t.sin() * 2).sum(), backend=backend)(x).backward()
    seconds = time.perf_counter() - started
    if progress and compiled:
        progress(f" {seconds:.1f} s\n")
    return seconds


def train_side_by_side(workload: Workload, labels: list[str], steps: int, progress=None) -> dict[str, Run]:
    """Train `workload`'s model in each run of `labels` (eager first: the oracle), from the
    same weights on the same batches, one step of each per round. `progress(text)` hears
    about each compile (step 0)."""
    torch.manual_seed(0)
    base = workload.build()
    runs = {label: Run.start(label, copy.deepcopy(base)) for label in labels}
    for i, batch in enumerate(workload.batches(steps)):
        for run in runs.values():
            if i == 0 and run.label != "eager" and progress:
                progress(f"compiling {workload.name} under {run.label} ...")
            run.step(batch, measure_saved=i == MEASURED_STEP)
            if i == 0 and run.label != "eager" and progress:
                progress(f" {run.first_step_seconds:.1f} s\n")
    for run in runs.values():
        run.finish()
    return runs


# -- comparing with eager ------------------------------------------------------------------

@dataclass
class Comparison:
    """How far one run is from eager: the worst relative error of each kind of tensor."""
    label: str
    errors: dict[str, float]   # "losses" / "gradients" / "final parameters and buffers" -> worst
    bitwise: bool
    tolerance: float

    @property
    def worst(self) -> float:
        return max(self.errors.values(), default=0.0)

    @property
    def matches(self) -> bool:
        return self.worst <= self.tolerance

    def describe(self) -> str:
        verdict = "ok" if self.matches else "DIFFERS"
        return f"{'bitwise equal' if self.bitwise else f'{self.worst:.1e}'}  {verdict} (tolerance {self.tolerance:g})"


def relative_error(expected: torch.Tensor, actual: torch.Tensor) -> float:
    """max|a - e| / max|e| (zoo.py's measure); inf for another shape, 0 for two empty tensors."""
    if expected.shape != actual.shape:
        return float("inf")
    if expected.numel() == 0:
        return 0.0
    e, a = expected.double(), actual.double()
    scale = e.abs().max().item() or 1.0
    return (a - e).abs().max().item() / scale


def compare(eager: Run, run: Run) -> Comparison:
    """`run`'s losses, gradients and final state against `eager`'s, tensor by tensor."""
    kinds = {"losses": (eager.losses, run.losses), "gradients": (eager.grads, run.grads),
             "final parameters and buffers": (eager.final_state, run.final_state)}
    errors, bitwise = {}, True
    for kind, (expected, actual) in kinds.items():
        if len(expected) != len(actual):
            errors[kind], bitwise = float("inf"), False
            continue
        errors[kind] = max((relative_error(e, a) for e, a in zip(expected, actual)), default=0.0)
        bitwise = bitwise and all(torch.equal(e, a) for e, a in zip(expected, actual))
    return Comparison(run.label, errors, bitwise, run.tolerance)


# -- printing ------------------------------------------------------------------------------

def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _seconds(seconds: float) -> str:
    return f"{seconds:.2f} s"


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:.1f} KiB"


def _percent(part: int, whole: int | None) -> str:
    if not whole:
        return "-"
    share = 100 * part / whole
    return f"{share:.0f}%" if share >= 10 or share == 0 else f"{share:.1f}%"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned first and last columns, the others right-aligned."""
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    last = len(header) - 1
    return ["  " + "  ".join(cell.ljust(w) if c in (0, last) else cell.rjust(w)
                             for c, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in [header, *rows]]


@dataclass
class Outcome:
    """One model's runs, each but eager's compared with eager."""
    workload: Workload
    runs: dict[str, Run]
    comparisons: dict[str, Comparison]

    def failures(self) -> list[str]:
        return [f"{self.workload.name} under {c.label} ({', '.join(k for k, e in c.errors.items() if e > c.tolerance)})"
                for c in self.comparisons.values() if not c.matches]


def backends_table(outcome: Outcome) -> list[str]:
    eager = outcome.runs["eager"]
    rows = []
    for label, run in outcome.runs.items():
        if ", budget " in label:
            continue
        c = outcome.comparisons.get(label)
        rows.append((label, _seconds(run.first_step_seconds), _ms(run.median_step_seconds),
                     f"{run.median_step_seconds / eager.median_step_seconds:.2f}x", _kib(run.saved_bytes),
                     "(the oracle)" if c is None else c.describe()))
    return _table(("backend", "first step", "median step", "vs eager", "saved for backward",
                   "max rel. diff from eager"), rows)


def budget_runs(outcome: Outcome) -> list[tuple[float, Run]]:
    """(budget, run) for aotgrad at each budget, 1 (the `aotgrad` run) first."""
    found = [(float(label.rpartition(" ")[2]), run) for label, run in outcome.runs.items() if ", budget " in label]
    return ([(1.0, outcome.runs["aotgrad"])] if found and "aotgrad" in outcome.runs else []) + found


def budgets_table(outcome: Outcome) -> list[str]:
    budgets = budget_runs(outcome)
    full = budgets[0][1].saved_bytes
    rows = [(f"{budget:g}", _seconds(run.first_step_seconds), _ms(run.median_step_seconds),
             _kib(run.saved_bytes), _percent(run.saved_bytes, full), outcome.comparisons[run.label].describe())
            for budget, run in budgets]
    return _table(("budget", "first step", "median step", "saved for backward", "of budget 1",
                   "max rel. diff from eager"), rows)


def highlights(outcome: Outcome) -> list[str]:
    """The ratios a reader came for, as measured (above 1: aotgrad's is larger, slower)."""
    runs, lines = outcome.runs, []
    pairs = [("aotgrad", "aot_eager", "PyTorch's AOTAutograd; both run eager's kernels"),
             ("aotgrad_inductor", "inductor", "both generate code with Inductor")]
    for ours, theirs, why in pairs:
        if ours in runs and theirs in runs:
            a, b = runs[ours], runs[theirs]
            lines.append(f"  {ours}/{theirs} ({why}): first step {a.first_step_seconds / b.first_step_seconds:.2f}x, "
                         f"median step {a.median_step_seconds / b.median_step_seconds:.2f}x, saved for backward "
                         f"{_percent(a.saved_bytes, b.saved_bytes)}")
    budgets = budget_runs(outcome)
    if budgets:
        (_, full), (low, run) = budgets[0], min(budgets, key=lambda b: b[0])
        lines.append(f"  aotgrad at budget {low:g} saves {_kib(run.saved_bytes)} instead of {_kib(full.saved_bytes)} "
                     f"({_percent(run.saved_bytes, full.saved_bytes)}), median step "
                     f"{run.median_step_seconds / full.median_step_seconds:.2f}x, "
                     f"{outcome.comparisons[run.label].describe().split('  ')[0]} to eager")
    return lines


def print_outcome(outcome: Outcome) -> None:
    w = outcome.workload
    parameters = sum(p.numel() for p in outcome.runs["eager"].model.parameters())
    print(f"\n{w.name}: {w.description}, {parameters:,} parameters")
    print("\n".join(backends_table(outcome)))
    if budget_runs(outcome):
        print("aotgrad at activation memory budgets (aotgrad.config.activation_memory_budget: "
              "below 1, min-cut recomputes what it does not save)")
        print("\n".join(budgets_table(outcome)))
    lines = highlights(outcome)
    if lines:
        print("\n".join(["as measured:", *lines]))


def verdict(outcomes: list[Outcome], steps: int) -> bool:
    """Prints PASS or FAIL; True for PASS."""
    failures = [f for o in outcomes for f in o.failures()]
    if failures:
        print(f"FAIL: differs from eager beyond its tolerance: {'; '.join(failures)}")
        return False
    runs = sum(len(o.comparisons) for o in outcomes)
    print(f"PASS: all {runs} compiled runs match eager over {steps} steps (losses, gradients, final parameters "
          f"and buffers; per tensor max|diff| / max|eager| within the tolerance shown)")
    return True


def run_workload(workload: Workload, labels: list[str], steps: int, progress=None) -> Outcome:
    runs = train_side_by_side(workload, labels, steps, progress)
    comparisons = {label: compare(runs["eager"], run) for label, run in runs.items() if label != "eager"}
    return Outcome(workload, runs, comparisons)


# -- the command line ----------------------------------------------------------------------

def _list(choices):
    def parse(text: str) -> list[str]:
        items = [t for t in text.split(",") if t]
        bad = [t for t in items if t not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"{', '.join(bad)} not among {', '.join(choices)}")
        return items
    return parse


def _budgets(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError("a budget is a fraction from 0 to 1")
    return values


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aotgrad demo", description=__doc__.split("\n\n")[0].strip("`"))
    parser.add_argument("--models", type=_list(tuple(WORKLOADS)), default=list(WORKLOADS),
                        help="comma-separated, from %(default)s (default: both)")
    parser.add_argument("--backends", type=_list(BACKENDS), default=list(BACKENDS),
                        help="comma-separated; eager, the oracle, is always run (default: all five)")
    parser.add_argument("--steps", type=int, default=8, help="SGD steps per run (default %(default)s)")
    parser.add_argument("--budgets", type=_budgets, default=list(BUDGETS),
                        help="activation memory budgets for aotgrad, comma-separated; '' for none "
                             "(default 1.0,0.5,0.1)")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default 1: the models are small, and one thread keeps "
                             "timings steady on a busy machine)")
    return parser


def _progress(text: str) -> None:
    print(text, end="", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.steps < MEASURED_STEP + 2:
        parser.error(f"--steps must be at least {MEASURED_STEP + 2}")
    if any(b != 1.0 for b in args.budgets) and "aotgrad" not in args.backends:
        parser.error("--budgets below 1 compare with the aotgrad run: add aotgrad to --backends")
    import aotgrad  # registers the backends

    run_labels = labels(args.backends, args.budgets)
    torch.set_num_threads(args.threads)
    budgets = [f"{b:g}" for b in args.budgets if b != 1.0]
    print(f"aotgrad demo: {' and '.join(WORKLOADS[m]().name for m in args.models)} under "
          f"{', '.join(run_labels[:len(run_labels) - len(budgets)])}"
          + (f", and aotgrad at memory budgets {', '.join(budgets)}" if budgets else "")
          + f"; {args.steps} SGD steps each, CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}, "
          f"aotgrad {aotgrad.__version__}")
    print("first step = compile + one step (aotgrad's disk cache and Inductor's FX graph cache off: every graph "
          "is compiled here); runs step in rounds")
    print("each aotgrad backend compiles just before the PyTorch one it is compared with, so the caches the first "
          "warms (Dynamo's, Inductor's compiled kernels) favour PyTorch's first step")
    started = time.perf_counter()
    outcomes = []
    with aotgrad.config.patch(cache_dir=None), \
            torch._inductor.config.patch(fx_graph_cache=False, autotune_local_cache=False):
        warm_up(args.backends, _progress)
        for name in args.models:
            outcomes.append(run_workload(WORKLOADS[name](), run_labels, args.steps, _progress))
            print_outcome(outcomes[-1])
            sys.stdout.flush()
    print(f"\ndemo wall time {time.perf_counter() - started:.0f} s (Python and torch start-up not included)")
    return 0 if verdict(outcomes, args.steps) else 1


if __name__ == "__main__":
    sys.exit(main())
