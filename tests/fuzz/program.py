"""Random programs over views, mutations and aliasing, as plain Python.

A `Program` is data: the statements that build its inputs (`make_inputs`) and the
statements of the function under test (`f`), each one line of Python. `to_source()`
prints both as a runnable module; `compile()` execs exactly that text, so the printed
program is what ran. `programs()` is the hypothesis strategy: it draws one statement at
a time and runs it on real tensors as it goes ("shadow" execution), so it knows every
value's shape, strides and storage, offers only ops that fit, and drops a statement
eager rejects (in-place on a leaf that requires grad, overlapping writes, ...).
Hypothesis shrinks the draws, and with them the program.

Grammar: pointwise (unary, binary with broadcasting, scalars), reductions, matmul,
views (view, reshape, transpose, t, slicing, select, expand, unsqueeze, squeeze,
split/chunk/unbind, diagonal, as_strided, permute, narrow, detach, contiguous), detached
aliases (`detach()`, `.data`: drawn as often as a kind of their own), in-place
ops (add_, mul_, copy_, zero_, unary_, index assignment, t_/unsqueeze_ metadata
changes) on any value, regions under `torch.no_grad()`, and outputs drawn among all
values (inputs, views of inputs, intermediates, views of intermediates, repeats).
Inputs: 1-3 arguments built from 1-3 leaves (requiring grad or not; `torch.randn`, or now
and then `torch.tensor` of special values: zeros, infinities, NaN, ties): a leaf itself, a
non-leaf (`leaf * 1`), the same tensor passed twice, or a view of another argument.
"""
from __future__ import annotations

import linecache
import math
import re
import warnings
from dataclasses import dataclass, field
from itertools import count

import torch
from hypothesis import strategies as st

ARG_NAMES = ("a", "b", "c")
_file_ids = count()


@dataclass(frozen=True)
class Stmt:
    """One line of Python; `no_grad` statements print inside `with torch.no_grad():`."""

    code: str
    no_grad: bool = False


@dataclass(frozen=True)
class Program:
    leaves: tuple[str, ...]          # make_inputs: lines creating the leaves l0, l1, ...
    args: tuple[str, ...]            # make_inputs: lines defining a, b, c
    body: tuple[Stmt, ...]           # f's statements
    outputs: tuple[str, ...]         # names f returns, as a tuple

    @property
    def arg_names(self) -> tuple[str, ...]:
        return ARG_NAMES[: len(self.args)]

    @property
    def leaf_names(self) -> tuple[str, ...]:
        return tuple(line.split(" = ")[0] for line in self.leaves)

    def function_source(self) -> str:
        lines = [f"def f({', '.join(self.arg_names)}):"]
        in_block = False
        for s in self.body:
            if s.no_grad and not in_block:
                lines.append("    with torch.no_grad():")
            in_block = s.no_grad
            lines.append(("        " if s.no_grad else "    ") + s.code)
        lines.append(f"    return ({', '.join(self.outputs)},)")
        return "\n".join(lines)

    def inputs_source(self) -> str:
        return "\n".join([
            "def make_inputs():",
            "    torch.manual_seed(0)",
            *("    " + line for line in self.leaves),
            *("    " + line for line in self.args),
            f"    return [{', '.join(self.arg_names)}], [{', '.join(self.leaf_names)}]",
        ])

    def to_source(self) -> str:
        """The program as a plain, runnable module (import, f, make_inputs)."""
        return f"import torch\n\n\n{self.function_source()}\n\n\n{self.inputs_source()}\n"

    def compile(self):
        """(f, make_inputs) from exec of `to_source()`; tracebacks show the program's lines."""
        return compile_source(self.to_source())

    @staticmethod
    def from_source(source: str) -> Program:
        """The Program that `to_source()` printed (to shrink or edit a printed failure)."""
        lines = source.splitlines()
        start = next(k for k, line in enumerate(lines) if line.startswith("def f("))
        body, outputs = [], ()
        for line in lines[start + 1:]:
            text = line.strip()
            if line.startswith("def make_inputs"):
                break
            if not text or text == "with torch.no_grad():":
                continue
            if text.startswith("return ("):
                outputs = tuple(o.strip() for o in text[len("return ("):-1].split(",") if o.strip())
            else:
                body.append(Stmt(text, no_grad=line.startswith("        ")))
        made = lines[next(k for k, line in enumerate(lines) if line.startswith("def make_inputs")):]
        leaves = tuple(line.strip() for line in made if re.match(r"\s+l\d+ = ", line))
        args = tuple(line.strip() for line in made if re.match(r"\s+[abc] = ", line))
        return Program(leaves, args, tuple(body), outputs)

    def __len__(self) -> int:
        return len(self.body)

    def __repr__(self) -> str:
        return "\n" + self.to_source()

    def _repr_pretty_(self, printer, cycle) -> None:  # how hypothesis prints a falsifying example
        printer.text(repr(self))


