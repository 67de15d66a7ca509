"""The whole test run uses a fresh disk cache (aotgrad.config.cache_dir) in a temporary folder.

Tests never read or write the user's ~/.cache/aotgrad, and a graph that several tests (or one
test twice) compile is loaded from disk the second time, so the load path runs everywhere.
Subprocesses the tests start find the same folder through AOTGRAD_CACHE_DIR.
"""
import contextvars
import os
import sys
import warnings

import pytest
import torch

import aotgrad


@pytest.fixture(autouse=True, scope="session")
def _disk_cache_in_a_temporary_folder(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("aotgrad-cache"))
    previous_dir, previous_env = aotgrad.config.cache_dir, os.environ.get("AOTGRAD_CACHE_DIR")
    aotgrad.config.cache_dir = os.environ["AOTGRAD_CACHE_DIR"] = folder
    yield folder
    aotgrad.config.cache_dir = previous_dir
    if previous_env is None:
        os.environ.pop("AOTGRAD_CACHE_DIR", None)
    else:
        os.environ["AOTGRAD_CACHE_DIR"] = previous_env


@pytest.hookimpl(trylast=True)  # after every other selection (markers, -k, the compiler matrix)
def pytest_collection_modifyitems(config, items):
    """AOTGRAD_TEST_SHARD=i/n keeps every n-th selected test from the i-th on: n processes,
    one per shard, run a long selection on a machine with many cores
    (benchmarks/compiler_matrix.sh)."""
    shard = os.environ.get("AOTGRAD_TEST_SHARD")
    if not shard:
        return
    try:
        index, count = (int(part) for part in shard.split("/"))
        assert 0 <= index < count
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"AOTGRAD_TEST_SHARD={shard!r}: expected i/n with 0 <= i < n, e.g. 0/4") from None
    kept = items[index::count]
    deselected = [item for k, item in enumerate(items) if k % count != index]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = kept


@pytest.fixture(autouse=True)
def _general_path_when_asked(monkeypatch):
    """AOTGRAD_TEST_GENERAL_PATH=1: every test's compiles take the general runtime path
    (tests/general_path.py), to check the interpreted path against eager with the same tests."""
    if os.environ.get("AOTGRAD_TEST_GENERAL_PATH") == "1":
        from tests.general_path import force_general_path
        force_general_path(monkeypatch)
    yield


_KNOBS = ("partitioner", "activation_memory_budget", "activation_memory_budget_bytes", "optimize_ddp",
          "compiled_autograd_verbose", "cache_dir", "cache_size_limit_mb", "log_level", "check_graphs")


@pytest.fixture(autouse=True)
def _config_left_as_found(request):
    """Every test leaves aotgrad.config as it found it: a knob a test changed and did not put
    back (a failed monkeypatch undo, say) would change what later tests test."""
    before = {name: getattr(aotgrad.config, name) for name in _KNOBS}
    yield
    after = {name: getattr(aotgrad.config, name) for name in _KNOBS}
    changed = {name: (before[name], after[name]) for name in _KNOBS if before[name] != after[name]}
    for name, (value, _) in changed.items():  # put back, unchecked, so one leak fails one test
        aotgrad.config.__dict__[name] = value
    assert not changed, f"{request.node.nodeid} left aotgrad.config changed: {changed}"


