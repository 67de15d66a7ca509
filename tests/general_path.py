"""The general (interpreted) runtime path, forced for a test or a whole run.

`force_general_path(monkeypatch)`: compiles from then on interpret every section made of steps
(runtime/lower.py's `generate` off): they make no generated call, and CompiledFunction's forward
and backward run interpreted. tests/runtime/test_lowered_sources.py checks each runtime feature both ways;
`AOTGRAD_TEST_GENERAL_PATH=1 python -m pytest ...` runs any selection of tests that way
(tests/conftest.py), so the interpreted path is checked against eager by the same tests as the
generated one (tests that read generated sources fail then, by design).
"""
from __future__ import annotations

import pytest

from aotgrad.runtime import backward


def force_general_path(monkeypatch: pytest.MonkeyPatch) -> list:
    """Compiles from here on interpret their steps (no generated call; the forward and backward
    steps interpreted). Returns a list that gets one entry (the plan) per backward run."""
    backwards: list = []
    general_backward = backward.general_backward

    def counted(ctx, grads):
        backwards.append(ctx.plan)
        return general_backward(ctx, grads)
    monkeypatch.setattr("aotgrad.runtime.lower.generate", False)
    monkeypatch.setattr(backward, "general_backward", counted)
    return backwards
