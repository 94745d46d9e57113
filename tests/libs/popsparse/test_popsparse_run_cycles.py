"""The product vertices' cycles on the meta-info they actually read (issue 28;
``popsparse-paper-method.md`` 2): the element-wise Fwd worker as its assembly runs it, the
supervisor's walk per bucket (a vertex without a matching sub-group pays only the skips),
each matching sub-group costed from its own worker entries; on the device, the slowest
tile of the actual pattern sets the distribution's time."""

from __future__ import annotations

import numpy as np

from tremula import target as targets
from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse import kernels, run_cost

MK2 = targets.ipu2()


def _bucket() -> tuple[np.ndarray, kernels.BucketFormat]:
    """One element-wise bucket (half, numZ = 16: Y offsets are columns x 2 x 16) written by
    hand (spec 2.7): sub-group id 5, one row of 2 non-zeros, one worker; then sub-group id 2,
    rows of 3, 1 and 2 non-zeros, worker 0 on rows 0-1 and worker 1 on row 2; then 0."""
    a = [5, 1, 0, 2, 18, 16, 0, 14, 1]  # header: id, x, y, count, size, numZ, rows-1, first, W
    a += [0, 16, 0, 0, 5]  # worker: sparseOffset, numZ, offsetZ, rows-1, to its first row
    a += [0, 2, 0, 32]  # row 0: 2 non-zeros at columns 0, 1
    b = [2, 0, 1, 6, 31, 16, 2, 19, 2]
    b += [0, 16, 0, 1, 10, 4, 16, 0, 0, 13]  # worker 1's entry is 5 words on: 27 - 14
    b += [0, 3, 0, 32, 64, 1, 1, 96, 2, 2, 0, 160]
    words = np.array([*a, *b, 0, 0, 0], dtype=np.uint16)
    return words[None, :], kernels.BucketFormat((1, 1), words.size, 8, 2, 16)


def test_vertex_cycles_by_hand():
    """Half, Z = 16 (general path, 2 chunks: per row 12 + 2 x 17 = 46, per non-zero 6,
    overhead 30). Sub-group 2: worker 0 has 2 rows and 4 non-zeros (30 + 92 + 24 = 146),
    worker 1 one row of 2 (30 + 46 + 12 = 88); its vertex walks to the second sub-group
    (47 x 2 + 46) after the constant 30, then 6 x 146. Sub-group 5: 30 + 47 + 46 + 6 x 88.
    A vertex of id 7 has no match: only the skip of both sub-groups, 30 + 32 x 2."""
    words, fmt = _bucket()
    kernels.decode(words, fmt)  # well formed
    kind = run_cost.VertexKind("Forward", (2, 4), 16, assembly=True)
    got = run_cost.vertex_cycles(MK2, kind, words, fmt, np.zeros(3, int), np.array([2, 5, 7]))
    assert got.tolist() == [30 + 94 + 46 + 6 * 146, 30 + 47 + 46 + 6 * 88, 30 + 64]


def test_vertex_cycles_over_buckets_and_rows_of_fields():
    """Two rows of fields, each of two copies of the bucket: a vertex pays each bucket it
    reads; the vertices of row 1 read its buckets only."""
    words, fmt = _bucket()
    two = np.tile(words, (2, 2))
    kind = run_cost.VertexKind("Forward", (2, 4), 16, assembly=True)
    one = run_cost.vertex_cycles(MK2, kind, words, fmt, np.zeros(2, int), np.array([2, 7]))
    got = run_cost.vertex_cycles(MK2, kind, two, fmt, np.array([0, 1, 1]), np.array([2, 2, 7]))
    walk = 30  # the constant is paid once per vertex
    assert got.tolist() == [2 * (one[0] - walk) + walk] * 2 + [2 * (one[1] - walk) + walk]


