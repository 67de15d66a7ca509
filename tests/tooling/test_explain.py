"""aotgrad.explain: the report a person reads to see what aotgrad made of their function."""
import re

import torch
from expecttest import TestCase

import aotgrad


def step(x, w):
    y = x.cos() * w
    x.add_(1)
    out = y.sin()
    return out, y.view(-1), x.view(-1)


def scaled_sine_cosine(x, w):
    return (x * w).sin().cos()


def _inputs():
    return torch.randn(4, 3), torch.randn(3, requires_grad=True)


class ExplainFunction(TestCase):
    def test_report_shows_graphs_saved_values_mutations_and_aliases(self):
        e = aotgrad.explain(step, *_inputs())
        sections = e.sections()
        self.assertEqual(list(sections), ["header", "forward", "backward", "saved", "mutations", "aliases",
                                          "compile time"])
        self.assertExpectedInline(sections["header"], """\
aotgrad.explain: step
inputs:
  primals_1  x  f32[4, 3]  mutated
  primals_2  w  f32[3]     requires grad""")
        self.assertExpectedInline(sections["forward"], """\
forward graph:
def forward(self, primals_1: "f32[4, 3]", primals_2: "f32[3]"):
    cos: "f32[4, 3]" = aten.cos.default(primals_1)  # test_explain.py:11  y = x.cos() * w
    mul: "f32[4, 3]" = aten.mul.Tensor(cos, primals_2)  # test_explain.py:11  y = x.cos() * w
    add: "f32[4, 3]" = aten.add.Tensor(primals_1, 1, alpha=1)  # test_explain.py:12  x.add_(1)
    sin: "f32[4, 3]" = aten.sin.default(mul)  # test_explain.py:13  out = y.sin()
    return (sin, mul, add, cos, mul)
# returns: sin = output 0, mul = base of output 1, add = new value of x; then saved for backward: cos, mul""")
        self.assertExpectedInline(sections["backward"], """\
backward graph:
def backward(self, cos: "f32[4, 3]", mul: "f32[4, 3]", tangents_1: "f32[4, 3]", tangents_2: "f32[4, 3]"):
    cos_1: "f32[4, 3]" = aten.cos.default(mul)  # test_explain.py:13  out = y.sin()  <- aten.sin.default
    mul_1: "f32[4, 3]" = aten.mul.Tensor(tangents_1, cos_1)  # test_explain.py:13  out = y.sin()  <- aten.sin.default
    add_1: "f32[4, 3]" = aten.add.Tensor(tangents_2, mul_1)  # test_explain.py:13  out = y.sin()  <- aten.sin.default
    mul_2: "f32[4, 3]" = aten.mul.Tensor(add_1, cos)  # test_explain.py:11  y = x.cos() * w  <- aten.mul.Tensor
    sum_1: "f32[3]" = aten.sum.dim_IntList(mul_2, [0], False)  # test_explain.py:11  y = x.cos() * w  <- aten.mul.Tensor
    return (sum_1,)
# tangents_1 = grad of sin (output 0), tangents_2 = grad of mul (base of output 1)
# returns: sum_1 = grad of w""")  # noqa: E501
        self.assertExpectedInline(sections["saved"], """\
saved for backward: 2 values, 96 B
  name  shape   dtype  bytes  made by           at
  cos   [4, 3]  f32    48     aten.cos.default  test_explain.py:11  y = x.cos() * w
  mul   [4, 3]  f32    48     aten.mul.Tensor   test_explain.py:11  y = x.cos() * w
recomputed in backward: 0 ops""")
        self.assertExpectedInline(sections["mutations"], """\
input mutations: 1
  x  x.copy_(add) under no_grad (autograd does not see it)""")
        self.assertExpectedInline(sections["aliases"], """\
output aliases: 2
  output 1  views mul (returned by the forward for it)  rebuilt as aten.view.default(mul, [-1])
  output 2  views input x                               rebuilt as aten.view.default(x, [-1])""")

    def test_compile_time_lists_each_phase_in_ms_and_percent(self):
        text = aotgrad.explain(step, *_inputs()).sections()["compile time"]
        lines = text.splitlines()
        self.assertRegex(lines[0], r"^compile time: \d+\.\d ms$")
        rows = [re.fullmatch(r"  (\w+) +\d+\.\d ms +\d+%", line) for line in lines[1:]]
        self.assertTrue(all(rows), text)
        self.assertEqual([r.group(1) for r in rows], ["trace", "functionalize", "partition", "compile"])

    def test_attributes_hold_the_printed_facts(self):
        e = aotgrad.explain(step, *_inputs())
        self.assertEqual([s.name for s in e.saved], ["cos", "mul"])
        self.assertEqual(e.saved_bytes, 2 * 4 * 3 * 4)
        self.assertEqual(e.recomputed, [])
        self.assertEqual([(m.input, m.new_value) for m in e.mutations], [("x", "add")])
        self.assertEqual([(a.output, a.of) for a in e.aliases],
                         [(1, "mul (returned by the forward for it)"), (2, "input x")])
        self.assertEqual(list(e.phases), ["trace", "functionalize", "partition", "compile"])
        self.assertEqual(len(e.records), 1)
        self.assertIn(e.forward_graph, str(e))

    def test_explaining_runs_nothing_and_leaves_inputs_unchanged(self):
        x, w = _inputs()
        before = x.clone()
        aotgrad.explain(step, x, w)
        self.assertTrue(torch.equal(x, before))
        self.assertEqual(x._version, 0)
        self.assertIsNone(w.grad)

    def test_min_cut_partition_lists_the_recomputed_ops(self):
        e = aotgrad.explain(scaled_sine_cosine, *_inputs(), partition_fn=aotgrad.min_cut_rematerialization_partition)
        self.assertEqual([r.name for r in e.recomputed], ["mul", "sin"])
        self.assertExpectedInline(e.sections()["saved"], """\
saved for backward: 2 values, 0 B
  name       shape   dtype  bytes  made by  at
  primals_1  [4, 3]  f32    0      input
  primals_2  [3]     f32    0      input
recomputed in backward: 2 ops
  mul  [4, 3]  aten.mul.Tensor   test_explain.py:18  return (x * w).sin().cos()
  sin  [4, 3]  aten.sin.default  test_explain.py:18  return (x * w).sin().cos()""")

    def test_no_input_requiring_grad_gives_an_inference_graph_and_no_backward(self):
        x, w = _inputs()
        e = aotgrad.explain(step, x, w.detach())
        sections = e.sections()
        self.assertIsNone(e.backward_graph)
        self.assertEqual(e.saved, [])
        self.assertTrue(sections["forward"].startswith("forward graph (inference, no backward):\n"))
        self.assertEqual(sections["backward"], "backward graph: none (no input requires grad)")
        self.assertEqual(sections["saved"], "saved for backward: nothing (no backward)")
        self.assertIn("returns: sin = output 0, mul = base of output 1, add = new value of x\n", str(e))

    def test_under_no_grad_the_report_says_grad_mode_is_off(self):
        with torch.no_grad():
            e = aotgrad.explain(step, *_inputs())
        self.assertEqual(e.sections()["backward"], "backward graph: none (grad mode is off)")

    def test_keyword_and_nested_inputs_are_named_as_the_caller_passed_them(self):
        def f(pair, *rest, scale):
            return pair[0] * pair[1] * rest[0] * scale

        t = torch.randn(2)
        e = aotgrad.explain(f, (t, torch.randn(2)), torch.randn(2), scale=torch.randn(2, requires_grad=True))
        self.assertEqual([i.name for i in e.inputs], ["pair[0]", "pair[1]", "rest[0]", "scale"])

    def test_an_input_passed_twice_is_one_placeholder_with_both_names(self):
        t = torch.randn(3, requires_grad=True)
        e = aotgrad.explain(lambda a, b: a * b, t, t)
        self.assertEqual([(i.placeholder, i.name) for i in e.inputs], [("primals_1", "a = b")])


