"""aotgrad on each supported torch release: the demo and the test suite, one environment each.

For every version asked for, an environment: one given with `--env VERSION=PATH` (a venv folder
or a Python executable, reused as it is), else a venv made under --venv-root with torch
installed first and then the test dependencies under a constraint file pinning torch, so pip
never swaps it. (Releases other than the CPU wheel a machine holds come from PyPI as CUDA builds
of several GB; they run on CPU too.) aotgrad is never installed: each run imports this checkout
through PYTHONPATH. Per version it runs `python -m aotgrad demo` and
`python -m pytest -q -rs <pytest args>`, keeps both logs under --logs, and prints one table:

    torch     python   demo   passed  failed  errors  skipped  minutes
    2.11.0    3.11.7   PASS     1510       0       0        17     17.9

    python benchmarks/torch_versions.py --env 2.11.0=/work/v211 --env 2.13.0=python \\
        --env 2.14.1=/work/v214 --markdown docs/compatibility_table.md

Exit status 0 when every demo passed and no test failed or errored.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VERSIONS = ("2.11.0", "2.13.0", "2.14.1")
# What the suite imports besides torch (pyproject.toml: dependencies and the `test` extra).
TEST_DEPENDENCIES = ("networkx>=3", "scipy>=1.10", "pytest>=7", "expecttest>=0.2", "hypothesis>=6",
                     "ninja>=1.11", "matplotlib>=3")


@dataclass
class Result:
    version: str
    python: str = "?"
    demo: str = "-"
    passed: int | None = None  # None: the suite did not run
    failed: int | None = None
    errors: int | None = None
    skipped: int | None = None
    minutes: float = 0.0
    note: str = ""

    @property
    def ok(self) -> bool:
        tests_ok = self.passed is None or (self.passed > 0 and self.failed == 0 and self.errors == 0)
        return self.demo == "PASS" and tests_ok


def _python_of(path: str) -> str:
    """A venv folder's interpreter, or the executable itself (a name is looked up on PATH)."""
    candidate = Path(path)
    if candidate.is_dir():
        for name in ("bin/python", "Scripts/python.exe"):
            if (candidate / name).exists():
                return str(candidate / name)
        raise SystemExit(f"{path}: a folder without bin/python; pass a venv or a Python executable")
    found = shutil.which(path)
    if found is None:
        raise SystemExit(f"{path}: no such Python")
    return found


