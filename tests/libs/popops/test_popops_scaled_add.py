"""``scaled_add_to``, ``scaled_subtract_from`` and ``a_x_plus_b_y``: number and tensor
scales, float / half / integer data, half data with float scales, overlapping operands,
errors and the ScaledAdd estimator."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import GraphError, TensorError
from tremula.libs.popops.scaled_add import a_x_plus_b_y, scaled_add_to, scaled_subtract_from


def _helpers():
    name = "tremula_tests_popops_elementwise_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("test_popops_elementwise_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
RNG = np.random.default_rng(3)
F32 = np.float32


def _ref(a, b, sa, sb, dtype):
    """sa * a + sb * b in float32 rounded once (floats) or wrapping (integers)."""
    if dtype.numpy.kind == "f":
        r = F32(sa) * a.astype(F32) + F32(sb) * b.astype(F32)
        return r.astype(dtype.numpy)
    with np.errstate(over="ignore"):
        return (a.astype(np.int64) * sa + b.astype(np.int64) * sb).astype(dtype.numpy)


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF, poplar.INT, poplar.UNSIGNED_SHORT])
def test_number_scales(dtype):
    rig = H.Rig()
    if dtype.is_float:
        a, b = RNG.standard_normal((3, 29)), RNG.standard_normal((3, 29))
    else:
        a, b = RNG.integers(0, 1000, (3, 29)), RNG.integers(0, 1000, (3, 29))
    a, b = a.astype(dtype.numpy), b.astype(dtype.numpy)
    ta, tb = rig.input(a), rig.input(b)
    tc, td = rig.input(a), rig.input(a)
    s = 0.75 if dtype.is_float else 3
    assert scaled_add_to(rig.graph, ta, tb, s, rig.prog) is ta
    scaled_subtract_from(rig.graph, tc, tb, s, rig.prog)
    a_x_plus_b_y(rig.graph, td, 2, tb, s, rig.prog)
    (ga, gc, gd), _ = rig.run([ta, tc, td])
    np.testing.assert_array_equal(ga, _ref(a, b, 1, s, dtype))
    np.testing.assert_array_equal(gc, _ref(a, b, 1, -s, dtype))
    np.testing.assert_array_equal(gd, _ref(a, b, 2, s, dtype))


def test_tensor_scales_and_half_data_with_float_scales():
    rig = H.Rig()
    a = RNG.standard_normal(50).astype(np.float16)
    b = RNG.standard_normal(50).astype(np.float16)
    ta, tb, tc, td = rig.input(a), rig.input(b), rig.input(a), rig.input(a)
    s = rig.input(np.array([0.1], F32), mapping="2")
    h = rig.input(np.array([1.5], np.float16), mapping="1")
    scaled_add_to(rig.graph, ta, tb, s, rig.prog)
    scaled_subtract_from(rig.graph, tc, tb, h, rig.prog)
    a_x_plus_b_y(rig.graph, td, s, tb, 0.3, rig.prog)  # number + tensor: a constant scale
    (ga, gc, gd), engine = rig.run([ta, tc, td])
    np.testing.assert_array_equal(ga, _ref(a, b, 1, F32(0.1), poplar.HALF))
    np.testing.assert_array_equal(gc, _ref(a, b, 1, -1.5, poplar.HALF))
    np.testing.assert_array_equal(gd, _ref(a, b, F32(0.1), F32(0.3), poplar.HALF))
    names = engine.get_graph_profile()["vertexTypes"]["names"]
    assert "popops::ScaledAdd1DTensor<half,float>" in names
    assert "popops::aXPlusbY1DTensor<half,float>" in names


def test_half_data_keeps_an_inexact_number_scale_in_float():
    rig = H.Rig()
    a = np.ones(8, np.float16) * 1000
    b = np.ones(8, np.float16) * 1000
    ta, tb = rig.input(a), rig.input(b)
    scaled_add_to(rig.graph, ta, tb, 0.1, rig.prog)
    (got,), engine = rig.run([ta])
    np.testing.assert_array_equal(got, _ref(a, b, 1, 0.1, poplar.HALF))
    assert "popops::ScaledAdd1D<half,float>" in engine.get_graph_profile()["vertexTypes"]["names"]


def test_deltas_overlapping_the_data_are_read_before_the_write():
    rig = H.Rig()
    a = np.arange(10, dtype=F32)
    ta = rig.input(a)
    scaled_add_to(rig.graph, ta, ta, 2.0, rig.prog)
    scaled_add_to(rig.graph, ta[1:], ta[:-1], 1.0, rig.prog)
    (got,), _ = rig.run([ta])
    want = 3 * a
    want[1:] = want[1:] + want[:-1]
    np.testing.assert_array_equal(got, want)


def test_scale_tensors_that_are_elements_of_the_data_are_read_before_the_write():
    """Was: a scale tensor viewing an element of ``a`` was read by the compute set that
    writes ``a``, and the graph failed verification."""
    rig = H.Rig()
    a = np.arange(1, 11, dtype=F32)
    b = np.full(10, 2.0, F32)
    ta, tb, tc = rig.input(a), rig.input(b), rig.input(a)
    scaled_add_to(rig.graph, ta, tb, ta[3], rig.prog)  # a += a[3] * b
    a_x_plus_b_y(rig.graph, tc, tc[0], tb, tc[9], rig.prog)  # c = c[0] * c + c[9] * b
    (ga, gc), _ = rig.run([ta, tc])
    np.testing.assert_array_equal(ga, a + a[3] * b)
    np.testing.assert_array_equal(gc, a[0] * a + a[9] * b)


def test_scaled_add_errors_leave_the_graph_unchanged():
    g = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)
    a = g.add_variable(poplar.FLOAT, (4,), "a", mapping="linear")
    b = g.add_variable(poplar.FLOAT, (5,), "b", mapping="linear")
    h = g.add_variable(poplar.HALF, (4,), "h", mapping="linear")
    i = g.add_variable(poplar.INT, (4,), "i", mapping="linear")
    two = g.add_variable(poplar.FLOAT, (2,), "two", mapping="linear")
    p = poplar.Sequence()
    before = g.state.generation
    with pytest.raises(TensorError, match=r"\[4\].*\[5\]"):
        scaled_add_to(g, a, b, 1.0, p)
    with pytest.raises(GraphError, match="half"):
        scaled_add_to(g, a, h, 1.0, p)
    with pytest.raises(GraphError, match="one element"):
        scaled_add_to(g, a, a, two, p)
    with pytest.raises(GraphError, match="one element of type int"):
        scaled_add_to(g, i, i, g.add_variable(poplar.FLOAT, (1,), "s"), p)
    before = g.state.generation
    with pytest.raises(GraphError, match=r"0\.5"):
        scaled_subtract_from(g, i, i, 0.5, p)
    with pytest.raises(GraphError, match="optimise"):
        scaled_add_to(g, a, a, 1.0, p, options={"optimise": "yes"})
    assert g.state.generation == before and not p.programs


@pytest.mark.parametrize(
    "dtype, scale, formula",
    [
        (poplar.FLOAT, 2.0, lambda n: 25 + 3 * max(n // 2 - 1, 0) + 4 * (n % 2)),
        (poplar.HALF, 0.1, lambda n: 25 + 5 * max(n // 4 - 1, 0) + 4 * (n % 4)),
        (poplar.INT, 3, lambda n: 53 + 26 * (n // 3) + 9 * (n % 3)),
    ],
)
def test_scaled_add_estimates(dtype, scale, formula):
    rig = H.Rig()
    n = 6 * 7
    a = rig.input(np.ones(n), dtype, mapping="0")
    b = rig.input(np.ones(n), dtype, mapping="0")
    scaled_add_to(rig.graph, a, b, scale, rig.prog, name="s")
    _, engine = rig.run([])
    by_tile, by_type = H.cs_estimates(engine, "s/ScaledAdd1D")
    # 42 elements on one tile: 6 workers of 7 (a grain of one vector rounds them)
    from tremula.libs import util

    lengths = util.partition(rig.graph, a, rig.graph.target.vector_width(dtype.size)).lengths
    per_vertex = [formula(int(k)) for k in lengths]
    assert list(by_type.values()) == [sum(per_vertex)]
    assert by_tile[0] == 6 * max(per_vertex) + rig.graph.target.compute_set_launch_cycles
