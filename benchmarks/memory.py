"""Activation memory: what each partitioner saves for the backward, what it recomputes, and
how far that is from the exact optimum of the same problem.

    python benchmarks/memory.py                      # every model, markdown to stdout
    python benchmarks/memory.py --models mlp,gpt2 --plots docs/images

For each model the joint graph is traced once by aotgrad and its forward's repeated
computations merged (partition/repeated.py, as aotgrad's min-cut does first and PyTorch's
partitioner does with its own pass; scored on the unmerged graph, a value the backward reads
through a merged twin would count as recomputed); then, on that same graph:
    default            aotgrad's default partition (save what the backward reads)
    aotgrad min-cut    aotgrad.min_cut_rematerialization_partition, budgets 1.0, 0.5, 0.25
    PyTorch min-cut    torch._functorch.partitioners.min_cut_rematerialization_partition,
                       with functorch's activation_memory_budget 1.0, 0.5, 0.25
    optimum            aotgrad.partition.optimal: least recompute under aotgrad's byte count
                       at each budget, fewest bytes under its recompute
Each partition is scored by aotgrad's cost model (partition/cost.py): saved bytes (inputs
free), recompute cost, the simulated backward peak (partition/peak.py) and partition time.
Each is then run for real through aotgrad's runtime: the saved bytes of a training step
(distinct storages packed by `saved_tensors_hooks`, inputs and parameters excluded), the
step time, and its loss and gradients against eager (same seed: dropout draws the same mask).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_and_step import CNN, GPT, MLP, make_inputs  # noqa: E402

import aotgrad  # noqa: E402
from aotgrad.partition import min_cut  # noqa: E402
from aotgrad.partition.graphs import split_joint  # noqa: E402
from aotgrad.partition.optimal import solve_optimum  # noqa: E402
from aotgrad.partition.peak import backward_peak_bytes  # noqa: E402
from aotgrad.partition.repeated import merge_repeated  # noqa: E402

BUDGETS = (1.0, 0.5, 0.25)


# -- the models the issue names, besides compile_and_step's MLP, GPT and CNN -----

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, cos, sin):
    """Rotate pairs of channels by position-dependent angles (rotary embeddings)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, attention with rotary embeddings (SDPA), RMSNorm, SwiGLU MLP; the loss is
    the mean square of the block's output (the block alone, no embedding or head)."""

    def __init__(self, d_model: int = 256, heads: int = 4, hidden: int = 688, seq: int = 128):
        super().__init__()
        self.heads = heads
        self.norm_1, self.norm_2 = RMSNorm(d_model), RMSNorm(d_model)
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model, bias=False), nn.Linear(d_model, d_model, bias=False)
        self.gate, self.up = nn.Linear(d_model, hidden, bias=False), nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)
        half = d_model // heads // 2
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(half) / half))
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, dim=-1)[:, :half], persistent=False)
        self.register_buffer("sin", torch.cat([angles.sin()] * 2, dim=-1)[:, :half], persistent=False)

    def forward(self, x, target):
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(self.norm_1(x)).split(d_model, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        cos, sin = self.cos[:seq], self.sin[:seq]
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(batch, seq, d_model))
        h = self.norm_2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return F.mse_loss(x, target)


