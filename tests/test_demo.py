"""`python -m aotgrad demo` end to end, in a fresh process as a user would run it."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "aotgrad", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_demo_trains_like_eager_and_says_pass():
    result = _run("demo")
    assert result.returncode == 0, result.stdout + result.stderr
    assert any(line.startswith("PASS: aotgrad matches eager") for line in result.stdout.splitlines()), result.stdout
    assert "activations saved" in result.stdout and "median step time" in result.stdout


def test_unknown_command_prints_usage_and_fails():
    result = _run("no-such-command")
    assert result.returncode == 2
    assert "unknown command 'no-such-command'" in result.stderr
    assert "usage: python -m aotgrad COMMAND" in result.stderr and "demo" in result.stderr


def test_saved_tensors_hooks_see_what_the_compiled_forward_saves():
    # The demo measures aotgrad's saved activations with saved_tensors_hooks; that works
    # because the runtime saves them with ctx.save_for_backward.
    import torch

    import aotgrad

    f = aotgrad.aot_function(lambda x, w: (x @ w).relu().sum(), aotgrad.nop)
    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    f(x, w)  # compile outside the hooks
    _, bw_gm = f.last_graphs
    saved_names = [n.name for n in bw_gm.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        f(x, w).backward()
    assert len(packed) == len(saved_names) > 0, saved_names
