"""benchmarks/zoo.py on a CI budget: GPT-2 and BERT from transformers, and timm's resnet18 where
timm is installed, trained 2 steps under backend="aotgrad" from eager's weights and inputs; every
loss, gradient, parameter and buffer within the zoo's tolerance of eager's (bitwise on CPU so far).
Inductor backends are left to the benchmark (a cold Inductor compile of one of these takes about
a minute on 2 cores). Skipped without transformers or timm (`pip install -e ".[zoo]"`)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch


@pytest.fixture
def zoo(monkeypatch):
    """benchmarks/zoo.py as a module (benchmarks/ is not a package)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    return importlib.import_module("zoo")


def _assert_matches_eager(zoo, name: str, backend: str, variant: str = "none") -> None:
    rows = zoo.run_model(name, [backend], variant=variant, steps=2, rounds=0)
    assert len(rows) == 1 and rows[0].backend == backend, rows
    row = rows[0]
    assert row.status == "ok", f"{name} under {backend}: {row.status}: {row.detail}"
    assert row.worst_rel_diff <= zoo.TOLERANCES[backend][variant == "bf16"], row
    assert row.graphs >= 1 and row.first_step_s > 0


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_transformers_model_trains_under_aotgrad_as_in_eager(zoo, name):
    pytest.importorskip("transformers", reason="the zoo's transformers models need transformers")
    _assert_matches_eager(zoo, name, "aotgrad")


def test_timm_resnet_trains_under_aotgrad_as_in_eager(zoo):
    pytest.importorskip("timm", reason="the zoo's timm models need timm")
    _assert_matches_eager(zoo, "resnet18", "aotgrad")


def test_bert_with_padding_mask_trains_under_aotgrad_as_in_eager(zoo):
    pytest.importorskip("transformers", reason="the zoo's transformers models need transformers")
    _assert_matches_eager(zoo, "bert", "aotgrad", variant="padding_mask")


def test_compare_finds_a_perturbed_gradient(zoo):
    expected = {"losses": torch.tensor([2.0, 1.5]), "grad w": torch.tensor([1.0, -2.0]), "grad b": torch.zeros(2),
                "step1 grad w": torch.tensor([0.5, 0.5])}
    assert zoo.compare(dict(expected), expected).bitwise
    perturbed = dict(expected, **{"grad w": torch.tensor([1.0, -2.001])})
    difference = zoo.compare(perturbed, expected)
    assert difference.worst(lambda name: 1e-5) == ("grad w", pytest.approx(50, rel=1e-3))
    assert difference.first_step_rel == 0.0
    # a gradient zero in exact arithmetic: its noise is measured against 1% of the largest gradient
    noisy = dict(expected, **{"grad b": torch.tensor([1e-9, 0.0]), "step1 grad w": torch.tensor([0.5, 0.5001])})
    assert zoo.compare(noisy, expected).errors["grad b"] == pytest.approx(5e-8)
    assert zoo.compare(noisy, expected).first_step_rel == pytest.approx(2e-4, rel=1e-3)
    assert not zoo.compare({"losses": expected["losses"]}, expected).errors.keys() <= expected.keys()


def test_variant_that_does_not_apply_is_a_skipped_row(zoo):
    pytest.importorskip("transformers", reason="the zoo's transformers models need transformers")
    rows = zoo.run_model("bert", ["aotgrad"], variant="channels_last", steps=1, rounds=0)
    assert [(row.status, row.detail) for row in rows] == [("skipped", "channels_last applies to image models")]


def test_missing_class_is_a_skipped_row(zoo, monkeypatch):
    missing = zoo.ZooModel("missing", "decoder", "", zoo._transformers("NoSuchForCausalLM", "NoSuchConfig"),
                           zoo.ZOO["gpt2"].inputs)
    monkeypatch.setitem(zoo.ZOO, "missing", missing)
    [row] = zoo.run_model("missing", ["aotgrad"], steps=1, rounds=0)
    assert row.status == "skipped"
    assert "has no NoSuchConfig, NoSuchForCausalLM" in row.detail or "transformers is not installed" in row.detail
