"""The runtime's one interpreter and one lowering loop, over sections made of steps.

A section is what one runtime function does (CompiledFunction's forward, ...), as a tuple of
steps. Each step is a small frozen dataclass saying what it does once, in two forms side by
side: `run(env)` does it on the section's values (an env whose attributes are named as the
generated code's locals: `ctx`, `args`, `results`, ...), and `emit(code)` writes it as
straight-line Python into a `Code` and returns True, or returns False when it has no straight
form, and then the whole section is interpreted.

- `interpret(steps, env)` runs the steps in order.
- `lower(name, head, steps, tail, constants)` writes them between a head (the `def` line) and
  a tail (the `return` line) and builds the function, or answers None (a step said False, or
  `generate` is off). The function keeps its source (`.source`).
- `emit_all(code, steps)` writes a part of a section (the epilogue inside a call) whole, or
  leaves the code as it was: the part is then one line running it interpreted.
- `describe(name, steps)` is an interpreted section's printout.

Generated code is the fast path (per-call overhead well below `aot_eager`'s); the interpreter
is the path for every case and the reference the generated code is tested against.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Protocol, Sequence

from aotgrad.persistence import generated

generate = True  # False: every section is interpreted (tests of the general path; stepping through a debugger)
_counter = itertools.count()


class Step(Protocol):
    def run(self, env: Any) -> None: ...

    def emit(self, code: Code) -> bool: ...


class Code:
    """Source lines plus the constants they name (`self.const(value)` -> a global name)."""

    def __init__(self, name: str):
        self.name = name
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {}
        self._names: dict[int, str] = {}

    def const(self, value: Any, name: str | None = None) -> str:
        if name is not None:
            self.namespace[name] = value
            return name
        key = id(value)
        if key not in self._names:
            self._names[key] = f"c{len(self._names)}"
            self.namespace[self._names[key]] = value
        return self._names[key]

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def mark(self) -> tuple:
        """Where the code is now (lines and constants), to come `back_to`."""
        return len(self.lines), dict(self._names), dict(self.namespace)

    def back_to(self, mark: tuple) -> None:
        lines, self._names, self.namespace = mark
        del self.lines[lines:]

    @property
    def source(self) -> str:
        return "\n".join(self.lines) + "\n"

    def build(self) -> Callable:
        source = self.source
        function = generated.define(source, f"<aotgrad {self.name} {next(_counter)}>", dict(self.namespace), self.name)
        function.source = source
        return function


def tuple_of(names: Sequence[str]) -> str:
    """Python for a tuple of these expressions (`(a,)` for one)."""
    return f"({', '.join(names)},)" if len(names) == 1 else f"({', '.join(names)})"


def interpret(steps: Sequence[Step], env: Any) -> Any:
    """Run the steps on `env`, in order; the env holds the results."""
    for step in steps:
        step.run(env)
    return env


def lower(name: str, head: str, steps: Sequence[Step], tail: str | None,
          constants: dict[str, Any] | None = None) -> Callable | None:
    """The steps as one generated function `name`: `head` (its `def` line), each step's code,
    `tail` (None: the last step returns). `constants` are global names every step may use
    (the section's own values: the plan, types). None when a step has no straight form, or
    `generate` is off."""
    if not generate:
        return None
    code = Code(name)
    for key, value in (constants or {}).items():
        code.const(value, key)
    code(head)
    if not emit_all(code, steps):
        return None
    if tail is not None:
        code(tail)
    return code.build()


def emit_all(code: Code, steps: Sequence[Step]) -> bool:
    """Write every step into `code`; if one has no straight form, leave `code` as it was (lines
    and constants) and answer False: the caller then runs the steps interpreted (a part of a
    section, such as the epilogue inside a call, can be one line calling the interpreter)."""
    mark = code.mark()
    for step in steps:
        if not step.emit(code):
            code.back_to(mark)
            return False
    return True


def describe(name: str, steps: Sequence[Step]) -> str:
    """An interpreted section's printout: one step per line."""
    return "".join([f"# {name}: interpreted\n", *(f"#   {_step_text(step)}\n" for step in steps)])


def _step_text(step: Step) -> str:
    fields = ", ".join(f"{f.name}={_value_text(getattr(step, f.name))}" for f in dataclasses.fields(step))
    return f"{type(step).__name__}({fields})"


def _value_text(value: Any) -> str:
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", type(value).__name__)  # (no address)
    return repr(value)
