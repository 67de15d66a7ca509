"""The `aotgrad` command (also `python -m aotgrad`): `aotgrad COMMAND [options]`.

Each command is a module-level `main(argv) -> exit status` whose argparse parser is named
`aotgrad COMMAND`, so `aotgrad COMMAND --help` reads the same for every command. COMMANDS
maps the name to that function and the one-line description the usage message shows.
`main` returns the exit status (the console script passes it to sys.exit); `--help` and
argparse's errors, which exit, become a returned status too.
"""
from __future__ import annotations

import sys

PROG = "aotgrad"


def _demo(argv: list[str]) -> int:
    from aotgrad.tooling import demo

    return demo.main(argv)


def _report(argv: list[str]) -> int:
    from aotgrad.tooling import report

    return report.main(argv)


def _explain(argv: list[str]) -> int:
    import importlib

    # (`from aotgrad import explain` is the function aotgrad.explain, not its module)
    return importlib.import_module("aotgrad.tooling.explain").main(argv)


def _cache(argv: list[str]) -> int:
    from aotgrad.persistence import cache_folder

    return cache_folder.main(argv)


COMMANDS = {
    "demo": (_demo, "train a small transformer and a CNN under eager, aot_eager, aotgrad, inductor and "
                    "aotgrad_inductor; compare results, compile and step time, and saved activations"),
    "report": (_report, "run a script (or -m module) with aotgrad's backends; write one HTML page of its "
                        "graphs, memory-vs-recompute curves, recompile reasons and timings"),
    "explain": (_explain, "run a script (or -m module) with aotgrad's backends; print what each compile "
                          "made: forward and backward graphs, saved values, mutations, aliases"),
    "cache": (_cache, "the disk cache: `info` (its folder, whether only you may write it, entries, size, "
                      "limit) or `clear` (delete every entry)"),
}


def version() -> str:
    import torch

    from aotgrad import __version__

    return f"{PROG} {__version__} (torch {torch.__version__}, python {sys.version.split()[0]})"


def usage() -> str:
    lines = [f"usage: {PROG} COMMAND [options]    (or: python -m aotgrad COMMAND [options])",
             f"       {PROG} --version", "", "commands:"]
    lines += [f"  {name:<8} {description}" for name, (_, description) in COMMANDS.items()]
    lines += ["", f"`{PROG} COMMAND --help` describes a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(version())
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"{PROG}: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    try:
        return command[0](argv[1:])
    except SystemExit as e:  # argparse's --help and usage errors
        return _exit_status(e)


def _exit_status(e: SystemExit) -> int:
    """What the interpreter would exit with: None is 0, a message is printed and is 1."""
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    print(e.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
