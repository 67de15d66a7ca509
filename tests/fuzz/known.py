"""Known bugs: what lets the fuzz run stay green while a found bug waits for its fix.

Each file in `tests/fuzz/regressions/` holds one bug: its shrunk program, a strict xfail
test, and a `KNOWN = KnownBug(...)` that recognises the bug's failures: the kind of
difference, a pattern of the message, and a fact about the inputs. The fuzz test and
the campaign skip failures a KnownBug recognises (and count them), so they report only
new bugs. When a fix lands, the regression's strict xfail starts passing and fails CI:
delete the xfail mark and the KNOWN in that file together, and the fuzz checks that
case again.
"""
from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.oracle import FuzzFailure, shares_memory

REGRESSIONS = Path(__file__).parent / "regressions"


@dataclass(frozen=True)
class KnownBug:
    """Recognises one bug's failures. `reason` is the one-line diagnosis (the xfail reason)."""

    reason: str
    categories: tuple[str, ...]                      # FuzzFailure categories it shows as
    message: str = ""                                # regex searched in the failure message
    inputs: Callable[[list], bool] | None = None     # a fact about fresh make_inputs() arguments
    backends: tuple[str, ...] = ("default", "min_cut", "compile")
    source: str = ""                                 # regex searched in the program's source

    def matches(self, failure: FuzzFailure, args: list, source: str = "") -> bool:
        return (failure.category in self.categories and failure.backend in self.backends
                and re.search(self.message, str(failure), re.DOTALL) is not None
                and re.search(self.source, source) is not None
                and (self.inputs is None or self.inputs(args)))


def known_bugs() -> dict[str, KnownBug]:
    """Every regression file's KNOWN (those still waiting for a fix), by file name."""
    bugs = {}
    for path in sorted(REGRESSIONS.glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"fuzz_regression_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if getattr(module, "KNOWN", None) is not None:
            bugs[path.stem] = module.KNOWN
    return bugs


def which_known(failure: FuzzFailure, make_inputs: Callable, bugs: dict[str, KnownBug],
                source: str = "") -> str | None:
    """The name of the known bug this failure is, or None for a new one."""
    args, _ = make_inputs()
    for name, bug in bugs.items():
        if bug.matches(failure, args, source):
            return name
    return None


# -- facts about inputs, for KnownBug.inputs ------------------------------------------

def non_leaf_requiring_grad_not_compact(args: list) -> bool:
    """An input that requires grad, is not a leaf, and whose layout a .clone() would not
    keep (strided, offset, expanded, overlapping)."""
    for a in args:
        if a.requires_grad and not a.is_leaf:
            c = a.detach().clone()
            if (c.stride(), c.storage_offset()) != (a.stride(), a.storage_offset()):
                return True
    return False


def non_leaf_requiring_grad(args: list) -> bool:
    return any(a.requires_grad and not a.is_leaf for a in args)


def inputs_share_memory(args: list) -> bool:
    """Two distinct inputs share memory, by the oracle's rule (`oracle.shares_memory`)."""
    return any(a is not b and shares_memory(a, b) for a in args for b in args)


def input_with_storage_offset(args: list) -> bool:
    return any(a.storage_offset() != 0 for a in args)
