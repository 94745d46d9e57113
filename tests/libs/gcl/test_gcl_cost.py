"""gcl costs: the ring's link traffic in the profiles' external exchanges and GlobalExchange
steps matches each algorithm's formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import gcl

Op = gcl.CollectiveOperator
CG, CGT, RG = gcl.CommGroup, gcl.CommGroupType, gcl.ReplicaGrouping


def _links(h) -> tuple[list[int], list[dict]]:
    """Bytes received per external exchange, and the GlobalExchange steps."""
    ext = h.engine.get_graph_profile()["externalExchanges"]
    received = [sum(row) for row in ext["bytesReceivedByTile"]]
    sent = [sum(row) for row in ext["bytesSentByTile"]]
    assert received == sent
    steps = h.engine.get_execution_profile()["simulation"]["steps"]
    return received, [s for s in steps if s["type"] == "GlobalExchange"]


def _group_size(R: int, group) -> int:
    if group is None:
        return R
    return (group.to_grouping(R) if isinstance(group, CG) else group).group_size


@pytest.mark.parametrize(
    "R,group,n,dtype",
    [
        (2, None, 1000, poplar.FLOAT),
        (4, None, 1000, poplar.FLOAT),
        (8, None, 1001, poplar.FLOAT),
        (8, CG(CGT.CONSECUTIVE, 2), 64, poplar.FLOAT),
        (8, CG(CGT.ORTHOGONAL, 4), 100, poplar.HALF),
        (8, RG(8, 2, 2), 33, poplar.INT),
        (4, CG(CGT.NONE), 100, poplar.FLOAT),
    ],
)
def test_all_reduce_link_bytes_follow_the_ring_formula(R, group, n, dtype, harness):
    h = harness(R)
    x = h.input("x", dtype, (n,))
    gcl.all_reduce(h.graph, x, Op.ADD, h.prog, group=group)
    h.run({})
    G = _group_size(R, group)
    chunk = math.ceil(n / G) * dtype.size
    received, steps = _links(h)
    assert len(received) == len(steps) == 2 * (G - 1)
    assert received == [chunk] * (2 * (G - 1))
    assert [s["totalData"] for s in steps] == received
    if n % G == 0:  # exactly 2 (G - 1) / G of the tensor's bytes per replica
        assert sum(received) == 2 * (G - 1) * n * dtype.size // G
    link = h.graph.target.ipu_link_bytes_per_cycle
    assert all(s["cycles"] >= chunk / link for s in steps)
    tile_cycles = h.engine.get_execution_profile()["simulation"]["tileCycles"]
    assert (tile_cycles["globalExchange"] > 0) == (G > 1)


def test_two_replica_all_reduce_costs_n_bytes(harness):
    """2 (G - 1) / G x N = N for a pair: each replica sends half, then the other half."""
    h = harness(2)
    x = h.input("x", poplar.FLOAT, (4096,))
    gcl.all_reduce(h.graph, x, Op.MEAN, h.prog)
    h.run({})
    received, steps = _links(h)
    assert sum(received) == 4096 * 4
    assert [s["name"] for s in steps] == [
        "allReduce/reduceScatter/send0",
        "allReduce/allGather/send0",
    ]


@pytest.mark.parametrize("R,group", [(4, None), (8, CG(CGT.ORTHOGONAL, 4)), (8, RG(8, 2, 2))])
def test_other_collectives_link_bytes(R, group, harness):
    G = _group_size(R, group)
    n = 30
    cases = {
        "reduce_scatter": lambda x, y: gcl.reduce_scatter(h.graph, x, "max", h.prog, group),
        "all_gather": lambda x, y: gcl.all_gather(h.graph, x, h.prog, group),
        "all_to_all": lambda x, y: gcl.all_to_all(h.graph, y, h.prog, group),
        "broadcast": lambda x, y: gcl.broadcast(h.graph, x, h.prog, 0, group),
    }
    want = {
        "reduce_scatter": [math.ceil(n / G) * 4] * (G - 1),
        "all_gather": [n * 4] * (G - 1),
        "all_to_all": [5 * 4] * (G - 1),
        "broadcast": [n * 4] * math.ceil(math.log2(G)),
    }
    for name, build in cases.items():
        h = harness(R)
        x = h.input("x", poplar.FLOAT, (n,))
        y = h.input("y", poplar.FLOAT, (G, 5))
        build(x, y)
        h.run({})
        received, steps = _links(h)
        assert received == want[name], name
        assert len(steps) == len(received)


def test_no_link_traffic_without_partners(harness):
    h = harness(4)
    x = h.input("x", poplar.FLOAT, (10,))
    ungrouped = CG(CGT.NONE)
    gcl.all_reduce(h.graph, x, Op.SQUARE_ADD, h.prog, group=ungrouped)
    gcl.all_reduce(h.graph, x, Op.LOCAL, h.prog)
    gcl.reduce_scatter(h.graph, x, Op.LOCAL, h.prog)
    gcl.all_gather(h.graph, x, h.prog, group=ungrouped)
    out = h.output("sq", gcl.all_reduce(h.graph, x, Op.SQUARE_ADD, h.prog, group=ungrouped))
    data = np.arange(40, dtype=np.float32).reshape(4, 10)
    res = h.run({"x": data})
    received, steps = _links(h)
    assert received == [] and steps == []
    assert out.shape == (10,)
    np.testing.assert_array_equal(res["sq"], data * data)


def test_collective_steps_are_named_and_vertices_estimated(harness):
    h = harness(4)
    x = h.input("x", poplar.FLOAT, (64,))
    gcl.all_reduce(h.graph, x, Op.ADD, h.prog, name="grads")
    h.run({})
    graph = h.engine.get_graph_profile()
    names = graph["computeSets"]["names"]
    assert "grads/reduceScatter/combine0" in names and "grads/allGather/place2" in names
    types = graph["vertexTypes"]["names"]
    assert {"gcl::SelectChunk<ADD,float>", "gcl::CombineChunk<ADD,float>"} <= set(types)
    cycles = graph["computeSets"]["cycleEstimates"]["cyclesByTile"]
    combine = names.index("grads/reduceScatter/combine0")
    assert min(c for c in cycles[combine] if c) > 0
