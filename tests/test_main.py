"""The `aotgrad` command (aotgrad/__main__.py): usage, --version, and the same --help for
every command in COMMANDS, whichever commands it holds."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aotgrad
from aotgrad.__main__ import COMMANDS, main

REPO = Path(__file__).resolve().parents[1]


def test_version_names_aotgrad_torch_and_python(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"aotgrad {aotgrad.__version__} (torch {torch.__version__}, python ")


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: aotgrad COMMAND [options]")
    for name, (_, description) in COMMANDS.items():
        assert f"  {name:<8} {description}" in out


def test_no_command_prints_usage_and_fails(capsys):
    assert main([]) == 2
    assert capsys.readouterr().err.startswith("usage: aotgrad COMMAND")


def test_unknown_command_prints_usage_and_fails(capsys):
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert "aotgrad: unknown command 'no-such-command'" in err and "usage: aotgrad COMMAND" in err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_under_its_own_name(name, capsys):
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: aotgrad {name} "), out
    assert "-h, --help" in out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_bad_option_is_a_usage_error_with_status_2(name, capsys):
    assert main([name, "--no-such-option"]) == 2
    assert f"aotgrad {name}: error:" in capsys.readouterr().err


def test_a_message_passed_to_sys_exit_is_printed_and_status_1(monkeypatch, capsys):
    def command(argv):
        sys.exit("it went wrong")
    monkeypatch.setitem(COMMANDS, "failing", (command, "exits with a message"))
    assert main(["failing"]) == 1
    assert capsys.readouterr().err == "it went wrong\n"


def test_python_dash_m_exits_with_mains_status():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "aotgrad", "no-such-command"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 2 and "unknown command" in result.stderr