def compile_source(source: str):
    """exec a program module; returns its (f, make_inputs)."""
    filename = f"<fuzz-program-{next(_file_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {"__name__": "fuzz_program"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the program is the test input
    return namespace["f"], namespace["make_inputs"]


# -- shadow execution ---------------------------------------------------------

@dataclass
class Shadow:
    """The program so far, run eagerly on real tensors while it is drawn."""

    namespace: dict = field(default_factory=lambda: {"torch": torch})
    names: list[str] = field(default_factory=list)      # tensor values f can use, in order
    counter: int = 0

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, self.namespace[n]) for n in self.names]

    def try_run(self, code: str, no_grad: bool = False) -> bool:
        """Run one line; False (and no effect on names) when eager raises."""
        src = f"with torch.no_grad():\n    {code}" if no_grad else code
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(src, self.namespace)  # noqa: S102
        except Exception:  # noqa: BLE001 - whatever eager rejects is left out
            return False
        return True

    def fresh_name(self) -> str:
        name = f"v{self.counter}"
        self.counter += 1
        return name


def shape_source(shape) -> str:
    """A shape as Python source: `(3,)`, `(2, 3)`, `()`."""
    return f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"


SHAPES = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)
SCALARS = st.sampled_from(["2", "0.5", "-1.5", "3"])
# The elements of a leaf with special values: zeros (0 * inf, 0 / 0, the kink of abs and
# relu), infinities and NaN, and few finite values so that ties (amax, maximum) are common.
# Mostly finite, so that NaN does not swallow every value downstream.
SPECIAL_VALUES = ["0.0", "1.0", "0.0", "-1.0", "2.0", "1.0", "torch.inf", "-torch.inf", "torch.nan"]


# -- inputs -------------------------------------------------------------------

ARG_VIEWS = ["{x}[1:]", "{x}.t()", "{x}[0]", "{x}.view(-1)", "{x}.unsqueeze(0)", "{x}.diagonal()",
             "{x}[:, ::2]", "{x}[..., 1:]", "{x}.transpose(0, -1)", "{x}.expand(2, *{x}.shape)", "{x}.detach()",
             "{x}.unfold(0, 2, 1)", "{x}.as_strided((2,), (1,), 1)"]


def nested_list(values: list[str], shape: tuple[int, ...]) -> str:
    """Python source of a nested list of `shape` holding `values` (row-major); a 0-d shape
    gives the one value itself: what `torch.tensor` takes."""
    if not shape:
        return values[0]
    step = len(values) // shape[0] if shape[0] else 0
    return "[" + ", ".join(nested_list(values[k * step:(k + 1) * step], shape[1:]) for k in range(shape[0])) + "]"


def _special_leaf(draw, name: str, shape: tuple[int, ...], dtype: str, grad: str) -> str:
    values = [draw(st.sampled_from(SPECIAL_VALUES)) for _ in range(math.prod(shape))]
    return f"{name} = torch.tensor({nested_list(values, shape)}{dtype}{grad})"


