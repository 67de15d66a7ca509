"""`aotgrad demo` (aotgrad/tooling/demo.py): its building blocks on a tiny transformer, its verdict, and
its command line. Inductor stays out of the default run (its C++ compiles take seconds per
kernel); the whole demo, Inductor included, is the `slow` test at the end."""
import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aotgrad
from aotgrad.tooling import demo

REPO = Path(__file__).resolve().parents[2]
LABELS = ["eager", "aotgrad", "aot_eager", "aotgrad, budget 0.1"]
STEPS = 3


def tiny_gpt() -> demo.Workload:
    return demo.gpt(batch=2, vocab=16, context=8, width=16, heads=2, layers=1)


def tiny_cnn() -> demo.Workload:
    return demo.cnn(batch=4, image=8, channels=4, classes=3)


@pytest.fixture(scope="module")
def outcome_and_progress():
    torch._dynamo.reset()
    said = []
    with aotgrad.config.patch(cache_dir=None):
        outcome = demo.run_workload(tiny_gpt(), LABELS, STEPS, said.append)
    return outcome, "".join(said)


def test_every_run_matches_eager_and_the_exact_backends_bitwise(outcome_and_progress, capsys):
    outcome, _ = outcome_and_progress
    assert list(outcome.comparisons) == LABELS[1:]
    for label in LABELS[1:]:
        assert outcome.comparisons[label].bitwise, (label, outcome.comparisons[label].errors)
    assert outcome.failures() == []
    assert demo.verdict([outcome], STEPS) is True
    assert capsys.readouterr().out.startswith("PASS: all 3 compiled runs match eager over 3 steps")


def test_every_run_took_every_step_from_the_same_start(outcome_and_progress):
    outcome, _ = outcome_and_progress
    for run in outcome.runs.values():
        assert len(run.step_seconds) == len(run.losses) == STEPS
        assert len(run.grads) == STEPS * len(list(run.model.parameters()))
    assert len({run.losses[0].item() for run in outcome.runs.values()}) == 1


def test_a_lower_budget_saves_fewer_activation_bytes(outcome_and_progress):
    outcome, _ = outcome_and_progress
    [(full_budget, full), (low_budget, low)] = demo.budget_runs(outcome)
    assert (full_budget, low_budget) == (1.0, 0.1) and full is outcome.runs["aotgrad"]
    assert 0 < low.saved_bytes < full.saved_bytes
    assert full.saved_bytes == outcome.runs["aot_eager"].saved_bytes  # both save what eager saves
    assert outcome.runs["eager"].saved_bytes > 0


def test_tables_have_a_row_per_run(outcome_and_progress):
    outcome, _ = outcome_and_progress
    backends = demo.backends_table(outcome)
    assert backends[0].split()[:3] == ["backend", "first", "step"]
    assert [row.split()[0] for row in backends[1:]] == ["eager", "aotgrad", "aot_eager"]
    assert "(the oracle)" in backends[1] and "bitwise equal  ok (tolerance 1e-05)" in backends[2]
    budgets = demo.budgets_table(outcome)
    assert [row.split()[0] for row in budgets[1:]] == ["1", "0.1"]
    assert budgets[1].split()[-6:-4] == ["100%", "bitwise"]


def test_progress_names_each_compile_with_its_time(outcome_and_progress):
    _, said = outcome_and_progress
    lines = said.splitlines()
    assert [line.split(" ...")[0] for line in lines] == [f"compiling TinyGPT under {label}" for label in LABELS[1:]]
    assert all(line.endswith(" s") for line in lines)


def test_a_perturbed_gradient_fails_the_demo(outcome_and_progress, capsys):
    outcome, _ = outcome_and_progress
    run = copy.copy(outcome.runs["aotgrad"])
    run.grads = list(run.grads)
    run.grads[-1] = run.grads[-1] * (1 + 1e-4)
    comparison = demo.compare(outcome.runs["eager"], run)
    assert not comparison.matches and comparison.errors["gradients"] > 1e-5
    assert comparison.errors["losses"] == 0.0
    broken = demo.Outcome(outcome.workload, outcome.runs, {**outcome.comparisons, "aotgrad": comparison})
    assert demo.verdict([broken], STEPS) is False
    assert capsys.readouterr().out == ("FAIL: differs from eager beyond its tolerance: "
                                       "TinyGPT under aotgrad (gradients)\n")


def test_relative_error_is_infinite_for_another_shape():
    assert demo.relative_error(torch.ones(2), torch.ones(3)) == float("inf")
    assert demo.relative_error(torch.tensor([2.0, -4.0]), torch.tensor([2.0, -3.0])) == 0.25


def test_main_passes_and_fails_with_its_exit_status(monkeypatch, capsys):
    monkeypatch.setitem(demo.WORKLOADS, "cnn", tiny_cnn)
    argv = ["--models", "cnn", "--backends", "eager,aotgrad", "--budgets", "1", "--steps", "3"]
    torch._dynamo.reset()
    assert demo.main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("PASS: all 1 compiled runs match eager")
    assert "TinyCNN: 2 conv-bn-relu layers (4 channels)" in out
    monkeypatch.setitem(demo.TOLERANCES, "aotgrad", -1.0)
    torch._dynamo.reset()
    assert demo.main(argv) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("FAIL: differs from eager beyond its tolerance: "
                                                               "TinyCNN under aotgrad")


@pytest.mark.parametrize("argv, message", [
    (["--budgets", "2"], "a budget is a fraction from 0 to 1"),
    (["--backends", "eager,tvm"], "tvm not among eager, aotgrad, aot_eager, aotgrad_inductor, inductor"),
    (["--backends", "eager,aot_eager"], "--budgets below 1 compare with the aotgrad run"),
    (["--steps", "2"], "--steps must be at least 3"),
])
def test_bad_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        demo.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_saved_tensors_hooks_see_what_the_compiled_forward_saves():
    # The demo measures aotgrad's saved activations with saved_tensors_hooks; that works
    # because the runtime saves them with ctx.save_for_backward.
    f = aotgrad.aot_function(lambda x, w: (x @ w).relu().sum(), aotgrad.nop)
    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    f(x, w)  # compile outside the hooks
    _, bw_gm = f.last_graphs
    saved_names = [n.name for n in bw_gm.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        f(x, w).backward()
    assert len(packed) == len(saved_names) > 0, saved_names


@pytest.mark.slow
def test_the_whole_demo_passes_in_a_fresh_process(request):
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("the whole demo, Inductor included, takes minutes: python -m pytest -m slow tests/test_demo.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "aotgrad", "demo"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("PASS: all 12 compiled runs match eager")
    assert "compiling TinyGPT under aotgrad_inductor ..." in result.stderr