class DropoutGPT(GPT):
    """compile_and_step's GPT with dropout after attention and MLP (p=0.1)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for block in self.blocks:
            block.mlp.append(nn.Dropout(0.1))
            block.proj = nn.Sequential(block.proj, nn.Dropout(0.1))


def _gpt_inputs(batch: int, seq: int, vocab: int = 512):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


MODELS: dict[str, tuple[str, Callable[[], tuple[nn.Module, tuple]]]] = {
    "mlp": ("MLP 64-64-64, batch 32", lambda: (MLP(), make_inputs("mlp", 32))),
    "gpt2": ("GPT 2 blocks, d256, seq 128, batch 8", lambda: (GPT(), make_inputs("gpt", (8, 128)))),
    "gpt6": ("GPT 6 blocks, d512, 8 heads, seq 256, batch 4, dropout 0.1",
             lambda: (DropoutGPT(seq=256, d_model=512, heads=8, blocks=6), _gpt_inputs(4, 256))),
    "llama": ("Llama block (RMSNorm, SwiGLU, rotary, SDPA), d256, seq 128, batch 8",
              lambda: (LlamaBlock(), (torch.randn(8, 128, 256, generator=torch.Generator().manual_seed(0)),
                                      torch.randn(8, 128, 256, generator=torch.Generator().manual_seed(1))))),
    "cnn": ("CNN 3x conv-bn-relu, 32x32, batch 16", lambda: (CNN(), make_inputs("cnn", 16))),
}


# -- one joint graph per model ---------------------------------------------------

@dataclass
class Joint:
    gm: torch.fx.GraphModule
    inputs: list
    num_fwd_outputs: int


def functional_step(model: nn.Module) -> Callable:
    """loss(params, buffers, *inputs): the model as a function of its state, for aot_function."""
    def step(params, buffers, *inputs):
        return torch.func.functional_call(model, (params, buffers), inputs)
    return step


def state(model: nn.Module) -> tuple[dict, dict]:
    return dict(model.named_parameters()), dict(model.named_buffers())


def trace_joint(model: nn.Module, inputs) -> Joint:
    got = {}

    def keep(gm, joint_inputs, num_fwd_outputs):
        got["joint"] = Joint(gm, list(joint_inputs), num_fwd_outputs)
        return aotgrad.default_partition(gm, joint_inputs, num_fwd_outputs=num_fwd_outputs)

    aotgrad.aot_function(functional_step(model), aotgrad.nop, partition_fn=keep)(*state(model), *inputs)
    return got["joint"]


# -- partitioners ------------------------------------------------------------------

def aotgrad_min_cut(budget: float) -> Callable:
    def partition(gm, inputs, *, num_fwd_outputs):
        return aotgrad.min_cut_rematerialization_partition(gm, inputs, num_fwd_outputs=num_fwd_outputs,
                                                           memory_budget=budget)
    return partition


def pytorch_min_cut(budget: float) -> Callable:
    """PyTorch's partitioner on aotgrad's joint graph (benchmarks may import it; aotgrad/ may not)."""
    from torch._functorch import config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def partition(gm, inputs, *, num_fwd_outputs):
        with functorch_config.patch(activation_memory_budget=budget):
            fw_gm, bw_gm = min_cut_rematerialization_partition(gm, inputs, num_fwd_outputs=num_fwd_outputs)
        outputs = fw_gm.graph.output_node().args[0]
        fw_gm.meta["num_saved"] = len(outputs) - num_fwd_outputs  # as aotgrad's partitioners record it
        fw_gm.meta.setdefault("num_saved_sizes", 0)
        bw_gm.meta["num_saved"] = fw_gm.meta["num_saved"]
        return fw_gm, bw_gm
    return partition


def optimal(max_bytes: int) -> Callable:
    from aotgrad.partition.optimal import optimal_partition

    def partition(gm, inputs, *, num_fwd_outputs):
        return optimal_partition(gm, inputs, num_fwd_outputs=num_fwd_outputs, max_bytes=max_bytes)
    return partition


# -- scoring -------------------------------------------------------------------------

@dataclass
class Row:
    config: str
    saved_bytes: int | None = None
    recompute: int | None = None
    peak: int | None = None
    partition_s: float | None = None
    real_saved_bytes: int | None = None
    step_ms: float | None = None
    correct: str = ""
    note: str = ""


PARTITION_REPEATS = 3  # partition time: the median of this many runs


def score(joint: Joint, name: str, partition: Callable) -> tuple[Row, tuple]:
    """Partition the joint graph (timed: median of PARTITION_REPEATS runs); cost the partition
    with aotgrad's model."""
    times = []
    for _ in range(PARTITION_REPEATS):
        start = time.perf_counter()
        fw_gm, bw_gm = partition(joint.gm, joint.inputs, num_fwd_outputs=joint.num_fwd_outputs)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    problem = min_cut.cut_problem(split_joint(joint.gm, joint.num_fwd_outputs))
    cut = min_cut.score_saved(problem, _saved_in_joint(joint.gm, fw_gm, joint.num_fwd_outputs))
    return Row(name, cut.bytes, cut.recompute, backward_peak_bytes(fw_gm, bw_gm), seconds), (fw_gm, bw_gm)


