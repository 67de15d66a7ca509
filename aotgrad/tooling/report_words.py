"""The words `python -m aotgrad report` uses for what it collected: graphs named after their
frame and modules, inputs after the parameter they are, saved values after the op and module
that made them, graph breaks after their reason and line, compiled-autograd misses in words.

In: a `phases.Origin`, FX nodes (`nn_module_stack`, Dynamo's placeholder names) and the text
Dynamo logs. Out: strings and `GraphBreak`s; nothing here renders HTML or runs anything.

    graph_title(origin)                         "GPT.forward (model.py:40)"
    input_name("L_self_modules_blocks_modules_0_modules_ln1_parameters_weight_")
                                                ("blocks.0.ln1.weight", "parameter")
    saved_value(native_layer_norm getitem)      "made by native_layer_norm in blocks.0.ln1"
"""
from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass

import torch.fx as fx

# Dynamo's name for the function it resumes after a graph break (resume_execution.py).
_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
# Dynamo's placeholder names: L_ (a local) or G_ (a global), then the path with _modules_,
# _parameters_, _buffers_ between its parts, then _.
_PLACEHOLDER = re.compile(r"^[LG]_(.*)_$")
_PATH_PART = re.compile(r"_(modules|parameters|buffers)_")


# -- graphs -----------------------------------------------------------------------------

def frame_name(name: str) -> str:
    """A frame's function, Dynamo's resume functions named after the function they resume:

        torch_dynamo_resume_in_f_at_6           -> "f, after the graph break at line 6"
        Net.torch_dynamo_resume_in_forward_at_9 -> "Net.forward, after the graph break at line 9"
    """
    owner, _, name = name.rpartition(".")
    owner = owner + "." if owner else ""
    lines = []
    match = _RESUME.match(name)
    while match:
        name = match.group(1)
        lines.insert(0, match.group(2))
        match = _RESUME.match(name)
    if not lines:
        return owner + name
    plural = "s" if len(lines) > 1 else ""
    return f"{owner}{name}, after the graph break{plural} at line{plural} " + ", ".join(lines)


def graph_title(name: str, location: str) -> str:
    """'GPT.forward (model.py:40)': the frame's function and where its code starts."""
    where = os.path.basename(location) if location else ""
    return frame_name(name) + (f" ({where})" if where else "")


def modules_of(gm: fx.GraphModule) -> list[str]:
    """The outermost modules the graph's ops ran in, in order: ["transformer (GPT2Model)",
    "lm_head (Linear)"] (from each node's `nn_module_stack`)."""
    seen: dict[str, str] = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if not stack:
            continue
        path, cls = next(iter(stack.values()))
        name = module_path(path)
        if name and name not in seen:
            seen[name] = getattr(cls, "__name__", str(cls))
    return [f"{name} ({cls})" for name, cls in seen.items()]


def module_path(dynamo_path: str) -> str:
    """The module's path from the compiled frame's `self`, as named_modules() names it:

        L['self'].transformer.h.0.ln_1                    -> transformer.h.0.ln_1
        L['self']._modules['h']._modules['0']              -> h.0
        L['model'].layers[2]                               -> model.layers.2
    """
    path = re.sub(r"\._modules\['([^']*)'\]", r".\1", str(dynamo_path))
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"^L\['self'\]\.?", "", path)
    return re.sub(r"^[LG]\['([^']*)'\]", r"\1", path)


# -- inputs and saved values ------------------------------------------------------------

def input_name(dynamo_name: str) -> tuple[str, str]:
    """The user's name of a graph input, and whether it is a "parameter", a "buffer" or an "input":

        L_self_modules_blocks_modules_0_modules_ln1_parameters_weight_ -> ("blocks.0.ln1.weight", "parameter")
        L_x_                                                        -> ("x", "input")
    """
    match = _PLACEHOLDER.match(dynamo_name)
    if match is None:
        return dynamo_name, "input"
    body = match.group(1)
    kinds = _PATH_PART.findall(body)
    parts = _PATH_PART.split(body)[::2]
    if kinds and parts[0] == "self":
        parts = parts[1:]
    kind = {"parameters": "parameter", "buffers": "buffer"}.get(kinds[-1], "input") if kinds else "input"
    return ".".join(parts), kind


def saved_value(node: fx.Node, input_names: list[str] | None) -> str:
    """What a value the forward saves is, for people: the parameter or input it is, or the op
    and module that made it ("made by native_layer_norm in blocks.0.ln1")."""
    if node.op == "placeholder":
        placeholders = node.graph.find_nodes(op="placeholder")
        index = placeholders.index(node)
        if input_names is None or index >= len(input_names):
            return "input" if input_names is None else "leaf made inside"
        name, kind = input_name(input_names[index])
        return f"{name} ({kind})"
    return made_by(node)


def made_by(node: fx.Node) -> str:
    """'made by <op> in <module>': the op (for one output of a multi-output op, that op) and
    the innermost module it ran in, if any."""
    producer = node
    if _short_op(node) == "getitem" and node.args and isinstance(node.args[0], fx.Node):
        producer = node.args[0]
    module = innermost_module(node) or innermost_module(producer)
    return f"made by {_short_op(producer)}" + (f" in {module}" if module else "")


