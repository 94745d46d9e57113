"""The element-wise Fwd vertex estimate (spec 3.6) against hand-computed values: the fast
paths of the worker, the supervisor's walk, the whole vertex the planner and the device
charge, and the same worker costed on an actual pattern's rows split as the partitioner
splits them (the imbalance a uniform estimate leaves out); the AMP block Fwd vertex."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import target as targets
from tremula.libs.popsparse import estimators as est

MK2 = targets.ipu2()


@pytest.mark.parametrize(
    "size, z, rows, nz, expected",
    [
        (2, 4, 3, 43, 30 + 3 * (11 + 2 * 43)),  # half, Z = 4: 30 and 11 + 2 numY
        (2, 8, 2, 10, 28 + 2 * (15 + 3 * 10)),  # half, Z = 8: 28 and 15 + 3 numY
        (4, 4, 5, 7, 25 + 5 * (13 + 3 * 7)),  # float, Z = 4: 25 and 13 + 3 numY
        (4, 2, 1, 9, 27 + 1 * (11 + 2 * 9)),  # float, Z = 2: 27 and 11 + 2 numY
        (2, 4, 0, 9, 0),  # a worker without rows costs nothing
    ],
)
def test_fwd_worker_fast_paths(size, z, rows, nz, expected):
    assert int(est.ew_fwd_worker(size, z, rows, nz)) == expected


def test_fwd_worker_general_z_is_three_cycles_per_chunk():
    """Off the fast paths: 3 cycles per nz per chunk of 8 half (4 float) of Z, plus the
    loop; the difference of two Z's of whole chunks is exactly 3 per chunk per nz."""
    for size, chunk in ((2, 8), (4, 4)):
        a = int(est.ew_fwd_worker(size, 8 * chunk, 2, 10))
        b = int(est.ew_fwd_worker(size, 4 * chunk, 2, 10))
        assert a - b == 2 * 10 * 3 * 4


def test_the_fwd_worker_as_the_assembly_runs_it():
    """``SparseDenseMatMulElementWise_half_float.S`` / ``_float_float.S`` off the Z = 4 / 8
    fast paths: per row 12 bundles, per 8-wide (half) / 4-wide (float) chunk of Z 17 / 12
    bundles, plus 3 per non-zero per chunk; PopLibs' estimator (the planner's) charges its
    loop constant once per row, 16 (half) / 12 (float), and 3 per chunk per non-zero."""
    assert [int(a) for a in est.ew_fwd_terms(2, 64, assembly=True)] == [30, 12 + 8 * 17, 3 * 8]
    assert [int(a) for a in est.ew_fwd_terms(4, 16, assembly=True)] == [30, 12 + 4 * 12, 3 * 4]
    assert [int(a) for a in est.ew_fwd_terms(2, 64)] == [30, 16, 3 * 8]
    assert [int(a) for a in est.ew_fwd_terms(4, 16)] == [30, 12, 3 * 4]
    for size, z in ((2, 8), (2, 4), (4, 4), (4, 2)):  # the fast paths match the estimator
        fast = [int(a) for a in est.ew_fwd_terms(size, z)]
        assert [int(a) for a in est.ew_fwd_terms(size, z, assembly=True)] == fast
    # a worker over 3 rows of 5 non-zeros, half, Z = 16 (2 chunks)
    assert int(est.ew_fwd_worker(2, 16, 3, 5, assembly=True)) == 30 + 3 * (12 + 2 * 17 + 6 * 5)


def test_supervisor_walk():
    """``30 + 32 (buckets - withInfo) avgSG + withInfo (47 (avgFirstMatch + 1) + 46)``."""
    assert int(est.ew_supervisor(30, 1, 1)) == 30 + 47 + 46
    assert int(est.ew_supervisor(30, 4, 2, 3)) == 30 + 32 * 2 * 3 + 2 * (47 * 2 + 46)


def test_vertex_is_supervisor_plus_six_slowest_workers():
    """18 uniform rows of 43 nz, half, Z = 4: 3 rows per worker (more than 12 rows:
    contiguous ranges), the vertex is the supervisor plus 6 x the worker."""
    cycles = est.ew_product_cycles(
        MK2, 2, np.array([1]), 4, np.array([18]), np.array([18 * 43]), 1, False
    )
    assert int(cycles[0]) == (30 + 47 + 46) + 6 * (30 + 3 * (11 + 2 * 43))


def test_split_worker_on_uniform_rows_equals_the_uniform_estimate():
    rows = np.full(18, 43)
    assert est.ew_fwd_split_worker(MK2, 2, 4, 1, rows) == int(est.ew_fwd_worker(2, 4, 3, 43))


def test_split_worker_row_ranges_by_hand():
    """14 rows (more than 12): ranges balanced on the nz prefix. nnz = [20, 2 x 13],
    total 46: workers start at rows 0, 1, 1, 3, 7, 11 (worker 1 gets none); the slowest
    is rows 3-6 (4 rows, 8 nz): 30 + 4 x 11 + 2 x 8 = 90, not row 0 alone (81)."""
    rows = np.array([20] + [2] * 13)
    assert est.ew_fwd_split_worker(MK2, 2, 4, 1, rows) == 90


