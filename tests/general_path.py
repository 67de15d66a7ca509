"""The general (interpreted) runtime path, forced for a test or a whole run.

`force_general_path(monkeypatch)`: compiles from then on make no generated call and interpret
every section made of steps (runtime/lower.py's `generate` off: CompiledFunction's forward and
backward). tests/runtime/test_lowered_sources.py checks each runtime feature both ways;
`AOTGRAD_TEST_GENERAL_PATH=1 python -m pytest ...` runs any selection of tests that way
(tests/conftest.py), so the interpreted path is checked against eager by the same tests as the
generated one (tests that read generated sources fail then, by design).
"""
from __future__ import annotations

import pytest

from aotgrad.runtime import backward


def force_general_path(monkeypatch: pytest.MonkeyPatch) -> list:
    """Compiles from here on make no generated call (`front.functions.call_code` answers None, as for an
    entry that needs more than a straight call) and interpret their forward and backward steps.
    Returns a list that gets one entry (the plan) per backward run."""
    backwards: list = []
    general_backward = backward.general_backward

    def counted(ctx, grads):
        backwards.append(ctx.plan)
        return general_backward(ctx, grads)
    # AotFunction._compile calls front.functions' name (issue 25's R4 moves the call to steps too)
    monkeypatch.setattr("aotgrad.front.functions.call_code", lambda *args, **kwargs: None)
    monkeypatch.setattr("aotgrad.runtime.lower.generate", False)
    monkeypatch.setattr(backward, "general_backward", counted)
    return backwards