def innermost_module(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path, _ = list(stack.values())[-1]
    return module_path(path)


def _short_op(node: fx.Node) -> str:
    """aten.native_layer_norm.default -> native_layer_norm; operator.getitem -> getitem."""
    target = node.target
    if hasattr(target, "_schema"):
        return target._schema.name.split("::")[-1]
    return getattr(target, "__name__", str(target))


# -- graph breaks -----------------------------------------------------------------------

@dataclass
class GraphBreak:
    """One place where Dynamo stopped a graph and went on in Python (or skipped the frame)."""
    path: str           # the user's file ("" when Dynamo did not say)
    line: int           # its line (0 when unknown)
    function: str       # the function it is in ("" when unknown)
    kind: str           # Dynamo's short name: "Data-dependent branching"
    explanation: str    # Dynamo's one-line explanation, or ""
    reason: str         # everything Dynamo said
    count: int = 1

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.path)}:{self.line}" if self.path else "(no source line)"

    @property
    def code(self) -> str:
        return linecache.getline(self.path, self.line).strip() if self.path and self.line else ""


def graph_break_from_log(message: str, exception: BaseException | None = None) -> GraphBreak:
    """A GraphBreak from a message of Dynamo's `graph_breaks` log (torch/_dynamo/symbolic_convert.py
    `log_graph_break`, or convert_frame.py's whole-frame skip, which names the exception):

        Graph break in user code at /x/train.py:13
        Graph Break Reason: Data-dependent branching
          Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). ...
        User code traceback:
          File "/x/train.py", line 13, in f
            if y.sum() > 0:
    """
    head, _, traceback_text = message.partition("User code traceback:")
    files = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', traceback_text or message)
    located = re.search(r"in user code at (.+):(\d+)\s*$", head.splitlines()[0] if head else "")
    path, line = (located.group(1), int(located.group(2))) if located else \
        ((files[-1][0], int(files[-1][1])) if files else ("", 0))
    function = next((f for p, n, f in reversed(files) if p == path and int(n) == line), "")
    reason = head.split("Graph Break Reason:", 1)[1].strip() if "Graph Break Reason:" in head else head.strip()
    if exception is not None:
        reason += "\n\n" + f"{type(exception).__name__}: {exception}".strip()
    lines = reason.splitlines()
    # Dynamo's short name is the line above "  Explanation:" (other lines say how it was met)
    at = next((k for k, text in enumerate(lines) if text.strip().startswith("Explanation:")), None)
    kind = lines[at - 1].strip() if at else next((text.strip() for text in lines if text.strip()), "graph break")
    explanation = lines[at].strip()[len("Explanation:"):].strip() if at is not None else ""
    return GraphBreak(path, line, function, kind, explanation, reason)


def merge_breaks(breaks: list[GraphBreak]) -> list[GraphBreak]:
    """One entry per place and kind (Dynamo logs a break again when it traces its frame again), counted."""
    merged: dict[tuple, GraphBreak] = {}
    for b in breaks:
        key = (b.path, b.line, b.kind)
        if key in merged:
            merged[key].count += b.count
        else:
            merged[key] = GraphBreak(b.path, b.line, b.function, b.kind, b.explanation, b.reason, b.count)
    return list(merged.values())


# -- compiled autograd ------------------------------------------------------------------

CACHE_MISS_MEANS = (
    "Compiled autograd turns the autograd graph that each .backward() call runs into one FX graph and "
    "caches it, keyed by the graph's structure (which autograd nodes, in which order, with which hooks and "
    "saved non-tensor values) and its sizes. A cache miss means this backward was not like any cached one: "
    "it is captured again and handed to the compiler again, which costs a compile. The first backward "
    "always misses; a later miss says what changed.")


def miss_in_words(reason: str) -> str:
    """One reason compiled autograd's cache missed (compiled_autograd/cache.py), as a sentence."""
    match = re.match(r"changed shapes: marking size idx (\d+) of (.+) as dynamic$", reason)
    if match:
        return (f"A size changed (size {match.group(1)} of {match.group(2)}): the backward is captured again with "
                "that size symbolic, so later values of it reuse the new graph.")
    match = re.match(r"changed shapes: size idx (\d+) of (.+) stays static \((.*)\)$", reason)
    if match:
        return (f"A size changed (size {match.group(1)} of {match.group(2)}) that stays a constant ({match.group(3)}): "
                "each new value of it is captured again.")
    match = re.match(r"new autograd node: (.+?) with key size \d+, previous key sizes=(.*)$", reason)
    if match and match.group(2) == "[]":
        return ("The first backward under this compiler_fn: nothing was cached for it yet, so it is captured and "
                "compiled (each compiler_fn has its own cache: a new one per step captures every step).")
    if match and match.group(1).startswith("CompiledFunctionBackward"):
        return (f"The backward's autograd graph is new from {match.group(1)} on: the backward of a torch.compile "
                "graph, which Dynamo compiled again (a recompile makes a new backward node).")
    if match:
        return (f"The backward's autograd graph is new from {match.group(1)} on: a different path through the model, "
                "different ops, or inputs that now do or do not require grad.")
    match = re.match(r"(.+) during the backward changed: (.*) -> (.*)$", reason)
    if match:
        return f"The {match.group(1)} during the backward changed from {match.group(2)} to {match.group(3)}."
    match = re.match(r"(hooks|saved values) of (.+) changed: (.*) -> (.*)$", reason)
    if match:
        return f"The {match.group(1)} of {match.group(2)} changed from {match.group(3)} to {match.group(4)}."
    return reason