def _saved_in_joint(joint_gm, fw_gm, num_fwd_outputs: int) -> list:
    """The joint graph's nodes for the forward's saved outputs (matched by name)."""
    by_name = {n.name: n for n in joint_gm.graph.nodes}
    outputs = fw_gm.graph.output_node().args[0][num_fwd_outputs:]
    return [by_name[o.name] for o in outputs if isinstance(o, torch.fx.Node) and o.name in by_name]


class SavedBytes:
    """Bytes of distinct storages autograd packs for backward, not counting `exclude`'s."""

    def __init__(self, exclude):
        self.excluded = {t.untyped_storage().data_ptr() for t in exclude}
        self.storages: dict[int, int] = {}

    def pack(self, t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.excluded:
            self.storages[storage.data_ptr()] = storage.nbytes()
        return t

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


def run_for_real(model: nn.Module, inputs, partition: Callable | None, iters: int) -> tuple[int, float, tuple]:
    """(saved bytes of one step, median step ms, (loss, grads)) through aotgrad's runtime
    with this partitioner, or eager when partition is None."""
    params, buffers = state(model)
    step = functional_step(model)
    fn = step if partition is None else aotgrad.aot_function(step, aotgrad.nop, partition_fn=partition)
    leaves = list(params.values())

    def one_step():
        torch.manual_seed(0)
        loss = fn(params, buffers, *inputs)
        return loss, torch.autograd.grad(loss, leaves)

    one_step()  # compile
    counter = SavedBytes([*leaves, *buffers.values(), *inputs])
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        torch.manual_seed(0)
        loss = fn(params, buffers, *inputs)
    del loss
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        result = one_step()
        times.append(time.perf_counter() - start)
    return counter.bytes, statistics.median(times) * 1e3, result


def _same(actual: tuple, expected: tuple) -> bool:
    loss, grads = actual
    return torch.allclose(loss, expected[0], rtol=1e-4, atol=1e-5) and all(
        torch.allclose(a, e, rtol=1e-3, atol=1e-5) for a, e in zip(grads, expected[1]))


@dataclass
class ModelReport:
    name: str
    text: str
    nodes: int
    rows: list[Row] = field(default_factory=list)
    hull: list[tuple[int, int]] = field(default_factory=list)
    optimum_points: list[tuple[int, int]] = field(default_factory=list)


def benchmark(name: str, iters: int, ilp_limit: float) -> ModelReport:
    text, make = MODELS[name]
    torch.manual_seed(0)
    model, inputs = make()
    joint = trace_joint(model, inputs)
    merged, _ = merge_repeated(joint.gm, joint.num_fwd_outputs)
    joint = Joint(merged, joint.inputs, joint.num_fwd_outputs)
    report = ModelReport(name, text, len(joint.gm.graph.nodes))
    _, _, expected = run_for_real(model, inputs, None, 1)
    configs = [("default", aotgrad.default_partition)]
    configs += [(f"aotgrad min-cut {b}", aotgrad_min_cut(b)) for b in BUDGETS]
    configs += [(f"PyTorch min-cut {b}", pytorch_min_cut(b)) for b in BUDGETS]
    for config, partition in configs:
        try:
            row, _ = score(joint, config, partition)
        except Exception as e:  # a partitioner that fails is a result, not a crash
            report.rows.append(Row(config, note=f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"))
            continue
        real, step_ms, result = run_for_real(model, inputs, partition, iters)
        row.real_saved_bytes, row.step_ms = real, step_ms
        row.correct = "yes" if _same(result, expected) else "**NO**"
        report.rows.append(row)
    problem = min_cut.cut_problem(split_joint(joint.gm, joint.num_fwd_outputs))
    for row in [r for r in report.rows if r.config.startswith("aotgrad") and r.saved_bytes is not None]:
        best = solve_optimum(problem, max_bytes=row.saved_bytes, time_limit=ilp_limit)
        fewest = solve_optimum(problem, max_recompute=row.recompute, time_limit=ilp_limit)
        row.note = (f"bytes {_ratio(row.saved_bytes, fewest.cut.bytes)} of the optimum at its recompute, "
                    f"recompute {_ratio(row.recompute, best.cut.recompute)} of the optimum at its bytes")
        report.rows.append(Row(f"optimum at {row.config[8:]}'s bytes", best.cut.bytes, best.cut.recompute,
                               partition_s=best.seconds,
                               note=f"{_proof(best)}; fewest bytes at its recompute: "
                                    f"{_mib(fewest.cut.bytes)} MiB{_proof(fewest, ', ')}"))
        report.optimum_points += [(best.cut.bytes, best.cut.recompute), (fewest.cut.bytes, fewest.cut.recompute)]
    report.hull = min_cut.tradeoff_hull(joint.gm, joint.num_fwd_outputs)
    return report


def _ratio(value: int, optimum: int) -> str:
    return "1.00x" if value == optimum else ("inf" if optimum == 0 else f"{value / optimum:.3f}x")


def _proof(optimum, sep: str = "") -> str:
    return f"{sep}proven in {optimum.seconds:.2f} s" if optimum.proven else f"{sep}NOT proven ({optimum.seconds:.0f} s)"


# -- output -----------------------------------------------------------------------------

def _mib(n: int | None) -> str:
    return "" if n is None else f"{n / 2 ** 20:.2f}"


def markdown(report: ModelReport) -> str:
    lines = [f"### {report.text} ({report.nodes} joint nodes)", "",
             "| partition | saved MiB (model) | recompute (model) | backward peak MiB | partition s "
             "| saved MiB (real step) | step ms | equal to eager | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report.rows:
        lines.append(f"| {r.config} | {_mib(r.saved_bytes)} | {'' if r.recompute is None else f'{r.recompute:,}'} "
                     f"| {_mib(r.peak)} | {'' if r.partition_s is None else f'{r.partition_s:.3f}'} "
                     f"| {_mib(r.real_saved_bytes)} | {'' if r.step_ms is None else f'{r.step_ms:.1f}'} "
                     f"| {r.correct} | {r.note} |")
    lines += ["", "aotgrad's trade-off hull (saved MiB, recompute): "
              + ", ".join(f"({_mib(b)}, {c:,})" for b, c in report.hull), ""]
    return "\n".join(lines)


def plot(report: ModelReport, folder: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    hull = sorted(report.hull)
    ax.plot([b / 2 ** 20 for b, _ in hull], [c for _, c in hull], "-o", label="aotgrad hull (lambda sweep)")
    for r in report.rows:
        if r.saved_bytes is None or r.config.startswith("optimum"):
            continue
        marker = "s" if r.config.startswith("PyTorch") else ("^" if r.config == "default" else "o")
        ax.scatter([r.saved_bytes / 2 ** 20], [r.recompute], marker=marker, s=60, label=r.config)
    ax.scatter([b / 2 ** 20 for b, _ in report.optimum_points], [c for _, c in report.optimum_points],
               marker="x", color="black", s=50, label="exact optimum (ILP)")
    ax.set_xlabel("saved for backward (MiB, cost model)")
    ax.set_ylabel("recompute cost (cost model)")
    ax.set_title(report.text, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"memory_{report.name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--iters", type=int, default=5, help="timed steps per partition (median)")
    parser.add_argument("--ilp-limit", type=float, default=120.0, help="seconds per exact-optimum solve")
    parser.add_argument("--plots", default=None, help="write a PNG per model into this folder")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    for name in args.models.split(","):
        report = benchmark(name, args.iters, args.ilp_limit)
        print(markdown(report), flush=True)
        if args.plots:
            print(f"plot: {plot(report, Path(args.plots))}\n", flush=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
