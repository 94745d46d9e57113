"""Bad input: a MatMulError naming the operand and the values, and the graph left as it was."""

from __future__ import annotations

import pytest

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs import poplin


@pytest.fixture
def g():
    return poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)


def var(g, shape, dtype=poplar.FLOAT, name="t", mapped=True):
    return g.add_variable(dtype, shape, name, mapping="linear" if mapped else None)


def unchanged(g, prog, call, match):
    """``call()`` raises a MatMulError matching ``match``; nothing was added."""
    before = (g.state.generation, len(g.state.variables), len(g.state.compute_sets))
    steps = len(prog.programs)
    with pytest.raises(poplin.MatMulError, match=match) as info:
        call()
    assert isinstance(info.value, GraphError) and isinstance(info.value, ValueError)
    assert (g.state.generation, len(g.state.variables), len(g.state.compute_sets)) == before
    assert len(prog.programs) == steps


def test_inner_dimension_mismatch_names_both_shapes(g):
    a, b, prog = var(g, (3, 4), name="a"), var(g, (5, 6), name="b"), poplar.Sequence()
    unchanged(g, prog, lambda: poplin.matmul(g, a, b, prog), r"\(3, 4\).*\(5, 6\)")


@pytest.mark.parametrize(("sa", "sb"), [((3,), (3, 2)), ((2, 3, 4), (4, 2)), ((2, 3), (3,))])
def test_rank_errors(g, sa, sb):
    a, b, prog = var(g, sa, name="a"), var(g, sb, name="b"), poplar.Sequence()
    unchanged(g, prog, lambda: poplin.matmul(g, a, b, prog), "rank 2")


def test_grouped_rank_and_group_count(g):
    prog = poplar.Sequence()
    a, b = var(g, (2, 3, 4), name="a"), var(g, (3, 4, 5), name="b")
    unchanged(g, prog, lambda: poplin.matmul_grouped(g, a, b, prog), "group counts differ")
    c = var(g, (3, 4), name="c")
    unchanged(g, prog, lambda: poplin.matmul_grouped(g, c, b, prog), "rank 3")


def test_dtype_mismatch_and_unsupported_types(g):
    prog = poplar.Sequence()
    a, b = var(g, (3, 4), poplar.FLOAT, "a"), var(g, (4, 2), poplar.HALF, "b")
    unchanged(g, prog, lambda: poplin.matmul(g, a, b, prog), "operand types differ.*float.*half")
    s, t = var(g, (3, 4), poplar.SHORT, "s"), var(g, (4, 2), poplar.SHORT, "t")
    unchanged(g, prog, lambda: poplin.matmul(g, s, t, prog), "short")
    x, y = var(g, (3, 4), name="x"), var(g, (4, 2), name="y")
    unchanged(g, prog, lambda: poplin.matmul(g, x, y, prog, dtype=poplar.INT), "output type")
    i, j = var(g, (3, 4), poplar.INT, "i"), var(g, (4, 2), poplar.INT, "j")
    unchanged(g, prog, lambda: poplin.matmul(g, i, j, prog, dtype=poplar.HALF), "output type")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"bogus": 1}, "unknown option.*bogus"),
        ({"availableMemoryProportion": 0}, "availableMemoryProportion"),
        ({"availableMemoryProportion": 1.5}, "availableMemoryProportion"),
        ({"availableMemoryProportion": "lots"}, "availableMemoryProportion"),
        ({"partialsType": "double"}, "partialsType"),
        ({"fullyConnectedPass": "SIDEWAYS"}, "fullyConnectedPass"),
        ([("partialsType", "half")], "must be a dict"),
    ],
)
def test_bad_options(g, options, match):
    a, b, prog = var(g, (3, 4), name="a"), var(g, (4, 2), name="b"), poplar.Sequence()
    unchanged(g, prog, lambda: poplin.matmul(g, a, b, prog, options=options), match)
    unchanged(
        g,
        prog,
        lambda: poplin.create_matmul_input_lhs(g, poplar.FLOAT, (3, 4), (4, 2), options=options),
        match,
    )


def test_options_as_strings_are_accepted(g):
    opts = {"availableMemoryProportion": "0.3", "partialsType": "HALF"}
    assert poplin.parse_options(opts, "test").available_memory_proportion == 0.3
    assert poplin.parse_options(opts, "test").partials_type == "half"


def test_bad_arguments(g):
    a, b, prog = var(g, (3, 4), name="a"), var(g, (4, 2), name="b"), poplar.Sequence()
    not_a_sequence = poplar.Execute(g.add_compute_set())
    unchanged(g, prog, lambda: poplin.matmul(g, a, b, not_a_sequence), "prog")
    other = poplar.Graph(g.target)
    o = other.add_variable(poplar.FLOAT, (4, 2), "o", mapping="linear")
    unchanged(g, prog, lambda: poplin.matmul(g, a, o, prog), "b must be a Tensor of this graph")
    unchanged(g, prog, lambda: poplin.matmul("graph", a, b, prog), "poplar.Graph")
    u = var(g, (4, 2), name="u", mapped=False)
    unchanged(g, prog, lambda: poplin.matmul(g, a, u, prog), "unmapped")


def test_matmul_acc_checks_c_and_scale(g):
    prog = poplar.Sequence()
    a, b = var(g, (3, 4), name="a"), var(g, (4, 2), name="b")
    c = var(g, (3, 3), name="c")
    unchanged(g, prog, lambda: poplin.matmul_acc(g, c, a, b, 1.0, prog), r"shape \(3, 2\)")
    d = var(g, (3, 2), name="d")
    unchanged(g, prog, lambda: poplin.matmul_acc(g, d, a, b, "two", prog), "scale")
    unchanged(g, prog, lambda: poplin.matmul_acc(g, "c", a, b, 1.0, prog), "c must be a Tensor")
    i, j = var(g, (3, 4), poplar.INT, "i"), var(g, (4, 2), poplar.INT, "j")
    k = var(g, (3, 2), poplar.INT, "k")
    unchanged(g, prog, lambda: poplin.matmul_acc(g, k, i, j, 0.5, prog), "integer")
    h = var(g, (3, 2), poplar.INT, "h")
    unchanged(g, prog, lambda: poplin.matmul_acc(g, h, a, b, 1.0, prog), "output type")


def test_create_inputs_check_shapes_and_types(g):
    prog = poplar.Sequence()
    unchanged(
        g,
        prog,
        lambda: poplin.create_matmul_input_rhs(g, poplar.FLOAT, (3, 4), (5, 2)),
        r"\(3, 4\).*\(5, 2\)",
    )
    unchanged(
        g, prog, lambda: poplin.create_matmul_input_lhs(g, poplar.BOOL, (3, 4), (4, 2)), "bool"
    )
    unchanged(
        g,
        prog,
        lambda: poplin.create_matmul_grouped_input_lhs(g, poplar.FLOAT, (2, 3, 4), (1, 4, 2)),
        "group counts",
    )


@pytest.mark.parametrize("bad", [(3, -4), (3, 4.5), "34", None])
def test_create_inputs_check_shape_values(g, bad):
    prog = poplar.Sequence()
    unchanged(
        g, prog, lambda: poplin.create_matmul_input_lhs(g, poplar.FLOAT, bad, (4, 2)), "a_shape"
    )


def test_matmul_plan_rejects_empty_shapes(g):
    with pytest.raises(poplin.MatMulError, match="empty"):
        poplin.matmul_plan(g.target, poplar.FLOAT, (0, 4), (4, 2))
