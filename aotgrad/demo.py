"""`python -m aotgrad demo`: train a small CNN eagerly and under torch.compile(backend="aotgrad").

In: nothing (or `--steps N`). Both runs start from the same weights and see the same
batches; each step is zero_grad, forward + loss, backward, SGD step. Out, printed:
median step time, activation bytes saved for backward in one step (measured with
saved_tensors_hooks, which also see what aotgrad's forward saves through
ctx.save_for_backward), and whether losses, gradients, final parameters and buffers
match eager. Exit status 1 when they do not.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

# Eager is the oracle; aotgrad with the nop compiler runs the same aten ops, so the
# runs should agree to float32 rounding (they are usually bitwise equal).
RTOL, ATOL = 1e-5, 1e-6
BATCH, IMAGE, CLASSES = 16, 16, 10
MEASURED_STEP = 1  # step 0 compiles; saved_tensors_hooks are active only in this one


class TinyCNN(nn.Module):
    """conv-bn-relu twice, global average pool, linear; the loss is part of forward,
    so forward + loss is one compiled graph (BatchNorm's running stats included)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES))

    def forward(self, x, y):
        return F.cross_entropy(self.body(x), y)


class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Sums the bytes of the distinct storages saved for backward while active,
    leaving out storages in `exclude` (parameters, buffers, the input batch)."""

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
    """What one training run recorded, step by step."""
    step_seconds: list[float] = field(default_factory=list)
    losses: list[torch.Tensor] = field(default_factory=list)
    grads: list[list[torch.Tensor]] = field(default_factory=list)
    saved_bytes: int = 0
    final_state: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def median_step_seconds(self) -> float:
        timed = [s for i, s in enumerate(self.step_seconds) if i not in (0, MEASURED_STEP)]
        return statistics.median(timed)


def make_batches(steps: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g))
            for _ in range(steps)]


def train(model: nn.Module, loss_fn, batches) -> Run:
    """SGD over `batches`; times every step, keeps losses and gradients, and measures
    saved bytes in step MEASURED_STEP (after step 0 has compiled, see the note below)."""
    params = list(model.parameters())
    state = [*params, *model.buffers()]
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    run = Run()
    for i, (x, y) in enumerate(batches):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if i == MEASURED_STEP:
            # Not during step 0: aotgrad's trace calls active pack hooks on fake tensors.
            saved = SavedBytes(exclude=[*state, x, y])
            with saved:
                loss = loss_fn(x, y)
            run.saved_bytes = saved.nbytes
        else:
            loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        run.step_seconds.append(time.perf_counter() - start)
        run.losses.append(loss.detach())
        run.grads.append([p.grad for p in params])  # SGD reads .grad, never writes it
    run.final_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return run


@dataclass
class Comparison:
    name: str
    max_abs_diff: float
    matches: bool


def compare(name: str, expected: list[torch.Tensor], actual: list[torch.Tensor]) -> Comparison:
    diffs = [(e.double() - a.double()).abs().max().item() if e.numel() else 0.0
             for e, a in zip(expected, actual)]
    matches = len(expected) == len(actual) and all(
        e.shape == a.shape and torch.allclose(e, a, rtol=RTOL, atol=ATOL) for e, a in zip(expected, actual))
    return Comparison(name, max(diffs, default=0.0), matches)


def compare_runs(eager: Run, compiled: Run) -> list[Comparison]:
    return [
        compare("losses", eager.losses, compiled.losses),
        compare("gradients", [g for step in eager.grads for g in step],
                [g for step in compiled.grads for g in step]),
        compare("final parameters and buffers", list(eager.final_state.values()),
                [compiled.final_state[k] for k in eager.final_state]),
    ]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:.1f} KiB"


def report(eager: Run, compiled: Run, comparisons: list[Comparison], graphs: int, breaks: int,
           steps: int) -> bool:
    """Prints the summary; returns whether every comparison matched."""
    ratio = compiled.median_step_seconds / eager.median_step_seconds
    print(f"{'':<24}{'eager':>12}{'aotgrad':>12}")
    print(f"{'median step time':<24}{_ms(eager.median_step_seconds):>12}"
          f"{_ms(compiled.median_step_seconds):>12}   aotgrad/eager = {ratio:.2f}x")
    print(f"{'first step':<24}{_ms(eager.step_seconds[0]):>12}{_ms(compiled.step_seconds[0]):>12}"
          f"   aotgrad's includes compiling ({graphs} graph, {breaks} graph breaks)")
    print(f"{'activations saved':<24}{_kib(eager.saved_bytes):>12}{_kib(compiled.saved_bytes):>12}"
          "   per step, for backward (parameters and inputs left out)")
    for c in comparisons:
        print(f"  {c.name:<32} {'match' if c.matches else 'DIFFER'}   max |diff| {c.max_abs_diff:.1e}")
    passed = all(c.matches for c in comparisons)
    what = "losses, gradients, final parameters and buffers"
    if passed:
        print(f"PASS: aotgrad matches eager over {steps} steps ({what}; rtol={RTOL}, atol={ATOL})")
    else:
        failed = ", ".join(c.name for c in comparisons if not c.matches)
        print(f"FAIL: aotgrad differs from eager in {failed} (rtol={RTOL}, atol={ATOL})")
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aotgrad demo", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="SGD steps per run (default 40)")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default 1: the model is small, and one thread keeps "
                             "timings steady on a busy machine)")
    args = parser.parse_args(argv)
    if args.steps < MEASURED_STEP + 2:
        parser.error(f"--steps must be at least {MEASURED_STEP + 2}")
    import aotgrad  # noqa: F401  registers the backend

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = TinyCNN()
    twin = copy.deepcopy(model)
    batches = make_batches(args.steps)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"aotgrad demo: TinyCNN ({n_params} parameters), batch {BATCH}x3x{IMAGE}x{IMAGE}, "
          f"{args.steps} SGD steps, CPU, {torch.get_num_threads()} thread(s)")

    eager = train(model, model, batches)
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    compiled = train(twin, torch.compile(twin, backend="aotgrad"), batches)
    graphs = counters["stats"]["unique_graphs"]
    breaks = sum(counters["graph_break"].values())
    passed = report(eager, compiled, compare_runs(eager, compiled), graphs, breaks, args.steps)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
