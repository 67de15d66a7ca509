"""Inductor's cache keys kept by aotgrad (aotgrad/persistence/inductor_keys.py): a warm compile hands Inductor
the key its cache stored each graph under instead of having it hash the graph again; a change
in anything Inductor keys on (its config here) is keyed again; a key whose graph Inductor's
cache lost compiles and is found again; torch's source hash comes from the cache folder only
while no file under torch changed.

A "second process" is `torch._dynamo.reset()` and a new torch.compile, with aotgrad's and
Inductor's cache folders kept (the disk cache's tests do the same)."""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os

import pytest
import torch
import torch.nn as nn
from torch._dynamo.utils import counters as dynamo_counters
from torch._inductor import codecache
from torch._inductor import config as inductor_config
from torch._higher_order_ops.wrap import wrap
from torch._inductor.utils import fresh_cache

import aotgrad
from aotgrad.observe.counting import counters
from aotgrad.persistence import inductor_keys
from tests.test_backends import TwoOutputs, _assert_buffers_as_eagers


@pytest.fixture
def cache(tmp_path):
    """An empty aotgrad cache folder for the test."""
    with aotgrad.config.patch(cache_dir=str(tmp_path / "aotgrad")):
        yield tmp_path / "aotgrad"


@pytest.fixture
def hashes(monkeypatch):
    """How many graphs Inductor hashed for its cache (its own key, not one aotgrad stored)."""
    calls = []
    original = codecache.compiled_fx_graph_hash

    def counted(gm, *args, **kwargs):
        calls.append(gm)
        return original(gm, *args, **kwargs)
    monkeypatch.setattr(codecache, "compiled_fx_graph_hash", counted)
    return calls


def train_twice(model: nn.Module, x: torch.Tensor):
    """Two steps, as a user's loop: the first backpropagates one output (a backward variant),
    the second both (the whole backward); checked against eager. Returns the grads."""
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="aotgrad_inductor")
    for both in (False, True):
        for m, run in ((model, compiled), (eager, eager)):
            y, e = run(x)
            (y.sum() + e.sum() if both else y.sum()).backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
        p.grad = q.grad = None


def compile_in_a_new_process(model, x, hashes) -> dict:
    """Train as a new process would, with the cache folders as they are; what Inductor did."""
    torch._dynamo.reset()
    dynamo_counters.clear()
    counters.clear()
    hashes.clear()
    train_twice(model, x)
    return {"hashed": len(hashes), **{k.removeprefix("fxgraph_cache_"): v for k, v in
                                      dynamo_counters["inductor"].items() if k.startswith("fxgraph_cache_")},
            **{k: v for k, v in counters["disk_cache"].items() if k.startswith("inductor_keys")}}


def test_a_warm_compile_hands_inductor_the_stored_key_of_each_graph(cache, hashes, tmp_path):
    """Cold, Inductor hashes the forward, the backward variant without the second output's
    tangent and the whole backward, and aotgrad keeps the three keys. Warm, Inductor hashes
    none and finds all three; grads as eager's both times."""
    torch.manual_seed(0)
    model, x = TwoOutputs(), torch.randn(4, 8)
    with fresh_cache(dir=str(tmp_path)):
        cold = compile_in_a_new_process(model, x, hashes)
        warm = compile_in_a_new_process(model, x, hashes)
    assert cold == {"hashed": 3, "miss": 3, "inductor_keys_stored": 3}, cold
    assert warm == {"hashed": 0, "hit": 3, "inductor_keys_known": 3}, warm


def test_inductors_own_lookup_is_back_after_each_compile(cache, hashes, tmp_path):
    """Inductor's `prepare_key` and `load_with_key` are wrapped only while a compile with a
    stored key runs."""
    own = [codecache.FxGraphCache.__dict__[name] for name in ("prepare_key", "load_with_key")]
    seen = []
    original_answering = inductor_keys.answering

    def watched(gm, key, **options):
        with original_answering(gm, key, **options):
            seen.append([codecache.FxGraphCache.__dict__[name] for name in ("prepare_key", "load_with_key")] == own)
            yield
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(inductor_keys, "answering", contextlib.contextmanager(watched))
    torch.manual_seed(0)
    model, x = TwoOutputs(), torch.randn(4, 8)
    try:
        with fresh_cache(dir=str(tmp_path)):
            compile_in_a_new_process(model, x, hashes)
            compile_in_a_new_process(model, x, hashes)
    finally:
        monkeypatch.undo()
    assert seen == [True] * 3 + [False] * 3, seen  # (cold: no key to give)
    assert [codecache.FxGraphCache.__dict__[name] for name in ("prepare_key", "load_with_key")] == own