def test_uniform_buckets_cost_the_static_estimate():
    """Buckets of one matching sub-group of 18 rows of 43 non-zeros (more than 12 rows:
    each worker 3 rows): the vertex costs what the uniform estimate gives."""
    rows, nz, zt = 18, 43, 16
    starts = [r * 3 for r in range(6)]
    head = [1, 0, 0, rows * nz, 0, zt, rows - 1, 9 + 30, 6]
    workers = []
    for k, r0 in enumerate(starts):
        first_row = 9 + 30 + r0 * (2 + nz)
        workers += [r0 * nz, zt, 0, 2, first_row - (9 + 5 * k)]
    body = []
    for r in range(rows):
        body += [r, nz, *(2 * zt * np.arange(nz)).tolist()]
    sg = head + workers + body
    sg[4] = len(sg)
    words = np.array([*sg, 0], dtype=np.uint16)[None, :]
    fmt = kernels.BucketFormat((1, 1), words.shape[1], rows * nz, 2, zt)
    kind = run_cost.VertexKind("Forward", (2, 4), zt, assembly=True)
    got = run_cost.vertex_cycles(MK2, kind, words, fmt, np.zeros(1, int), np.array([1]))
    expected = est.ew_product_cycles(
        MK2, 2, np.array([zt // 4]), 4, np.array([rows]), np.array([rows * nz]), 1, False, True
    )
    assert got.tolist() == expected.tolist()


def test_block_sub_groups_cost_their_blocks():
    """A block bucket (16x16 half, float partials, Z = 32) with a sub-group of id 1 of 3
    blocks in 2 block rows: the block estimate of one bucket with info (spec 3.6)."""
    sg = [1, 0, 0, 3 * 256, 0, 1, 0]  # id, x, y, values, size, block rows - 1, GradW workers
    sg += [0, 1, 0, 16, 16, 0, 32]  # row 0: blocks at columns 0, 16; row 16: column 32
    sg[4] = len(sg)
    words = np.array([*sg, 0], dtype=np.uint16)[None, :]
    fmt = kernels.BucketFormat((16, 16), words.shape[1], 3 * 256, 2, 32)
    kind = run_cost.VertexKind("block", (2, 4), 32, 16)
    got = run_cost.vertex_cycles(MK2, kind, words, fmt, np.zeros(2, int), np.array([1, 9]))
    assert got[0] == int(est.block_fwd_cycles(MK2, 16, (2, 4), 32, 3, 2, 1, 1))
    assert got[1] == 40 + 33  # no match: the skip only


def _distribution_cycles(engine) -> int:
    steps = engine.get_execution_profile()["simulation"]["steps"]
    return next(
        s["cycles"]
        for s in steps
        if s["type"] == "OnTileExecute" and s["name"].split("/")[-1].startswith("distribution")
    )


def test_the_slowest_tile_of_the_pattern_sets_the_distribution(h, rng, sparse_layer):
    """One compiled layer (half, Z = 16): a uniform pattern of the planned density stays
    in its Z groups and takes about the static estimate; one whose non-zeros crowd the rows
    of the first X partition makes its distribution take longer (those tiles hold more
    rows and non-zeros than the plan expects), on the same graph profile; writing the first
    pattern again gives its cycles again."""
    params = h.layer(1, 0.1, 16, 512, 512)
    run = sparse_layer(params, "half", {"metaInfoBucketOversizeProportion": 3.0}, passes=("fwd",))
    px = run.plan.partition.x
    uniform = h.random_coo(rng, 512, 512, 1, 0.1)
    rows = -(-512 // px)
    crowded = h.random_coo(rng, 512, 512, 1, 0.1 / 3, rect=(0, rows, 0, 512))
    run.engine.reset_execution_profile()
    run.run(uniform, rng)
    assert run.propagation_computes() == 0
    first = _distribution_cycles(run.engine)
    graph = run.engine.get_graph_profile()
    names = graph["computeSets"]["names"]
    cs = next(i for i, n in enumerate(names) if n.endswith("/distribution"))
    static = max(graph["computeSets"]["cycleEstimates"]["activeCyclesByTile"][cs])
    assert 0.8 * static < first < 1.3 * static
    run.engine.reset_execution_profile()
    run.run(crowded, rng)
    assert _distribution_cycles(run.engine) > 1.5 * first
    assert run.engine.get_graph_profile() == graph
    run.engine.reset_execution_profile()
    run.run(uniform, rng)
    assert _distribution_cycles(run.engine) == first
