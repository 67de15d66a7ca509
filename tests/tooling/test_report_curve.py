"""report_curve.py: the memory-vs-recompute curve's axes carry units, each in the unit its
largest value reads best in, and the figure uses them."""
import pytest

from aotgrad.tooling.report_curve import Curve, axis_labels, byte_unit

pytest.importorskip("matplotlib", reason="the report draws its curves with matplotlib (pip install matplotlib)")


def test_byte_unit_is_the_binary_unit_of_the_largest_value():
    assert byte_unit(0) == ("bytes", 1)
    assert byte_unit(1023) == ("bytes", 1)
    assert byte_unit(1024) == ("KiB", 1024)
    assert byte_unit(5 * 2 ** 20) == ("MiB", 2 ** 20)
    assert byte_unit(3 * 2 ** 30) == ("GiB", 2 ** 30)


def test_each_axis_has_its_own_unit():
    curve = Curve(hull=[(600 * 2 ** 10, 0), (100 * 2 ** 10, 3 * 2 ** 20)], budgets=[(0.5, 300 * 2 ** 10, 2 ** 20, 0)],
                  chosen=(2 * 2 ** 20, 0, 0))
    x_label, y_label, x_scale, y_scale = axis_labels(curve)
    assert (x_label, x_scale) == ("saved for backward (MiB)", 2 ** 20)  # the star's 2 MiB is the largest
    assert (y_label, y_scale) == ("recompute cost (MiB moved;\nFLOPs count as FLOPs / 100)", 2 ** 20)


def test_figure_plots_in_the_labelled_units():
    from aotgrad.tooling.report_curve import curve_figure

    curve = Curve(hull=[(4096, 0), (1024, 8192)], budgets=[(0.0, 1024, 8192, 0)], chosen=(4096, 0, 0))
    ax = curve_figure(curve, "graph 1: f").axes[0]
    assert ax.get_xlabel() == "saved for backward (KiB)"
    assert ax.get_ylabel() == "recompute cost (KiB moved;\nFLOPs count as FLOPs / 100)"
    xs, ys = ax.lines[0].get_data()
    assert list(xs) == [1.0, 4.0] and list(ys) == [8.0, 0.0]  # the hull, in KiB
