"""Bad input to the element-wise functions: a Tremula error naming the operand and the
values, raised before the graph is changed."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import GraphError, TensorError
from tremula.libs.popops import elementwise as ew
from tremula.libs.popops.expr import Const, Exp, ExprError, Select, _1, _2, _3


def _graph(tiles: int = 4) -> poplar.Graph:
    return poplar.Graph(poplar.IPUModel(tiles_per_ipu=tiles).create_device().target)


def _var(g: poplar.Graph, dtype, shape, name: str, mapped: bool = True) -> poplar.Tensor:
    t = g.add_variable(dtype, shape, name)
    if mapped:
        poplar.map_tensor_linearly(g, t)
    return t


def _unchanged(g: poplar.Graph, fn, error, *match: str) -> None:
    """``fn()`` raises ``error`` mentioning every ``match`` and leaves ``g`` unchanged."""
    before = (g.state.generation, len(g.state.variables), len(g.state.compute_sets))
    with pytest.raises(error) as info:
        fn()
    for m in match:
        assert m in str(info.value), (m, str(info.value))
    after = (g.state.generation, len(g.state.variables), len(g.state.compute_sets))
    assert after == before


def test_shapes_that_do_not_broadcast():
    g = _graph()
    a, b = _var(g, poplar.FLOAT, (3, 4), "a"), _var(g, poplar.FLOAT, (5,), "b")
    _unchanged(g, lambda: ew.add(g, a, b, poplar.Sequence()), TensorError, "[3, 4]", "[5]")


def test_operand_types_differ():
    g = _graph()
    a, b = _var(g, poplar.FLOAT, (4,), "a"), _var(g, poplar.HALF, (4,), "b")
    _unchanged(g, lambda: ew.mul(g, a, b, poplar.Sequence()), ExprError, "half", "float")
    c = _var(g, poplar.FLOAT, (4,), "c")
    _unchanged(
        g,
        lambda: ew.map(g, Select(_1, _2, _3), [a, a, c], poplar.Sequence()),
        ExprError,
        "condition is bool",
    )


def test_op_not_supported_for_the_type():
    g = _graph()
    i, f = _var(g, poplar.INT, (4,), "i"), _var(g, poplar.FLOAT, (4,), "f")
    _unchanged(g, lambda: ew.exp(g, i, poplar.Sequence()), ExprError, "EXPONENT", "int")
    _unchanged(g, lambda: ew.logical_and(g, f, f, poplar.Sequence()), ExprError, "float")
    _unchanged(g, lambda: ew.shift_left(g, f, f, poplar.Sequence()), ExprError, "SHIFT_LEFT")


def test_wrong_number_of_inputs_for_the_expression():
    g = _graph()
    a = _var(g, poplar.FLOAT, (4,), "a")
    _unchanged(g, lambda: ew.map(g, _1 + _2, [a], poplar.Sequence()), ExprError, "_2", "1 input")
    _unchanged(g, lambda: ew.map(g, Exp(_1), [a, a], poplar.Sequence()), ExprError, "_2 not used")
    _unchanged(g, lambda: ew.map(g, _1, [], poplar.Sequence()), GraphError, "at least one")


def test_in_place_output_that_would_need_broadcasting():
    g = _graph()
    a, b = _var(g, poplar.FLOAT, (4,), "a"), _var(g, poplar.FLOAT, (3, 4), "b")
    _unchanged(
        g, lambda: ew.add_in_place(g, a, b, poplar.Sequence()), TensorError, "_1", "[4]", "[3, 4]"
    )


def test_in_place_result_of_another_type():
    g = _graph()
    a = _var(g, poplar.FLOAT, (4,), "a")
    _unchanged(
        g, lambda: ew.map_in_place(g, _1 < 0, [a], poplar.Sequence()), ExprError, "bool", "float"
    )


def test_in_place_operand_with_aliases_or_unmapped():
    g = _graph()
    a = _var(g, poplar.FLOAT, (1, 4), "a")
    bcast = a.broadcast(3, 0)
    _unchanged(g, lambda: ew.neg_in_place(g, bcast, poplar.Sequence()), TensorError, "aliased")
    u = _var(g, poplar.FLOAT, (4,), "u", mapped=False)
    _unchanged(g, lambda: ew.neg_in_place(g, u, poplar.Sequence()), GraphError, "not mapped")


def test_constants_that_do_not_fit():
    g = _graph()
    i = _var(g, poplar.INT, (4,), "i")
    c = _var(g, poplar.UNSIGNED_CHAR, (4,), "c")
    _unchanged(g, lambda: ew.add(g, i, 2.5, poplar.Sequence()), ExprError, "2.5", "int")
    _unchanged(g, lambda: ew.add(g, c, 300, poplar.Sequence()), ExprError, "300")
    _unchanged(g, lambda: ew.add(g, c, -1, poplar.Sequence()), ExprError, "-1")
    half = Const(1.5, poplar.HALF)
    _unchanged(g, lambda: ew.map(g, _1 + half, [i], poplar.Sequence()), ExprError, "half")


def test_non_tensor_operands_and_foreign_graphs():
    g, other = _graph(), _graph()
    a = _var(g, poplar.FLOAT, (4,), "a")
    b = _var(other, poplar.FLOAT, (4,), "b")
    _unchanged(g, lambda: ew.add(g, a, b, poplar.Sequence()), GraphError, "another graph")
    _unchanged(g, lambda: ew.add(g, 1, 2, poplar.Sequence()), GraphError, "at least one")
    _unchanged(g, lambda: ew.add(g, a, "x", poplar.Sequence()), GraphError, "operand 2")
    _unchanged(g, lambda: ew.add_in_place(g, 1.0, a, poplar.Sequence()), GraphError, "first")
    _unchanged(g, lambda: ew.map(g, _1, [np.zeros(4)], poplar.Sequence()), GraphError, "ndarray")


def test_bad_options():
    g = _graph()
    a = _var(g, poplar.FLOAT, (4,), "a")
    _unchanged(
        g, lambda: ew.exp(g, a, poplar.Sequence(), options={"fast": "1"}), GraphError, "fast"
    )
    bad = {"enableGenerateCodelet": "maybe"}
    _unchanged(g, lambda: ew.exp(g, a, poplar.Sequence(), options=bad), GraphError, "maybe")
