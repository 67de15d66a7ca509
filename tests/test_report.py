"""`python -m aotgrad report`: the page of the demo and of a small script, read as HTML and
as headless Chromium renders it (the browser is installed with apt-get when missing; the
rendering tests skip, saying why, where it cannot be)."""
import base64
import html
import io
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from aotgrad import report

pytest.importorskip("matplotlib", reason="the report draws its curves with matplotlib (pip install matplotlib)")
from PIL import Image  # noqa: E402  (a dependency of matplotlib)

REPO = Path(__file__).resolve().parents[1]
PNG_DATA = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')

# Dynamo recompiles for the second shape; compiled autograd captures again for the second batch.
TINY_SCRIPT = '''
import sys
import torch
import aotgrad


def f(x, w):
    return (x @ w).sin().sum()


compiled = torch.compile(f, backend="aotgrad")
w = torch.randn(4, 3, requires_grad=True)
for rows in (2, 5):
    compiled(torch.randn(rows, 4), w).backward()

model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
with aotgrad.compiled_autograd.enable(lambda gm: gm):
    for batch in (3, 6):
        model(torch.randn(batch, 4)).sum().backward()
print("script arguments:", sys.argv[1:])
'''

FAILING_SCRIPT = '''
import torch


@torch.compile(backend="aot_eager")
def step(x):
    return x.cos().sum()


step(torch.randn(3, requires_grad=True)).backward()
raise ValueError("the script's own error <here>")
'''


def _report(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = folder / "report.html"
    result = subprocess.run([sys.executable, "-m", "aotgrad", "report", "--out", str(out), *args], cwd=folder,
                            env=env, capture_output=True, text=True, timeout=300)
    assert out.exists(), result.stdout + result.stderr
    return result, out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory) -> tuple[subprocess.CompletedProcess, str, Path]:
    folder = tmp_path_factory.mktemp("demo")
    result, page = _report(folder, "-m", "aotgrad", "demo", "--models", "cnn", "--backends", "aotgrad",
                           "--budgets", "1", "--steps", "3")
    return result, page, folder / "report.html"


@pytest.fixture(scope="module")
def tiny_page(tmp_path_factory) -> tuple[subprocess.CompletedProcess, str, Path]:
    folder = tmp_path_factory.mktemp("tiny")
    (folder / "tiny.py").write_text(TINY_SCRIPT)
    result, page = _report(folder, "tiny.py", "--flag", "value")
    return result, page, folder / "report.html"


@pytest.fixture(scope="module")
def failing_page(tmp_path_factory) -> tuple[subprocess.CompletedProcess, str]:
    folder = tmp_path_factory.mktemp("failing")
    (folder / "fails.py").write_text(FAILING_SCRIPT)
    return _report(folder, "fails.py")


def _pngs(page: str) -> list[Image.Image]:
    return [Image.open(io.BytesIO(base64.b64decode(data))) for data in PNG_DATA.findall(page)]


# -- the command line and the backends --------------------------------------------------

def test_command_line_separates_report_options_from_the_scripts():
    assert report.split_command_line(["--out", "r.html", "-m", "aotgrad", "demo", "--steps", "3"]) == (
        ["--out", "r.html"], ["-m", "aotgrad", "demo", "--steps", "3"])
    assert report.split_command_line(["--backend", "keep", "train.py", "--out", "x"]) == (
        ["--backend", "keep"], ["train.py", "--out", "x"])
    assert report.split_command_line(["--out=r.html", "train.py"]) == (["--out=r.html"], ["train.py"])


def test_compile_backends_become_aotgrads_only_for_the_run():
    original = torch.compile
    calls = Counter()
    with report.substitute("auto", calls):
        torch.compile(lambda x: x + 1)                                  # no backend: Inductor
        torch.compile(lambda x: x + 1, backend="aot_eager")
        torch.compile(lambda x: x + 1, backend="eager")                 # kept
        torch.compile(lambda x: x + 1, backend="inductor", mode="max-autotune")  # aotgrad_inductor takes it
    assert torch.compile is original
    assert calls == {("inductor", "aotgrad_inductor", ()): 2, ("aot_eager", "aotgrad", ()): 1}
    dropped = Counter()
    with report.substitute("aotgrad", dropped):
        torch.compile(lambda x: x + 1, backend="inductor", mode="max-autotune", options=None)
        torch.compile(lambda x: x + 1, backend="inductor", options={"max_autotune": True})
    assert dropped == {("inductor", "aotgrad", ("mode",)): 1, ("inductor", "aotgrad", ("options",)): 1}


# -- the page as HTML -------------------------------------------------------------------

def test_demo_page_has_its_graph_saved_values_and_curve(demo_page):
    result, page, _ = demo_page
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS: all 1 compiled runs match eager" in result.stdout  # the demo ran, its output untouched
    assert 'id="graph-1"' in page and 'id="graph-2"' not in page  # graph 0: the demo's warm-up
    assert '<pre class="fx forward">def forward(self, primals_1' in page
    assert '<pre class="fx backward">def backward(self, ' in page
    assert "aten.convolution.default" in page and "aten.convolution_backward.default" in page
    assert '<table class="saved">' in page and '<table class="budgets">' in page
    assert [img.format for img in _pngs(page)] == ["PNG", "PNG"]  # a curve per graph
    assert _pngs(page)[1].size[0] >= 400


