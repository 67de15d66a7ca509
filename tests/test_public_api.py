"""The public names DESIGN.md promises ("Public API (names are a contract: keep them)") exist,
with the parameters it lists, and the top-level ones are exported (`aotgrad.__all__`).

DESIGN.md lives beside the repository (`../shared/DESIGN.md`); its names are parsed from the
Public API code block. `DESIGN_NAMES` pins the same list, so the check also runs where that
file is absent, and a test fails when the two drift apart."""
from __future__ import annotations

import dataclasses
import inspect
import pathlib
import re

import pytest
import torch

import aotgrad

DESIGN = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "DESIGN.md"

DESIGN_NAMES = [
    "aotgrad.aot_function", "aotgrad.aot_module", "aotgrad.aot_module_simplified", "aotgrad.aot_export_joint",
    "aotgrad.nop", "aotgrad.default_partition", "aotgrad.min_cut_rematerialization_partition",
    "aotgrad.testing.aot_autograd_check", "aotgrad.compiled_autograd.enable", "aotgrad.compiled_autograd.reset",
    "aotgrad.counters", "aotgrad.trace_wrapped", "aotgrad.distributed.DDPOptimizer", "aotgrad.config",
]
DESIGN_BACKENDS = ["aotgrad", "aotgrad_inductor"]
DESIGN_CONFIG_KNOBS = ["optimize_ddp", "partitioner", "activation_memory_budget", "activation_memory_budget_bytes",
                       "compiled_autograd_verbose", "cache_dir", "log_level"]

_NAME = re.compile(r"\baotgrad(?:\.\w+)+")


def _public_api_block() -> str:
    text = DESIGN.read_text()
    section = text[text.index("## Public API"):]
    return section[section.index("```python") + len("```python"):section.index("```", section.index("```python") + 3)]


def _statements(block: str) -> list[str]:
    """The block's code without comments, one string per statement (calls spanning lines joined)."""
    statements, current, depth = [], "", 0
    for line in block.splitlines():
        code = line.split("#", 1)[0].rstrip()
        if not code.strip():
            continue
        current += " " + code.strip()
        depth += code.count("(") - code.count(")")
        if depth == 0:
            statements.append(current.strip())
            current = ""
    return statements


def _arguments(statement: str, start: int) -> str | None:
    """The text between the parentheses of a call whose name ends at `start`, or None."""
    if start >= len(statement) or statement[start] != "(":
        return None
    depth = 0
    for i in range(start, len(statement)):
        depth += {"(": 1, ")": -1}.get(statement[i], 0)
        if depth == 0:
            return statement[start + 1:i]
    raise AssertionError(f"unbalanced parentheses in DESIGN.md: {statement}")


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return parts + ([current.strip()] if current.strip() else [])


def design_calls() -> dict[str, list[str] | None]:
    """DESIGN.md's `aotgrad.*` names -> the parameters its calls list (None where not called)."""
    calls: dict[str, list[str] | None] = {}
    for statement in _statements(_public_api_block()):
        for match in _NAME.finditer(statement):
            arguments = _arguments(statement, match.end())
            params = _split_top_level(arguments) if arguments is not None else None
            if params is not None or match.group() not in calls:
                calls[match.group()] = params
    return calls


def design_backends() -> list[str]:
    return re.findall(r'backend="(\w+)"', "\n".join(_statements(_public_api_block())))


def design_config_knobs() -> list[str]:
    block = _public_api_block()
    comment = block[block.index("plain attributes:") + len("plain attributes:"):]
    lines = [comment.splitlines()[0]] + [ln.strip()[1:] for ln in comment.splitlines()[1:]
                                         if ln.strip().startswith("#")]
    return [name.strip() for name in ",".join(lines).split(",") if name.strip()]


def _resolve(dotted: str):
    obj = aotgrad
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _signature_mismatches(name: str, params: list[str]) -> list[str]:
    """Where the parameters DESIGN.md lists for `name` differ from its real signature:
    each must exist with the same kind (positional before a bare `*`, keyword-only after)."""
    signature = inspect.signature(_resolve(name))
    real = signature.parameters
    kinds = inspect.Parameter
    problems, keyword_only = [], False
    for param in params:
        if param == "*" or (param.startswith("*") and not param.startswith("**")):
            keyword_only = True
            if param != "*" and not any(p.kind is kinds.VAR_POSITIONAL for p in real.values()):
                problems.append(f"{name}: DESIGN.md lists {param}, the function takes no *args")
            continue
        if param.startswith("**"):
            if not any(p.kind is kinds.VAR_KEYWORD for p in real.values()):
                problems.append(f"{name}: DESIGN.md lists {param}, the function takes no **kwargs")
            continue
        pname = param.split("=", 1)[0].strip()
        if pname not in real:
            problems.append(f"{name}: no parameter {pname!r} (signature {signature})")
        elif keyword_only and real[pname].kind is not kinds.KEYWORD_ONLY:
            problems.append(f"{name}: {pname!r} should be keyword-only (signature {signature})")
        elif not keyword_only and real[pname].kind not in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD):
            problems.append(f"{name}: {pname!r} should be positional (signature {signature})")
    return problems


needs_design = pytest.mark.skipif(not DESIGN.exists(), reason=f"{DESIGN} is not beside this checkout")


@needs_design
def test_pinned_names_are_designs():
    assert sorted(design_calls()) == sorted(DESIGN_NAMES)
    assert sorted(design_backends()) == sorted(DESIGN_BACKENDS)
    assert sorted(design_config_knobs()) == sorted(DESIGN_CONFIG_KNOBS)


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_design_name_exists(name):
    _resolve(name)


def test_top_level_design_names_are_exported():
    top_level = {name.split(".")[1] for name in DESIGN_NAMES}
    assert top_level - set(aotgrad.__all__) == set()
    assert all(hasattr(aotgrad, name) for name in aotgrad.__all__)


@needs_design
def test_design_parameters_match_the_signatures():
    problems = [p for name, params in design_calls().items() if params is not None
                for p in _signature_mismatches(name, params)]
    assert problems == []


def test_signature_check_catches_a_renamed_parameter():
    assert _signature_mismatches("aotgrad.aot_function", ["fn", "fw_compiler", "*", "partition"]) != []
    assert _signature_mismatches("aotgrad.aot_function", ["fn", "*", "fw_compiler"]) != []
    assert _signature_mismatches("aotgrad.trace_wrapped", ["*args", "fn=fn"]) == []


@pytest.mark.parametrize("backend", DESIGN_BACKENDS)
def test_design_backend_is_registered(backend):
    assert backend in torch._dynamo.list_backends(exclude_tags=())


@pytest.mark.parametrize("knob", DESIGN_CONFIG_KNOBS)
def test_design_config_knob_exists(knob):
    assert hasattr(aotgrad.config, knob)


def test_ddp_optimizer_has_compile_fn_and_buckets_of_design_fields():
    opt = aotgrad.distributed.DDPOptimizer(25 * 1024 * 1024, aotgrad.nop)
    assert callable(opt.compile_fn) and hasattr(opt, "buckets")
    fields = {f.name for f in dataclasses.fields(aotgrad.distributed.Bucket)}
    assert {"size", "params", "param_ids"} <= fields


def test_trace_wrapped_is_the_hop_and_calls_fn_in_eager():
    from aotgrad import trace_wrapped
    from aotgrad.trace.hops import trace_wrapped as hop

    assert trace_wrapped is hop is aotgrad.trace_wrapped
    x = torch.randn(3)
    assert torch.equal(trace_wrapped(x, fn=torch.sin), torch.sin(x))  # eager: fn(*args)
