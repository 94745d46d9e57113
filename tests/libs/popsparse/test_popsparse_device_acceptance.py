"""The acceptance matrix of spec section 5.3 on the device program: every case against a
dense float64 NumPy reference (Fwd ``Q = W S``, GradA ``dS = W^T dQ``, GradW
``dW = (dQ S^T)[mask]``), with a bit-exact partitioner round trip, forced spills and
imbalanced patterns that need the propagation phase. Tolerances are tighter than PopLibs'
(``conftest.TOLERANCE``), or exact with +-1 data."""

from __future__ import annotations

import numpy as np
import pytest

from tremula.libs.popsparse import dynamic

ALL = {"doGradAPass": True, "doGradWPass": True}
TYPES = [("half", "float"), ("half", "half"), ("float", "float")]  # data / partials


def _round_trip(run, pattern, impl) -> None:
    back = run.partitioner.sparsity_data_impl_to_coo_matrix(impl)
    want = pattern.to_coo()
    assert np.array_equal(back.row_indices, want.row_indices)
    assert np.array_equal(back.column_indices, want.column_indices)
    assert np.array_equal(back.nz_values, want.nz_values.astype(run.dtype.numpy))


def _case(
    h,
    rng,
    sparse_layer,
    block,
    dtype,
    partials,
    batch,
    in_,
    out,
    density,
    options,
    tiles=24,
    passes=None,
    pattern=None,
    bipolar=False,
):
    opts = {**options, "partialsType": partials}
    params = h.layer(block, density, batch, in_, out)
    run = sparse_layer(params, dtype, opts, tiles=tiles, passes=passes or h.PASSES)
    m = pattern if pattern is not None else h.random_coo(rng, out, in_, block, density)
    if bipolar:
        m = h.bipolar(m, rng)
    res = run.run(m, rng, bipolar_data=bipolar)
    _round_trip(run, m, res["impl"])
    return run, res


@pytest.mark.parametrize("exchange_buckets", [False, True], ids=["gradw-inputs", "gradw-buckets"])
@pytest.mark.parametrize("types", TYPES, ids=lambda t: "/".join(t))
@pytest.mark.parametrize("block", [4, 8, 16])
def test_cases_1_2_blocks_forced_spills(h, rng, sparse_layer, block, types, exchange_buckets):
    """#1 and #2: 1024 x 1024, batch 4, 10 %, T=24, forced spills, all passes."""
    opts = {
        **ALL,
        "partitioner.forceBucketSpills": True,
        "planConstraints": {"exchange": {"gradWExchangeBuckets": exchange_buckets}},
    }
    run, _ = _case(h, rng, sparse_layer, block, *types, 4, 1024, 1024, 0.1, opts)
    assert run.plan.exchange_plan.grad_w_exchange_buckets == exchange_buckets
    assert run.propagation_computes() > 0  # forced spills leave the Z groups


@pytest.mark.parametrize("types", TYPES, ids=lambda t: "/".join(t))
@pytest.mark.parametrize("block", [4, 8, 16])
def test_case_3_batch_8(h, rng, sparse_layer, block, types):
    opts = {**ALL, "partitioner.forceBucketSpills": True}
    _case(h, rng, sparse_layer, block, *types, 8, 1024, 1024, 0.1, opts, bipolar=True)


@pytest.mark.parametrize("types", TYPES, ids=lambda t: "/".join(t))
@pytest.mark.parametrize("block", [4, 8, 16])
def test_case_4_very_sparse_batch_64(h, rng, sparse_layer, block, types):
    """#4: 256 x 256, batch 64, 1 %: the GradW AMP method is a candidate."""
    opts = {**ALL, "partitioner.forceBucketSpills": True}
    run, _ = _case(h, rng, sparse_layer, block, *types, 64, 256, 256, 0.01, opts)
    assert run.plan.method.grad_w in ("GradWBlock", "GradWAMPBlock")


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("dtype", ["half", "float"])
@pytest.mark.parametrize("phase", ["fwd", "bwd", "wu"])
def test_case_5_element_wise_per_pass(h, rng, sparse_layer, phase, dtype, shared):
    """#5: 512 x 512, batch 4, 10 %, shared buckets or not, forced spills, AMP 0.6, each
    pass planned and run on its own."""
    passes = {"fwd": ("fwd",), "bwd": ("grad_a",), "wu": ("grad_w",)}[phase]
    opts = {
        "doGradAPass": phase == "bwd",
        "doGradWPass": phase == "wu",
        "sharedBuckets": shared,
        "partitioner.forceBucketSpills": True,
        "availableMemoryProportion": 0.6,
    }
    run, _ = _case(h, rng, sparse_layer, 1, dtype, "float", 4, 512, 512, 0.1, opts, passes=passes)
    assert run.propagation_computes() > 0


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("dtype", ["half", "float"])
def test_case_6_weight_update_exchanging_buckets(h, rng, sparse_layer, dtype, shared):
    opts = {
        "doGradWPass": True,
        "sharedBuckets": shared,
        "partitioner.forceBucketSpills": True,
        "planConstraints": {"exchange": {"gradWExchangeBuckets": True}},
    }
    _case(h, rng, sparse_layer, 1, dtype, "float", 4, 512, 512, 0.1, opts, passes=("grad_w",))


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("dtype", ["half", "float"])
def test_case_7_mnist_like_full_ipu(h, rng, sparse_layer, dtype, shared):
    """#7: 784 -> 300, batch 16, 10 %, all 1472 tiles of the Mk2, oversize 0.5."""
    opts = {**ALL, "metaInfoBucketOversizeProportion": 0.5, "sharedBuckets": shared}
    run, _ = _case(h, rng, sparse_layer, 1, dtype, "float", 16, 784, 300, 0.1, opts, tiles=1472)
    assert run.plan.num_buckets > 24