@st.composite
def _inputs(draw, shadow: Shadow):
    leaves, args = [], []
    for i in range(draw(st.integers(1, 3))):
        shape = draw(st.one_of(SHAPES.filter(lambda s: len(s) >= 1), st.just(())))
        dtype = draw(st.sampled_from(["", "", "", ", dtype=torch.float64"]))
        grad = ", requires_grad=True" if draw(st.booleans()) else ""
        if draw(st.integers(0, 5)) == 5:  # one leaf in six: special values (shrinks to randn)
            leaves.append(_special_leaf(draw, f"l{i}", shape, dtype, grad))
        else:
            leaves.append(f"l{i} = torch.randn({shape_source(shape)}{dtype}{grad})")
        assert shadow.try_run(leaves[-1]), leaves[-1]
    for name in ARG_NAMES[: draw(st.integers(1, 3))]:
        kind = draw(st.sampled_from(["leaf", "nonleaf", "dup", "view"]))
        leaf = draw(st.sampled_from([f"l{i}" for i in range(len(leaves))]))
        expr = {"leaf": leaf, "nonleaf": f"{leaf} * 1"}.get(kind)
        if kind in ("dup", "view"):
            source = draw(st.sampled_from([*(a.split(" = ")[0] for a in args), *(f"l{i}" for i in range(len(leaves)))]))
            expr = source if kind == "dup" else draw(st.sampled_from(ARG_VIEWS)).format(x=source)
        line = f"{name} = {expr}"
        if not shadow.try_run(line):
            line = f"{name} = {leaf} * 1"
            assert shadow.try_run(line), line
        args.append(line)
        shadow.names.append(name)
    return tuple(leaves), tuple(args)


# -- expressions: each takes (draw, shadow, name, tensor) and returns code or None ----

UNARY = ["{x}.sin()", "{x}.cos()", "{x}.tanh()", "{x}.sigmoid()", "{x}.relu()", "-{x}", "{x} * {s}",
         "{x} + {s}", "{x}.exp()", "{x}.abs()", "{x}.clone()", "{x} ** 2", "{x}.double()", "{x}.float()",
         "({x} > 0)", "torch.zeros_like({x})", "torch.ones_like({x}).requires_grad_()", "{x}.new_ones(2)",
         "{x}.to(torch.float64)", "{x}.clone().requires_grad_()"]


def _unary(draw, shadow, x, t):
    return draw(st.sampled_from(UNARY)).format(x=x, s=draw(SCALARS))


def _broadcasts(a, b) -> bool:
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False


def _binary(draw, shadow, x, t):
    others = [n for n, o in shadow.tensors() if _broadcasts(t.shape, o.shape)]
    y = draw(st.sampled_from(others))
    op = draw(st.sampled_from(["{x} + {y}", "{x} * {y}", "{x} - {y}", "torch.maximum({x}, {y})",
                               "torch.where({x} > 0, {x}, {y})", "{x} / ({y}.abs() + 1)",
                               "torch.cat([{x}.reshape(-1), {y}.reshape(-1)])",
                               "torch.stack([{x}, {x}])"]))
    return op.format(x=x, y=y)


def _reduction(draw, shadow, x, t):
    if t.dim() == 0:
        return f"{x}.sum()"
    d = draw(st.integers(-t.dim(), t.dim() - 1))
    op = draw(st.sampled_from(["{x}.sum()", "{x}.sum({d})", "{x}.mean({d}, keepdim=True)", "{x}.amax({d})",
                               "{x}.softmax({d})", "{x}.logsumexp({d})", "{x}.cumsum({d})", "{x}.mean()"]))
    return op.format(x=x, d=d)


def _matmul_fits(a, b) -> bool:
    try:
        torch.matmul(torch.empty(a, device="meta"), torch.empty(b, device="meta"))
        return True
    except RuntimeError:
        return False


def _matmul(draw, shadow, x, t):
    if t.dim() == 0:
        return None
    others = [n for n, o in shadow.tensors() if _matmul_fits(t.shape, o.shape)]
    options = [f"{x} @ {y}" for y in others]
    if t.dim() >= 2:
        options += [f"{x} @ {x}.mT", f"{x}.mT @ {x}"]
    return draw(st.sampled_from(options)) if options else None


