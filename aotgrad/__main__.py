"""`python -m aotgrad COMMAND`: the command line.

Each command is a module-level `main(argv) -> exit status`; COMMANDS maps the name
to it and the one-line description shown in the usage message.
"""
from __future__ import annotations

import sys


def _demo(argv: list[str]) -> int:
    from aotgrad import demo

    return demo.main(argv)


def _report(argv: list[str]) -> int:
    from aotgrad import report

    return report.main(argv)


def _cache(argv: list[str]) -> int:
    from aotgrad import cache_folder

    return cache_folder.main(argv)


COMMANDS = {
    "demo": (_demo, "train a small CNN eagerly and with torch.compile(backend=\"aotgrad\"); "
                    "compare speed, saved activations, and results"),
    "report": (_report, "run a script (or -m module) with aotgrad's backends; write one HTML page of its "
                        "graphs, memory-vs-recompute curves, recompile reasons and timings"),
    "cache": (_cache, "the disk cache: `info` (its folder, whether only you may write it, entries, size, "
                      "limit) or `clear` (delete every entry)"),
}


def usage() -> str:
    lines = ["usage: python -m aotgrad COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<8} {description}" for name, (_, description) in COMMANDS.items()]
    lines += ["", "`python -m aotgrad COMMAND --help` describes a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"python -m aotgrad: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    return command[0](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
