"""The host partitioner (spec section 2): bit-exact round trips, spills, skewed patterns,
errors, GradW read-back, speed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tremula import target as targets
from tremula.libs.popsparse import (
    BucketOverflowError,
    COOMatrix,
    CSRMatrix,
    MetaInfoError,
    SparseFormatError,
    dynamic,
)


def _same(a: COOMatrix, b: COOMatrix) -> bool:
    """Equal patterns and bit-identical values (COO sorted row-major)."""
    a, b = a.to_coo(), b.to_coo()
    return (
        a.block_dimensions == b.block_dimensions
        and np.array_equal(a.row_indices, b.row_indices)
        and np.array_equal(a.column_indices, b.column_indices)
        and a.nz_values.dtype == b.nz_values.dtype
        and np.array_equal(a.nz_values.view(np.uint8), b.nz_values.view(np.uint8))
    )


def _cast(m: COOMatrix, dtype) -> COOMatrix:
    return COOMatrix(
        m.nz_values.astype(dtype),
        m.row_indices,
        m.column_indices,
        m.block_dimensions,
        m.num_rows,
        m.num_columns,
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([1, 4, 8, 16]),
    st.sampled_from(["half", "float"]),
    st.integers(1, 16),
    st.integers(1, 16),
    st.floats(0.0, 0.5),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**31),
)
def test_round_trip_is_bit_exact(h, b, typ, xb, yb, density, grad_w, shared, force, skew, seed):
    X, Y = xb * max(b, 4), yb * max(b, 4)
    rng = np.random.default_rng(seed)
    rect = (0, 1, 0, Y // b) if skew else None  # all non-zeros in one row of blocks
    m = h.random_coo(rng, X, Y, b, density, rect=rect)
    ratio = max(m.num_blocks * b * b, 1) / (X * Y)
    opts = {
        "doGradWPass": grad_w,
        "doGradAPass": True,
        "sharedBuckets": shared,
        "partitioner.forceBucketSpills": force,
    }
    part = dynamic.Partitioner(h.layer(b, ratio, 16, Y, X), typ, h.T24, opts)
    impl = part.create_sparsity_data_impl(m)
    assert impl.meta_info.dtype == np.uint16 and impl.nz_values.dtype == part.dtype
    assert impl.meta_info.size == part.plan.meta_info_elems
    assert impl.nz_values.size == part.plan.nz_elems
    want = _cast(m, part.dtype)
    assert _same(part.sparsity_data_impl_to_coo_matrix(impl), want)
    csr = part.sparsity_data_impl_to_csr_matrix(impl)
    assert np.array_equal(csr.nz_values, want.to_csr().nz_values)
    csc = part.sparsity_data_impl_to_csc_matrix(impl)
    assert np.array_equal(csc.offsets, want.to_csc().offsets)
    for other in (m.to_csr(), m.to_csc()):  # every input format gives the same buckets
        again = part.create_sparsity_data_impl(other)
        assert np.array_equal(again.meta_info, impl.meta_info)
        assert np.array_equal(again.nz_values, impl.nz_values)


@pytest.mark.parametrize(
    "b, typ", [(1, "float"), (1, "half"), (4, "half"), (8, "float"), (16, "half")]
)
def test_forced_spills_move_every_row_and_read_back(h, rng, b, typ):
    X, Y = 256, 512
    m = h.random_coo(rng, X, Y, b, 0.1)
    opts = {
        "partitioner.forceBucketSpills": True,
        "doGradWPass": True,
        "planConstraints": {"partition": {"x": 4, "y": 3, "z": 1}},
    }
    part = dynamic.Partitioner(h.layer(b, 0.1, 16, Y, X), typ, h.T24, opts)
    impl = part.create_sparsity_data_impl(m)
    assert _same(part.sparsity_data_impl_to_coo_matrix(impl), _cast(m, part.dtype))
    rows, cols = part.nz_slot_coordinates(impl.meta_info)
    x, y, _ = part.plan.bucket_coordinates()
    xs, ys = part.plan.starts("x"), part.plan.starts("y")
    slot_bucket = np.arange(rows.size) // part.plan.nz_elems_per_bucket
    used = rows >= 0
    home_x = np.searchsorted(xs, rows[used], side="right") - 1
    home_y = np.searchsorted(ys, cols[used], side="right") - 1
    moved = (home_x != x[slot_bucket[used]]) | (home_y != y[slot_bucket[used]])
    assert moved.all(), "no non-zero stays in a bucket of its own tile"
    overflow = part.overflow_info(impl)
    assert overflow[0] * overflow[1] * overflow[2] > part.plan.partition.z  # propagation
    steps = dynamic.propagation_steps(part.plan.partition.xyz, overflow)
    assert any(s.compute for s in steps)


@pytest.mark.parametrize("speed", [True, False])
def test_skewed_pattern_spills_behind_or_by_fill(h, rng, speed):
    """All non-zeros in the first rows: buckets of X partition 0 overflow; with
    optimiseForSpeed the spill goes to the partitions just behind (X distance 1, 2, ...)."""
    X = Y = 256
    m = h.random_coo(rng, X, Y, 1, 0.05, rect=(0, 16, 0, Y))
    opts = {
        "partitioner.optimiseForSpeed": speed,
        "planConstraints": {"partition": {"x": 8, "y": 3, "z": 1}},
    }
    part = dynamic.Partitioner(h.layer(1, 0.05, 8, Y, X), "float", h.T24, opts)
    impl = part.create_sparsity_data_impl(m)
    assert _same(part.sparsity_data_impl_to_coo_matrix(impl), m)
    oi = part.overflow_info(impl)
    distances = {2 * i + bit for i, w in enumerate(oi[3:]) for bit in (0, 1) if w >> bit & 1}
    if speed:  # buckets behind partition 0 are partitions 7, 6, ...: distances 1, 2, ...
        assert distances == set(range(oi[0]))
    assert oi[0] > 1


def test_overflow_errors(h, rng):
    X = Y = 128
    part = dynamic.Partitioner(
        h.layer(1, 0.05, 8, Y, X), "float", h.T24, {"metaInfoBucketOversizeProportion": 0}
    )
    too_many = h.random_coo(rng, X, Y, 1, 0.2)
    with pytest.raises(
        BucketOverflowError,
        match=r"Overflow in buckets: .* 3277 non-zero values "
        r"\(3277 blocks of 1\) .* planned for 820",
    ):
        part.create_sparsity_data_impl(too_many)
    # as many non-zeros as planned, but each in a row of its own (one column): the planner
    # sized the meta-info for rows of ~2 non-zeros, and the rows do not fit
    X, Y = 1024, 64
    column = COOMatrix(np.ones(X), np.arange(X), np.zeros(X, dtype=int), (1, 1), X, Y)
    tight = dynamic.Partitioner(
        h.layer(1, 1 / 64, 8, Y, X),
        "float",
        h.T24,
        {
            "metaInfoBucketOversizeProportion": 0,
            "planConstraints": {"partition": {"x": 1, "y": 1, "z": 1}},
        },
    )
    cap = tight.plan.fwd_meta_info_elems_per_bucket - 1
    kept = (cap - 39) // 3  # header + 6 workers, then 2 words per row + 1 per non-zero
    left = X - kept
    with pytest.raises(
        BucketOverflowError,
        match=rf"Overflow in buckets: {left} of 1024 non-zero blocks could not be "
        rf"placed \(overflow metainfo {39 + 3 * left}/{cap - 39 - 3 * kept} "
        rf"words free of {cap}, nz values {left}/{left} blocks free of 1024\);"
        rf" left over from PN 0 \(x=0, y=0, z=0\): {left} blocks",
    ):
        tight.create_sparsity_data_impl(column)


def test_input_errors(h, rng):
    part = dynamic.Partitioner(h.layer(4, 0.1, 8, 64, 32), "half", h.T24)
    with pytest.raises(SparseFormatError, match="Block dimensions of matrix do not match"):
        part.create_sparsity_data_impl(h.random_coo(rng, 32, 64, 8, 0.1))
    with pytest.raises(SparseFormatError, match="has 64 rows; the layer's weights have 32"):
        part.create_sparsity_data_impl(h.random_coo(rng, 64, 64, 4, 0.1))
    with pytest.raises(SparseFormatError, match=r"row indices\[0\] = 32 is out of range"):
        part.create_sparsity_data_impl(COOMatrix(np.ones(16), [32], [0], (4, 4)))
    with pytest.raises(SparseFormatError, match=r"column_indices\[0\] = 64 is out of range"):
        part.create_sparsity_data_impl(CSRMatrix(np.ones(16), [0] * 8 + [16], [64], (4, 4)))
    with pytest.raises(SparseFormatError, match="expected a COOMatrix"):
        part.create_sparsity_data_impl(np.eye(4))


def test_decode_errors(h, rng):
    part = dynamic.Partitioner(h.layer(1, 0.1, 8, 64, 64), "float", h.T24)
    impl = part.create_sparsity_data_impl(h.random_coo(rng, 64, 64, 1, 0.1))
    with pytest.raises(MetaInfoError, match="Invalid meta-info: 5 words"):
        part.sparsity_data_impl_to_coo_matrix(
            dynamic.SparsityDataImpl(impl.meta_info[:5], impl.nz_values)
        )
    with pytest.raises(MetaInfoError, match="Invalid nz values"):
        part.sparsity_data_impl_to_coo_matrix(
            dynamic.SparsityDataImpl(impl.meta_info, impl.nz_values[:-1])
        )
    bad = impl.meta_info.copy()
    bad[part.plan.num_overflow_info_elems] = 999  # first sub-group id
    with pytest.raises(MetaInfoError, match=r"bucket 0, sub-group at word 0: sub-group id 999"):
        part.sparsity_data_impl_to_coo_matrix(dynamic.SparsityDataImpl(bad, impl.nz_values))
    bad = impl.meta_info.copy()
    bad[part.plan.num_overflow_info_elems + 4] += 1  # offsetToNextSubGroup
    with pytest.raises(MetaInfoError, match="possibly corrupt or invalid metaInfo"):
        part.sparsity_data_impl_to_coo_matrix(dynamic.SparsityDataImpl(bad, impl.nz_values))


@pytest.mark.parametrize("b", [1, 8])
def test_grad_w_read_back(h, rng, b):
    """A GradW result has the nz layout: decoding it puts each slot's value at the slot's
    position (spec 2.12)."""
    m = h.random_coo(rng, 64, 128, b, 0.2)
    part = dynamic.Partitioner(
        h.layer(b, 0.2, 16, 128, 64), "float", h.T24, {"doGradWPass": True, "doGradAPass": True}
    )
    impl = part.create_sparsity_data_impl(m)
    grad = rng.standard_normal(impl.nz_values.size).astype(np.float32)
    rows, cols = part.nz_slot_coordinates(impl.meta_info)
    used = rows >= 0
    assert used.sum() == m.nz_values.size  # padding slots are -1
    assert not impl.nz_values[~used].any()
    dense_values = m.to_dense()
    assert np.array_equal(impl.nz_values[used], dense_values[rows[used], cols[used]])
    got = part.grad_w_to_coo_matrix(impl.meta_info, grad).to_dense()
    want = np.zeros_like(dense_values)
    want[rows[used], cols[used]] = grad[used]
    assert np.array_equal(got, want)


def test_actual_worker_costs_and_matmul(h, rng):
    m = h.random_coo(rng, 96, 64, 1, 0.15)
    mm = dynamic.MatMulParams.create_with_nz_ratio(dynamic.SparsityParams(), 0.15, 1, 96, 64, 8)
    for opts in (
        {"partitioner.useActualWorkerSplitCosts": True, "sharedBuckets": False},
        {"partitioner.optimiseForSpeed": False},
    ):
        part = dynamic.Partitioner(mm, "half", h.T24, opts)
        assert part.plan.options.do_grad_a_pass
        impl = part.create_sparsity_data_impl(m)
        assert _same(part.sparsity_data_impl_to_coo_matrix(impl), _cast(m, np.float16))


def test_determinism(h, rng):
    m = h.random_coo(rng, 128, 128, 8, 0.1)
    opts = {"partitioner.forceBucketSpills": True, "doGradWPass": True, "doGradAPass": True}
    a = dynamic.Partitioner(h.layer(8, 0.1, 4, 128, 128), "float", h.T24, opts)
    b = dynamic.Partitioner(h.layer(8, 0.1, 4, 128, 128), "float", h.T24, opts)
    ia, ib = a.create_sparsity_data_impl(m), b.create_sparsity_data_impl(m.to_csc())
    assert np.array_equal(ia.meta_info, ib.meta_info)
    assert np.array_equal(ia.nz_values, ib.nz_values)


def test_float_16x16_blocks_use_8x8_grain(h, rng):
    m = h.random_coo(rng, 64, 64, 16, 0.5)
    part = dynamic.Partitioner(h.layer(16, 0.5, 8, 64, 64), "float", h.T24)
    assert part.plan.block_dimensions == (8, 8)
    impl = part.create_sparsity_data_impl(m)
    back = part.sparsity_data_impl_to_coo_matrix(impl)
    assert back.block_dimensions == (16, 16) and _same(back, m)


def test_dense_fallback_round_trip(h, rng):
    m = h.random_coo(rng, 32, 48, 4, 0.3)
    part = dynamic.Partitioner(
        h.layer(4, 0.3, 8, 48, 32), "half", h.T24, {"planConstraints": '{"useDense": true}'}
    )
    impl = part.create_sparsity_data_impl(m)
    assert impl.meta_info.size == 0
    assert np.array_equal(impl.nz_values.reshape(48, 32), m.to_dense().T.astype(np.float16))
    assert _same(part.sparsity_data_impl_to_coo_matrix(impl), _cast(m, np.float16))


def test_partitioning_4096_round_trips():
    """New 4096 x 4096 patterns of density 1/16 (1M non-zeros) partition and read back
    (timed in benchmarks/bench_popsparse_host.py, target under 0.5 s)."""
    rng = np.random.default_rng(0)
    X = Y = 4096
    sp = dynamic.SparsityParams()
    params = dynamic.FullyConnectedParams.create_with_nz_ratio(sp, 1 / 16, 64, 1, Y, X)
    part = dynamic.Partitioner(params, "half", targets.ipu2(), {"doGradWPass": True})
    idx = rng.choice(X * Y, size=X * Y // 16, replace=False)
    m = COOMatrix(rng.standard_normal(idx.size).astype(np.float32), idx // Y, idx % Y, (1, 1), X, Y)
    back = part.sparsity_data_impl_to_coo_matrix(part.create_sparsity_data_impl(m))
    assert back.nz_values.size == X * Y // 16
    order = np.lexsort((m.column_indices, m.row_indices))
    got = np.lexsort((back.column_indices, back.row_indices))
    np.testing.assert_array_equal(back.row_indices[got], m.row_indices[order])
    np.testing.assert_array_equal(back.column_indices[got], m.column_indices[order])
    np.testing.assert_array_equal(back.nz_values[got], m.nz_values[order].astype(np.float16))


@pytest.mark.parametrize("b, force", [(1, False), (1, True), (4, False)])
def test_closed_form_fit_matches_the_search(h, rng, monkeypatch, b, force):
    """The closed-form prefix fit of additive costs places exactly what the generic
    binary search over sub-group costs places."""
    from tremula.libs.popsparse import bucketing

    X = Y = 256
    m = h.random_coo(rng, X, Y, b, 0.08, rect=(0, X // b // 5, 0, Y // b))
    opts = {"partitioner.forceBucketSpills": force, "doGradWPass": True}
    part = dynamic.Partitioner(h.layer(b, 0.08, 8, Y, X), "half", h.T24, opts)
    fast = part.create_sparsity_data_impl(m)
    monkeypatch.setattr(bucketing._Costing, "additive", property(lambda self: False))
    slow = part.create_sparsity_data_impl(m)
    assert part.overflow_info(fast)[0] > 1  # the pattern spills across X partitions
    assert np.array_equal(fast.meta_info, slow.meta_info)
    assert np.array_equal(fast.nz_values, slow.nz_values)


@pytest.mark.parametrize("px", [2, 7])
@pytest.mark.parametrize("py", [2, 7])
@pytest.mark.parametrize("pz", [2, 4])
@pytest.mark.parametrize("b", [1, 4])
@pytest.mark.parametrize("density", [0.1, 0.05])
def test_poplibs_partitioner_grid(h, px, py, pz, b, density):
    """The grid of PopLibs' SparsePartitionerTests (spec 5.2): 100 x 100, batch 8, splits
    x, y in {2, 7}, z in {2, 4}, excess 0.1; round trip and the spec decoder agree."""
    rng = np.random.default_rng(px * 1000 + py * 100 + pz * 10 + b)
    X = 100
    m = h.random_coo(rng, X, X, b, density)
    params = h.layer(b, m.nz_values.size / X**2, 8, X, X)
    opts = {
        "metaInfoBucketOversizeProportion": 0.1,
        "planConstraints": {"partition": {"x": px, "y": py, "z": pz}},
    }
    part = dynamic.Partitioner(params, "float", targets.ipu2(tiles_per_ipu=256), opts)
    impl = part.create_sparsity_data_impl(m)
    assert _same(part.sparsity_data_impl_to_coo_matrix(impl), m)
