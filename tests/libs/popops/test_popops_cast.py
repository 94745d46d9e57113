"""``popops.cast`` between every pair of Poplar types against a per-element Python oracle
of the documented rules, a destination tensor, the same-type copy, errors and the
estimator."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import GraphError, TensorError
from tremula.libs.popops.cast import cast


def _helpers():
    name = "tremula_tests_popops_elementwise_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("test_popops_elementwise_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
TYPES = [
    poplar.FLOAT,
    poplar.HALF,
    poplar.INT,
    poplar.UNSIGNED_INT,
    poplar.SHORT,
    poplar.UNSIGNED_SHORT,
    poplar.CHAR,
    poplar.UNSIGNED_CHAR,
    poplar.BOOL,
    poplar.LONGLONG,
]
FLOATS = [0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 255.9, 300.0, -129.0, 65504.0, 7e4, 3e9, -3e9,
          1e20, -1e20, math.inf, -math.inf, math.nan]  # fmt: skip
INTS = [0, 1, -1, 127, 128, -129, 255, 256, 32767, 40000, -40000, 65535, 2**31 - 1, -(2**31)]


def _source(t: poplar.Type) -> np.ndarray:
    if t is poplar.BOOL:
        return np.array([True, False, True])
    if t.is_float:
        with np.errstate(over="ignore"):
            return np.array(FLOATS, dtype=t.numpy)
    info = np.iinfo(t.numpy)
    return np.array([v for v in INTS if info.min <= v <= info.max], dtype=t.numpy)


def _one(v, src: poplar.Type, dst: poplar.Type):
    """The documented conversion of one value."""
    if dst is poplar.BOOL:
        return bool(v != 0) or bool(v != v)
    if dst.numpy.kind in "iu":
        info = np.iinfo(dst.numpy)
        if src.is_float:
            f = float(v)
            if math.isnan(f):
                return 0
            if math.isinf(f):
                return int(info.max) if f > 0 else int(info.min)
            return min(max(math.trunc(f), int(info.min)), int(info.max))
        bits = 8 * dst.size
        w = int(v) % 2**bits
        return w - 2**bits if dst.numpy.kind == "i" and w > info.max else w
    with np.errstate(over="ignore"):
        return dst.numpy.type(float(v) if src.is_float else int(v))


@pytest.mark.parametrize("src", TYPES, ids=lambda t: t.name.replace(" ", "_"))
def test_cast_to_every_type_follows_the_rules(src):
    rig = H.Rig()
    data = _source(src)
    x = rig.input(data, src)
    outs = [cast(rig.graph, x, dst, rig.prog) for dst in TYPES]
    values, _ = rig.run(outs)
    for dst, got in zip(TYPES, values):
        want = np.array([_one(v, src, dst) for v in data], dtype=dst.numpy)
        assert got.dtype == dst.numpy
        np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst}")


def test_cast_into_a_destination_tensor_and_to_the_same_type():
    rig = H.Rig()
    x = rig.input(np.array([[1.9, -1.9], [3.5, 0.2]], np.float32))
    dst = rig.graph.add_variable(poplar.SHORT, (2, 2), "dst", mapping="linear")
    assert cast(rig.graph, x, dst, rig.prog) is dst
    same = cast(rig.graph, x, "float", rig.prog)
    (gd, gs), engine = rig.run([dst, same])
    np.testing.assert_array_equal(gd, [[1, -1], [3, 0]])
    np.testing.assert_array_equal(gs, np.array([[1.9, -1.9], [3.5, 0.2]], np.float32))
    assert "popops::Cast1D<float,short>" in engine.get_graph_profile()["vertexTypes"]["names"]


def test_cast_output_is_mapped_like_the_input():
    rig = H.Rig()
    x = rig.graph.add_variable(poplar.FLOAT, (8,), "x")
    rig.graph.set_tile_mapping(x, np.array([3, 3, 3, 3, 2, 2, 2, 2]))
    out = cast(rig.graph, x, poplar.HALF, rig.prog)
    np.testing.assert_array_equal(rig.graph.tiles_of(out), rig.graph.tiles_of(x))


def test_cast_errors_leave_the_graph_unchanged():
    rig = H.Rig()
    g = rig.graph
    x = rig.input(np.zeros(4, np.float32))
    before = g.state.generation
    with pytest.raises(TensorError, match=r"\[3\]"):
        cast(g, x, g.add_variable(poplar.INT, (3,), "d3", mapping="linear"), rig.prog)
    before = g.state.generation
    with pytest.raises(GraphError, match="unknown element type"):
        cast(g, x, "quad", rig.prog)
    with pytest.raises(GraphError, match="source"):
        cast(g, np.zeros(4), poplar.INT, rig.prog)
    assert g.state.generation == before


@pytest.mark.parametrize(
    "src, dst, formula",
    [
        (poplar.FLOAT, poplar.HALF, lambda n: 26 + max(n // 4 - 1, 0) * 2 + 2 * (n % 4)),
        (poplar.INT, poplar.FLOAT, lambda n: 26 + max(n // 2 - 1, 0) * 2 + 2 * (n % 2)),
        (poplar.HALF, poplar.UNSIGNED_CHAR, lambda n: 26 + max(n - 1, 0) * 3),
        (poplar.FLOAT, poplar.LONGLONG, lambda n: 20 + 3 + 5 * n),
    ],
)
def test_cast_estimates(src, dst, formula):
    rig = H.Rig()
    x = rig.input(np.ones(2), src, mapping="0")
    cast(rig.graph, x, dst, rig.prog, name="c")
    _, engine = rig.run([])
    (cs,) = [n for n in engine.get_graph_profile()["computeSets"]["names"] if n.startswith("c/")]
    by_tile, by_type = H.cs_estimates(engine, cs)
    assert list(by_type.values()) == [formula(2)]
    assert by_tile[0] == 6 * formula(2) + rig.graph.target.compute_set_launch_cycles
