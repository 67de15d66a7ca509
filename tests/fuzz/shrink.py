"""Shrink a failing Program by editing its statements, outside hypothesis.

    python -m tests.fuzz.shrink failing_program.py [--backend default]

Hypothesis shrinks a failure it found itself; a fuzz campaign (`campaign.py`) collects
many failures in one run without stopping and shrinks each here instead. In: a Program
and a predicate "still fails the same way". Out: a Program no single edit can simplify
further: drop a statement, an output, an argument or a leaf, leave a `no_grad` region,
turn an argument into a plain leaf, stop a leaf requiring grad, shrink a leaf's shape,
give a leaf of special values (`torch.tensor([0.0, torch.nan])`) fewer of them or randn ones.
"""
from __future__ import annotations

import ast
import dataclasses
import re
import signal
from collections.abc import Callable, Iterator

import torch

from tests.fuzz.oracle import EagerRejected, FuzzFailure, check_program, failure_type
from tests.fuzz.program import ARG_NAMES, Program, Stmt, nested_list, shape_source


def _without(items: tuple, k: int) -> tuple:
    return items[:k] + items[k + 1:]


def _renamed_args(p: Program, drop: int) -> Program | None:
    """Drop argument `drop` (later arguments built from it get its expression inlined);
    the later ones move up a letter (a, b, c stay contiguous)."""
    old = list(p.arg_names)
    new = old[:drop] + old[drop + 1:]
    mapping = {o: n for o, n in zip(new, ARG_NAMES)}
    pattern = re.compile(r"\b(" + "|".join(old) + r")\b")
    expr = p.args[drop].split(" = ", 1)[1]
    inlined = expr if re.fullmatch(r"[\w.]+", expr) else f"({expr})"

    def sub(text: str, inline: bool = False) -> str:
        def one(m):
            if m.group(1) == old[drop]:
                return inlined if inline else m.group(1) + "_dropped"
            return mapping[m.group(1)]
        return pattern.sub(one, text)

    args = tuple(sub(line, inline=True) for k, line in enumerate(p.args) if k != drop)
    body = tuple(dataclasses.replace(s, code=sub(s.code)) for s in p.body)
    outputs = tuple(sub(o) for o in p.outputs)
    if any("_dropped" in t for t in (*args, *(s.code for s in body), *outputs)):
        return None
    return Program(p.leaves, args, body, outputs) if new else None


def _smaller_leaves(line: str) -> Iterator[str]:
    """Simpler versions of one leaf line: fewer flags, smaller shapes, ordinary values."""
    yield from _smaller_randn_leaves(line)
    yield from _smaller_special_leaves(line)


def _smaller_randn_leaves(line: str) -> Iterator[str]:
    m = re.match(r"(l\d+) = torch\.randn\(\(([\d, ]*)\)(, dtype=torch\.\w+)?(, requires_grad=True)?\)", line)
    if not m:
        return
    name, dims, dtype, grad = m.group(1), [int(d) for d in m.group(2).replace(" ", "").split(",") if d], \
        m.group(3) or "", m.group(4) or ""

    def leaf(shape, dtype=dtype, grad=grad):
        return f"{name} = torch.randn({shape_source(shape)}{dtype}{grad})"

    if grad:
        yield leaf(dims, grad="")
    if dtype:
        yield leaf(dims, dtype="")
    for k, d in enumerate(dims):
        for smaller in sorted({1, d - 1}) if d > 1 else ():
            yield leaf(dims[:k] + [smaller] + dims[k + 1:])
    for k in range(len(dims)):
        yield leaf(dims[:k] + dims[k + 1:])


def _parse_values(node: ast.expr) -> tuple[list[str], tuple[int, ...]]:
    """The elements (as source) and shape of a nested list literal."""
    if not isinstance(node, ast.List):
        return [ast.unparse(node)], ()
    rows = [_parse_values(item) for item in node.elts]
    return [v for values, _ in rows for v in values], (len(rows), *(rows[0][1] if rows else ()))


def _smaller_special_leaves(line: str) -> Iterator[str]:
    """A `torch.tensor` leaf of special values: randn of its shape, fewer flags, one special
    value replaced by 1.0 everywhere, a smaller shape (the first or last part of a dim, or a
    dim dropped)."""
    m = re.match(r"(l\d+) = torch\.tensor\((.+?)(, dtype=torch\.\w+)?(, requires_grad=True)?\)$", line)
    if not m:
        return
    name, dtype, grad = m.group(1), m.group(3) or "", m.group(4) or ""
    values, shape = _parse_values(ast.parse(m.group(2), mode="eval").body)

    def leaf(values=values, shape=shape, dtype=dtype, grad=grad):
        return f"{name} = torch.tensor({nested_list(values, shape)}{dtype}{grad})"

    yield f"{name} = torch.randn({shape_source(shape)}{dtype}{grad})"
    if grad:
        yield leaf(grad="")
    if dtype:
        yield leaf(dtype="")
    for special in sorted(set(values) - {"1.0"}):
        yield leaf([("1.0" if v == special else v) for v in values])
    index = torch.arange(len(values)).reshape(shape)
    for k, d in enumerate(shape):
        for smaller in sorted({1, d - 1}) if d > 1 else ():
            for start in sorted({0, d - smaller}):
                yield leaf([values[i] for i in index.narrow(k, start, smaller).flatten().tolist()],
                           shape[:k] + (smaller,) + shape[k + 1:])
    for k in range(len(shape)):
        yield leaf([values[i] for i in index.select(k, 0).flatten().tolist()], shape[:k] + shape[k + 1:])