def test_overlapping_compiles_each_get_their_own_key_and_inductors_lookup_comes_back():
    """Two compiles with stored keys overlapping (two threads): each graph gets its key, any
    other graph Inductor's own lookup; Inductor's own `prepare_key` is back after the last."""
    own = codecache.FxGraphCache.__dict__["prepare_key"]
    loads = codecache.FxGraphCache.__dict__["load_with_key"]
    graphs = [torch.fx.symbolic_trace(nn.Linear(2, 2)) for _ in range(3)]

    def lookup(gm):
        return codecache.FxGraphCache.prepare_key(gm, [], {}, [], False)[0][0]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(codecache.FxGraphCache, "prepare_key", staticmethod(lambda gm, *args: (("own", []), {})))
        inductors = codecache.FxGraphCache.__dict__["prepare_key"]
        first = inductor_keys.answering(graphs[0], "key0")
        second = inductor_keys.answering(graphs[1], "key1")
        first.__enter__()
        second.__enter__()
        assert [lookup(gm) for gm in graphs] == ["key0", "key1", "own"]
        first.__exit__(None, None, None)
        assert [lookup(gm) for gm in graphs] == ["own", "key1", "own"]
        second.__exit__(None, None, None)
        assert codecache.FxGraphCache.__dict__["prepare_key"] is inductors
    assert codecache.FxGraphCache.__dict__["prepare_key"] is own
    assert codecache.FxGraphCache.__dict__["load_with_key"] is loads


def test_only_the_graph_that_must_hit_raises_on_a_miss():
    """Two graphs under one stored key, one given to Inductor as aotgrad keeps it (hit only),
    one a copy Inductor may compile: a miss raises NotStored for the first only (Inductor's
    constants name the graph it is loading for)."""
    graphs = [torch.fx.symbolic_trace(nn.Linear(2, 2)) for _ in range(2)]

    def load(gm):
        constants = type("Constants", (), {"gm": gm})()
        return codecache.FxGraphCache.load_with_key("key", [], [], True, None, is_backward=False, constants=constants)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(codecache.FxGraphCache, "load_with_key", staticmethod(lambda key, *args, **kwargs: (None, {})))
        with inductor_keys.answering(graphs[0], "key", hit_only=True), inductor_keys.answering(graphs[1], "key"):
            assert load(graphs[1]) == (None, {})
            with pytest.raises(inductor_keys.NotStored):
                load(graphs[0])


def test_a_changed_inductor_setting_is_keyed_again(cache, hashes, tmp_path):
    """The stored keys hold for the Inductor settings they were made under: with one changed
    (here `size_asserts`, which changes the generated code), Inductor hashes every graph again
    and compiles it, as it would without aotgrad's keys."""
    torch.manual_seed(0)
    model, x = TwoOutputs(), torch.randn(4, 8)
    with fresh_cache(dir=str(tmp_path)):
        compile_in_a_new_process(model, x, hashes)
        with inductor_config.patch(size_asserts=not inductor_config.size_asserts):
            changed = compile_in_a_new_process(model, x, hashes)
    assert changed == {"hashed": 3, "miss": 3, "inductor_keys_stored": 3}, changed


def test_a_graph_inductors_cache_lost_is_compiled_under_its_stored_key(cache, hashes, tmp_path):
    """Inductor's cache emptied (another folder) while aotgrad's keys stay: each graph misses
    under its stored key (twice: given as it is, which Inductor must not compile, then as the
    copy it compiles), is compiled, correctly, and stored there; the next process finds it."""
    torch.manual_seed(0)
    model, x = TwoOutputs(), torch.randn(4, 8)
    with fresh_cache(dir=str(tmp_path)):
        compile_in_a_new_process(model, x, hashes)
    with fresh_cache(dir=str(tmp_path)):
        lost = compile_in_a_new_process(model, x, hashes)
        found = compile_in_a_new_process(model, x, hashes)
    assert lost == {"hashed": 0, "miss": 6, "inductor_keys_known": 3}, lost
    assert found == {"hashed": 0, "hit": 3, "inductor_keys_known": 3}, found


