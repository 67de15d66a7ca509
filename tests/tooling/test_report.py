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

from aotgrad.tooling import report

pytest.importorskip("matplotlib", reason="the report draws its curves with matplotlib (pip install matplotlib)")
from PIL import Image  # noqa: E402  (a dependency of matplotlib)

REPO = Path(__file__).resolve().parents[2]
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

# A module with blocks (parameters named blocks.0.ln1.weight), a data-dependent `if` (a graph
# break counters["graph_break"] does not count) and a source line longer than the page is wide.
BLOCKS_SCRIPT = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(self.ln1(x)).tanh()  # a long line, printed beside its ops in the graph: it wraps on the page, it does not make the page scroll sideways


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        if x.sum() > 0:  # data-dependent: a graph break
            x = x * 2
        return x.sum()


torch.manual_seed(0)
net = torch.compile(Net(), backend="aotgrad")
net(torch.randn(4, 8)).backward()
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
def blocks_page(tmp_path_factory) -> tuple[subprocess.CompletedProcess, str, Path]:
    folder = tmp_path_factory.mktemp("blocks")
    (folder / "blocks.py").write_text(BLOCKS_SCRIPT)
    result, page = _report(folder, "blocks.py")
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
    assert '<pre class="fx forward"><span class="line">def forward(self, primals_1' in page
    assert '<pre class="fx backward"><span class="line">def backward(self, ' in page
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
    assert page.count('<pre class="fx capture"><span class="line">def compiled_autograd_graph(') == 2
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


def test_data_dependent_if_is_a_graph_break_with_its_reason_and_line(blocks_page):
    result, page, _ = blocks_page
    assert result.returncode == 0, result.stdout + result.stderr
    breaks = re.findall(r'<article class="graph-break">(.*?)</article>', page, flags=re.S)
    assert len(breaks) == 1, breaks
    assert "<h3>Data-dependent branching</h3>" in breaks[0]
    assert '<p class="where">at blocks.py:23, in forward</p>' in breaks[0]
    assert '<pre class="code">if x.sum() &gt; 0:  # data-dependent: a graph break</pre>' in breaks[0]
    assert "Detected data-dependent branching" in breaks[0]
    assert re.search(r"<tr><td>graph breaks</td><td class=\"num\">1</td></tr>", page)


def test_graph_breaks_fall_back_to_dynamos_counter_when_none_were_logged():
    breaks = report._counted_breaks(Counter({"Failed to trace builtin operator\n  Explanation: print": 2, "gone": 0}))
    assert [(b.kind, b.count, b.where) for b in breaks] == [("Failed to trace builtin operator", 2, "(no source line)")]


def test_graph_breaks_are_read_without_printing_dynamos_log(blocks_page):
    result, _, _ = blocks_page
    assert "Graph break in user code" not in result.stderr  # (the log is off unless TORCH_LOGS asks)


def test_graphs_are_named_after_their_frame_and_modules(blocks_page):
    _, page, _ = blocks_page
    assert "torch.compile graph" not in page
    titles = re.findall(r'<article class="graph" id="graph-\d+"><h3>(.*?)</h3>\s*<p class="frame">(.*?)</p>', page)
    assert titles == [
        ("Graph 1 of 2: Net.forward (blocks.py:20)",
         "torch.compile frame 0/0 · modules: blocks.0 (Block), blocks.1 (Block) · blocks.py:20"),
        ("Graph 2 of 2: Net.forward, after the graph break at line 23 (blocks.py:23)",
         "torch.compile frame 1/0 · blocks.py:23"),
    ], titles


def test_saved_values_are_named_by_parameter_and_by_op_and_module(blocks_page):
    _, page, _ = blocks_page
    table = re.search(r'<table class="saved">(.*?)</table>', page, flags=re.S).group(1)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row)[:2] for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    assert ["primals_1", "blocks.0.ln1.weight (parameter)"] in rows, rows
    assert ["primals_3", "x (input)"] in rows, rows
    assert ["getitem_1", "made by native_layer_norm in blocks.0.ln1"] in rows, rows
    assert ["tanh_1", "made by tanh in blocks.1"] in rows, rows


def test_curve_says_how_to_read_it_with_units_on_both_axes(blocks_page):
    _, page, _ = blocks_page
    caption = re.search(r'<figcaption class="how-to-read">(.*?)</figcaption>', page).group(1)
    assert "Each point is one way to split this graph" in caption
    assert "aotgrad.config.activation_memory_budget" in caption
    assert 'alt="memory vs recompute, graph 1: saved for backward (bytes) against recompute cost (KiB moved; ' \
           'FLOPs count as FLOPs / 100)"' in page


def test_compiled_autograd_cache_miss_is_said_in_words(tiny_page):
    _, page, _ = tiny_page
    section = re.search(r'<section id="compiled-autograd">(.*?)</section>', page, flags=re.S).group(1)
    assert '<p class="cache-miss-means">Compiled autograd turns the autograd graph' in section
    assert "A cache miss means this backward was not like any cached one: it is captured again" in section
    reasons = re.findall(r'<li class="reason">(.*?)</li>', section, flags=re.S)
    assert reasons[0].startswith("The first backward under this compiler_fn: nothing was cached for it yet"), reasons
    assert any(r.startswith("A size changed (size ") and "captured again with that size symbolic" in r
               for r in reasons[1:]), reasons


def test_page_is_self_contained(tiny_page):
    _, page, _ = tiny_page
    assert "<script" not in page and "<link" not in page
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # data URIs and links within the page only


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


def test_rendered_graphs_wrap_their_long_lines(chromium, blocks_page, tmp_path):
    _, page, _ = blocks_page
    # A copy that opens every graph, then records whether the page, any <pre> or any table
    # reaches past its box (sideways scrolling), in a narrow window.
    probe = ("<script>window.addEventListener('load', () => { document.querySelectorAll('details')"
             ".forEach(d => d.open = true); const e = document.documentElement; "
             "e.setAttribute('data-page-overflows', e.scrollWidth > e.clientWidth); "
             "for (const pre of document.querySelectorAll('pre')) "
             "pre.setAttribute('data-overflows', pre.scrollWidth > pre.clientWidth); "
             "for (const t of document.querySelectorAll('table')) t.setAttribute('data-overflows', "
             "t.getBoundingClientRect().right > t.parentElement.getBoundingClientRect().right + 1); });</script></body>")
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", probe), encoding="utf-8")
    dom = _chromium(chromium, tmp_path / "profile", "--window-size=760,800", "--virtual-time-budget=10000",
                    "--dump-dom", probed.as_uri()).stdout
    assert 'data-page-overflows="false"' in dom
    overflows = re.findall(r'<(pre|table) class="([^"]*)" data-overflows="(\w+)"', dom)
    assert {"fx forward", "fx backward", "saved"} <= {cls for _, cls, _ in overflows}, overflows
    assert all(o == "false" for _, _, o in overflows), overflows


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
