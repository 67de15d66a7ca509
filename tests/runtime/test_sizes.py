"""runtime/sizes.py: symbolic sizes in the runtime's plan, made concrete per call."""
import math

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from aotgrad.runtime.sizes import SymbolSources, concrete


def test_a_float_symbol_keeps_its_fraction_when_made_concrete():
    """A size computed from a float read at run time (`x.item()`, a float argument under
    torch.compile): floor(2 * 1.75) is 3; the float read as an integer would give 2."""
    shape_env = ShapeEnv()
    FakeTensorMode(shape_env=shape_env)
    scale = shape_env.create_unbacked_symfloat()
    size = math.floor(scale * 2)
    sources = SymbolSources({}, {scale.node.expr: (0, "value", 0)})
    for value in (1.75, 3.25, 2.0):
        env = sources.bind([], [torch.tensor(value, dtype=torch.float64)])
        assert concrete((size, scale * 0.5), env) == (math.floor(value * 2), value * 0.5)