def _slice(draw, n: int) -> str:
    start = draw(st.integers(0, max(n - 1, 0)))
    stop = draw(st.integers(start, n))
    step = draw(st.sampled_from(["", ":2"]))
    return f"{start}:{stop}{step}"


def _index(draw, t) -> str | None:
    """A basic index of t: slices and ints over its leading dims."""
    if t.dim() == 0:
        return None
    parts = []
    for d in range(draw(st.integers(1, t.dim()))):
        n = t.shape[d]
        kind = draw(st.sampled_from(["slice", "int", "all"]))
        parts.append(_slice(draw, n) if kind == "slice" else str(draw(st.integers(-n, n - 1))) if kind == "int" and n
                     else ":")
    return ", ".join(parts)


def _dim(draw, t, extra: int = 0) -> int:
    return draw(st.integers(-(t.dim() + extra), t.dim() + extra - 1))


def _reshape(kind):
    def make(draw, shadow, x, t):
        shape = shape_source(_factor(draw, t.numel()))
        return draw(st.sampled_from([f"{x}.{kind}(-1)", f"{x}.{kind}({shape})"]))
    return make


def _expand(draw, shadow, x, t):
    sizes = [draw(st.sampled_from([s, 3])) if s == 1 else s for s in t.shape]
    lead = draw(st.lists(st.integers(1, 3), max_size=1))
    return f"{x}.expand({', '.join(map(str, [*lead, *sizes]))})" if lead or sizes else None


def _piece(kind):
    """One piece of a multi-output view op (split, chunk, unbind) or narrow."""
    def make(draw, shadow, x, t):
        if t.dim() == 0:
            return None
        d = _dim(draw, t)
        n = t.shape[d]
        if kind == "unbind":
            return f"{x}.unbind({d})[{draw(st.integers(0, n - 1))}]" if n else None
        if kind == "narrow":
            start = draw(st.integers(0, n))
            return f"{x}.narrow({d}, {start}, {draw(st.integers(0, n - start))})"
        k = draw(st.integers(1, 3))
        pieces = len(t.split(k, d)) if kind == "split" else len(t.chunk(k, d))
        return f"{x}.{kind}({k}, {d})[{draw(st.integers(0, max(pieces - 1, 0)))}]"
    return make


def _unfold(draw, shadow, x, t):
    if t.dim() == 0:
        return None
    d = _dim(draw, t)
    size = draw(st.integers(1, max(t.shape[d], 1)))
    return f"{x}.unfold({d}, {size}, {draw(st.integers(1, 2))})"


def _expand_as(draw, shadow, x, t):
    others = [n for n, o in shadow.tensors() if _broadcasts(t.shape, o.shape)
              and torch.broadcast_shapes(t.shape, o.shape) == o.shape]
    return f"{x}.expand_as({draw(st.sampled_from(others))})"


def _if_rank(test, make):
    return lambda draw, shadow, x, t: make(draw, shadow, x, t) if test(t.dim()) else None