def candidates(p: Program) -> Iterator[Program]:
    """Every one-edit simplification of p, biggest cuts first."""
    for k in range(len(p.body)):
        yield dataclasses.replace(p, body=_without(p.body, k))
    for k in range(len(p.outputs)):
        if len(p.outputs) > 1:
            yield dataclasses.replace(p, outputs=_without(p.outputs, k))
    for k in range(len(p.args)):
        q = _renamed_args(p, k)
        if q is not None:
            yield q
    used = " ".join((*p.args, *(s.code for s in p.body)))
    for k, name in enumerate(p.leaf_names):
        if not re.search(rf"\b{name}\b", used):
            yield dataclasses.replace(p, leaves=_without(p.leaves, k))
    for k, s in enumerate(p.body):
        if s.no_grad:
            yield dataclasses.replace(p, body=p.body[:k] + (Stmt(s.code, False),) + p.body[k + 1:])
    for k, line in enumerate(p.args):
        name, expr = line.split(" = ", 1)
        for leaf in p.leaf_names:
            for simpler in (leaf, f"{leaf} * 1"):
                if len(simpler) < len(expr):
                    yield dataclasses.replace(p, args=p.args[:k] + (f"{name} = {simpler}",) + p.args[k + 1:])
    for k, line in enumerate(p.leaves):
        for smaller in _smaller_leaves(line):
            yield dataclasses.replace(p, leaves=p.leaves[:k] + (smaller,) + p.leaves[k + 1:])


def canonical(p: Program) -> Program:
    """Renumber values (v0, v1, ...) and leaves (l0, l1, ...) in order of definition."""
    values = [s.code.split(" = ")[0] for s in p.body if re.match(r"v\d+ = ", s.code)]
    mapping = {**{old: f"v{k}" for k, old in enumerate(values)},
               **{old: f"l{k}" for k, old in enumerate(p.leaf_names)}}

    def sub(text: str) -> str:
        return re.sub(r"\b([vl]\d+)\b", lambda m: mapping.get(m.group(1), m.group(1)), text)

    return Program(tuple(map(sub, p.leaves)), tuple(map(sub, p.args)),
                   tuple(dataclasses.replace(s, code=sub(s.code)) for s in p.body), tuple(map(sub, p.outputs)))


def shrink(p: Program, still_fails: Callable[[Program], bool], max_steps: int = 500) -> Program:
    """Greedy: take the first candidate that still fails, until none does; then renumber."""
    for _ in range(max_steps):
        for q in candidates(p):
            if still_fails(q):
                p = q
                break
        else:
            break
    q = canonical(p)
    return q if still_fails(q) else p


def _hang(signum, frame):
    raise failure_type("hang")("[any] the program hangs")


def signature(failure: FuzzFailure) -> tuple:
    """What a shrunk failure must keep: its kind, and for crashes the error's first words
    (so shrinking does not slide from one crash to another)."""
    text = str(failure)
    if failure.category in ("crash", "backward_crash") and " raised " in text:
        return type(failure), text.split(" raised ", 1)[1][:60]
    return (type(failure),)


def fails_like(failure: FuzzFailure, backends: tuple[str, ...],
               timeout_s: int = 120) -> Callable[[Program], bool]:
    """The predicate 'fails with the same signature on these backends'."""
    wanted = signature(failure)

    def still_fails(q: Program) -> bool:
        signal.signal(signal.SIGALRM, _hang)
        signal.alarm(timeout_s)
        try:
            f, make_inputs = q.compile()
            check_program(f, make_inputs, backends)
        except FuzzFailure as e:
            return signature(e) == wanted
        except (EagerRejected, Exception):  # noqa: BLE001 - a broken candidate is not the bug
            return False
        finally:
            signal.alarm(0)
        return False
    return still_fails


def main() -> None:
    import argparse
    import logging

    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    parser = argparse.ArgumentParser(description="Shrink a printed failing program.")
    parser.add_argument("file", help="a program as printed by a fuzz failure (f and make_inputs)")
    parser.add_argument("--backend", default=None, help="default, min_cut or compile (default: all)")
    args = parser.parse_args()
    with open(args.file) as source:
        program = Program.from_source(source.read())
    backends = (args.backend,) if args.backend else ("default", "min_cut", "compile")
    f, make_inputs = program.compile()
    try:
        check_program(f, make_inputs, backends)
    except EagerRejected as rejected:
        print(f"eager rejects the program: {rejected}")
        return
    except FuzzFailure as failure:
        small = shrink(program, fails_like(failure, (failure.backend,)))
        f, make_inputs = small.compile()
        try:
            check_program(f, make_inputs, backends)
        except FuzzFailure as small_failure:
            failure = small_failure
        print(small.to_source() + "".join(f"\n# {line}" for line in str(failure).splitlines()[:6]))
        return
    print("the program passes")


if __name__ == "__main__":
    main()
