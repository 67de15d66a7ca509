"""Functional rules are derived from the schemas: every in-place, out= and mutable aten op that
has a functional twin gets a rule, with the right output for each written argument."""
import pytest
import torch

from aotgrad import compat
from aotgrad.errors import UnsupportedError
from aotgrad.functionalize.rules import (
    METADATA_MUTATIONS,
    RESIZES,
    mutation_rule,
    written_arguments,
)

aten = torch.ops.aten

# In-place overloads that write only `self` and have no functional twin, and why that is fine.
NO_FUNCTIONAL_FORM = {
    # CompositeImplicitAutograd: decomposed before dispatch, so the tracer never records them
    "aten.fill_diagonal_.default", "aten.dropout_.default", "aten.alpha_dropout_.default",
    "aten.feature_dropout_.default", "aten.feature_alpha_dropout_.default",
    "aten.requires_grad_.default",
    # named-tensor overloads, CompositeImplicitAutograd too; torch 2.11 has them, 2.13 no more
    *(str(op) for op in compat.aten_overloads("rename_.default", "squeeze_.dimname")),
    # TorchScript-only overloads (lists, Python scalars)
    "aten.add_.t", "aten.copy_.Tensor", "aten.copy_.int", "aten.copy_.float",
    "aten._index_put_impl_.hacked_twin",
    # replace the storage: rules.py raises its own UnsupportedError
    "aten.set_.default", "aten.set_.source_Tensor", "aten.set_.source_Storage",
    "aten.set_.source_Storage_storage_offset", "aten.set_.source_Tensor_storage_offset",
    *(str(op) for op in compat.STORAGE_REPLACING_OPS),  # torch 2.14's shallow_copy_data_
    # internal engines (SobolEngine, CUDA memory-efficient attention)
    "aten._sobol_engine_initialize_state_.default", "aten._sobol_engine_scramble_.default",
    "aten._sobol_engine_ff_.default", "aten._fill_mem_eff_dropout_mask_.default",
}


def _aten_ops():
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::"):
            try:
                yield getattr(getattr(aten, schema.name[6:]), schema.overload_name or "default")
            except (AttributeError, RuntimeError):
                continue


def test_every_in_place_overload_with_a_functional_twin_has_a_rule():
    missing = []
    for op in _aten_ops():
        name = op._schema.name
        if (not name.endswith("_") or name.endswith("__") or written_arguments(op) != ["self"]
                or op in METADATA_MUTATIONS or op in RESIZES):
            continue
        try:
            mutation_rule(op)
        except UnsupportedError:
            missing.append(str(op))
    assert sorted(missing) == sorted(NO_FUNCTIONAL_FORM)


@pytest.mark.parametrize("op, functional", [
    (aten.pow_.Scalar, aten.pow.Tensor_Scalar),         # overload names differ
    (aten.pow_.Tensor, aten.pow.Tensor_Tensor),
    (aten.float_power_.Scalar, aten.float_power.Tensor_Scalar),
    (aten.floor_divide_.Tensor, aten.floor_divide.default),
    (aten.ldexp_.default, aten.ldexp.Tensor),
    (aten.polygamma_.default, aten.polygamma.default),  # argument order differs: (n, self)
    (aten.__iand__.Tensor, aten.__and__.Tensor),
    (aten.bernoulli_.float, aten.bernoulli.p),
    (aten.normal_.default, aten.normal_functional.default),
])
def test_in_place_op_writes_the_functional_result_into_self(op, functional):
    rule = mutation_rule(op)
    assert rule.functional is functional
    assert rule.mutated == (("self", 0),) and rule.returns == ("self",)


def test_mutable_op_returns_its_result_and_writes_its_functional_twins_extra_output():
    rule = mutation_rule(aten.rrelu_with_noise.default)
    assert rule.functional is aten.rrelu_with_noise_functional.default
    assert rule.mutated == (("noise", 1),) and rule.returns == (0,)
    in_place = mutation_rule(aten.rrelu_with_noise_.default)
    assert in_place.mutated == (("self", 0), ("noise", 1)) and in_place.returns == ("self",)
    batch_norm = mutation_rule(aten._native_batch_norm_legit.default)
    assert batch_norm.functional is aten._native_batch_norm_legit_functional.default
    assert batch_norm.mutated == (("running_mean", 3), ("running_var", 4)) and batch_norm.returns == (0, 1, 2)


def test_out_variants_drop_their_out_arguments():
    add = mutation_rule(aten.add.out)
    assert add.functional is aten.add.Tensor and add.drop_args == ("out",) and add.mutated == (("out", 0),)
    max_dim = mutation_rule(aten.max.dim_max)
    assert max_dim.functional is aten.max.dim
    assert max_dim.mutated == (("max", 0), ("max_values", 1)) and max_dim.returns == ("max", "max_values")
    foreach = mutation_rule(aten._foreach_add.Scalar_out)  # returns nothing
    assert foreach.functional is aten._foreach_add.Scalar and foreach.mutated == (("out", 0),)
    adam = mutation_rule(aten._fused_adam_.default)
    assert adam.functional is aten._fused_adam.default
    assert [name for name, _ in adam.mutated] == ["self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"]


def test_factory_out_variant_takes_dtype_and_device_from_out():
    rule = mutation_rule(aten.zeros.out)
    assert rule.functional is aten.zeros.default and rule.options_from == "out"
    assert mutation_rule(aten.arange.start_out).functional is aten.arange.start_step


def test_view_ops_are_never_a_functional_form():
    # transpose_ changes metadata only; transpose.int is a view, not a new value of self
    with pytest.raises(UnsupportedError):
        mutation_rule(aten.transpose_.default)


def test_set_keeps_its_clear_error():
    with pytest.raises(UnsupportedError, match="replaces a tensor's storage"):
        mutation_rule(aten.set_.source_Tensor)