def _batch_norm_step_in_a_new_process(model: nn.Module, x: torch.Tensor, copies: list) -> list:
    """One training step of a copy of `model` (BatchNorm: its statistics written inside
    Inductor's forward), compiled as a new process would, checked against eager's step (grads,
    statistics and their versions); returns how many graphs aotgrad copied for Inductor."""
    torch._dynamo.reset()
    copies.clear()
    eager, twin = copy.deepcopy(model), copy.deepcopy(model)
    eager(x).sum().backward()
    torch.compile(twin, backend="aotgrad_inductor")(x).sum().backward()
    for (name, p), q in zip(twin.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
    _assert_buffers_as_eagers(twin, eager)
    return list(copies)


@pytest.fixture
def copies(monkeypatch):
    """The roles of the graphs aotgrad copied for Inductor to compile."""
    from aotgrad import backends

    made, copy_for_inductor = [], backends._inductors_copy
    monkeypatch.setattr(backends, "_inductors_copy", lambda gm, **kw: made.append(gm) or copy_for_inductor(gm, **kw))
    return made


def test_a_stored_graph_is_loaded_without_a_copy_and_in_graph_writes_still_happen(cache, copies, tmp_path):
    """Warm, Inductor is handed each graph as aotgrad keeps it (no copy: on a hit it neither
    hashes nor rewrites it); the forward's statistics writes are in the stored code. Lost from
    Inductor's cache, each graph is compiled from a copy with the writes made again. Grads,
    statistics and versions as eager's every time."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()), torch.randn(2, 3, 6, 6)
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    with fresh_cache(dir=str(tmp_path / "first")):
        cold = _batch_norm_step_in_a_new_process(model, x, copies)
        warm = _batch_norm_step_in_a_new_process(model, x, copies)
    with fresh_cache(dir=str(tmp_path / "second")):
        lost = _batch_norm_step_in_a_new_process(model, x, copies)
    assert (len(cold), len(warm), len(lost)) == (2, 0, 2), (cold, warm, lost)


def test_no_key_is_kept_without_aotgrads_cache_folder(hashes, tmp_path):
    torch.manual_seed(0)
    model, x = TwoOutputs(), torch.randn(4, 8)
    with fresh_cache(dir=str(tmp_path)), aotgrad.config.patch(cache_dir=None):
        cold = compile_in_a_new_process(model, x, hashes)
        warm = compile_in_a_new_process(model, x, hashes)
    assert cold == {"hashed": 3, "miss": 3} and warm == {"hashed": 3, "hit": 3}, (cold, warm)


def test_a_graph_calling_a_higher_order_op_keeps_inductors_own_key(cache):
    """Inductor's key may cover code outside such a graph (a user's Triton kernel's source)."""
    def graph_calling(target) -> torch.fx.GraphModule:
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        graph.output((graph.call_function(target, (x,)),))
        return torch.fx.GraphModule(nn.Module(), graph)

    plain, wrapped = graph_calling(torch.ops.aten.sin.default), graph_calling(wrap)
    for gm in (plain, wrapped):
        gm.meta[inductor_keys.META_KEY] = "entry"
    fx_kwargs = {"is_backward": False, "boxed_forward_device_index": None}
    assert inductor_keys.key_for(plain, "forward", fx_kwargs) is not None
    assert inductor_keys.key_for(wrapped, "forward", fx_kwargs) is None


def test_a_stored_key_that_is_no_key_is_deleted(cache):
    inductor_keys.remember("ab" * 32, type("Compiled", (), {"_fx_graph_cache_key": "fabc123"})())
    assert inductor_keys.known("ab" * 32) == "fabc123"
    path = cache / "inductor" / "ab" / ("ab" * 32)
    path.write_bytes(b"import os\n")
    assert inductor_keys.known("ab" * 32) is None and not path.exists()


# -- torch's and Triton's source hashes ----------------------------------------------

def _fresh_key(monkeypatch, name: str, value):
    """Inductor's `codecache.<name>` as a fresh, unset cache in this process (what a new process
    has) returning `value`, with the list of times it computed; aotgrad not primed yet."""
    from torch.utils._functools import prefetchable_cache

    computed = []

    @prefetchable_cache
    def fresh_key():
        computed.append(True)
        return value
    fresh_key.computed = computed
    monkeypatch.setattr(codecache, name, fresh_key)
    monkeypatch.setattr(inductor_keys, "_source_keys_primed", False)
    return fresh_key


def _next_process(monkeypatch, *keys) -> None:
    for key in keys:
        key.clear()
        key.computed.clear()
    monkeypatch.setattr(inductor_keys, "_source_keys_primed", False)


@pytest.fixture
def torch_key(monkeypatch):
    monkeypatch.setattr(inductor_keys, "_triton_folder", lambda: None)
    return _fresh_key(monkeypatch, "torch_key", b"\x01" * 32)


@pytest.fixture
def triton_key(monkeypatch, tmp_path):
    """Inductor's `triton_key` fresh, for a Triton installed in a folder of the test's."""
    folder = tmp_path / "triton"
    (folder / "_C").mkdir(parents=True)
    (folder / "__init__.py").write_text("__version__ = '3.8.0'\n")
    (folder / "_C" / "libtriton.so").write_bytes(b"\0" * 64)
    monkeypatch.setattr(inductor_keys, "_triton_folder", lambda: str(folder))
    _fresh_key(monkeypatch, "torch_key", b"\x01" * 32)
    key = _fresh_key(monkeypatch, "triton_key", "3.8.0-abc-def")
    key.folder = folder
    return key


def test_torch_key_comes_from_the_cache_folder_while_no_torch_file_changed(cache, torch_key, monkeypatch):
    inductor_keys._prime_source_keys()  # a first process: computed, then stored
    assert torch_key.computed == [True]
    _next_process(monkeypatch, torch_key)
    inductor_keys._prime_source_keys()  # a second one: read
    assert torch_key() == b"\x01" * 32 and torch_key.computed == []


def test_torch_key_is_computed_again_when_a_torch_file_changed(cache, torch_key, monkeypatch):
    inductor_keys._prime_source_keys()
    _next_process(monkeypatch, torch_key)
    monkeypatch.setattr(inductor_keys, "_torch_files_digest", lambda: "another digest")
    inductor_keys._prime_source_keys()
    assert torch_key.computed == [True]


def test_triton_key_comes_from_the_cache_folder_while_no_triton_file_changed(cache, triton_key, monkeypatch):
    """Triton's key hashes its 505 MB libtriton (0.36 s a process, torch 2.14's CUDA wheel)."""
    inductor_keys._prime_source_keys()
    assert triton_key.computed == [True]
    _next_process(monkeypatch, triton_key, codecache.torch_key)
    inductor_keys._prime_source_keys()
    assert triton_key() == "3.8.0-abc-def" and triton_key.computed == []
    assert codecache.torch_key.computed == []  # (each kept in a file of its own)


def test_triton_key_is_computed_again_when_a_triton_file_changed(cache, triton_key, monkeypatch):
    inductor_keys._prime_source_keys()
    library = triton_key.folder / "_C" / "libtriton.so"
    stat = library.stat()
    os.utime(library, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1000))  # a reinstall, same size
    _next_process(monkeypatch, triton_key)
    inductor_keys._prime_source_keys()
    assert triton_key.computed == [True]
    _next_process(monkeypatch, triton_key)
    inductor_keys._prime_source_keys()  # the new key was kept
    assert triton_key.computed == []


