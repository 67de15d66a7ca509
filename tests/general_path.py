"""The general (interpreted) runtime path, forced for a test or a whole run.

`force_general_path(monkeypatch)`: compiles from then on make no generated call, interpret every
section made of steps (runtime/lower.py's `generate` off: the forward) and run every backward
through `CompiledFunction.general_backward`. tests/runtime/test_lowered_sources.py
checks each runtime feature both ways; `AOTGRAD_TEST_GENERAL_PATH=1 python -m pytest ...` runs
any selection of tests that way (tests/conftest.py), so the interpreted path is checked against
eager by the same tests as the generated one (tests that read generated sources fail then, by
design).
"""
from __future__ import annotations

from typing import Callable

import pytest

from aotgrad.runtime.function import CompiledFunction

GENERAL_BACKWARD = "# (backward: general_backward, forced by the test)\n"


def force_general_path(monkeypatch: pytest.MonkeyPatch) -> list:
    """Compiles from here on make no generated call (`front.functions.call_code` answers None, as for an
    entry that needs more than a straight call), interpret their forward steps, and give every plan
    a `run_backward` that is `CompiledFunction.general_backward`. Returns a list that gets one
    entry per backward run."""
    backwards: list = []

    def general_backward_only(plan) -> Callable:
        def run_backward(ctx, grads):
            backwards.append(plan)
            return CompiledFunction.general_backward(ctx, grads)
        run_backward.source = GENERAL_BACKWARD
        return run_backward
    # AotFunction._compile calls api's name; RuntimePlan.__post_init__ imports wrapper's at each
    # plan (a function-level import), also for plans loaded from the disk cache. Issue 25 moves
    # these seams: each section then falls back where an `emit` says False.
    monkeypatch.setattr("aotgrad.front.functions.call_code", lambda *args, **kwargs: None)
    monkeypatch.setattr("aotgrad.runtime.lower.generate", False)
    monkeypatch.setattr("aotgrad.runtime.wrapper.backward_code", general_backward_only)
    return backwards
