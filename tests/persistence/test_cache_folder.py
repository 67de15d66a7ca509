"""`aotgrad cache info|clear` (aotgrad/persistence/cache_folder.py's `main`), run through
aotgrad.__main__.main on a cache folder of the test's own. (Who may write the folder, and
the size limit, are tested through the disk cache: tests/persistence/test_disk_cache.py.)"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

import aotgrad
from aotgrad.__main__ import main
from aotgrad.persistence import cache_folder


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setattr(aotgrad.config, "cache_dir", str(folder))
    monkeypatch.setattr(cache_folder, "_warned", set())
    return folder


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 4))

    def forward(self, x):
        return torch.tanh(x @ self.weight.t())


def store_one_graph() -> None:
    """One entry in the cache folder (and the code generated for it)."""
    torch.manual_seed(0)
    aotgrad.aot_module_simplified(fx.symbolic_trace(Tiny()), [torch.randn(2, 4)], aotgrad.nop)
    assert len([path for path, _ in cache_folder.files() if Path(path).parent.parent == cache_folder.root()]) == 1


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    status = main(["cache", *argv])
    return status, capsys.readouterr().out.splitlines()


def test_cache_info_gives_the_folder_its_privacy_entries_size_and_limit(cache, capsys, monkeypatch):
    store_one_graph()
    monkeypatch.setattr(aotgrad.config, "cache_size_limit_mb", 2.5)
    code = len(cache_folder.files()) - 1
    size = sum(stat.st_size for _, stat in cache_folder.files())
    status, lines = run(capsys, "info")
    assert status == 0 and code > 0
    assert lines == [f"disk cache folder: {cache}", "private: yes (only you may write it, and what is in it)",
                     f"entries: 1 graphs, {code} generated code files, 0 Inductor keys",
                     f"size: {size / 2**20:.1f} MiB of 2.5 MiB (aotgrad.config.cache_size_limit_mb)"]


def test_cache_info_names_what_others_may_write_and_the_fix(cache, capsys):
    store_one_graph()
    os.chmod(cache, 0o777)
    [entry] = [Path(path) for path, _ in cache_folder.files() if Path(path).parent.parent == cache]
    os.chmod(entry, 0o646)
    _, lines = run(capsys, "info")
    assert lines[1] == "private: no, so aotgrad neither reads nor writes it (2 paths others may write)"
    assert lines[2:5] == [f"  {cache}: its group and all users may write it (mode drwxrwxrwx)",
                          f"  {entry}: all users may write it (mode -rw-r--rw-)",
                          f"  To use it: `chmod -R go-w {cache}` if it is yours, or set AOTGRAD_CACHE_DIR "
                          f"to a folder of your own."]


def test_cache_clear_deletes_every_entry_and_the_code(cache, capsys):
    store_one_graph()
    count = len(cache_folder.files())
    status, lines = run(capsys, "clear")
    assert status == 0 and lines == [f"Deleted 1 entries ({count} files, generated code and Inductor's keys "
                                     f"included) from {cache}."]
    assert cache_folder.files() == []


def test_cache_commands_say_when_there_is_no_folder(cache, capsys, monkeypatch):
    assert run(capsys, "info") == (0, [f"disk cache folder: {cache} (not made yet: the first compile stored "
                                       f"makes it)"])
    monkeypatch.setattr(aotgrad.config, "cache_dir", None)
    assert run(capsys, "clear") == (0, ["The disk cache is off: aotgrad.config.cache_dir is None "
                                        "(AOTGRAD_CACHE_DIR is set and empty)."])


def test_cache_help_describes_both_actions_and_the_usage_lists_the_command(capsys):
    code = main(["cache", "--help"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("usage: aotgrad cache [-h] {info,clear}")
    assert "`info`: the folder, whether only you may write it" in " ".join(out.split())
    assert "`clear`: delete every entry" in " ".join(out.split())
    main(["--help"])
    assert "  cache " in capsys.readouterr().out


def test_cache_refuses_an_unknown_action(capsys):
    code = main(["cache", "list"])
    assert code == 2 and "invalid choice: 'list'" in capsys.readouterr().err