class ExplainModule(TestCase):
    def test_parameters_and_buffers_are_named_and_running_stats_written_back(self):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
        e = aotgrad.explain(m, torch.randn(5, 3))
        self.assertExpectedInline(e.sections()["header"], """\
aotgrad.explain: Sequential.forward
inputs:
  primals_1  0.weight               f32[2, 3]  parameter, requires grad
  primals_2  0.bias                 f32[2]     parameter, requires grad
  primals_3  1.weight               f32[2]     parameter, requires grad
  primals_4  1.bias                 f32[2]     parameter, requires grad
  primals_5  1.running_mean         f32[2]     buffer, mutated
  primals_6  1.running_var          f32[2]     buffer, mutated
  primals_7  1.num_batches_tracked  i64[]      buffer, mutated
  primals_8  input                  f32[5, 3]""")
        self.assertExpectedInline(e.sections()["mutations"], """\
input mutations: 3
  1.running_mean         1.running_mean.data.copy_(getitem) (no version bump, as eager wrote it through .data)
  1.running_var          1.running_var.data.copy_(getitem_1) (no version bump, as eager wrote it through .data)
  1.num_batches_tracked  1.num_batches_tracked.copy_(add) under no_grad (autograd does not see it)""")
        self.assertIn("# returns: mm = grad of 0.weight, sum_1 = grad of 0.bias", e.backward_graph)
        self.assertEqual(m[1].num_batches_tracked.item(), 0)  # nothing ran


# -- `aotgrad explain SCRIPT.py [args]` ------------------------------------------------

EXPLAINED_SCRIPT = '''
import sys
import torch

model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())


@torch.compile(backend="aot_eager")
def step(x):
    return model(x).sum()


step(torch.randn(2, 3)).backward()
print("script arguments:", sys.argv[1:])
sys.exit(int(sys.argv[1]))
'''


def test_command_explains_each_compile_of_a_script_under_aotgrad(tmp_path, capsys):
    import importlib

    script = tmp_path / "train.py"
    script.write_text(EXPLAINED_SCRIPT)
    torch._dynamo.reset()
    status = importlib.import_module("aotgrad.tooling.explain").main([str(script), "3"])
    out = capsys.readouterr().out
    assert status == 3  # the script's own
    assert out.startswith("script arguments: ['3']\n\n== compile 1 of 1: step at ")
    assert "  primals_1  model.0.weight  f32[4, 3]  parameter, requires grad\n" in out
    assert "  primals_3  x               f32[2, 3]\n" in out
    assert "# returns: mm = grad of model.0.weight, sum_2 = grad of model.0.bias" in out
    assert "\nsaved for backward: " in out and "\ncompile time: " in out
