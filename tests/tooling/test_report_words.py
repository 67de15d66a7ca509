"""report_words.py: the names and sentences the report uses, from Dynamo's names, FX node
metadata, Dynamo's graph-break log and compiled autograd's miss reasons."""
import operator

import torch
import torch.fx as fx

from aotgrad.tooling import report_words as words

aten = torch.ops.aten

# A message of Dynamo's graph_breaks log, as torch 2.11 to 2.14 write it (symbolic_convert.py).
DATA_DEPENDENT = '''Graph break in user code at /x/train.py:13
Graph Break Reason: Data-dependent branching
  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). Dynamo does not support tracing dynamic control flow.
  Hint: Use `torch.cond` to express dynamic control flow.

  Developer debug context: attempted to jump with TensorVariable()

User code traceback:
  File "/x/train.py", line 20, in <module>
    step(x)
  File "/x/train.py", line 13, in step
    if y.sum() > 0:
'''

# A break met in a call, then the frame skipped (convert_frame.py's wording differs again).
CANNOT_RESUME = '''Graph break in user code at /x/utils.py:40
Graph Break Reason: Encountered graph break that we cannot resume from. Compiling up to the previous resumable state, then skipping the rest of the function. Graph break encountered:

logging.Logger method not supported for non-export cases
  Explanation: logging.Logger methods are not supported for non-export cases.

User code traceback:
  File "/x/utils.py", line 40, in loss_function
    logger.warning_once(
'''

SKIPPED_FRAME = '''Graph break: torch.compile cannot properly resume from this graph break, which results in a skip.
torch.compile will skip tracing the frame f (/x/a.py line 3) and fall back to eager.
The graph break occurred in the following user code:
  File "/x/a.py", line 5, in f
    torch._dynamo.graph_break()
'''


def test_frame_names_resume_functions_after_the_function_they_resume():
    assert words.frame_name("GPT.forward") == "GPT.forward"
    assert words.frame_name("torch_dynamo_resume_in_f_at_6") == "f, after the graph break at line 6"
    assert words.frame_name("Net.torch_dynamo_resume_in_forward_at_22") == \
        "Net.forward, after the graph break at line 22"
    assert words.frame_name("torch_dynamo_resume_in_torch_dynamo_resume_in_f_at_6_at_9") == \
        "f, after the graph breaks at lines 6, 9"


def test_graph_title_is_the_frame_and_where_its_code_starts():
    assert words.graph_title("GPT.forward", "/home/me/model.py:40") == "GPT.forward (model.py:40)"
    assert words.graph_title("step", "") == "step"


def test_placeholder_names_become_parameter_paths():
    assert words.input_name("L_self_modules_blocks_modules_0_modules_ln1_parameters_weight_") == \
        ("blocks.0.ln1.weight", "parameter")
    assert words.input_name("L_self_modules_lm_head_parameters_weight_") == ("lm_head.weight", "parameter")
    assert words.input_name("L_self_modules_bn_buffers_running_mean_") == ("bn.running_mean", "buffer")
    assert words.input_name("L_model_modules_fc_parameters_bias_") == ("model.fc.bias", "parameter")
    assert words.input_name("L_input_ids_") == ("input_ids", "input")
    assert words.input_name("x") == ("x", "input")


def test_module_paths_as_named_modules_names_them():
    assert words.module_path("L['self'].transformer.h.0.ln_1") == "transformer.h.0.ln_1"
    assert words.module_path("L['self']._modules['h']._modules['0']") == "h.0"
    assert words.module_path("L['model'].layers[2]") == "model.layers.2"
    assert words.module_path("L['self']") == ""


def _layer_norm_graph() -> tuple[fx.Graph, dict]:
    """x, weight -> native_layer_norm (in blocks.0.ln1) -> its output 0, and a tanh outside any module."""
    graph = fx.Graph()
    x, weight = graph.placeholder("primals_1"), graph.placeholder("primals_2")
    norm = graph.call_function(aten.native_layer_norm.default, (x, [8], weight, None, 1e-5))
    norm.meta["nn_module_stack"] = {"a": ("L['self'].blocks[0]", torch.nn.Module),
                                    "b": ("L['self'].blocks[0].ln1", torch.nn.LayerNorm)}
    out = graph.call_function(operator.getitem, (norm, 0))
    out.meta["nn_module_stack"] = dict(norm.meta["nn_module_stack"])
    tanh = graph.call_function(aten.tanh.default, (out,))
    graph.output((tanh,))
    return graph, {"x": x, "weight": weight, "norm": norm, "out": out, "tanh": tanh}