@pytest.mark.parametrize("value", [b"\x00\xff" * 16, "3.8.0-abc", None], ids=["bytes", "str", "none"])
def test_a_kept_key_comes_back_with_its_type(value):
    """torch_key is bytes; triton_key a str, or None where Triton is there but unusable."""
    assert inductor_keys._decoded(inductor_keys._encoded(value)) == value
    with pytest.raises(ValueError):
        inductor_keys._decoded(["str", None])


def test_a_kept_key_in_another_format_is_computed_again(cache, torch_key, monkeypatch):
    inductor_keys._prime_source_keys()
    path = inductor_keys._path(hashlib.sha256(b"torch_key").hexdigest())
    stored = json.loads(path.read_bytes())
    path.write_bytes(json.dumps(dict(stored, key="0101")).encode())  # (an older aotgrad's format)
    _next_process(monkeypatch, torch_key)
    inductor_keys._prime_source_keys()
    assert torch_key.computed == [True]
    _next_process(monkeypatch, torch_key)
    inductor_keys._prime_source_keys()  # rewritten in this format
    assert torch_key.computed == []


def test_the_digest_of_torchs_files_follows_their_sizes_and_times(tmp_path):
    """The files torch_key reads: modules of packages; not other files, nor folders that are no package."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "include").mkdir()
    module, other, header = tmp_path / "pkg" / "mod.py", tmp_path / "notes.txt", tmp_path / "include" / "gen.py"
    for path in (module, other, header):
        path.write_text("x = 1\n")
    before = inductor_keys._torch_files_digest(str(tmp_path))
    other.write_text("ab")
    header.write_text("ab")
    assert inductor_keys._torch_files_digest(str(tmp_path)) == before
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1000))
    assert inductor_keys._torch_files_digest(str(tmp_path)) != before