@pytest.fixture(autouse=True, scope="session")
def _fake_mode_first_entered_on_the_main_thread():
    """torch 2.11 without a usable GPU: FakeTensorMode's entry installs a no-op CUDA device guard
    (`torch._C._ensureCUDADeviceGuardSet()`), and if the first install was made on a thread that
    has ended, the next one, on any thread, is a segfault (measured on 2.11.0+cu130 without a
    GPU: thread, then main thread, crashes; main thread, thread, main thread does not; 2.12.1
    and 2.13.0 do not crash). Tests that capture or compile on worker threads first (e.g.
    test_engine.py's eight-thread test selected alone) crashed the run; entered here once, on
    the main thread, first."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        pass
    yield


def _eval_frame_override():
    """torch 2.11's Dynamo eval-frame override (None where the release has none): a process-wide
    value that a fullgraph=True compiled function sets to SKIP for its call and puts back after."""
    eval_frame = torch._C._dynamo.eval_frame
    if not hasattr(eval_frame, "set_eval_frame_override"):  # 2.12 and later
        return None
    value = eval_frame.set_eval_frame_override(eval_frame._EvalFrameOverride.NONE)
    eval_frame.set_eval_frame_override(value)
    return value


def _process_wide_config_modules() -> list:
    """PyTorch's config modules (torch._dynamo.config, torch._inductor.config, ...) where their
    overrides are process-wide: torch 2.11. 2.12 made each override a ContextVar (per thread):
    there, none."""
    from torch.utils._config_module import ConfigModule

    entry = next(iter(torch._dynamo.config._config.values()))
    if not hasattr(entry, "user_override") or isinstance(entry.user_override, contextvars.ContextVar):
        return []
    return [module for module in list(sys.modules.values()) if isinstance(module, ConfigModule)]


def _same_setting(a, b) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # noqa: BLE001 - a value that cannot be compared: changed
        return False


@pytest.fixture(autouse=True)
def _pytorch_compiler_state_left_as_found(request):
    """torch 2.11: a change that one call makes to PyTorch's compiler state for its duration, and
    undoes by putting back the value it found, is process-wide; such calls overlapping on two
    threads can leave the wrong value, as the thread that returns last puts back what the other
    had set. Two of them on the threads of test_engine.py's eight-thread test (compiled
    backwards under `torch.compile(gm, fullgraph=True, dynamic=True)`):
      - Dynamo's eval-frame override left at SKIP (fullgraph): from then on no frame that
        compiled code calls is given to Dynamo, the code after a graph break runs uncompiled
        (DDP splitting saw no graph to split);
      - torch._dynamo.config.assume_static_by_default left False (dynamic=True): every later
        torch.compile is dynamic (a float module attribute became a symbol, and aotgrad
        rejected the MultiheadAttention graph that used it).
    2.12 and 2.13 leave neither (their config overrides are ContextVars). PyTorch's race, not
    the test's logic nor aotgrad's (which sets neither): put back after every test, with a
    warning, so it does not change what later tests test."""
    from torch.utils._config_module import _UNSET_SENTINEL

    override = _eval_frame_override()
    modules = _process_wide_config_modules()
    before = [{name: entry.user_override for name, entry in module._config.items()} for module in modules]
    yield
    changed = []
    after = _eval_frame_override()
    if after != override:
        torch._C._dynamo.eval_frame.set_eval_frame_override(override)
        changed.append(f"Dynamo's eval-frame override {override!r} -> {after!r}")
    for module, found in zip(modules, before):
        for name, entry in module._config.items():
            value, previous = entry.user_override, found.get(name, entry.user_override)
            if value is previous:
                continue
            effective = [entry.default if v is _UNSET_SENTINEL else v for v in (previous, value)]
            if not _same_setting(*effective):  # (not a read that copied a list default into the override)
                entry.user_override = previous
                module._is_dirty = True
                changed.append(f"{module.__name__}.{name} {effective[0]!r} -> {effective[1]!r}")
    if changed:
        warnings.warn(f"{request.node.nodeid} left PyTorch's compiler state changed (torch 2.11's race between "
                      f"calls on several threads?); put back: {'; '.join(changed)}")


@pytest.fixture(autouse=True)
def _no_ddp_module_left_active(request):
    """No test leaves a DDP module marked active (`DistributedDataParallel._active_ddp_module`,
    which aotgrad's backends and PyTorch's DDP splitter read): tests/distributed/models.py's
    FakeDDP marks itself in a forward that Dynamo compiles, and a compile that raises after the
    graph break at the mark never runs the forward's `finally`. Left active, every later
    torch.compile would split with that module's bucket caps."""
    from torch.nn.parallel import DistributedDataParallel

    yield
    active = DistributedDataParallel._active_ddp_module
    DistributedDataParallel._active_ddp_module = None  # put back, so one leak fails one test
    assert active is None, f"{request.node.nodeid} left a DDP module marked active: {type(active).__name__}"
