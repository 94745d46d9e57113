"""The planner: properties (hypothesis) and agreement with the simulated profile."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tremula import poplar
from tremula import target as targets
from tremula.libs import poplin
from tremula.libs.poplin import plan as plan_mod
from tremula.libs.poplin.layout import Geometry

TYPES = [
    ("float", "float", "float"),
    ("half", "float", "half"),
    ("half", "half", "half"),
    ("half", "float", "float"),
    ("int", "int", "int"),
]

params_st = st.builds(
    lambda g, m, k, n, types, amp: plan_mod.MatMulParams(g, m, k, n, *types, amp),
    st.integers(1, 6),
    st.integers(1, 300),
    st.integers(1, 400),
    st.integers(1, 300),
    st.sampled_from(TYPES),
    st.sampled_from([0.6, 0.1, 0.02, 1.0]),
)
target_st = st.sampled_from([targets.ipu2(tiles_per_ipu=t) for t in (1, 4, 16, 64)])


@settings(max_examples=60, deadline=None)
@given(params_st, target_st)
def test_plan_covers_the_shape_exactly(params, target):
    plan = poplin.plan_matmul(params, target)
    G, M, K, N = plan.dims
    for size, blocks, d in (
        (plan.block_g, plan.blocks_g, G),
        (plan.block_m, plan.blocks_m, M),
        (plan.block_n, plan.blocks_n, N),
    ):
        assert size * (blocks - 1) < d <= size * blocks
    assert plan.blocks_k <= plan.k_chunks
    assert plan.tiles == plan.blocks_g * plan.blocks_m * plan.blocks_n * plan.blocks_k
    assert plan.tiles <= target.num_tiles
    assert plan.cycles == plan.exchange_cycles + plan.compute_cycles + plan.reduce_cycles
    k_steps = -(-plan.k_chunks // plan.blocks_k)
    assert plan.loop == {True: "k", False: plan.loop and "n"}[k_steps > 1]
    if plan.loop == "n":  # every step: the same blocks, step_n columns of each
        assert plan.serial > 1 and k_steps == 1
        assert plan.step_n * plan.serial == plan.block_n and plan.block_n * plan.blocks_n == N
        plan = plan.n_step_plan()
        assert plan.tiles == plan.blocks_g * plan.blocks_m * plan.blocks_n * plan.blocks_k
        G, M, K, N = plan.dims
    else:
        assert plan.serial == k_steps and plan.step_n == plan.block_n
    geo = Geometry(plan)
    # every (output element, K element) product is computed once, on a tile of the plan:
    # regions are products of spans covering G, M, N once and K once over the steps
    for spans, d in ((geo.g_spans, G), (geo.m_spans, M), (geo.n_spans, N)):
        assert np.array_equal(_covered(spans, d), np.ones(d))
    k_spans = [x for s in range(plan.serial) for x in geo.k_spans(s)]
    assert np.array_equal(_covered(k_spans, K), np.ones(K))
    tiles = []
    for s in range(plan.serial):
        regions = geo.product_regions(s)
        assert len(regions) == len(geo.g_spans) * len(geo.m_spans) * len(geo.n_spans) * len(
            geo.k_spans(s)
        )
        step = []
        for r in regions:
            t = geo.grid_tiles(r).reshape(r.grid)
            assert np.all(t // geo.blocks == r.k.index)  # the j-th tile does the j-th chunk
            step.append(t.reshape(-1))
        step = np.concatenate(step)
        assert np.unique(step).size == step.size  # one product per tile and step
        tiles.append(step)
    tiles = np.concatenate(tiles)
    assert tiles.min() >= 0 and tiles.max() < plan.tiles
    # every output element is reduced once, on one of its block's tiles
    out = np.zeros((G, M, N), dtype=np.int64)
    for r in geo.reduce_regions():
        g, m, n = (slice(x.start, x.stop) for x in (r.g, r.m, r.n))
        if plan.split == "m":
            out[g, _pieces_of(r.m, r.k), n] += 1
        else:
            out[g, m, _pieces_of(r.n, r.k)] += 1
    assert np.all(out == 1)
    assert np.all(geo.output_tiles(True) % geo.blocks == geo.output_tiles(False))


def _covered(spans, d):
    count = np.zeros(d, dtype=np.int64)
    for x in spans:
        count[x.start : x.stop] += 1
    return count


def _pieces_of(blocks, pieces):
    """Indices covered by a span of pieces in every block of a span of blocks."""
    inside = np.arange(pieces.start, pieces.stop)
    return (blocks.start + blocks.size * np.arange(blocks.count)[:, None] + inside).reshape(-1)


@settings(max_examples=60, deadline=None)
@given(params_st, target_st)
def test_plan_respects_the_memory_bound(params, target):
    plan = poplin.plan_matmul(params, target)
    budget = params.available_memory_proportion * target.memory_bytes_per_tile
    if plan.fits:
        assert plan.temp_bytes <= budget
    else:  # nothing fits: the least memory of all candidates, still a valid plan
        assert plan.temp_bytes > budget


@settings(max_examples=30, deadline=None)
@given(params_st, target_st)
def test_plans_are_cached_and_deterministic(params, target):
    first = poplin.plan_matmul(params, target)
    assert poplin.plan_matmul(params, target) is first
    plan_mod._plan.cache_clear()
    again = poplin.plan_matmul(plan_mod.MatMulParams(*vars(params).values()), target)
    assert again == first and again is not first


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params_st, target_st, st.sampled_from(["a", "b"]))
def test_created_operands_spread_each_block_over_its_readers(params, target, role):
    plan = poplin.plan_matmul(params, target)
    geo = Geometry(plan)
    G, M, K, N = plan.dims
    tiles = geo.operand_tiles(role)
    assert tiles.shape == ((G, M, K) if role == "a" else (G, K, N))
    j, block = tiles // geo.blocks, tiles % geo.blocks
    chunk = np.arange(K) // plan.step_k
    if role == "a":
        assert np.all(j == (chunk % plan.blocks_k)[None, None, :])
        readers = plan.blocks_n
    else:
        assert np.all(j == (chunk % plan.blocks_k)[None, :, None])
        readers = plan.blocks_m
    # the pieces of one block are near-equal: count the elements of block 0 per tile
    rows, cols = (plan.block_m, plan.step_k) if role == "a" else (plan.step_k, plan.block_n)
    first = tiles[: plan.block_g, :rows, :cols]
    counts = np.unique(first, return_counts=True)[1]
    assert counts.size == min(readers, first.size) and counts.max() - counts.min() <= 1
    assert block.max() < geo.blocks


def _operand_blocks(geo, role):
    """Per tile, the (g, m or n, chunk) block of operand ``role`` it reads in step 0."""
    out = np.full((geo.plan.tiles, 3), -1)
    for r in geo.product_regions(0):
        idx = np.meshgrid(r.g.index, r.m.index, r.n.index, r.k.index, indexing="ij")
        gi, mi, ni, j = (x.reshape(-1) for x in idx)
        out[geo.grid_tiles(r)] = np.stack([gi, mi if role == "a" else ni, j], axis=1)
    return out


@pytest.mark.parametrize(("shape", "share"), [((512, 256, 512), "a"), ((16, 512, 512), "b")])
def test_super_tile_pairs_read_one_operand_block(shape, share):
    m, k, n = shape
    plan = poplin.matmul_plan(targets.ipu2(tiles_per_ipu=64), poplar.HALF, (m, k), (k, n))
    assert plan.share == share
    blocks = _operand_blocks(Geometry(plan), share)
    assert np.array_equal(blocks[0::2], blocks[1::2])


def test_half_plans_use_the_amp_and_ints_do_not():
    t = targets.ipu2()
    half = poplin.matmul_plan(t, poplar.HALF, (512, 512), (512, 512))
    assert half.method == "amp" and half.tiles > t.num_tiles // 2
    assert poplin.matmul_plan(t, poplar.INT, (64, 64), (64, 64)).method == "mac"


def test_cpu_target_plans_keep_the_natural_frame():
    """The IPU Model swaps a short-M product onto the AMP's wide side; the CPU target, which
    simulates no cycles, keeps C = A B (a row-major output for the host)."""
    shape = ((32, 256), (256, 256))
    assert poplin.matmul_plan(targets.ipu2(tiles_per_ipu=1), poplar.FLOAT, *shape).swap
    assert not poplin.matmul_plan(targets.cpu(), poplar.FLOAT, *shape).swap


@pytest.mark.parametrize("fc_pass", ["TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU"])
def test_training_passes_swap_the_operands(fc_pass):
    """PopLibs plans a training layer's passes jointly and forces ``swapOperands`` for a
    joint plan (popsparse-paper-method.md 2): a short-M product, which a plain matmul
    swaps onto the AMP's wide side, gets the same plan; a short-N one, which a plain matmul
    keeps, is swapped all the same (its N columns become the output positions, and cost
    more: four columns cannot feed the AMP)."""
    t = targets.ipu2(tiles_per_ipu=64)
    short_m, short_n = ((4, 512), (512, 512)), ((512, 512), (512, 4))
    opts = {"fullyConnectedPass": fc_pass}
    for shape in (short_m, short_n):
        inference = poplin.matmul_plan(
            t, poplar.HALF, *shape, options={"fullyConnectedPass": "INFERENCE_FWD"}
        )
        assert inference == poplin.matmul_plan(t, poplar.HALF, *shape)
    plain_m, plain_n = (poplin.matmul_plan(t, poplar.HALF, *s) for s in (short_m, short_n))
    joint_m, joint_n = (
        poplin.matmul_plan(t, poplar.HALF, *s, options=opts) for s in (short_m, short_n)
    )
    assert plain_m.swap and not plain_n.swap
    assert joint_m.swap and joint_n.swap and not joint_n.params.swappable
    assert joint_m.cycles == plain_m.cycles
    assert joint_n.dims == (1, 4, 512, 512)
    assert joint_n.cycles > plain_n.cycles


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF])
def test_a_training_pass_computes_the_product_as_planned(session, close, dtype):
    opts = {"fullyConnectedPass": "TRAINING_FWD"}
    m, k, n = 96, 200, 8  # a plain matmul keeps this frame, the joint plan swaps
    s = session(tiles=16)
    a = poplin.create_matmul_input_lhs(s.graph, dtype, (m, k), (k, n), "a", opts)
    b = poplin.create_matmul_input_rhs(s.graph, dtype, (m, k), (k, n), "b", opts)
    c = poplin.matmul(s.graph, a, b, s.prog, options=opts)
    rng = np.random.default_rng(1)
    A = rng.standard_normal((m, k)).astype(dtype.numpy)
    B = rng.standard_normal((k, n)).astype(dtype.numpy)
    got = s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"]
    close(got, A, B, dtype.numpy)
    plan = poplin.matmul_plan(s.graph.target, dtype, (m, k), (k, n), options=opts)
    assert plan.swap and not poplin.matmul_plan(s.graph.target, dtype, (m, k), (k, n)).swap
    assert abs(s.cycles - plan.cycles) <= 0.02 * plan.cycles + 20


def test_smaller_memory_gives_plans_that_fit_less_memory():
    t = targets.ipu2(tiles_per_ipu=16)
    temps = [
        poplin.matmul_plan(
            t, poplar.FLOAT, (256, 512), (512, 256), options={"availableMemoryProportion": p}
        ).temp_bytes
        for p in (0.6, 0.2, 0.05)
    ]
    assert temps[0] >= temps[1] >= temps[2]
    assert temps[2] <= 0.05 * t.memory_bytes_per_tile


def _run_created(session, shape, dtype, tiles, version="ipu2", opts=None):
    m, k, n = shape
    s = session(tiles=tiles, version=version)
    a = poplin.create_matmul_input_lhs(s.graph, dtype, (m, k), (k, n), "a", opts)
    b = poplin.create_matmul_input_rhs(s.graph, dtype, (m, k), (k, n), "b", opts)
    c = poplin.matmul(s.graph, a, b, s.prog, options=opts)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((m, k)).astype(dtype.numpy)
    B = rng.standard_normal((k, n)).astype(dtype.numpy)
    s.run({"a": (a, A), "b": (b, B)}, {"c": c})
    plan = poplin.matmul_plan(s.graph.target, dtype, (m, k), (k, n), options=opts)
    return s, plan


def _peak_cycles(target, plan):
    p = plan.params
    in_size = poplar.as_type(p.in_type).size
    flops = 2.0 * p.groups * p.m * p.k * p.n
    peak = target.peak_flops(in_size, poplar.as_type(p.partials_type).size)
    return flops / peak * target.tile_clock_frequency


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF])
@pytest.mark.parametrize(
    ("shape", "tiles", "opts"),
    [
        ((64, 64, 64), 16, None),
        ((200, 96, 33), 64, None),
        ((100, 700, 60), 16, None),
        ((128, 256, 128), 16, {"availableMemoryProportion": 0.02}),
        ((512, 256, 512), 64, None),  # super-tile pairs share A blocks
        ((16, 512, 512), 64, None),  # pairs share B blocks
        ((300, 500, 200), 64, {"availableMemoryProportion": 0.05}),  # ragged, serial steps
    ],
)
def test_plan_estimate_matches_the_simulation(session, dtype, shape, tiles, opts):
    s, plan = _run_created(session, shape, dtype, tiles, opts=opts)
    assert abs(s.cycles - plan.cycles) <= 0.02 * plan.cycles + 20
    assert s.cycles >= _peak_cycles(s.graph.target, plan)


@pytest.mark.parametrize("dtype", [poplar.FLOAT, poplar.HALF])
def test_mk2_simulated_cycles_never_beat_the_amp_peak(session, dtype):
    s, plan = _run_created(session, (256, 256, 256), dtype, tiles=1472)
    peak = _peak_cycles(s.graph.target, plan)
    assert s.cycles >= peak
    assert abs(s.cycles - plan.cycles) <= 0.02 * plan.cycles
