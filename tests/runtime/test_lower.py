"""runtime/lower.py: the one interpreter and the one lowering loop over a section's steps."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from aotgrad.runtime import lower as lowering


@dataclass(frozen=True)
class Add:
    amount: int

    def run(self, env) -> None:
        env.total += self.amount

    def emit(self, code) -> bool:
        code(f"    total += {code.const(self.amount)}")
        return True


@dataclass(frozen=True)
class NoStraightForm:
    def run(self, env) -> None:
        env.total *= 2

    def emit(self, code) -> bool:
        return False


def _lowered(steps):
    return lowering.lower("f", "def f(total):", steps, "    return total")


def test_lowered_and_interpreted_steps_agree():
    steps = (Add(2), Add(5))
    f = _lowered(steps)
    assert f(1) == lowering.interpret(steps, SimpleNamespace(total=1)).total == 8
    assert f.source == "def f(total):\n    total += c0\n    total += c1\n    return total\n"


def test_a_step_without_straight_form_makes_the_section_interpreted():
    assert _lowered((Add(2), NoStraightForm())) is None
    assert lowering.interpret((Add(2), NoStraightForm()), SimpleNamespace(total=1)).total == 6


def test_generate_off_interprets_every_section(monkeypatch):
    monkeypatch.setattr(lowering, "generate", False)
    assert _lowered((Add(2),)) is None


def test_an_interpreted_section_prints_one_step_per_line_without_addresses():
    @dataclass(frozen=True)
    class Call:
        graph: object
        count: int

    def forward(args):
        return args
    assert lowering.describe("run", (Call(forward, 2), Add(1))) == (
        "# run: interpreted\n#   Call(graph=forward, count=2)\n#   Add(amount=1)\n")


def test_a_part_without_straight_form_leaves_the_code_as_it_was():
    code = lowering.Code("f")
    code("def f(total):")
    code.const("kept")
    assert lowering.emit_all(code, (Add(7), Add(8))) is True
    lines, names = list(code.lines), dict(code.namespace)
    assert lowering.emit_all(code, (Add(2), NoStraightForm())) is False
    assert code.lines == lines and code.namespace == names
    assert code.const(9) == "c3"  # numbering goes on from the kept constants, not the dropped one
