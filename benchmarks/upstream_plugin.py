"""pytest plugin for benchmarks/upstream_autograd.py: runs PyTorch's own autograd tests as a mode says.

Loaded with `-p upstream_plugin` (this folder on PYTHONPATH); configured by environment:
  AOTGRAD_UPSTREAM_MODE      stock       nothing of aotgrad imported
                             imported    `import aotgrad`, nothing enabled
                             identity    every test inside compiled_autograd.enable(lambda gm: gm)
                             eager       ... enable(lambda gm: torch.compile(gm, backend="eager"))
                             eager-full  ... torch.compile(gm, backend="eager", fullgraph=True, dynamic=True)
  AOTGRAD_UPSTREAM_RESULTS   a file that gets one JSON line per test: id, outcome, error, counters
  AOTGRAD_UPSTREAM_SHARD     "i/n": run only every n-th test starting at i
  AOTGRAD_UPSTREAM_TIMEOUT   seconds one test may take (default 120), then it fails with "timeout"
Before collection it installs the shims a 2023 test file needs on today's torch (names that moved).
"""
from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal

import pytest

MODE = os.environ.get("AOTGRAD_UPSTREAM_MODE", "stock")
MODES = ("stock", "imported", "identity", "eager", "eager-full")


def _install_shims() -> None:
    """Names the 2023 test file imports that later torch releases renamed or removed."""
    import torch
    import torch._functorch.config as functorch_config
    from torch.testing._internal import common_utils
    from torch.utils._config_module import _Config, _ConfigEntry

    if not hasattr(common_utils, "skipIfMps"):
        common_utils.skipIfMps = common_utils.skipIfMPS
    if not hasattr(torch._C, "has_mkldnn"):
        torch._C.has_mkldnn = torch.backends.mkldnn.is_available()
    for name in ("use_fake_tensor", "use_functionalize", "use_dynamic_shapes"):
        if name not in functorch_config._config:
            # an option nobody reads, so the old tests' `config.patch(name=...)` works
            # (torch 2.13's _ConfigEntry takes the option's name too; 2.11's only the config)
            takes_name = "name" in inspect.signature(_ConfigEntry.__init__).parameters
            entry = _ConfigEntry(_Config(default=False), name) if takes_name else _ConfigEntry(_Config(default=False))
            functorch_config._config[name] = entry


def _compiler():
    import torch
    if MODE == "identity":
        return lambda gm: gm
    if MODE == "eager":
        return lambda gm: torch.compile(gm, backend="eager")
    if MODE == "eager-full":
        return lambda gm: torch.compile(gm, backend="eager", fullgraph=True, dynamic=True)
    return None


def pytest_configure(config):
    if MODE not in MODES:
        raise pytest.UsageError(f"AOTGRAD_UPSTREAM_MODE={MODE!r}: expected one of {', '.join(MODES)}")
    _install_shims()
    if MODE != "stock":
        import aotgrad  # noqa: F401


def pytest_collection_modifyitems(config, items):
    shard = os.environ.get("AOTGRAD_UPSTREAM_SHARD")
    if not shard:
        return
    index, count = (int(part) for part in shard.split("/"))
    keep = [item for position, item in enumerate(items) if position % count == index]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


class _Timeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _Timeout("timeout")


@contextlib.contextmanager
def _time_limit(seconds: int):
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


_counters_after: dict = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    compiler = _compiler()
    seconds = int(os.environ.get("AOTGRAD_UPSTREAM_TIMEOUT", "120"))
    if compiler is None:
        with _time_limit(seconds):
            yield
        return
    import aotgrad
    from aotgrad import compiled_autograd
    compiled_autograd.reset()
    with _time_limit(seconds), compiled_autograd.enable(compiler):
        yield
    _counters_after[item.nodeid] = dict(aotgrad.counters["compiled_autograd"])


_results: dict = {}


def pytest_runtest_logreport(report):
    entry = _results.setdefault(report.nodeid, {"id": report.nodeid, "outcome": "passed", "error": ""})
    if report.skipped and report.when in ("setup", "call"):
        entry["outcome"] = "skipped"
    elif report.failed:
        entry["outcome"] = "failed"
        entry["error"] = entry["error"] or _first_line(report)
    if report.when == "teardown":
        entry["counters"] = _counters_after.pop(report.nodeid, {})
        path = os.environ.get("AOTGRAD_UPSTREAM_RESULTS")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(entry) + "\n")


def _first_line(report) -> str:
    """The exception's type and first line, e.g. 'AssertionError: Tensor-likes are not close!'."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.splitlines()[0][:300] if crash.message else ""
    return str(report.longrepr).strip().splitlines()[-1][:300]


__all__ = ["MODE", "MODES"]
