"""Cycle estimates in the graph profile follow the PopLibs shapes (spec section 3.3): for
the vertices of one compute set on one tile, ``activeCyclesByVertexType`` is the sum of the
per-vertex formula and ``cyclesByTile`` is 6 x the busiest worker plus the launch."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import util
from tremula.libs.popops import elementwise as ew
from tremula.libs.popops.expr import Relu, _1, _2


def _helpers():
    name = "tremula_tests_popops_elementwise_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("test_popops_elementwise_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
LAUNCH = poplar.IPUModel(tiles_per_ipu=4).create_device().target.compute_set_launch_cycles


def c(n: int, k: int) -> int:
    return math.ceil(n / k)


# (label, dtype, arity, build(graph, tensors, prog) -> out, vertex type, formula(n))
CASES = [
    ("add float", poplar.FLOAT, 2, ew.add, "popops::BinaryOp1D<ADD,float>",
     lambda n: 29 + c(n, 2) * (1 + 2)),
    ("add half", poplar.HALF, 2, ew.add, "popops::BinaryOp1D<ADD,half>",
     lambda n: 26 + c(n, 4) * (1 + 2)),
    ("add int", poplar.INT, 2, ew.add, "popops::BinaryOp1D<ADD,int>", lambda n: 29 + 7 * n),
    ("div float", poplar.FLOAT, 2, ew.div, "popops::BinaryOp1D<DIVIDE,float>",
     lambda n: 29 + c(n, 2) * (16 + 5)),
    ("add in place", poplar.FLOAT, 2, ew.add_in_place, "popops::BinaryOp1DInPlace<ADD,float>",
     lambda n: 58 + c(n, 2) * (1 + 2)),
    ("exp float", poplar.FLOAT, 1, ew.exp, "popops::UnaryOp1D<EXPONENT,float>",
     lambda n: 33 + c(n, 2) * (6 + 4)),
    ("sqrt half", poplar.HALF, 1, ew.sqrt, "popops::UnaryOp1D<SQRT,half>",
     lambda n: 17 + c(n, 4) * (23 + 4)),
    ("sin float", poplar.FLOAT, 1, ew.sin, "popops::UnaryOp1D<SIN,float>",
     lambda n: 17 + 2300 * n),
    ("tanh in place", poplar.HALF, 1, ew.tanh_in_place, "popops::UnaryOp1DInPlace<TANH,half>",
     lambda n: 55 + c(n, 4) * (4 + 4)),
    ("mul scalar", poplar.FLOAT, -2, ew.mul, "popops::BroadcastScalar1D<MULTIPLY,float>",
     lambda n: 20 + c(n, 2) * (1 + 1)),
    ("max scalar", poplar.HALF, -2, ew.max, "popops::BroadcastScalar1D<MAXIMUM,half>",
     lambda n: 20 + c(n, 4) * (1 + 4)),
    ("select", poplar.FLOAT, 3, ew.select,
     "popops::Select<float>", lambda n: 30 + c(n, 2) * (2 + 6)),
    ("fused relu", poplar.FLOAT, 2,
     lambda g, a, b, prog: ew.map(g, Relu(_1 * _2 + 1), [a, b], prog), "popops::Fused_",
     lambda n: 17 + 6 + c(n, 2) * ((1 + 1 + 3) + 3 + 2)),
]  # fmt: skip


def _build(rig: H.Rig, dtype, arity: int, build, n: int):
    """Operands on tile 0 (a scalar second operand when ``arity`` is -2)."""
    rng = np.random.default_rng(0)
    data = rng.uniform(0.5, 2, n)
    tensors = [rig.input(data, dtype, mapping="0")]
    if arity in (2, 3):
        tensors.append(rig.input(data, dtype, mapping="0"))
    if arity == -2:
        tensors.append(rig.input(data[:1], dtype, mapping="0"))
    if arity == 3:
        cond = rig.graph.add_variable(poplar.BOOL, (n,), "cond")
        rig.graph.set_tile_mapping(cond, 0)
        tensors.append(cond)
    out = build(rig.graph, *tensors, rig.prog)
    return out if out is not None else tensors[0]


@pytest.mark.parametrize("n", [2, 1200, 37])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_profile_estimates_follow_the_formula(case, n):
    _, dtype, arity, build, vtype, formula = case
    rig = H.Rig()
    out = _build(rig, dtype, arity, build, n)
    lengths = util.partition(rig.graph, out, 8 if arity == 3 else 4).lengths  # grain: widest
    if n == 2:
        assert lengths.tolist() == [2]  # one vertex
    _, engine = rig.run([])
    cs_name = next(n for n in engine.get_graph_profile()["computeSets"]["names"] if "/" in n)
    by_tile, by_type = H.cs_estimates(engine, cs_name)
    ((name, active),) = by_type.items()
    assert name.startswith(vtype)
    per_vertex = [formula(int(k)) for k in lengths]
    assert active == sum(per_vertex)
    assert by_tile[0] == 6 * max(per_vertex) + LAUNCH
    assert not by_tile[1:].any()


def test_spec_example_binary_add_1200_floats():
    # spec 3.3: BinaryOp1D ADD float, n = 1200: 6 x (29 + 100 x 3) + 11 = 1985 tile cycles;
    # here 6 workers of 200 elements and the target's compute-set launch instead of the 11
    rig = H.Rig()
    out = _build(rig, poplar.FLOAT, 2, ew.add, 1200)
    _, engine = rig.run([out])
    by_tile, _ = H.cs_estimates(engine, "add/ADD(_1,_2)")
    assert by_tile[0] == 6 * (29 + 100 * 3) + LAUNCH


def test_a_fused_expression_costs_less_than_its_ops_one_by_one():
    rig = H.Rig()
    a = rig.input(np.ones(600), poplar.FLOAT, mapping="0")
    b = rig.input(np.ones(600), poplar.FLOAT, mapping="0")
    expr = Relu(_1 * _2 + 1)
    ew.map(rig.graph, expr, [a, b], rig.prog, name="fused")
    ew.map(rig.graph, expr, [a, b], rig.prog, name="ops", options={"enableGenerateCodelet": False})
    _, engine = rig.run([])
    names = engine.get_graph_profile()["computeSets"]["names"]
    fused = sum(H.cs_estimates(engine, n)[0][0] for n in names if n.startswith("fused/"))
    ops = sum(H.cs_estimates(engine, n)[0][0] for n in names if n.startswith("ops/"))
    assert 0 < fused < ops
