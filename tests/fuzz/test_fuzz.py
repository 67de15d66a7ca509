"""Random programs over views, mutations and aliasing: aotgrad against eager.

`test_random_programs_match_eager` is the default-suite run: a fixed, derandomized set of
programs through aot_function (default and min-cut partitioners) and
torch.compile(backend="aotgrad"). `test_random_programs_long` is the long sweep:
`python -m pytest -m slow tests/fuzz` (FUZZ_EXAMPLES / FUZZ_SEED override its size and
seed). A failure prints the shrunk program as plain Python; see docs/fuzzing.md.
Failures that a file in regressions/ already pins (its KNOWN) are skipped and counted.
"""
from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, event, given, reject, seed, settings

from tests.fuzz.known import known_bugs, which_known
from tests.fuzz.oracle import EagerRejected, FuzzFailure, check_program
from tests.fuzz.program import Program, programs

pytestmark = pytest.mark.filterwarnings("ignore")
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)

KNOWN = known_bugs()
_SETTINGS = {"deadline": None, "database": None, "print_blob": False,
             "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large]}


def check(program: Program, backends: tuple[str, ...]) -> None:
    """The body of both tests: run the oracle; eager rejects are discarded, known bugs skipped."""
    f, make_inputs = program.compile()
    try:
        report = check_program(f, make_inputs, backends)
    except EagerRejected:
        reject()
    except FuzzFailure as failure:
        known = which_known(failure, make_inputs, KNOWN, program.to_source())
        if known is None:
            raise
        event(f"known bug: {known}")
        return
    for message in report.clear_errors.values():
        event(f"clear aotgrad error: {message[:100]}")


@settings(max_examples=300, derandomize=True, **_SETTINGS)
@given(programs(max_statements=6))
def test_random_programs_match_eager(program):
    check(program, ("default", "min_cut", "compile"))


@pytest.mark.slow
@seed(int(os.environ.get("FUZZ_SEED", "0")))
@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")), **_SETTINGS)
@given(programs(max_statements=10))
def test_random_programs_long(program):
    check(program, ("default", "min_cut", "compile"))