def _run(cmd: list[str], log: Path, timeout: float, env: dict | None = None, append: bool = False) -> tuple[int, str]:
    """Run `cmd` in the repository, output to `log` (and returned); rc 124 on timeout."""
    with open(log, "a" if append else "w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        try:
            rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
            out.write(f"\n[torch_versions] stopped after {timeout:.0f} s\n")
    return rc, log.read_text(errors="replace")


def make_venv(version: str, root: Path, log: Path) -> str:
    """A venv with torch==version, then the test dependencies with torch pinned."""
    folder = root / f"torch-{version}"
    python = folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    constraint = folder / "torch-constraint.txt"
    constraint.write_text(f"torch=={version}\n")
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
    for step in ([*pip, f"torch=={version}"], [*pip, "-c", str(constraint), *TEST_DEPENDENCIES]):
        rc, _ = _run(step, log, timeout=3 * 3600, append=True)
        if rc != 0:
            raise RuntimeError(f"torch {version}: `{' '.join(step)}` failed (exit {rc}), see {log}")
    return str(python)


def _torch_and_python(python: str) -> tuple[str, str]:
    out = subprocess.run([python, "-c", "import sys, torch; print(torch.__version__, sys.version.split()[0])"],
                         capture_output=True, text=True, cwd="/", timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{python}: cannot import torch:\n{out.stderr[-2000:]}")
    torch_version, python_version = out.stdout.split()[-2:]
    return torch_version, python_version


def _counts(summary: str) -> dict[str, int]:
    """pytest's last line, "3 failed, 1483 passed, 1 skipped, 8 warnings in 930.63s", as counts."""
    lines = [line for line in summary.splitlines() if re.search(r"\b(passed|failed|error|skipped)\b.* in [\d.]+s", line)]
    found = dict.fromkeys(("passed", "failed", "errors", "skipped"), 0)
    for count, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", lines[-1] if lines else ""):
        found["errors" if word.startswith("error") else word] = int(count)
    return found


def check(version: str, python: str, logs: Path, pytest_args: list[str], skip_tests: bool) -> Result:
    start = time.monotonic()
    torch_version, python_version = _torch_and_python(python)
    result = Result(version, python_version)
    if torch_version.split("+")[0] != version:
        raise RuntimeError(f"{python} has torch {torch_version}, not {version}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    rc, text = _run([python, "-m", "aotgrad", "demo"], logs / f"torch-{version}-demo.log", 900, env)
    result.demo = "PASS" if rc == 0 and "\nPASS: all " in text else f"FAIL ({rc})"
    if not skip_tests:
        rc, text = _run([python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *pytest_args],
                        logs / f"torch-{version}-tests.log", 4 * 3600, env)
        counts = _counts(text)
        result.passed, result.failed, result.errors, result.skipped = (
            counts["passed"], counts["failed"], counts["errors"], counts["skipped"])
        if rc not in (0, 1):
            result.note = f"pytest exit {rc}"
    result.minutes = (time.monotonic() - start) / 60
    return result


def table(results: list[Result], markdown: bool) -> str:
    header = ("torch", "python", "demo", "passed", "failed", "errors", "skipped", "minutes")
    rows = [(r.version, r.python, r.demo, *("-" if n is None else str(n) for n in (r.passed, r.failed, r.errors, r.skipped)),
             f"{r.minutes:.1f}" + (f" ({r.note})" if r.note else "")) for r in results]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in [header, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", default=",".join(DEFAULT_VERSIONS),
                        help="torch releases to check, comma-separated (default: %(default)s)")
    parser.add_argument("--env", action="append", default=[], metavar="VERSION=PATH",
                        help="reuse an environment for VERSION: a venv folder or a Python executable "
                             "(its torch must be VERSION); versions without one get a new venv")
    parser.add_argument("--venv-root", type=Path, default=Path.home() / ".cache" / "aotgrad-torch-versions",
                        help="where new venvs are made (default: %(default)s)")
    parser.add_argument("--logs", type=Path, default=REPO / "out" / "torch_versions",
                        help="folder for each run's log (default: %(default)s)")
    parser.add_argument("--skip-tests", action="store_true", help="run only the demo")
    parser.add_argument("--markdown", type=Path, help="also write the table, dated, as Markdown here")
    parser.add_argument("pytest_args", nargs="*", default=["tests"],
                        help="arguments for pytest after `--` (default: tests)")
    args = parser.parse_args(argv)

    given = {}
    for item in args.env:
        version, sep, path = item.partition("=")
        if not sep:
            parser.error(f"--env {item}: expected VERSION=PATH")
        given[version] = _python_of(path)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    versions += [v for v in given if v not in versions]
    args.logs.mkdir(parents=True, exist_ok=True)

    results = []
    for version in versions:
        print(f"== torch {version}", flush=True)
        try:
            python = given.get(version) or make_venv(version, args.venv_root, args.logs / f"torch-{version}-install.log")
            results.append(check(version, python, args.logs, args.pytest_args, args.skip_tests))
        except (RuntimeError, subprocess.SubprocessError) as error:
            print(f"torch {version}: {error}", file=sys.stderr)
            results.append(Result(version, demo="not run", note=str(error).splitlines()[0][:60]))
        print(table(results[-1:], markdown=False), flush=True)

    print("\n" + table(results, markdown=False))
    print(f"logs in {args.logs}")
    if args.markdown:
        command = "python benchmarks/torch_versions.py " + " ".join(argv if argv is not None else sys.argv[1:])
        args.markdown.write_text(f"{datetime.date.today().isoformat()}, `{command}`\n\n{table(results, True)}\n")
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
