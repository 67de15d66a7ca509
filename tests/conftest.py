"""The whole test run uses a fresh disk cache (aotgrad.config.cache_dir) in a temporary folder.

Tests never read or write the user's ~/.cache/aotgrad, and a graph that several tests (or one
test twice) compile is loaded from disk the second time, so the load path runs everywhere.
Subprocesses the tests start find the same folder through AOTGRAD_CACHE_DIR.
"""
import os

import pytest

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


_KNOBS = ("partitioner", "activation_memory_budget", "activation_memory_budget_bytes", "optimize_ddp",
          "compiled_autograd_verbose", "cache_dir", "log_level", "check_graphs")


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
