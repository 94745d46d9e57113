"""The final reduction of the Fwd and GradA passes (spec 4.2 step 4): PopLibs' conv reduction,
as the planner costs it (spec 3.5 step 5): the PNs of one output slab each sum an equal
piece of it over the partitions, on their own tiles, at the ``ReduceAdd`` estimate."""

from __future__ import annotations

import numpy as np
import pytest

from tremula.libs.poplin import estimators as poplin_est
from tremula.libs.popsparse import reduction

FWD_GRAD_A = {"doGradAPass": True}


@pytest.mark.parametrize(
    "length, p, runs",
    [
        (64, 4, [(0, 4, 16)]),  # equal pieces
        (30, 4, [(0, 3, 8), (3, 1, 6)]),  # ceil(30 / 4) = 8: three of 8 and one of 6
        (9, 4, [(0, 3, 3)]),  # ceil(9 / 4) = 3: three pieces, the fourth PN reduces nothing
        (3, 4, [(0, 3, 1)]),
    ],
)
def test_pieces_by_hand(length, p, runs):
    assert reduction.pieces(length, p) == runs


@pytest.mark.parametrize("dtype", ["float", "half"])
def test_reduction_cycles_and_placement(h, rng, sparse_layer, dtype):
    """Partition (2, 4, 2) of a 96 x 80 layer, batch 16: forward slabs of 48 x 8 outputs
    over 4 Y partitions (pieces of 96), GradA slabs of 20 x 8 over 2 X partitions (pieces
    of 80). Each PN's reduce vertex costs ``ReduceAdd`` for its piece and depth, by hand
    from the poplin estimate; the pieces lie on the PNs' tiles; the results are checked
    against float64 by the run."""
    opts = {**FWD_GRAD_A, "planConstraints": {"partition": {"x": 2, "y": 4, "z": 2}}}
    run = sparse_layer(h.layer(1, 0.2, 16, 80, 96), dtype, opts, passes=("fwd", "grad_a"))
    assert run.plan.partition.xyz == (2, 4, 2)
    run.run(h.random_coo(rng, 96, 80, 1, 0.2), rng)
    graph = run.engine.get_graph_profile()
    names = graph["computeSets"]["names"]
    active = graph["computeSets"]["cycleEstimates"]["activeCyclesByTile"]
    target, ts = run.device.target, run.dtype.size
    tiles = run.plan.bucket_tiles("fwd")
    for prefix, depth, piece in (("fwd", 4, 96), ("grad_a", 2, 80)):
        cs = next(i for i, n in enumerate(names) if n.endswith("/reduce") and f"_{prefix}/" in n)
        want = int(poplin_est.reduce_cycles(target, piece, depth, 4, ts, False))
        used = np.flatnonzero(np.asarray(active[cs]))
        assert set(used.tolist()) == set(tiles.tolist())
        assert all(active[cs][t] == want for t in used)
    out_tiles = run.graph.tiles_of(run.outputs["fwd"])  # [Z][X]
    for z, x in ((0, 0), (15, 95), (9, 50)):
        # PN (x // 48, y, z // 8) with y the piece of (x % 48) * 8 + z % 8
        y = ((x % 48) * 8 + z % 8) // 96
        assert out_tiles[z, x] == tiles[((x // 48) * 4 + y) * 2 + z // 8]


def test_pieces_of_whole_rows_are_named_by_rows(h, rng, sparse_layer):
    """A piece of whole ``Zt`` rows of the slab is a ``Px1xRxZt`` vertex (the engine then
    reads it in place), another a ``Px1x1xL`` one; both cost ``ReduceAdd`` of their
    length, and the run's results are checked against float64. Partition (2, 5, 2) of a
    96 x 80 layer, batch 16: forward slabs of 48 x 8 = 384 over 5 Y partitions (pieces of
    77, the last 76: not whole rows), GradA slabs of 16 x 8 = 128 over 2 X partitions
    (pieces of 64 = 8 rows of 8)."""
    assert reduction._rows(192, 32) == "6x32"
    assert reduction._rows(77, 8) == "1x77"
    opts = {**FWD_GRAD_A, "planConstraints": {"partition": {"x": 2, "y": 5, "z": 2}}}
    run = sparse_layer(h.layer(1, 0.2, 16, 80, 96), "float", opts, passes=("fwd", "grad_a"))
    assert run.plan.partition.xyz == (2, 5, 2)
    run.run(h.random_coo(rng, 96, 80, 1, 0.2), rng)
    names = run.engine.get_graph_profile()["vertexTypes"]["names"]
    reduce = sorted(n for n in names if n.startswith("poplin::ReducePartials"))
    assert reduce == [
        "poplin::ReducePartials<float,float,2x1x8x8>",
        "poplin::ReducePartials<float,float,5x1x1x76>",
        "poplin::ReducePartials<float,float,5x1x1x77>",
    ]
