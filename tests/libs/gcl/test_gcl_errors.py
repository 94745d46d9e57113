"""gcl: bad input raises a Tremula error naming the values, and leaves the graph as it was."""

from __future__ import annotations

import pytest

from tremula import poplar
from tremula.errors import TremulaError
from tremula.libs import gcl

Op = gcl.CollectiveOperator
CG, CGT, RG = gcl.CommGroup, gcl.CommGroupType, gcl.ReplicaGrouping


@pytest.fixture
def g():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    graph = poplar.Graph(device.target, replication_factor=4)
    graph.x = graph.add_variable(poplar.FLOAT, (3, 4), "x", mapping="linear")
    graph.b = graph.add_variable(poplar.BOOL, (5,), "b", mapping="linear")
    graph.i = graph.add_variable(poplar.INT, (5,), "i", mapping="linear")
    return graph


def _check(g, error, match, call):
    before = (g.state.generation, len(g.state.variables), len(g.state.compute_sets))
    prog = poplar.Sequence()
    with pytest.raises(error, match=match) as err:
        call(prog)
    assert isinstance(err.value, TremulaError) and isinstance(err.value, ValueError)
    assert (g.state.generation, len(g.state.variables), len(g.state.compute_sets)) == before
    assert prog.programs == []


@pytest.mark.parametrize(
    "group,match",
    [
        (CG(CGT.CONSECUTIVE, 3), r"all_reduce: CommGroup\(CONSECUTIVE, 3\).*divide the 4"),
        (CG(CGT.ORTHOGONAL, 0), r"CommGroup\(ORTHOGONAL, 0\).*must be positive"),
        (RG(8, 2, 2), "groups 8 replicas; the graph has 4"),
        (RG.from_assignment([0, 1, 1, 0]), r"assignment=\[0, 1, 1, 0\].*not a constant-stride"),
        ("all", "group must be None, a CommGroup or a ReplicaGrouping, got str"),
    ],
)
def test_bad_groups(g, group, match):
    _check(g, gcl.GroupingError, match, lambda p: gcl.all_reduce(g, g.x, Op.ADD, p, group))


@pytest.mark.parametrize(
    "op,tensor,match",
    [
        (Op.LOGICAL_AND, "x", "LOGICAL_AND does not apply to float tensors; it takes bool"),
        (Op.ADD, "b", "operator ADD does not apply to bool tensors"),
        (Op.MEAN, "i", "operator MEAN does not apply to int tensors; it takes floating-point"),
        ("LOGICAL_OR", "i", "LOGICAL_OR does not apply to int"),
        ("maximum", "x", "collective operator 'maximum' unknown; expected one of ADD, MEAN"),
    ],
)
def test_operator_and_type(g, op, tensor, match):
    t = getattr(g, tensor)
    _check(g, gcl.CollectiveError, match, lambda p: gcl.all_reduce(g, t, op, p))
    _check(g, gcl.CollectiveError, match, lambda p: gcl.reduce_scatter(g, t, op, p))
    _check(g, gcl.CollectiveError, match, lambda p: gcl.all_reduce_in_place(g, t, op, p))


def test_all_to_all_leading_dimension(g):
    match = r"shape \(3, 4\) needs a leading dimension equal to the group size 2"
    group = CG(CGT.CONSECUTIVE, 2)
    _check(g, gcl.CollectiveError, match, lambda p: gcl.all_to_all(g, g.x, p, group))
    scalar = g.add_variable(poplar.FLOAT, (), "s", mapping="linear")
    _check(g, gcl.CollectiveError, "shape \\(\\) needs", lambda p: gcl.all_to_all(g, scalar, p))


@pytest.mark.parametrize("root", [-1, 4, 1.0, True])
def test_broadcast_root(g, root):
    match = f"broadcast: root {root!r} must be an index in 0..3"
    _check(g, gcl.CollectiveError, match, lambda p: gcl.broadcast(g, g.x, p, root=root))


def test_options(g):
    _check(
        g,
        gcl.CollectiveError,
        r"unknown option\(s\) \['maxBytesPerTile'\]",
        lambda p: gcl.all_gather(g, g.x, p, options={"maxBytesPerTile": 10}),
    )
    _check(
        g,
        gcl.CollectiveError,
        "method='meet_in_middle_ring' unsupported",
        lambda p: gcl.all_reduce(g, g.x, "add", p, options={"method": "meet_in_middle_ring"}),
    )


def test_tensor_and_program_arguments(g):
    other = poplar.Graph(g.target, replication_factor=4)
    foreign = other.add_variable(poplar.FLOAT, (2,), "foreign", mapping="linear")
    unmapped = g.add_variable(poplar.FLOAT, (2,), "unmapped")
    cases = [
        (foreign, "expected a tensor of this graph", False),
        (unmapped, r"is not mapped to tiles \(flat element 0\)", False),
        (g.x, "prog must be a poplar.Sequence", True),
    ]
    for t, match, wrap in cases:
        call = lambda p, t=t, wrap=wrap: gcl.all_gather(g, t, [p] if wrap else p)  # noqa: E731
        _check(g, gcl.CollectiveError, match, call)
