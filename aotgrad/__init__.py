"""aotgrad: ahead-of-time autograd for PyTorch training steps.

Tour: one function through every stage.

    def f(x, w):                    # x: f32[4, 3], w: f32[3] (requires grad)
        return (x * w).sin()

    g = aotgrad.aot_function(f, aotgrad.nop)
    y = g(x, w); y.sum().backward()

1. trace/ (capture): f runs once on fake tensors under a TorchDispatchMode that
   records each aten op.
2. analysis.py: what each input and output is (mutated? a view of an input?), which
   outputs get an incoming gradient.
3. joint.py: the autograd engine runs the backward under the same recorder, so the
   forward's and the backward's ops land in one graph, the joint graph:
       joint(primals_1, primals_2, tangents_1):
           mul = aten.mul(primals_1, primals_2); sin = aten.sin(mul)
           cos = aten.cos(mul); mul_1 = aten.mul(tangents_1, cos)
           mul_2 = aten.mul(mul_1, primals_1); sum_1 = aten.sum(mul_2, [0], True) ...
           return (sin, view)
4. functionalize/: in-place ops and writes through views become pure ops.
5. partition/: split the joint graph; the forward returns (sin, primals_1, mul),
   the backward takes (primals_1, mul, tangents_1).
6. the graph compiler (aotgrad.nop, or Inductor) compiles both graphs.
7. runtime/: an autograd.Function runs them; an epilogue writes back mutated
   inputs and rebuilds outputs that alias inputs. Each part of the run is a list of
   steps, interpreted or written out as straight-line Python (runtime/lower.py).
persistence/ keeps what steps 1-5 made on disk (config.cache_dir): a second process
starts at step 6.

Glossary:
  primal   an input of the traced function (primals_1 ...)
  tangent  the incoming gradient of a forward output (tangents_1 ...)
  saved    a forward value the backward reads (returned by fw, passed to bw)
  alias    a tensor sharing storage with another (a view)
  base     the tensor a view was taken from; the root of a storage
"""
from aotgrad import config
from aotgrad.api import aot_function, aot_module, aot_module_simplified, nop
from aotgrad.front.export import aot_export_joint
from aotgrad.partition import default_partition, min_cut_rematerialization_partition
from aotgrad import testing
from aotgrad.backends import register as _register_backends
from aotgrad import compiled_autograd
from aotgrad import distributed
from aotgrad.tooling.explain import explain
from aotgrad.trace.hops import trace_wrapped
from aotgrad.observe.counting import counters  # a defaultdict of Counters, like torch._dynamo.utils.counters

__version__ = "0.1.0"

_register_backends()

__all__ = [
    "aot_export_joint", "aot_function", "aot_module", "aot_module_simplified", "compiled_autograd", "config",
    "counters", "distributed", "explain",
    "default_partition", "min_cut_rematerialization_partition", "nop", "testing", "trace_wrapped",
]