def test_saved_values_by_parameter_name_or_by_op_and_module():
    _, nodes = _layer_norm_graph()
    names = ["L_x_", "L_self_modules_blocks_modules_0_modules_ln1_parameters_weight_"]
    assert words.saved_value(nodes["weight"], names) == "blocks.0.ln1.weight (parameter)"
    assert words.saved_value(nodes["x"], names) == "x (input)"
    assert words.saved_value(nodes["x"], None) == "input"
    assert words.saved_value(nodes["out"], names) == "made by native_layer_norm in blocks.0.ln1"
    assert words.saved_value(nodes["tanh"], names) == "made by tanh"


def test_modules_of_a_graph_are_its_outermost_modules_in_order():
    graph, _ = _layer_norm_graph()
    assert words.modules_of(fx.GraphModule(torch.nn.Module(), graph)) == ["blocks.0 (Module)"]


def test_data_dependent_branch_read_from_dynamos_log():
    b = words.graph_break_from_log(DATA_DEPENDENT)
    assert (b.path, b.line, b.function, b.kind) == ("/x/train.py", 13, "step", "Data-dependent branching")
    assert b.explanation.startswith("Detected data-dependent branching")
    assert b.where == "train.py:13"
    assert "Hint: Use `torch.cond`" in b.reason and "User code traceback" not in b.reason


def test_kind_of_a_break_met_deeper_is_dynamos_short_name():
    b = words.graph_break_from_log(CANNOT_RESUME)
    assert (b.where, b.function, b.kind) == ("utils.py:40", "loss_function",
                                             "logging.Logger method not supported for non-export cases")


def test_skipped_frame_is_located_by_its_traceback_and_named_by_its_exception():
    b = words.graph_break_from_log(SKIPPED_FRAME, RuntimeError("graph_break() called"))
    assert (b.where, b.function) == ("a.py:5", "f")
    assert b.kind.startswith("Graph break: torch.compile cannot properly resume")
    assert b.reason.endswith("RuntimeError: graph_break() called")


def test_breaks_met_again_are_counted_once_per_place_and_kind():
    first, again = words.graph_break_from_log(DATA_DEPENDENT), words.graph_break_from_log(DATA_DEPENDENT)
    other = words.graph_break_from_log(CANNOT_RESUME)
    merged = words.merge_breaks([first, other, again])
    assert [(b.where, b.count) for b in merged] == [("train.py:13", 2), ("utils.py:40", 1)]
    assert first.count == 1  # the inputs are left as they were


def test_compiled_autograd_misses_in_words():
    first = "new autograd node: torch::autograd::GraphRoot (NodeCall 0) with key size 35, previous key sizes=[]"
    assert words.miss_in_words(first).startswith("The first backward under this compiler_fn")
    recompiled = "new autograd node: CompiledFunctionBackward (NodeCall 1) with key size 35, previous key sizes=[35]"
    assert "which Dynamo compiled again" in words.miss_in_words(recompiled)
    other = "new autograd node: MulBackward0 (NodeCall 3) with key size 40, previous key sizes=[35]"
    assert words.miss_in_words(other).startswith(
        "The backward's autograd graph is new from MulBackward0 (NodeCall 3)")
    dynamic = "changed shapes: marking size idx 0 of torch::autograd::GraphRoot (NodeCall 0) as dynamic"
    assert words.miss_in_words(dynamic) == (
        "A size changed (size 0 of torch::autograd::GraphRoot (NodeCall 0)): the backward is captured again with "
        "that size symbolic, so later values of it reuse the new graph.")
    static = "changed shapes: size idx 2 of AddmmBackward0 (NodeCall 2) stays static (0 or 1)"
    assert words.miss_in_words(static).startswith("A size changed (size 2 of AddmmBackward0 (NodeCall 2)) that stays")
    hooks = "hooks of MulBackward0 (NodeCall 1) changed: none -> pre-hooks"
    assert words.miss_in_words(hooks) == "The hooks of MulBackward0 (NodeCall 1) changed from none to pre-hooks."
    autocast = "autocast during the backward changed: False -> True"
    assert words.miss_in_words(autocast) == "The autocast during the backward changed from False to True."
    assert words.miss_in_words("something new") == "something new"