def test_split_worker_rectangle_by_hand():
    """2 rows (nnz 3, 5) x 4 Z grains of 4 half: the rectangle split gives pieces
    (row, grains) (0, 1), (0, 1), (1, 1), (1, 1), (0, 2), (1, 2); the slowest is row 1
    over 2 grains (Z = 8 fast path): 28 + 15 + 3 x 5 = 58."""
    assert est.ew_fwd_split_worker(MK2, 2, 4, 4, np.array([3, 5])) == 58


def test_zeroing_on_the_device_is_one_64_bit_store_per_worker_cycle():
    """18 x 4 float partials (288 bytes, 36 words): 6 x (20 + ceil(36 / 6)) = 156."""
    assert int(est.zero_cycles(MK2, 288)) == 6 * (20 + 6)
    assert int(est.zero_cycles(MK2, 0)) == 0


def test_the_planner_charges_zeroing_with_the_partials_per_worker():
    """popsparse-paper-method.md 2: ``zeroPartialsCycles`` gets ``ceil(partialsPerTile /
    W)`` and returns it times W. The spec's 16x16 half layer at n = 1024 (tiles of 192
    output rows x 32 batch columns: 6,144 float partials) is charged 6,144 cycles, not the
    36,864 (6 x 6,144) of the partials per tile times the workers."""
    assert int(est.planner_zero_cycles(MK2, 192 * 32)) == 6144
    assert int(est.planner_zero_cycles(MK2, 72)) == 72
    assert est.planner_zero_cycles(MK2, np.array([0, 5, 7])).tolist() == [0, 6, 12]


def test_block_fwd_vertex_by_hand():
    """AMP block Fwd, 16x16 half blocks, float partials, Z = 32 (6 per worker: inner
    overhead 25, 4 cycles per Z), 4 buckets with a matching sub-group of 3 blocks in 2
    block rows. Mk2 (16 conv units): 1 weight load; supervisor 40 + 4 (46 + 56) + 4 (3
    (256 / 4 + 3 + 12) + 2 x 4); worker 3 (25 + 6 x 4) - 3 (one block retains its row)."""
    cycles = est.block_fwd_cycles(MK2, 16, (2, 4), 32, 3, 2, 4, 4)
    sup = 40 + 4 * (46 + 56) + 4 * (3 * (64 + 3 + 12) + 2 * 4)
    assert int(cycles) == sup + 6 * 4 * (3 * (25 + 6 * 4) - 3)


def test_block_fwd_weight_loads_follow_the_conv_units():
    """Two weight loads for 16x16 blocks where the AMP has 8 conv units (Mk1, half in):
    12 supervisor cycles more per block, and the worker's per-block term, the retained
    row's -3 included, twice (spec 3.6: ``weightLoads (inner + Z cyclesPerZ - 3
    retainX)``)."""
    mk1 = targets.ipu1()
    assert est.amp_weight_loads(mk1, 16, 2, 4) == 2 and est.amp_weight_loads(MK2, 16, 2, 4) == 1
    assert est.amp_weight_loads(mk1, 8, 2, 4) == 1
    eight_for_float_partials = targets.ipu2(fp16_in_fp32_out_conv_units_per_tile=8)
    assert est.amp_weight_loads(eight_for_float_partials, 16, 2, 4) == 2
    assert est.amp_weight_loads(eight_for_float_partials, 16, 2, 2) == 1
    cycles = est.block_fwd_cycles(mk1, 16, (2, 4), 32, 3, 2, 4, 4)
    sup = 40 + 4 * (46 + 56) + 4 * (3 * (64 + 3 + 24) + 2 * 4)
    assert int(cycles) == sup + 6 * 4 * 2 * (3 * (25 + 6 * 4) - 3)


def test_block_supervisor_skips_a_bucket_in_33_cycles():
    """``40 + 33 (buckets - withInfo) avgSG + withInfo (46 (avgFirst + 1) + 56)``."""
    assert int(est.ew_supervisor(40, 4, 2, search=46, found=56, skip=33)) == 40 + 66 + 2 * 102


def test_the_planner_zeroing_in_a_plan_cost(monkeypatch):
    """The spec's worked 16x16 half layer (m = k = 4096, n = 1024, d = 1/16, partition 22 x
    2 x 32: tiles of 192 rows x 32 batch columns, Mk2): its Fwd estimate holds 6,144
    cycles of zeroing, the partials of one tile."""
    from tremula.libs.popsparse import dynamic

    sp = dynamic.SparsityParams(block_dimensions=(16, 16))
    params = dynamic.FullyConnectedParams.create_with_nz_ratio(sp, 1 / 16, 1024, 1, 4096, 4096)
    with_zeroing = dynamic.estimate_cost(MK2, "half", params, {}, (22, 2, 32))
    monkeypatch.setattr(est, "planner_zero_cycles", lambda target, n: np.zeros_like(n))
    without = dynamic.estimate_cost(MK2, "half", params, {}, (22, 2, 32))
    assert with_zeroing is not None and without is not None
    assert with_zeroing.fwd_cycles - without.fwd_cycles == 192 * 32