# Every view op the grammar knows: name -> (draw, shadow, name, tensor) -> expression or None.
VIEWS = {
    "view": _reshape("view"),
    "reshape": _reshape("reshape"),
    "transpose": _if_rank(lambda r: r >= 1, lambda d, s, x, t: f"{x}.transpose({_dim(d, t)}, {_dim(d, t)})"),
    "t": _if_rank(lambda r: r <= 2, lambda d, s, x, t: f"{x}.t()"),
    "slice": _if_rank(lambda r: r >= 1, lambda d, s, x, t: f"{x}[{_index(d, t)}]"),
    "select": _if_rank(lambda r: r >= 1, lambda d, s, x, t: f"{x}.select({_dim(d, t)}, 0)"),
    "expand": _expand,
    "unsqueeze": lambda d, s, x, t: f"{x}.unsqueeze({_dim(d, t, extra=1)})",
    "split": _piece("split"),
    "chunk": _piece("chunk"),
    "diagonal": _if_rank(lambda r: r >= 2, lambda d, s, x, t: "{}.diagonal({}, {}, {})".format(
        x, d(st.integers(-1, 1)), *d(st.sampled_from([(0, 1), (-1, -2), (0, -1)])))),
    "as_strided": lambda d, s, x, t: _as_strided(d, x, t),
    "permute": _if_rank(lambda r: r >= 1, lambda d, s, x, t: "{}.permute({})".format(
        x, ", ".join(map(str, d(st.permutations(range(t.dim()))))))),
    "squeeze": lambda d, s, x, t: f"{x}.squeeze()" if t.dim() == 0 or d(st.booleans()) else
    f"{x}.squeeze({_dim(d, t)})",
    "unbind": _piece("unbind"),
    "narrow": _piece("narrow"),
    "detach": lambda d, s, x, t: f"{x}.detach()",
    "contiguous": lambda d, s, x, t: f"{x}.contiguous()",
    "flatten": lambda d, s, x, t: f"{x}.flatten()",
    "data": lambda d, s, x, t: f"{x}.data",
    "unfold": _unfold,
    "view_dtype": lambda d, s, x, t: "{}.view({})".format(
        x, d(st.sampled_from(["torch.int32", "torch.float32", "torch.int64", "torch.float64"]))),
    "expand_as": _expand_as,
    "movedim": _if_rank(lambda r: r >= 1, lambda d, s, x, t: f"{x}.movedim({_dim(d, t)}, {_dim(d, t)})"),
}


def _view(draw, shadow, x, t):
    return VIEWS[draw(st.sampled_from(list(VIEWS)))](draw, shadow, x, t)


def _factor(draw, n: int) -> tuple[int, ...]:
    """A shape with n elements (at most 3 dims)."""
    if n == 0:
        return (0,)
    shape = []
    for _ in range(draw(st.integers(0, 2))):
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        d = draw(st.sampled_from(divisors))
        shape.append(d)
        n //= d
    return (*shape, n)


def _as_strided(draw, x, t):
    storage = t.untyped_storage().nbytes() // t.element_size()
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    strides = draw(st.lists(st.integers(0, 3), min_size=len(sizes), max_size=len(sizes)))
    extent = sum((s - 1) * st_ for s, st_ in zip(sizes, strides))
    if extent > storage - 1:
        return None
    offset = draw(st.integers(0, storage - 1 - extent))
    return f"{x}.as_strided({shape_source(sizes)}, {shape_source(strides)}, {offset})"


def _value_for(draw, shadow, shape) -> str:
    """A scalar or a value broadcastable to `shape` (without growing it)."""
    fits = [n for n, o in shadow.tensors() if _broadcasts(shape, o.shape)
            and torch.broadcast_shapes(shape, o.shape) == shape]
    if fits and draw(st.booleans()):
        return draw(st.sampled_from(fits))
    return draw(SCALARS)