def test_script_page_has_every_graph_and_capture(tiny_page):
    result, page, _ = tiny_page
    assert result.returncode == 0, result.stdout + result.stderr
    assert "script arguments: ['--flag', 'value']" in result.stdout
    assert 'id="graph-0"' in page and 'id="graph-1"' in page and 'id="graph-2"' not in page
    assert page.count('<pre class="fx forward">') == 2 and page.count('<pre class="fx backward">') == 2
    assert 'id="capture-0"' in page and 'id="capture-1"' in page
    assert page.count('<pre class="fx capture">def compiled_autograd_graph(') == 2
    assert len(_pngs(page)) == 2  # one curve per graph with a backward


def test_script_page_gives_dynamo_and_compiled_autograd_recompile_reasons(tiny_page):
    _, page, _ = tiny_page
    reasons = re.findall(r'<li class="recompile-reason">(.*?)</li>', page, flags=re.S)
    assert any("Dynamo recompiled f" in r and "size mismatch at index 0. expected 2, actual 5" in r for r in reasons), \
        reasons
    assert any("compiled autograd captured again (capture 1)" in r and "as dynamic" in r for r in reasons), reasons
    assert "recompiled because: 0/0: tensor &#x27;x&#x27; size mismatch" in page  # on graph 1 itself
    assert "new autograd node" in page  # why capture 0 missed


def test_script_page_says_which_graphs_were_not_stored_in_the_disk_cache_and_why(tiny_page):
    _, page, _ = tiny_page
    assert page.count("disk cache: stored") == 1  # the first graph, on a fresh cache folder
    assert page.count("not stored in the disk cache: the graphs have symbolic sizes") == 1  # the recompile's


def test_page_is_self_contained(tiny_page):
    _, page, _ = tiny_page
    assert "<script" not in page and "<link" not in page
    assert not re.search(r'(src|href)="(?!data:)', page)


def test_failing_script_still_gets_its_page_and_the_command_fails(failing_page):
    result, page = failing_page
    assert result.returncode == 1
    assert "ValueError: the script's own error <here>" in result.stderr
    escaped = re.search(r'<pre class="traceback">(.*?)</pre>', page, flags=re.S).group(1)
    assert "ValueError: the script&#x27;s own error &lt;here&gt;" in escaped
    traceback_text = html.unescape(escaped)
    assert 'File "fails.py", line 11, in <module>' in traceback_text and "runpy" not in traceback_text
    assert 'id="graph-0"' in page  # what compiled before the error is there
    assert "torch.compile(backend=&#x27;aot_eager&#x27;) ran as &#x27;aotgrad&#x27;" in page


# -- the page as Chromium renders it ----------------------------------------------------

@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's headless Chromium: found, or installed with apt-get (skips if it cannot be)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("Chromium is not installed and cannot be: this needs apt-get as root (apt-get install chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    failure = ""
    for command in (["apt-get", "install", "-y", "chromium"], ["apt-get", "update"],
                    ["apt-get", "install", "-y", "chromium"]):
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            pytest.skip(f"installing Chromium timed out ({' '.join(command)})")
        failure = done.stderr[-500:]
        if shutil.which("chromium"):
            return shutil.which("chromium")
    pytest.skip(f"apt-get could not install Chromium: {failure}")


def _chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_rendered_page_shows_every_graph_and_decoded_plot(chromium, tiny_page, tmp_path):
    _, page, _ = tiny_page
    # A copy with a probe that records, once loaded, how wide each image decoded (the
    # report itself has no scripts).
    probe = ("<script>window.addEventListener('load', () => { for (const img of document.images) "
             "img.setAttribute('data-decoded-width', img.naturalWidth); });</script></body>")
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", probe), encoding="utf-8")
    dom = _chromium(chromium, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom",
                    probed.as_uri()).stdout
    for section in ("summary", "graphs", "compiled-autograd", "recompiles", "timings", "graph-0", "graph-1",
                    "capture-0", "capture-1"):
        assert f'id="{section}"' in dom, section
    assert dom.count('<pre class="fx backward">') == 2
    widths = re.findall(r'<img [^>]*data-decoded-width="(\d+)"', dom)
    assert len(widths) == 2 and all(int(w) >= 400 for w in widths), widths


def test_rendered_demo_page_screenshot_shows_the_plot(chromium, demo_page, tmp_path):
    _, _, path = demo_page
    shot = tmp_path / "page.png"
    _chromium(chromium, tmp_path / "profile", "--hide-scrollbars", "--window-size=1280,3000",
              f"--screenshot={shot}", path.as_uri())
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 3000)
    colours = image.getcolors(maxcolors=1 << 20)
    assert len(colours) > 50, "the page rendered (nearly) blank"
    star = (0xc4, 0x4e, 0x52)  # the plot's marker for the partition used: nothing else is this colour
    assert any(all(abs(a - b) <= 6 for a, b in zip(colour, star)) and n >= 20 for n, colour in colours)
