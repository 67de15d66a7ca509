"""benchmarks/warm_start.py: the cold and warm figures of a model from its processes' seconds."""
from __future__ import annotations

import importlib
from pathlib import Path


def test_warm_figures_are_medians_and_the_median_of_each_rounds_ratio(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    warm_start = importlib.import_module("warm_start")
    # the load doubles in the third round: both backends' processes slow down together
    times = {"inductor": [30.0, 4.0, 4.0, 8.0, 4.1], "aotgrad_inductor": [27.0, 3.8, 4.4, 7.2, 3.7]}
    cold, warm, paired = warm_start.summarize(times)
    assert cold == {"inductor": 30.0, "aotgrad_inductor": 27.0}
    assert warm == {"inductor": 4.05, "aotgrad_inductor": 4.1}
    assert abs(paired - (3.7 / 4.1 + 0.95) / 2) < 1e-12  # ratios 0.95, 1.1, 0.9, 0.902: the middle two
