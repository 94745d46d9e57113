"""``map`` and ``map_in_place``: broadcasting, odd sizes, fusion into one compute set,
constants, in-place aliasing, output mapping, zero-copy gathers, the unfused option,
replicas, and random expressions against a NumPy evaluation (hypothesis)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula import poplar
from tremula.libs.popops import elementwise as ew
from tremula.libs.popops.expr import (
    BinaryOpType,
    Exp,
    Max,
    Relu,
    Sigmoid,
    Sqrt,
    Square,
    Tanh,
    _1,
    _2,
    _3,
    placeholders,
    substitute,
)


def _helpers():
    name = "tremula_tests_popops_elementwise_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("test_popops_elementwise_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
RNG = np.random.default_rng(7)


def _rand(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(
    "sa, sb",
    [((3, 1, 5), (4, 1)), ((7,), (1,)), ((2, 3), ()), ((1,), (5, 1)), ((1001,), (1001,))],
)
def test_binary_broadcasting_matches_numpy(sa, sb):
    rig = H.Rig()
    a, b = _rand(sa), _rand(sb)
    out = ew.sub(rig.graph, rig.input(a), rig.input(b), rig.prog)
    assert out.shape == np.broadcast_shapes(sa, sb)
    (got,), _ = rig.run([out])
    np.testing.assert_array_equal(got, a - b)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 25, 97])
def test_odd_sizes_fused_and_family(n):
    rig = H.Rig()
    a, b = _rand(n), _rand(n)
    ta, tb = rig.input(a), rig.input(b)
    f = ew.map(rig.graph, Tanh(_1) * _2 - 0.5, [ta, tb], rig.prog)
    m = ew.mul(rig.graph, ta, tb, rig.prog)
    (gf, gm), _ = rig.run([f, m])
    np.testing.assert_array_equal(gf, np.tanh(a) * b - np.float32(0.5))
    np.testing.assert_array_equal(gm, a * b)


def test_a_fused_expression_is_one_compute_set_of_one_vertex_type():
    rig = H.Rig(tiles=4)
    a, b, c = _rand((4, 30)), _rand((4, 30)), _rand(30)
    expr = Sigmoid(_1 * _2 + Sqrt(Square(_3) + 1)) - Exp(-_1)
    out = ew.map(rig.graph, expr, [rig.input(a), rig.input(b), rig.input(c)], rig.prog)
    (got,), engine = rig.run([out])
    gp = engine.get_graph_profile()
    cs = gp["computeSets"]
    mine = [i for i, n in enumerate(cs["names"]) if n.startswith("map/")]
    assert len(mine) == 1
    types = [gp["vertexTypes"]["names"][t] for t in cs["vertexTypes"][mine[0]]]
    assert len(types) == 1 and types[0].startswith("popops::Fused_")
    assert sum(cs["vertexCounts"][mine[0]]) <= 4 * 6  # at most one per worker per tile
    x = a * b + np.sqrt(c * c + np.float32(1))
    want = 1 / (1 + np.exp(-x.astype(np.float64))) - np.exp(-a.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_same_expression_reuses_one_generated_codelet():
    rig = H.Rig()
    x, y = rig.input(_rand(8)), rig.input(_rand(8))
    ew.map(rig.graph, Relu(_1 * _2 + 1), [x, y], rig.prog)
    ew.map(rig.graph, Max(_1 * _2 + 1, 0), [x, y], rig.prog)
    ew.map(rig.graph, Relu(_1 * _2 + 1), [y, x], rig.prog)
    names = {g.vertex_type.name for gs in rig.graph.state.vertex_groups for g in gs}
    assert len(names) == 2


def test_map_accepts_an_op_type():
    rig = H.Rig()
    a, b = _rand(9), _rand(9)
    out = ew.map(rig.graph, BinaryOpType.ATAN2, [rig.input(a), rig.input(b)], rig.prog)
    (got,), engine = rig.run([out])
    np.testing.assert_array_equal(got, np.arctan2(a, b))
    assert "popops::BinaryOp1D<ATAN2,float>" in engine.get_graph_profile()["vertexTypes"]["names"]


def test_scalar_operands_use_broadcast_scalar_vertices():
    rig = H.Rig()
    a = _rand((6, 10))
    s = np.array([2.5], np.float32)
    ta, ts = rig.input(a), rig.input(s, mapping="3")
    out = ew.mul(rig.graph, ta, ts, rig.prog)
    rev = ew.sub(rig.graph, ts, ta, rig.prog)  # scalar first: a fused vertex
    (gm, gr), engine = rig.run([out, rev])
    np.testing.assert_array_equal(gm, a * s)
    np.testing.assert_array_equal(gr, s - a)
    assert (
        "popops::BroadcastScalar1D<MULTIPLY,float>"
        in (engine.get_graph_profile()["vertexTypes"]["names"])
    )


def test_numbers_as_operands_of_named_functions():
    rig = H.Rig()
    a = _rand(10)
    ta = rig.input(a)
    outs = [
        ew.add(rig.graph, ta, 1.5, rig.prog),
        ew.sub(rig.graph, 1, ta, rig.prog),
        ew.clamp(rig.graph, ta, -0.5, 0.5, rig.prog),
        ew.pow(rig.graph, 2.0, ta, rig.prog),
    ]
    (g1, g2, g3, g4), _ = rig.run(outs)
    np.testing.assert_array_equal(g1, a + np.float32(1.5))
    np.testing.assert_array_equal(g2, np.float32(1) - a)
    np.testing.assert_array_equal(g3, np.clip(a, -0.5, 0.5))
    np.testing.assert_array_equal(g4, np.power(np.float32(2), a))


def test_output_is_mapped_like_the_first_full_shaped_input_else_linearly():
    rig = H.Rig(tiles=4)
    g = rig.graph
    a = g.add_variable(poplar.FLOAT, (12,), "a")
    g.set_tile_mapping(a, np.array([3] * 6 + [1] * 6))
    b = g.add_variable(poplar.FLOAT, (1,), "b")
    g.set_tile_mapping(b, 0)
    out = ew.add(g, b, a, rig.prog)
    np.testing.assert_array_equal(g.tiles_of(out), g.tiles_of(a))
    bcast = ew.add(g, a.reshape((12, 1)), a.reshape((1, 12)), rig.prog)
    assert set(np.unique(g.tiles_of(bcast))) == {0, 1, 2, 3}  # linear over the 4 tiles


def test_in_place_with_broadcast_operand_and_unused_target():
    rig = H.Rig()
    a, b = _rand((3, 8)), _rand(8)
    ta, tb = rig.input(a), rig.input(b)
    assert ew.map_in_place(rig.graph, _1 * _2 + _2, [ta, tb], rig.prog) is ta
    tc = rig.input(np.zeros((3, 8), np.float32))
    ew.map_in_place(rig.graph, Exp(_2), [tc, ta], rig.prog)  # _1 only written
    (ga, gc), _ = rig.run([ta, tc])
    want = a * b + b
    np.testing.assert_array_equal(ga, want)
    np.testing.assert_array_equal(gc, np.exp(want))


def test_in_place_operands_aliasing_the_target():
    rig = H.Rig()
    a = np.arange(10, dtype=np.float32)
    ta = rig.input(a)
    ew.add_in_place(rig.graph, ta, ta, rig.prog)  # the same tensor: read through the target
    ew.map_in_place(rig.graph, _1 * 10 + _2, [ta[1:], ta[:-1]], rig.prog)  # shifted: copied
    ew.sub_in_place(rig.graph, ta[:5], ta[5:], rig.prog)  # disjoint views of one variable
    (got,), _ = rig.run([ta])
    want = a + a
    want[1:] = want[1:] * 10 + want[:-1]
    want[:5] = want[:5] - want[5:]
    np.testing.assert_array_equal(got, want)


def test_fields_of_linearly_mapped_tensors_are_zero_copy_views():
    rig = H.Rig(tiles=16)
    a, b = rig.input(_rand(5000)), rig.input(_rand(5000))
    ew.map(rig.graph, Relu(_1 * _2 + 1), [a, b], rig.prog)
    ew.add_in_place(rig.graph, a, b, rig.prog)
    _, engine = rig.run([])
    for ccs in engine.step_plan.compute_sets:
        for group in ccs.groups:
            assert all(gather.is_view for gather in group.gathers.values()), ccs.name


def test_unfused_option_runs_one_compute_set_per_op_with_the_same_result():
    rig = H.Rig()
    a, b = _rand(33), _rand(33)
    ta, tb = rig.input(a), rig.input(b)
    expr = Relu(_1 * _2 + 1) - _2
    fused = ew.map(rig.graph, expr, [ta, tb], rig.prog)
    before = len(rig.graph.state.compute_sets)
    opts = {"enableGenerateCodelet": "false"}
    unfused = ew.map(rig.graph, expr, [ta, tb], rig.prog, options=opts)
    assert len(rig.graph.state.compute_sets) - before == 4
    tc = rig.input(b)
    ew.map_in_place(rig.graph, expr, [tc, ta], rig.prog, options=opts)  # _1 is tc here
    (gf, gu, gc), _ = rig.run([fused, unfused, tc])
    np.testing.assert_array_equal(gf, gu)
    np.testing.assert_array_equal(gc, np.maximum(b * a + 1, 0) - a)


def test_empty_tensors_add_no_compute_set():
    rig = H.Rig()
    a = rig.graph.add_variable(poplar.FLOAT, (0, 3), "empty")
    before = len(rig.graph.state.compute_sets)
    out = ew.exp(rig.graph, a, rig.prog)
    assert out.shape == (0, 3) and len(rig.graph.state.compute_sets) == before


def test_replicated_graph_computes_per_replica():
    device = poplar.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device()
    graph = poplar.Graph(device.target, replication_factor=2)
    a = graph.add_variable(poplar.FLOAT, (20,), "a", mapping="linear")
    s = graph.add_variable(poplar.FLOAT, (1,), "s", mapping="linear")
    prog = poplar.Sequence()
    out = ew.map(graph, _1 * _2 + _3, [a, s, s], prog)
    graph.create_host_write("a", a)
    graph.create_host_write("s", s)
    graph.create_host_read("out", out)
    engine = poplar.Engine(graph, prog)
    engine.load(device)
    av = _rand((2, 20))
    sv = np.array([[2.0], [-3.0]], np.float32)
    engine.write_tensor("a", av)
    engine.write_tensor("s", sv)
    engine.run()
    H.validate(engine.get_graph_profile(), engine.get_execution_profile())
    np.testing.assert_array_equal(engine.read_tensor("out"), av * sv + sv)


# ---- random expressions against NumPy ----

_UNARY = {"neg": (lambda e: -e, np.negative), "tanh": (Tanh, np.tanh), "abs": (abs, np.abs)}
_BINARY = {
    "add": (lambda x, y: x + y, np.add),
    "mul": (lambda x, y: x * y, np.multiply),
    "sub": (lambda x, y: x - y, np.subtract),
    "max": (Max, np.maximum),
}


@st.composite
def _expressions(draw, depth=3):
    """(expression over _1 .. _3, the same as a NumPy function of three float32 arrays);
    constants appear as the second operand of binary ops."""
    kind = "leaf" if depth == 0 else draw(st.sampled_from(["leaf", "unary", "binary"]))
    if kind == "leaf":
        i = draw(st.integers(0, 2))
        return (_1, _2, _3)[i], lambda *xs, i=i: xs[i]
    if kind == "unary":
        ctor, fn = _UNARY[draw(st.sampled_from(sorted(_UNARY)))]
        e, f = draw(_expressions(depth - 1))
        return ctor(e), lambda *xs, f=f: fn(f(*xs))
    ctor, fn = _BINARY[draw(st.sampled_from(sorted(_BINARY)))]
    ea, fa = draw(_expressions(depth - 1))
    if draw(st.booleans()):
        c = draw(st.sampled_from([0.5, 2.0, -1.0]))
        eb, fb = c, lambda *xs, c=c: np.float32(c)
    else:
        eb, fb = draw(_expressions(depth - 1))
    return ctor(ea, eb), lambda *xs, fa=fa, fb=fb: fn(fa(*xs), fb(*xs))


@settings(max_examples=25, deadline=None)
@given(_expressions())
def test_random_fused_expressions_match_numpy(case):
    expr, fn = case
    xs = [_rand(17), _rand((3, 17)), _rand(1)]
    used = sorted(placeholders(expr))
    rig = H.Rig()
    tensors = [rig.input(xs[i - 1]) for i in used]
    expr = substitute(expr, {old: new + 1 for new, old in enumerate(used)})
    out = ew.map(rig.graph, expr, tensors, rig.prog)
    (got,), _ = rig.run([out])
    with np.errstate(all="ignore"):
        want = np.broadcast_to(fn(*xs), got.shape).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_map_on_a_virtual_graph_uses_its_tiles():
    rig = H.Rig(tiles=8)
    sub = rig.graph.create_virtual_graph(4, 8)
    a = sub.add_variable(poplar.FLOAT, (40,), "va", mapping="linear")
    rig.graph.create_host_write("va", a)
    rig.feeds["va"] = np.arange(40, dtype=np.float32)
    out = ew.map(sub, Exp(-_1 * 0.1), [a], rig.prog)
    (got,), engine = rig.run([out])
    np.testing.assert_array_equal(got, np.exp(-np.arange(40, dtype=np.float32) * np.float32(0.1)))
    by_tile, _ = H.cs_estimates(engine, engine.get_graph_profile()["computeSets"]["names"][-1])
    assert not by_tile[:4].any() and by_tile[4:].all()
