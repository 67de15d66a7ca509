"""The oracle charges aotgrad only with what it changes: where torch.compile's front end
alone (backend="eager") differs from eager the same way, the compile backend's difference is
reported as dynamo's, not as an aotgrad mismatch."""
import torch

from tests.fuzz.oracle import check_program


def test_dynamo_returning_one_data_tensor_twice_is_not_charged_to_aotgrad():
    def f(a):
        v0 = a.data
        v1 = a.data
        return (v1, v0)

    def make_inputs():
        torch.manual_seed(0)
        l0 = torch.randn(())
        return [l0], [l0]
    report = check_program(f, make_inputs)
    assert any("front end differs from eager" in e for e in report.clear_errors.values()), report
