"""``popops.fill`` / ``zero``: several types, views, errors and the Fill estimator."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import GraphError, TensorError
from tremula.libs.popops.fill import fill, zero


def _helpers():
    name = "tremula_tests_popops_elementwise_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("test_popops_elementwise_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()


@pytest.mark.parametrize(
    "dtype, value",
    [
        (poplar.FLOAT, 2.5),
        (poplar.HALF, -0.1),
        (poplar.INT, -7),
        (poplar.UNSIGNED_INT, 2**32 - 1),
        (poplar.UNSIGNED_CHAR, 255),
        (poplar.BOOL, True),
        (poplar.FLOAT, float("nan")),
    ],
    ids=str,
)
def test_fill_sets_every_element(dtype, value):
    rig = H.Rig()
    x = rig.input(np.zeros((3, 41)), dtype)
    assert fill(rig.graph, x, value, rig.prog) is x
    (got,), _ = rig.run([x])
    np.testing.assert_array_equal(got, np.full((3, 41), value, dtype=dtype.numpy))


def test_zero_and_fill_of_a_view():
    rig = H.Rig()
    x = rig.input(np.arange(20, dtype=np.float32).reshape(4, 5))
    y = rig.input(np.ones(7, np.int32))
    fill(rig.graph, x[1:3, ::2], -1, rig.prog)
    zero(rig.graph, y, rig.prog)
    (gx, gy), _ = rig.run([x, y])
    want = np.arange(20, dtype=np.float32).reshape(4, 5)
    want[1:3, ::2] = -1
    np.testing.assert_array_equal(gx, want)
    np.testing.assert_array_equal(gy, np.zeros(7))


def test_fill_errors_leave_the_graph_unchanged():
    g = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)
    i = g.add_variable(poplar.INT, (4,), "i", mapping="linear")
    u = g.add_variable(poplar.FLOAT, (4,), "u")
    before = g.state.generation
    with pytest.raises(GraphError, match=r"2\.5"):
        fill(g, i, 2.5, poplar.Sequence())
    with pytest.raises(GraphError, match="number"):
        fill(g, i, [1, 2], poplar.Sequence())
    with pytest.raises(TensorError, match="aliased"):
        fill(g, i[:1].broadcast(3, 0), 1, poplar.Sequence())
    with pytest.raises(GraphError, match="not mapped"):
        zero(g, u, poplar.Sequence())
    assert g.state.generation == before


@pytest.mark.parametrize(
    "dtype, n, formula",
    [
        (poplar.FLOAT, 2, lambda n: 16 + -(-4 * n // 8)),
        (poplar.HALF, 4, lambda n: 16 + -(-2 * n // 8)),
        (poplar.UNSIGNED_CHAR, 8, lambda n: int(np.ceil(28 + n / 4))),
        (poplar.LONGLONG, 1, lambda n: 5 + n),
    ],
)
def test_fill_estimates(dtype, n, formula):
    rig = H.Rig()
    x = rig.input(np.zeros(n), dtype, mapping="0")
    fill(rig.graph, x, 1, rig.prog, name="f")
    _, engine = rig.run([])
    by_tile, by_type = H.cs_estimates(engine, "f/Fill")
    assert list(by_type.values()) == [formula(n)]
    assert by_tile[0] == 6 * formula(n) + rig.graph.target.compute_set_launch_cycles


def test_fill_estimate_for_long_byte_vectors():
    rig = H.Rig()
    x = rig.input(np.zeros(6 * 128), poplar.UNSIGNED_CHAR, mapping="0")
    fill(rig.graph, x, 1, rig.prog, name="f")
    _, engine = rig.run([])
    _, by_type = H.cs_estimates(engine, "f/Fill")
    assert list(by_type.values()) == [6 * (39 + 128 // 8)]


def test_later_runs_fill_through_the_prepared_assignment():
    """Replayed runs fill through the codelet's prepared assignment: a whole tensor (a view
    of device memory), a strided view (its addresses) and one compute set whose vertices
    hold different values; the host overwrites the tensors between runs."""
    rig = H.Rig()
    x = rig.input(np.zeros((4, 6), np.float32))
    y = rig.input(np.zeros(9, np.int32))
    z = rig.input(np.zeros(8, np.float32))
    fill(rig.graph, x[:, 1::2], 3.5, rig.prog)
    fill(rig.graph, y, 7, rig.prog)
    cs = rig.graph.add_compute_set("two values")
    rig.graph.add_vertex(cs, "popops::Fill<float>", {"out": z[:3], "value": 1.5}, 0)
    rig.graph.add_vertex(cs, "popops::Fill<float>", {"out": z[5:], "value": -4.0}, 1)
    rig.prog.add(poplar.Execute(cs))
    (gx, gy, gz), engine = rig.run([x, y, z])
    want_x = np.zeros((4, 6), np.float32)
    want_x[:, 1::2] = 3.5
    want_z = np.array([1.5, 1.5, 1.5, 0, 0, -4, -4, -4], np.float32)
    for _ in range(3):  # interpreted above, replayed here
        np.testing.assert_array_equal(gx, want_x)
        np.testing.assert_array_equal(gy, np.full(9, 7, np.int32))
        np.testing.assert_array_equal(gz, want_z)
        engine.write_tensor("in0", np.zeros((4, 6), np.float32))
        engine.write_tensor("in1", np.zeros(9, np.int32))
        engine.write_tensor("in2", np.zeros(8, np.float32))
        engine.run()
        gx, gy, gz = (engine.read_tensor(f"out{i}") for i in range(3))