@pytest.mark.parametrize("dtype", ["half", "float"])
def test_case_8_weighted_area_needs_propagation(h, rng, sparse_layer, dtype):
    """#8: 1024 x 1024, batch 8, 10 %, rows [384, 400) x columns [128, 786) 8 times denser:
    the buckets of that area overflow and the propagation phase runs."""
    m = h.weighted_coo(rng, 1024, 1024, 1, 0.1, (384, 400, 128, 786), 8)
    run, res = _case(h, rng, sparse_layer, 1, dtype, "float", 8, 1024, 1024, 0.1, ALL, pattern=m)
    steps = dynamic.propagation_steps(
        run.plan.partition.xyz, run.partitioner.overflow_info(res["impl"])
    )
    assert sum(s.compute for s in steps) > 0
    assert run.propagation_computes() == 3 * sum(s.compute for s in steps)  # Fwd, GradA, GradW


def test_case_9_plan_constraints(h, rng, sparse_layer):
    opts = {"planConstraints": {"partition": {"x": 6, "y": 4, "z": 1}}}
    run, _ = _case(
        h, rng, sparse_layer, 1, "half", "float", 64, 512, 512, 0.01, opts, passes=("fwd",)
    )
    assert run.plan.partition.xyz == (6, 4, 1)


def test_case_10_spills_in_every_dimension(h, rng, sparse_layer):
    """#10: 1024 -> 1080, batch 4, 10 %, shared buckets, oversize 0.005."""
    opts = {**ALL, "sharedBuckets": True, "metaInfoBucketOversizeProportion": 0.005}
    run, res = _case(h, rng, sparse_layer, 1, "half", "float", 4, 1024, 1080, 0.1, opts)
    info = run.partitioner.overflow_info(res["impl"])
    assert info[0] > 1 or info[1] > 1


def test_case_11_blocks_16_no_structured_rearrangement(h, rng, sparse_layer):
    opts = {**ALL, "metaInfoBucketOversizeProportion": 0.2, "enableStructuredRearrangements": False}
    _case(h, rng, sparse_layer, 16, "half", "half", 16, 512, 544, 0.1, opts)


def test_case_12_determinism(h, rng, sparse_layer):
    """#12: 128 x 128, batch 4, 10 %, 8x8 float, forced spills: two runs give identical
    results and identical profiles."""
    opts = {**ALL, "partitioner.forceBucketSpills": True}
    params = h.layer(8, 0.1, 4, 128, 128)
    m = h.random_coo(rng, 128, 128, 8, 0.1)
    outs = []
    for _ in range(2):
        run = sparse_layer(params, "float", opts)
        res = run.run(m, np.random.default_rng(7))
        outs.append((res["got"], run.engine.get_execution_profile()))
    for name in ("fwd", "grad_a", "grad_w_vector"):
        assert np.array_equal(outs[0][0][name], outs[1][0][name])
    assert outs[0][1] == outs[1][1]


@pytest.mark.parametrize("in_", [32, 47, 512])
@pytest.mark.parametrize("out", [23, 128])
def test_case_13_dense_fallback_odd_sizes(h, rng, sparse_layer, in_, out):
    opts = {"planConstraints": {"useDense": True}}
    run, _ = _case(
        h, rng, sparse_layer, 1, "float", "float", 4, in_, out, 0.3, opts, passes=("fwd",)
    )
    assert run.plan.use_dense


@pytest.mark.parametrize(
    "dtype,z", [("float", 2), ("float", 4), ("float", 12), ("half", 4), ("half", 8), ("half", 28)]
)
@pytest.mark.parametrize("tiles", [1, 2])
def test_case_15_single_vertex_element_wise(h, rng, sparse_layer, dtype, z, tiles):
    """#15: 20 x 20 element-wise at 50 % on one vertex per pass (one or two buckets)."""
    opts = {**ALL, "planConstraints": {"partition": {"x": 1, "y": 1, "z": 1}} if tiles == 1 else {}}
    run, _ = _case(h, rng, sparse_layer, 1, dtype, "float", z, 20, 20, 0.5, opts, tiles=tiles)
    assert run.plan.num_buckets <= 2


@pytest.mark.parametrize(
    "dtype,z", [("float", 2), ("float", 12), ("float", 16), ("half", 4), ("half", 16), ("half", 28)]
)
@pytest.mark.parametrize("block,rows", [(4, 2), (8, 3), (16, 2)])
def test_case_15_single_vertex_blocks(h, rng, sparse_layer, dtype, z, block, rows):
    """#15: ``(rows b) x (2 b)`` blocks at 50 % on one vertex per pass."""
    opts = {**ALL, "planConstraints": {"partition": {"x": 1, "y": 1, "z": 1}}}
    partials = "half" if dtype == "half" and block == 8 else "float"
    _case(
        h, rng, sparse_layer, block, dtype, partials, z, 2 * block, rows * block, 0.5, opts, tiles=1
    )


@pytest.mark.parametrize("block", [1, 16])
def test_paper_size_4096(h, rng, sparse_layer, block):
    """An extra case of the paper's sizes: m = k = 4096, n = 4, density 1/32 on the Mk2."""
    _case(
        h,
        rng,
        sparse_layer,
        block,
        "half",
        "float",
        4,
        4096,
        4096,
        1 / 32,
        {},
        tiles=1472,
        passes=("fwd",),
    )