def _inplace(draw, shadow, x, t):
    """A statement (not an expression): an in-place op on x."""
    kind = draw(st.sampled_from(["add_", "mul_", "copy_", "zero_", "setitem", "unary_", "metadata_", "out",
                                 "masked", "index_tensor", "data_", "inference"]))
    if kind == "inference":  # a write autograd does not record, as eager's inference mode
        return f"torch.inference_mode()(lambda: {x}.mul_({draw(SCALARS)}))()"
    if kind in ("add_", "mul_"):
        return f"{x}.{kind}({_value_for(draw, shadow, t.shape)})"
    if kind == "copy_":
        fits = [n for n, o in shadow.tensors() if _broadcasts(t.shape, o.shape)
                and torch.broadcast_shapes(t.shape, o.shape) == t.shape]
        return f"{x}.copy_({draw(st.sampled_from(fits))})" if fits else None
    if kind == "zero_":
        return f"{x}.zero_()"
    if kind == "unary_":
        return draw(st.sampled_from(["{x}.sin_()", "{x}.relu_()", "{x}.clamp_(min=0)", "{x}.neg_()"])).format(x=x)
    if kind == "metadata_":
        return draw(st.sampled_from([f"{x}.t_()", f"{x}.unsqueeze_(0)", f"{x}.squeeze_()", f"{x}.transpose_(0, -1)",
                                     f"{x}.detach_()", f"{x}.requires_grad_()"]))
    if kind == "out":
        others = [n for n, o in shadow.tensors() if o.shape == t.shape]
        op = draw(st.sampled_from(["torch.add", "torch.mul", "torch.sub"]))
        return f"{op}({draw(st.sampled_from(others))}, {draw(SCALARS)}, out={x})"
    if kind == "masked":
        return f"{x}.masked_fill_({x} > 0, {draw(SCALARS)})"
    if kind == "index_tensor" and t.dim() >= 1 and t.shape[0] >= 1:
        index = draw(st.lists(st.integers(0, t.shape[0] - 1), min_size=1, max_size=2))
        op = draw(st.sampled_from(["{x}[torch.tensor({i})] = {s}", "{x}.index_fill_(0, torch.tensor({i}), {s})",
                                   "{x}.index_add_(0, torch.tensor({i}), torch.ones_like({x}[torch.tensor({i})]))"]))
        return op.format(x=x, i=index, s=draw(SCALARS))
    if kind == "data_":
        return f"{x}.data.mul_({draw(SCALARS)})"
    index = _index(draw, t)
    if index is None:
        return None
    try:  # only the shape is needed: index a detached alias (no autograd checks)
        target = eval(f"t[{index}]", {"t": t.detach()})
    except (IndexError, RuntimeError):
        return None
    return f"{x}[{index}] = {_value_for(draw, shadow, target.shape)}"


def _detached(draw, shadow, x, t):
    """An alias sharing x's memory but not its autograd history (later writes through either
    change both's values, each keeps its own gradient); a view taken under inference mode."""
    return draw(st.sampled_from([f"{x}.detach()", f"{x}.data",
                                 f"torch.inference_mode()(lambda: {x}.view({x}.shape))()"]))


EXPRESSIONS = {"unary": _unary, "binary": _binary, "reduction": _reduction, "matmul": _matmul, "view": _view,
               "detached": _detached}
# sampled_from shrinks towards the first entry: simplest first; views and in-place ops weighted up.
KINDS = ["unary", "view", "inplace", "binary", "view", "inplace", "reduction", "matmul", "no_grad", "view",
         "detached"]


def _statement(draw, shadow: Shadow, kind: str, no_grad: bool) -> Stmt | None:
    x = draw(st.sampled_from(shadow.names))
    t = shadow.namespace[x]
    try:  # a generator that inspects a tensor eager would refuse to touch offers nothing
        if kind == "inplace":
            code = _inplace(draw, shadow, x, t)
            return Stmt(code, no_grad) if code and shadow.try_run(code, no_grad) else None
        expr = EXPRESSIONS[kind](draw, shadow, x, t)
    except (RuntimeError, IndexError, ValueError, TypeError):
        return None
    if expr is None:
        return None
    name = shadow.fresh_name()
    code = f"{name} = {expr}"
    if not shadow.try_run(code, no_grad):
        shadow.counter -= 1
        return None
    shadow.names.append(name)
    return Stmt(code, no_grad)


@st.composite
def programs(draw, max_statements: int = 8) -> Program:
    """A random Program whose every statement runs in eager (forward; backward may still fail)."""
    shadow = Shadow()
    leaves, args = draw(_inputs(shadow))
    body: list[Stmt] = []
    for _ in range(draw(st.integers(1, max_statements))):
        kind = draw(st.sampled_from(KINDS))
        if kind == "no_grad":
            inner = [k for k in KINDS if k != "no_grad"]
            block = [_statement(draw, shadow, draw(st.sampled_from(inner)), no_grad=True)
                     for _ in range(draw(st.integers(1, 3)))]
            body.extend(s for s in block if s is not None)
            continue
        s = _statement(draw, shadow, kind, no_grad=False)
        if s is not None:
            body.append(s)
    outputs = draw(st.lists(st.sampled_from(shadow.names[::-1]), min_size=1, max_size=3))
    return Program(leaves, args, tuple(body), tuple(outputs))
