"""The disk cache (aotgrad/persistence/disk_cache.py): a second process loads what the first traced and
partitioned, and the loaded graphs behave as a fresh compile's (outputs, grads, BatchNorm
statistics, output aliases, printed graphs); every part of the key invalidates; what is not
stored says why; loads pause the garbage collector; the size limit evicts the least recently
used; a folder or entry others may write is neither read nor written; corrupt entries are
rejected and rebuilt; concurrent writers leave only whole entries.

Each test gets its own empty cache folder. A "second process" is a subprocess where the point
is the process boundary, else `torch._dynamo.reset()` and a new torch.compile (aotgrad keeps
no in-memory cache across aot_module_simplified calls)."""
from __future__ import annotations

import copy
import gc
import json
import logging
import os
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

import aotgrad
from aotgrad.observe import phases
from aotgrad.observe.printing import format_graph
from aotgrad.persistence import cache_folder, disk_cache, generated, graph_pickle

ROOT = Path(__file__).resolve().parents[2]  # the checkout: its aotgrad, not an installed one


class Net(nn.Module):
    """Linear, BatchNorm (running statistics: input mutations), ReLU; also returns a view of
    its input (an output alias the epilogue rebuilds)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 5)
        self.norm = nn.BatchNorm1d(5)

    def forward(self, x):
        return F.relu(self.norm(self.linear(x))).pow(2).mean(), x.t()


class ConvNet(nn.Module):
    """A convolution Inductor may lay out channels-last: its saved activation must keep its
    identity between the stored forward and backward (backends.InductorCompilers)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x))).sum()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder for this test, and counters read as changes from here."""
    folder = tmp_path / "cache"
    monkeypatch.setattr(aotgrad.config, "cache_dir", str(folder))
    monkeypatch.setattr(cache_folder, "_warned", set())  # each test sees its warnings
    before = Counter(aotgrad.counters["disk_cache"])
    aotgrad.counters["disk_cache"].clear()
    yield folder
    aotgrad.counters["disk_cache"].clear()
    aotgrad.counters["disk_cache"].update(before)


def entries(folder: Path) -> list[Path]:
    """The entry files (not a writer's temporary `.<name>.<random>.tmp`)."""
    return sorted(p for p in folder.glob("??/*") if not p.name.startswith("."))


def train_step(model: nn.Module, x: torch.Tensor, backend: str | None) -> dict:
    """One forward + backward, eager (backend None) or through a fresh torch.compile; the
    outputs, grads, buffers, whether output 1 aliases x, and the printed graphs compiled."""
    torch._dynamo.reset()
    x = x.clone().requires_grad_()
    fn = model if backend is None else torch.compile(model, backend=backend)
    with phases.watch() as records:
        loss, view = fn(x)
    (loss + view.sum()).backward()
    return {"outputs": [loss.detach(), view.detach()], "grads": [x.grad] + [p.grad for p in model.parameters()],
            "buffers": list(model.buffers()), "alias": view.untyped_storage()._cdata == x.untyped_storage()._cdata,
            "graphs": [(format_graph(r.forward), r.forward.code, format_graph(r.backward, "backward"), r.backward.code)
                       for r in records],
            "cache": [r.disk_cache for r in records]}


def assert_same_training(actual: dict, expected: dict) -> None:
    for what in ("outputs", "grads", "buffers"):
        torch.testing.assert_close(actual[what], expected[what], msg=lambda m: f"{what}: {m}")
    assert actual["alias"] == expected["alias"]


def net_and_input():
    torch.manual_seed(0)
    return Net(), torch.randn(8, 6)


# -- hits ---------------------------------------------------------------------

def test_second_compile_loads_the_graphs_and_matches_eager_and_the_first(cache):
    model, x = net_and_input()
    eager = train_step(copy.deepcopy(model), x, None)
    cold = train_step(copy.deepcopy(model), x, "aotgrad")
    assert cold["cache"] == ["stored"] and len(entries(cache)) == 1
    warm = train_step(copy.deepcopy(model), x, "aotgrad")
    assert warm["cache"] == ["hit"]
    assert aotgrad.counters["disk_cache"] == Counter(hits=1, misses=1, stores=1)
    assert_same_training(cold, eager)
    assert_same_training(warm, eager)
    assert warm["alias"]
    assert warm["graphs"] == cold["graphs"]  # printed text, source lines and shapes included


def test_aotgrad_inductor_loads_a_conv_net_and_matches_eager(cache):
    torch.manual_seed(0)
    model, x = ConvNet(), torch.randn(2, 3, 8, 8)
    expected = copy.deepcopy(model)
    expected(x).backward()
    for status in ("stored", "hit"):
        torch._dynamo.reset()
        twin = copy.deepcopy(model)
        with phases.watch() as records:
            torch.compile(twin, backend="aotgrad_inductor")(x).backward()
        assert [r.disk_cache for r in records] == [status]
        for p, q in zip(expected.parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(list(twin.buffers()), list(expected.buffers()))


WORKER = """
import json, sys, torch, aotgrad, aotgrad.persistence.disk_cache
from {module} import Net, net_and_input, train_step
aotgrad.persistence.disk_cache.SOURCE_DIGEST = sys.argv[1]  # as the test's: aotgrad may be edited meanwhile
model, x = net_and_input()
result = train_step(model, x, "aotgrad")
print(json.dumps({"aotgrad": aotgrad.__file__, "counters": aotgrad.counters["disk_cache"], "graphs": result["graphs"],
                  "loss": result["outputs"][0].item(), "grads": [g.sum().item() for g in result["grads"]],
                  "buffers": [b.float().sum().item() for b in result["buffers"]]}))
"""


def run_worker(cache: Path, code: str, *args: str) -> subprocess.Popen:
    """`python -c code *args` with this test's cache folder. It imports this file under the name
    pytest gave it: the module of the model's classes is part of the graph's key."""
    path = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent)])
    env = {**os.environ, "AOTGRAD_CACHE_DIR": str(cache), "PYTHONPATH": path}
    code = code.replace("{module}", __name__)
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def worker_result(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_another_process_hits_and_matches_eager(cache):
    model, x = net_and_input()
    eager = train_step(copy.deepcopy(model), x, None)
    cold = train_step(copy.deepcopy(model), x, "aotgrad")  # this process: stores
    assert cold["cache"] == ["stored"]
    other = worker_result(run_worker(cache, WORKER, disk_cache.SOURCE_DIGEST))
    assert Path(other["aotgrad"]).resolve() == Path(aotgrad.__file__).resolve()  # this checkout's code
    assert Counter(other["counters"]) == Counter(hits=1)
    assert [tuple(g) for g in other["graphs"]] == cold["graphs"]
    torch.testing.assert_close(other["loss"], eager["outputs"][0].item())
    torch.testing.assert_close(other["grads"], [g.sum().item() for g in eager["grads"]])
    torch.testing.assert_close(other["buffers"], [b.float().sum().item() for b in eager["buffers"]])


class PoolNet(nn.Module):
    """Max pooling through torch.nn.functional's boolean_dispatch closures (F.max_pool2d,
    F.adaptive_max_pool2d), which pickle cannot name."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        h = F.max_pool2d(self.conv(x), 2)
        return F.adaptive_max_pool2d(h, 2).pow(2).mean(), x.flatten(1).t()


class WeightNormNet(nn.Module):
    """A weight-normed convolution (wav2vec2's positional embedding): the parametrization makes
    a class at run time (`ParametrizedConv1d`), which dynamo's nn_module_stack names and pickle
    cannot find again by name."""

    def __init__(self):
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1), name="weight", dim=2)

    def forward(self, x):
        return F.gelu(self.conv(x)).pow(2).mean(), x.flatten(1).t()


@pytest.mark.parametrize("make", [lambda: (PoolNet(), torch.randn(2, 3, 8, 8)),
                                  lambda: (WeightNormNet(), torch.randn(2, 4, 8))], ids=["max_pool", "weight_norm"])
def test_a_graph_whose_functions_or_classes_pickle_cannot_name_is_stored_and_hits(cache, make):
    torch.manual_seed(0)
    model, x = make()
    eager = train_step(copy.deepcopy(model), x, None)
    cold = train_step(copy.deepcopy(model), x, "aotgrad")
    assert cold["cache"] == ["stored"]
    warm = train_step(copy.deepcopy(model), x, "aotgrad")
    assert warm["cache"] == ["hit"] and warm["graphs"] == cold["graphs"]
    assert_same_training(warm, eager)


BOOLEAN_DISPATCHED = [F.max_pool1d, F.max_pool2d, F.max_pool3d, F.adaptive_max_pool1d, F.adaptive_max_pool2d,
                      F.adaptive_max_pool3d, F.fractional_max_pool2d, F.fractional_max_pool3d]


def test_boolean_dispatch_functions_are_stored_by_their_public_name():
    payload = graph_pickle.dumps(BOOLEAN_DISPATCHED, [])
    assert b"<locals>" not in payload and b"max_pool2d" in payload
    assert graph_pickle.loads(payload, None, {}) == BOOLEAN_DISPATCHED  # the same objects
    names = [graph_pickle.stable_repr(fn) for fn in BOOLEAN_DISPATCHED]
    assert names[1] == "torch.nn.functional.max_pool2d" and len(set(names)) == len(names)


# -- keys ---------------------------------------------------------------------

class FlatNet(Net):
    """Net in functional calls, for fx.symbolic_trace (which keeps nn.BatchNorm1d a module):
    its parameters and running statistics become get_attr nodes, lifted as inputs."""

    def forward(self, x):
        norm = self.norm
        h = F.batch_norm(F.linear(x, self.linear.weight, self.linear.bias), norm.running_mean, norm.running_var,
                         norm.weight, norm.bias, training=True)
        return F.relu(h).pow(2).mean(), x.t()


def traced_net() -> fx.GraphModule:
    """The graph aot_module_simplified gets in the key tests: cheaper than torch.compile's."""
    torch.manual_seed(0)
    return fx.symbolic_trace(FlatNet())


def compile_graph(gm: fx.GraphModule, x: torch.Tensor, **options) -> str:
    """aot_module_simplified on `gm` (static inputs: the disk cache's path); what the cache did."""
    with phases.watch() as records:
        aotgrad.aot_module_simplified(gm, [x], aotgrad.nop, **options)
    return records[0].disk_cache


def _relu(gm: fx.GraphModule) -> fx.Node:
    return gm.graph.find_nodes(op="call_function", target=F.relu)[0]


def _other_code(gm, x, options, monkeypatch):
    relu = _relu(gm)
    relu.target, relu.kwargs = F.gelu, {}
    gm.recompile()


def _other_source_line(gm, x, options, monkeypatch):
    _relu(gm).meta["stack_trace"] = '  File "model.py", line 2, in forward\n    return relu(x)\n'


def _other_constant(gm, x, options, monkeypatch):
    gm.offset = torch.ones(5)  # a constant: neither parameter nor buffer, keyed by its value
    relu = _relu(gm)
    with gm.graph.inserting_after(relu), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FX's "no underlying reference": it looks for buffers only
        offset = gm.graph.get_attr("offset")
    with gm.graph.inserting_after(offset):
        shifted = gm.graph.call_function(torch.add, (relu, offset))
    relu.replace_all_uses_with(shifted, delete_user_cb=lambda user: user is not shifted)
    gm.recompile()


def _set(obj, name, value):
    return lambda gm, x, options, monkeypatch: monkeypatch.setattr(obj, name, value)


def _option(name, value):
    return lambda gm, x, options, monkeypatch: options.__setitem__(name, value)


def _input(make):
    return lambda gm, x, options, monkeypatch: setattr(x, "data", make(x))


KEY_PARTS = {
    "graph code": _other_code,
    "source line": _other_source_line,
    "graph constant": _other_constant,
    "input shape": _input(lambda x: torch.randn(4, 6)),
    "input dtype": _input(lambda x: x.double()),
    "input strides": _input(lambda x: torch.randn(6, 8).t()),
    "partitioner": _option("partition_fn", aotgrad.min_cut_rematerialization_partition),
    "decompositions": _option("decompositions", torch._decomp.get_decompositions([torch.ops.aten.addmm])),
    "memory budget": _set(aotgrad.config, "activation_memory_budget", 0.5),
    "memory budget bytes": _set(aotgrad.config, "activation_memory_budget_bytes", 10_000),
    "torch version": _set(torch, "__version__", "0.0.1"),
    "aotgrad version": _set(aotgrad, "__version__", "0.0.1"),
    "aotgrad source": _set(disk_cache, "SOURCE_DIGEST", "edited"),
    "default dtype": lambda gm, x, options, monkeypatch: (
        monkeypatch.setattr(torch, "get_default_dtype", lambda: torch.float64)),
}


@pytest.mark.parametrize("part", KEY_PARTS)
def test_changing_one_key_part_misses_and_the_old_entry_still_hits(cache, part, monkeypatch):
    gm, x, options = traced_net(), torch.randn(8, 6), {}
    assert compile_graph(gm, x) == "stored"
    changed_gm, changed_x = copy.deepcopy(gm), x.clone()
    with monkeypatch.context() as patches:
        KEY_PARTS[part](changed_gm, changed_x, options, patches)
        assert compile_graph(changed_gm, changed_x, **options) == "stored"
    assert compile_graph(gm, x) == "hit"
    assert aotgrad.counters["disk_cache"]["rejected"] == 0 and len(entries(cache)) == 2


def test_the_source_digest_covers_every_module_of_the_package(tmp_path):
    """The entries' source digest reads all of aotgrad, not only persistence/ where it lives: an
    edit to any stage changes the graphs an entry would hold, so it must miss."""
    package = Path(aotgrad.__file__).parent
    assert disk_cache._digest_of_source() == disk_cache._digest_of_source(package)
    copied = tmp_path / "aotgrad"
    for path in package.rglob("*.py"):
        (copied / path.relative_to(package)).parent.mkdir(parents=True, exist_ok=True)
        (copied / path.relative_to(package)).write_bytes(path.read_bytes())
    before = disk_cache._digest_of_source(copied)
    assert before == disk_cache._digest_of_source(package)
    with open(copied / "runtime" / "function.py", "a") as f:
        f.write("# edited\n")
    assert disk_cache._digest_of_source(copied) != before


def test_requires_grad_of_an_input_is_in_the_key(cache):
    gm = traced_net()
    assert compile_graph(gm, torch.randn(8, 6)) == "stored"
    assert compile_graph(gm, torch.randn(8, 6, requires_grad=True)) == "stored"
    assert compile_graph(gm, torch.randn(8, 6, requires_grad=True)) == "hit"


def test_autocast_is_in_the_key(cache):
    gm, x = traced_net(), torch.randn(8, 6)
    assert compile_graph(gm, x) == "stored"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compile_graph(gm, x) == "stored"
        assert compile_graph(gm, x) == "hit"


def test_a_graph_calling_a_user_function_is_not_stored_and_says_why_at_info(cache, caplog):
    def user_function(t):
        return t * 2
    gm = traced_net()
    relu = _relu(gm)
    relu.target, relu.kwargs = user_function, {}  # its code could change while the graph's stays the same
    gm.recompile()
    why = f"node relu calls {__name__}.{user_function.__qualname__}, whose code the key cannot see"
    assert disk_cache.graph_key(gm, aotgrad.pipeline.Options(aotgrad.nop)) == why
    with caplog.at_level(logging.INFO, logger="aotgrad"):
        assert compile_graph(gm, torch.randn(8, 6)) == f"not stored: {why}"
    assert f"aotgrad torch.compile graph: not stored in the disk cache: {why}" in caplog.messages
    assert entries(cache) == []


def test_symbolic_graphs_are_not_stored_and_say_why(cache, caplog):
    model, x = net_and_input()
    torch._dynamo.reset()
    with phases.watch() as records, caplog.at_level(logging.INFO, logger="aotgrad"):
        torch.compile(model, backend="aotgrad", dynamic=True)(x)
    assert [r.disk_cache for r in records] == ["not stored: the graphs have symbolic sizes"]
    assert aotgrad.counters["disk_cache"] == Counter()  # not looked for either: no miss
    assert "aotgrad torch.compile graph: not stored in the disk cache: the graphs have symbolic sizes" \
        in caplog.messages
    assert compile_graph(traced_net(), x, dynamic=True) == "not stored: the graphs have symbolic sizes"
    assert entries(cache) == [] and aotgrad.counters["disk_cache"]["stores"] == 0


def test_cache_dir_none_turns_the_cache_off(cache, monkeypatch):
    monkeypatch.setattr(aotgrad.config, "cache_dir", None)
    model, x = net_and_input()
    eager = train_step(copy.deepcopy(model), x, None)
    for _ in range(2):
        result = train_step(copy.deepcopy(model), x, "aotgrad")
        assert result["cache"] == ["off"]
        assert_same_training(result, eager)
    assert not cache.exists() and aotgrad.counters["disk_cache"] == Counter()


def load_entry(path: Path):
    """(Partitioned, out_spec) of a stored entry, in a new fake mode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return disk_cache.load(disk_cache.stored_key(path), FakeTensorMode())


def test_an_unpicklable_value_is_not_stored_and_nothing_is_written(cache):
    compile_graph(traced_net(), torch.randn(8, 6))
    [path] = entries(cache)
    partitioned, out_spec = load_entry(path)
    partitioned.dead_ends = [lambda: 0]
    reason = disk_cache.store(disk_cache.entry_key("graph", ("call",)), partitioned, out_spec)
    assert reason.startswith(f"not stored: the payload names {__name__}.")
    assert entries(cache) == [path] and not list(cache.glob("**/*.tmp"))


def _watch_collector(monkeypatch, fail: bool = False) -> list[bool]:
    """Whether the garbage collector was on at each graph_pickle.loads (which raises with `fail`)."""
    seen, real_loads = [], graph_pickle.loads

    def watched(*args):
        seen.append(gc.isenabled())
        if fail:
            raise graph_pickle.BadPayload("made to fail")
        return real_loads(*args)
    monkeypatch.setattr(graph_pickle, "loads", watched)
    return seen


def test_loading_pauses_the_garbage_collector(cache, monkeypatch):
    # (a load makes ~10k objects and frees few: with the collector on, they set off collections,
    # every few loads a full one; docs/benchmarks.md measures the pause)
    compile_graph(traced_net(), torch.randn(8, 6))
    seen = _watch_collector(monkeypatch)
    assert load_entry(entries(cache)[0]) is not None
    assert seen == [False] and gc.isenabled()


def test_loading_leaves_the_garbage_collector_as_it_found_it(cache, monkeypatch):
    compile_graph(traced_net(), torch.randn(8, 6))
    [path] = entries(cache)
    gc.disable()
    try:
        assert load_entry(path) is not None
        assert not gc.isenabled()  # the caller's choice, kept
    finally:
        gc.enable()
    seen = _watch_collector(monkeypatch, fail=True)
    assert load_entry(path) is None and seen == [False]  # rejected
    assert gc.isenabled()


def test_a_saved_value_loads_as_one_fake_tensor_in_both_graphs(cache):
    compile_graph(traced_net(), torch.randn(8, 6, requires_grad=True))
    partitioned, _ = load_entry(entries(cache)[0])
    outputs = partitioned.forward.graph.find_nodes(op="output")[0].args[0]
    saved = [node.meta["val"] for node in outputs[partitioned.num_forward_outputs:]]
    placeholders = partitioned.backward.graph.find_nodes(op="placeholder")
    assert saved and all(p.meta["val"] is s for p, s in zip(placeholders, saved))


def test_clear_deletes_every_entry(cache):
    gm = traced_net()
    compile_graph(gm, torch.randn(8, 6))
    compile_graph(gm, torch.randn(4, 6))
    assert disk_cache.clear() == 2 and entries(cache) == []



def _loaded_forward(cache) -> fx.GraphModule:
    compile_graph(traced_net(), torch.randn(8, 6))
    partitioned, _ = load_entry(entries(cache)[0])
    return partitioned.forward


def _fx_compiled(gm: fx.GraphModule) -> bool:
    return type(gm).forward is not type(gm)._lazy_forward


def test_a_loaded_graph_compiles_fx_code_only_when_called_or_read(cache):
    from aotgrad.runtime.boxed import boxed_graph

    gm = _loaded_forward(cache)
    assert isinstance(gm, graph_pickle.LoadedGraphModule) and gm.stored_code is not None
    boxed = boxed_graph(gm)  # reads the stored text
    assert not _fx_compiled(gm)
    args = [torch.randn(node.meta["val"].shape) for node in gm.graph.find_nodes(op="placeholder")]
    expected = gm(*args)  # compiles FX's forward from the stored code
    assert _fx_compiled(gm) and gm.stored_code is None
    assert gm.code == gm.graph.python_code(root_module="self").src  # the code FX makes for the graph
    actual = boxed(list(args))
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def test_a_loaded_graph_changed_and_recompiled_runs_its_new_code(cache):
    from aotgrad.runtime.boxed import boxed_graph

    gm = _loaded_forward(cache)
    args = [torch.randn(node.meta["val"].shape) for node in gm.graph.find_nodes(op="placeholder")]
    before = gm(*args)
    relu = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.relu.default)[0]
    relu.target = torch.ops.aten.sigmoid.default
    gm.recompile()
    assert gm.stored_code is None
    assert "sigmoid" in gm.code and "relu.default" not in gm.code
    expected = fx.Interpreter(gm).run(*args)  # node by node, from the edited graph
    assert not all(torch.equal(a, b) for a, b in zip(expected, before))
    for actual in (gm(*args), boxed_graph(gm)(list(args))):
        assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def test_a_loaded_graph_deep_copies(cache):
    gm = _loaded_forward(cache)
    twin = copy.deepcopy(gm)
    assert twin.code == gm.code and format_graph(twin) == format_graph(gm)


# -- size limit -------------------------------------------------------------------

def _store_each(gm: fx.GraphModule, cache: Path, batches) -> dict[int, Path]:
    """Compile `gm` for each batch size (each stored); the entry of each."""
    stored = {}
    for batch in batches:
        before = set(entries(cache))
        assert compile_graph(gm, torch.randn(batch, 6)) == "stored"
        [stored[batch]] = set(entries(cache)) - before
    return stored


def test_a_store_past_the_size_limit_evicts_the_least_recently_used_files(cache, monkeypatch):
    monkeypatch.setattr(aotgrad.config, "cache_size_limit_mb", None)
    gm = traced_net()
    stored = _store_each(gm, cache, (8, 4, 2))
    for path, _ in cache_folder.files():
        os.utime(path, (4000, 4000))  # generated code: used after the entries below
    for used, batch in enumerate((8, 4, 2), start=1):
        os.utime(stored[batch], (used * 1000, used * 1000))
    assert compile_graph(gm, torch.randn(8, 6)) == "hit"  # used now: batch 4's entry is the least recent
    total, entry = sum(stat.st_size for _, stat in cache_folder.files()), stored[4].stat().st_size
    # a limit the next store passes, and deleting one entry brings the folder under EVICT_TO of
    low, high = total / cache_folder.EVICT_TO, total + entry
    assert low < high, "an entry is too small beside the generated code for this test"
    monkeypatch.setattr(aotgrad.config, "cache_size_limit_mb", (low + high) / 2 / 2**20)
    assert compile_graph(gm, torch.randn(3, 6)) == "stored"
    assert [stored[batch].exists() for batch in (8, 4, 2)] == [True, False, True]
    assert len(entries(cache)) == 3 and aotgrad.counters["disk_cache"]["evicted"] == 1


def test_under_the_limit_a_process_counts_the_folder_only_at_its_first_store(cache, monkeypatch):
    gm = traced_net()
    _store_each(gm, cache, (8,))
    counted, real_files = [], cache_folder.files
    monkeypatch.setattr(cache_folder, "files", lambda: counted.append(1) or real_files())
    _store_each(gm, cache, (4, 2))  # (listing a folder of 60k files takes 0.2-0.7 s)
    assert counted == []


def test_the_entry_just_stored_is_kept_whatever_the_limit(cache, monkeypatch):
    gm = traced_net()
    _store_each(gm, cache, (8,))
    monkeypatch.setattr(aotgrad.config, "cache_size_limit_mb", 0)
    [kept] = _store_each(gm, cache, (4,)).values()
    assert entries(cache) == [kept]
    assert compile_graph(gm, torch.randn(4, 6)) == "hit"


# -- who may write the folder -------------------------------------------------------

def _count_unpickling(monkeypatch) -> list:
    calls, real_loads = [], graph_pickle.loads

    def counted(*args):
        calls.append(args)
        return real_loads(*args)
    monkeypatch.setattr(graph_pickle, "loads", counted)
    return calls


def _warnings_about(caplog, path: Path) -> list[str]:
    return [m for m in caplog.messages if m.startswith(f"aotgrad disk cache: not using {path}: ")]


def test_a_cache_folder_others_may_write_is_not_read_and_warned_about_once(cache, monkeypatch, caplog):
    model, x = net_and_input()
    eager = train_step(copy.deepcopy(model), x, None)
    train_step(copy.deepcopy(model), x, "aotgrad")
    [path] = entries(cache)
    stored = path.read_bytes()
    os.chmod(cache, 0o777)  # (as a shared AOTGRAD_CACHE_DIR=/tmp/... may be)
    unpickled = _count_unpickling(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="aotgrad"):
        runs = [train_step(copy.deepcopy(model), x, "aotgrad") for _ in range(2)]
    assert unpickled == [] and aotgrad.counters["disk_cache"]["hits"] == 0
    for run in runs:
        assert run["cache"] == [f"not stored: others may write the cache folder {cache} (see the warning)"]
        assert_same_training(run, eager)
    [warning] = _warnings_about(caplog, cache)
    assert "its group and all users may write it (mode drwxrwxrwx)" in warning
    assert "whoever can write there could run code in this process" in warning
    assert f"`chmod 700 {cache}`" in warning and "AOTGRAD_CACHE_DIR" in warning
    assert entries(cache) == [path] and path.read_bytes() == stored  # nothing written either
    os.chmod(cache, 0o700)
    assert train_step(copy.deepcopy(model), x, "aotgrad")["cache"] == ["hit"]


def test_an_entry_others_may_write_is_neither_read_nor_replaced(cache, monkeypatch, caplog):
    gm, x = traced_net(), torch.randn(8, 6)
    compile_graph(gm, x)
    [path] = entries(cache)
    os.chmod(path, 0o664)
    unpickled = _count_unpickling(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="aotgrad"):
        did = compile_graph(gm, x)
    assert did == f"not stored: others may write {path} or a folder above it (see the warning)"
    assert unpickled == [] and aotgrad.counters["disk_cache"]["hits"] == 0
    [warning] = _warnings_about(caplog, path)
    assert "its group may write it (mode -rw-rw-r--)" in warning and f"`chmod 600 {path}`" in warning
    assert path.stat().st_mode & 0o777 == 0o664  # not replaced


def test_a_cache_folder_of_another_user_is_not_read(cache, monkeypatch, caplog):
    gm, x = traced_net(), torch.randn(8, 6)
    compile_graph(gm, x)
    owner = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    unpickled = _count_unpickling(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="aotgrad"):
        did = compile_graph(gm, x)
    assert did.startswith("not stored: others may write the cache folder") and unpickled == []
    [warning] = _warnings_about(caplog, cache)
    assert f"it belongs to user id {owner}, not to this process's user ({owner + 1})" in warning
    assert "chmod" not in warning and "a folder of your own" in warning


def test_a_cache_subfolder_others_may_write_is_not_read(cache, monkeypatch, caplog):
    gm, x = traced_net(), torch.randn(8, 6)
    compile_graph(gm, x)
    [path] = entries(cache)
    os.chmod(path.parent, 0o757)
    unpickled = _count_unpickling(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="aotgrad"):
        did = compile_graph(gm, x)
    assert did.startswith("not stored: others may write") and unpickled == []
    [warning] = _warnings_about(caplog, path.parent)
    assert "all users may write it (mode drwxr-xrwx)" in warning


def test_nothing_in_a_folder_others_may_write_is_even_opened(cache, monkeypatch):
    compile_graph(traced_net(), torch.randn(8, 6))
    [path] = entries(cache)
    os.chmod(path.parent, 0o777)

    def refuse(*args, **kwargs):  # (opening a FIFO someone put there would block)
        raise AssertionError(f"opened {args[0]}")
    monkeypatch.setitem(cache_folder.__dict__, "open", refuse)
    assert cache_folder.read_private(path) is None


def test_the_cache_folders_and_files_aotgrad_makes_are_private(cache):
    umask = os.umask(0o002)  # group-writable by default, as on many shared machines
    try:
        generated.define("def f():\n    return 1\n", "<f>", {}, "f")  # the code folder first: it makes the root
        compile_graph(traced_net(), torch.randn(8, 6))
    finally:
        os.umask(umask)
    folders = [cache, *(p for p in cache.rglob("*") if p.is_dir())]
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert {cache, cache / "code"} < set(folders) and len(files) >= 2  # and the xx of each file
    assert {oct(p.stat().st_mode & 0o777) for p in folders} == {"0o700"}
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {"0o600"}


# -- corruption -----------------------------------------------------------------

def _flip_payload_byte(data: bytes) -> bytes:
    return data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:]


def _edit_header(data: bytes, **edits) -> bytes:
    """The entry with header fields changed (a well-formed header saying something else)."""
    header, payload = disk_cache._split(data)
    header.update({field: edit(header[field]) for field, edit in edits.items()})
    text = json.dumps(header).encode()
    return disk_cache.MAGIC + disk_cache._HEADER.pack(disk_cache.FORMAT_VERSION, len(text)) + text + payload


def _format_version(data: bytes) -> bytes:
    start = len(disk_cache.MAGIC)
    return data[:start] + (disk_cache.FORMAT_VERSION + 1).to_bytes(4, "little") + data[start + 4:]


CORRUPTIONS = {  # name: (corrupt the entry's bytes, why it is rejected)
    "truncated": (lambda data: data[: len(data) // 2], "checksum mismatch"),
    "flipped payload byte": (_flip_payload_byte, "checksum mismatch"),
    "garbage": (lambda data: os.urandom(len(data)), "no aotgrad cache header"),
    "empty": (lambda data: b"", "no aotgrad cache header"),
    "format version": (_format_version, f"format {disk_cache.FORMAT_VERSION + 1}, this aotgrad reads"),
    "entry of another key": (lambda data: _edit_header(data, key=lambda key: key + " "), "stored for another key"),
    "written by another torch": (lambda data: _edit_header(data, torch=lambda version: "0.1"),
                                 "written by torch 0.1"),
}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_corrupt_entry_is_rejected_rebuilt_and_correct(cache, corruption, caplog):
    corrupt, why = CORRUPTIONS[corruption]
    model, x = net_and_input()
    eager = train_step(copy.deepcopy(model), x, None)
    train_step(copy.deepcopy(model), x, "aotgrad")
    [path] = entries(cache)
    path.write_bytes(corrupt(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="aotgrad"):
        rebuilt = train_step(copy.deepcopy(model), x, "aotgrad")
    assert rebuilt["cache"] == ["stored"] and aotgrad.counters["disk_cache"]["rejected"] == 1
    assert f"rejected {path}" in caplog.text and why in caplog.text, caplog.text
    assert_same_training(rebuilt, eager)
    assert train_step(copy.deepcopy(model), x, "aotgrad")["cache"] == ["hit"]


def test_entry_whose_graphs_disagree_with_their_facts_is_rejected(cache, monkeypatch):
    gm, x = traced_net(), torch.randn(8, 6)
    compile_graph(gm, x)
    real_loads = graph_pickle.loads

    def inconsistent(*args):
        loaded = real_loads(*args)
        loaded["partitioned"].num_primals += 1
        return loaded
    monkeypatch.setattr(graph_pickle, "loads", inconsistent)
    assert compile_graph(gm, x) == "stored" and aotgrad.counters["disk_cache"]["rejected"] == 1


# -- concurrency ----------------------------------------------------------------

WRITER = """
import json, os, sys, time, torch, aotgrad
from pathlib import Path
from aotgrad.persistence import disk_cache
from {module} import compile_graph, entries, load_entry, traced_net
go = Path(sys.argv[1])
disk_cache.SOURCE_DIGEST = sys.argv[2]
while not go.exists():
    time.sleep(0.005)
gm = traced_net()
for batch in (8, 4, 2):  # each stores or loads: all three entries exist afterwards
    compile_graph(gm, torch.randn(batch, 6))
paths = entries(Path(aotgrad.config.cache_dir))
for _ in range(20):  # rewrite each entry and read it back while the other writers do the same
    for path in paths:
        loaded = load_entry(path)
        assert loaded is not None, path
        assert disk_cache.store(disk_cache.stored_key(path), *loaded) == "stored"
print(json.dumps(aotgrad.counters["disk_cache"]))
"""


def test_concurrent_writers_leave_whole_entries(cache):
    go = cache.parent / "go"
    writers = [run_worker(cache, WRITER, str(go), disk_cache.SOURCE_DIGEST) for _ in range(3)]
    time.sleep(0.5)
    go.touch()
    for writer in writers:
        assert worker_result(writer).get("rejected", 0) == 0
    assert not list(cache.glob("**/*.tmp")) and len(entries(cache)) == 3
    gm = traced_net()
    for batch in (8, 4, 2):
        assert compile_graph(gm, torch.randn(batch, 6)) == "hit"
    assert aotgrad.counters["disk_cache"]["rejected"] == 0
