"""Serial loops of the planner (PopLibs' serial splits, spec 3.5): the ``"k"`` loop (a
reduction into an accumulator per step) and the ``"n"`` loop (A broadcast before the loop,
per step the columns of every N block): results against NumPy, estimates against the
simulated profile, and the costs they pay that a single step does not."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula import target as targets
from tremula.libs import poplin
from tremula.libs.poplin import estimators as est

#: (shape, dtype, options) -> the loop the planner picks on 16 tiles, and the case it covers
CASES = [
    ((512, 256, 64), poplar.FLOAT, 0.02, "TRAINING_FWD", "n"),  # swapped: A copied to 16 N blocks
    ((128, 256, 128), poplar.FLOAT, 0.02, "NONE", "n"),  # pairs share B
    ((64, 256, 512), poplar.FLOAT, 0.02, "NONE", "n"),  # swapped, one N block: no copy
    ((300, 500, 200), poplar.HALF, 0.05, "NONE", "n"),  # dot products, half out
    ((512, 256, 64), poplar.FLOAT, 0.05, "TRAINING_FWD", "k"),  # float out: no accumulator
    ((300, 500, 200), poplar.HALF, 0.1, "NONE", "k"),  # accumulator cast into half
]


def _opts(amp, fc):
    return {"availableMemoryProportion": amp, "fullyConnectedPass": fc}


@pytest.mark.parametrize(("shape", "dtype", "amp", "fc", "loop"), CASES)
@pytest.mark.parametrize("created", [True, False])
def test_loops_compute_the_product_and_match_their_estimate(
    session, close, shape, dtype, amp, fc, loop, created
):
    m, k, n = shape
    opts = _opts(amp, fc)
    s = session(tiles=16)
    plan = poplin.matmul_plan(s.graph.target, dtype, (m, k), (k, n), options=opts)
    assert plan.loop == loop and plan.serial > 1 and plan.fits
    if created:
        a = poplin.create_matmul_input_lhs(s.graph, dtype, (m, k), (k, n), "a", opts)
        b = poplin.create_matmul_input_rhs(s.graph, dtype, (m, k), (k, n), "b", opts)
    else:
        a = s.graph.add_variable(dtype, (m, k), "a", mapping="linear")
        b = s.graph.add_variable(dtype, (k, n), "b", mapping="linear")
    c = poplin.matmul(s.graph, a, b, s.prog, options=opts)
    rng = np.random.default_rng(3)
    A = rng.standard_normal((m, k)).astype(dtype.numpy)
    B = rng.standard_normal((k, n)).astype(dtype.numpy)
    close(s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"], A, B, dtype.numpy)
    names = [cs.name for cs in s.graph.state.compute_sets]
    assert len([x for x in names if "/partials" in x]) == plan.serial
    if created:
        assert abs(s.cycles - plan.cycles) <= 0.02 * plan.cycles + 20


@pytest.mark.parametrize(("shape", "dtype", "amp", "fc", "loop"), CASES[4:])
def test_k_loop_accumulates_into_an_existing_result(session, close, shape, dtype, amp, fc, loop):
    m, k, n = shape
    s = session(tiles=16)
    a = s.graph.add_variable(dtype, (m, k), "a", mapping="linear")
    b = s.graph.add_variable(dtype, (k, n), "b", mapping="linear")
    c = s.graph.add_variable(dtype, (m, n), "c", mapping="linear")
    poplin.matmul_acc(s.graph, c, a, b, -0.5, s.prog, options=_opts(amp, fc))
    rng = np.random.default_rng(4)
    A, B, C = (rng.standard_normal(x).astype(dtype.numpy) for x in ((m, k), (k, n), (m, n)))
    got = s.run({"a": (a, A), "b": (b, B), "c": (c, C)}, {"c": c})["c"]
    close(got, A * -0.5, B, dtype.numpy, C.astype(np.float64))


def test_k_loop_pays_a_reduction_per_step():
    """A K loop of ``S`` steps pays ``S`` stage-2 reductions (the first writing the
    accumulator, the others updating it) and a cast: the spec's per-step reduce and
    addInPlace, where accumulating in the AMP's partials would pay one."""
    t = targets.ipu2(tiles_per_ipu=16)
    params = poplin.MatMulParams(1, 300, 500, 200, "half", "float", "half", 0.1)
    plan = poplin.plan_matmul(params, t)
    assert plan.loop == "k"
    piece = -(-plan.block_m // plan.blocks_k) * plan.block_n  # split along m
    assert plan.split == "m" and plan.blocks_k == 1
    launch = t.compute_set_launch_cycles
    first = launch + est.reduce_cycles(t, piece, 1, 4, 4, False)
    later = launch + est.reduce_cycles(t, piece, 1, 4, 4, True)
    cast = launch + est.reduce_cycles(t, piece, 1, 4, 2, False)
    assert plan.reduce_cycles == first + (plan.serial - 1) * later + cast
    vectors = -(-piece // 4)  # an update costs one more cycle per loop of 4 floats
    assert later - first == t.num_worker_contexts * -(-vectors // t.num_worker_contexts)


def test_n_loop_costs_the_broadcast_once_and_the_b_columns_per_step():
    """Two N blocks of 256 columns, one M block: each tile receives the other half of its
    A block once, before the loop (and copies its own half), and holds its B columns: the
    loop's 32 steps exchange nothing more."""
    t = targets.ipu2(tiles_per_ipu=16)
    params = poplin.MatMulParams(1, 512, 256, 64, "float", "float", "float", 0.02, False)
    plan = poplin.plan_matmul(params, t)
    assert (plan.loop, plan.blocks_n, plan.blocks_m, plan.serial) == ("n", 2, 1, 32)
    a_block = plan.block_m * plan.step_k * 4
    half = a_block // 2
    copy = est.exchange_cycles(t, half) + -(-half // t.memcpy_bytes_per_cycle)
    assert plan.exchange_cycles == copy
    steps = plan.serial * (
        t.compute_set_launch_cycles
        + est.amp_cycles(t, 4, 4, 1, plan.block_m, plan.step_k, plan.step_n)
    )
    assert plan.compute_cycles == steps


def test_n_loop_broadcast_is_shared_by_super_tile_pairs(session):
    """Eight N blocks reading one A block, each holding an eighth of it: the copy before the
    loop sends each eighth once; a tile receives the seven eighths it lacks, the two tiles
    of a super-tile (share "a": consecutive N blocks) share the six eighths both lack, so it
    is busy for 7/8 - 3/8 = half the block (spec 4.1), plus copying its own eighth. The
    simulated run costs what the planner estimates."""
    opts = _opts(0.02, "TRAINING_FWD")  # a joint plan: swapped, M = 64 in the planned frame
    s = session(tiles=64)
    t = s.graph.target
    m, k, n = 1024, 256, 64
    plan = poplin.matmul_plan(t, poplar.FLOAT, (m, k), (k, n), options=opts)
    assert (plan.loop, plan.share, plan.blocks_n, plan.blocks_m) == ("n", "a", 8, 1)
    a_block = plan.block_m * plan.step_k * 4
    assert a_block % 16 == 0
    own = a_block // 8
    copy = est.exchange_cycles(t, a_block // 2) + -(-own // t.memcpy_bytes_per_cycle)
    assert plan.exchange_cycles == copy  # each tile holds its B columns: no step exchange
    a = poplin.create_matmul_input_lhs(s.graph, poplar.FLOAT, (m, k), (k, n), "a", opts)
    b = poplin.create_matmul_input_rhs(s.graph, poplar.FLOAT, (m, k), (k, n), "b", opts)
    c = poplin.matmul(s.graph, a, b, s.prog, options=opts)
    rng = np.random.default_rng(5)
    A, B = (rng.standard_normal(x).astype(np.float32) for x in ((m, k), (k, n)))
    got = s.run({"a": (a, A), "b": (b, B)}, {"c": c})["c"]
    np.testing.assert_allclose(got, A.astype(np.float64) @ B, rtol=0, atol=1e-4)
    assert s.cycles == plan.cycles
