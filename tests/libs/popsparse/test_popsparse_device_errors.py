"""Bad input to the device functions (spec 3, 5.3's error cases and the issue): clear
errors before the graph changes; corrupt meta-info is named when the program reads it."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.libs.popsparse import (
    BucketOverflowError,
    COOMatrix,
    MetaInfoError,
    PlanningError,
    PopsparseError,
    SparseFormatError,
    dynamic,
)

OPTS = {"doGradAPass": True}


@pytest.fixture
def graph():
    device = poplar.IPUModel("ipu2", tiles_per_ipu=24).create_device()
    return poplar.Graph(device.target)


def test_batch_not_a_multiple_of_the_vector_width(h, graph):
    params = h.layer(1, 0.1, 3, 64, 64)
    with pytest.raises(PlanningError, match="multiple of 2 if using fp32, and 4 for fp16"):
        dynamic.create_fully_connected_weights(graph, poplar.HALF, params)


@pytest.mark.parametrize("dims", [(3, 3), (4, 8), (6, 6)])
def test_block_sizes(dims):
    with pytest.raises(PopsparseError, match="block_dimensions"):
        dynamic.SparsityParams(dynamic.SparsityType.Block, block_dimensions=dims)


def test_groups(h):
    with pytest.raises(PopsparseError, match="num_groups"):
        dynamic.FullyConnectedParams.create_with_nz_ratio(dynamic.SparsityParams(), 0.1, 4, 2, 8, 8)


def test_overflow_of_a_skewed_pattern(h, rng):
    params = h.layer(1, 0.1, 8, 256, 128)
    opts = {
        "metaInfoBucketOversizeProportion": 0.0,
        "planConstraints": {"partition": {"x": 8, "y": 3, "z": 1}},  # 16 rows: 2 X partitions
    }
    part = dynamic.Partitioner(params, "float", h.T24, opts)
    m = h.random_coo(rng, 128, 256, 1, 0.1, rect=(0, 16, 0, 205))  # all in 16 rows
    with pytest.raises(BucketOverflowError, match=r"Overflow in buckets: .* could not be placed"):
        part.create_sparsity_data_impl(m)


def test_more_non_zeros_than_planned(h, rng):
    part = dynamic.Partitioner(h.layer(1, 0.05, 8, 256, 128), "float", h.T24)
    with pytest.raises(BucketOverflowError, match="planned for"):
        part.create_sparsity_data_impl(h.random_coo(rng, 128, 256, 1, 0.2))


@pytest.mark.parametrize(
    "rows,cols,match",
    [([0, 128], [0, 4], "out of range"), ([0, 2], [0, 4], "not a multiple of the block")],
)
def test_indices_out_of_range_or_not_aligned(h, rows, cols, match):
    with pytest.raises(SparseFormatError, match=match):
        m = COOMatrix(np.ones(32, np.float32), rows, cols, (4, 4), 128, 128)
        dynamic.Partitioner(h.layer(4, 0.1, 8, 128, 128), "float", h.T24).create_sparsity_data_impl(
            m
        )


def _added(graph) -> tuple[int, int]:
    st = graph.state
    return len(st.variables), len(st.compute_sets)


@pytest.mark.parametrize(
    "other",
    [
        {"options": {"doGradAPass": False}},
        {"options": {**OPTS, "metaInfoBucketOversizeProportion": 0.5}},
        {"batch": 16},
        {"density": 0.2},
    ],
    ids=["options", "oversize", "batch", "density"],
)
def test_weights_used_with_other_params_or_options(h, graph, other):
    params = h.layer(4, 0.1, 8, 64, 64)
    w = dynamic.create_fully_connected_weights(graph, poplar.FLOAT, params, OPTS)
    use = h.layer(4, other.get("density", 0.1), other.get("batch", 8), 64, 64)
    opts = other.get("options", OPTS)
    act = graph.add_variable(poplar.FLOAT, (use.batch_size, 64), "act", mapping="linear")
    before = _added(graph)
    with pytest.raises(PopsparseError, match="created with"):
        dynamic.fully_connected_fwd(graph, w, act, use, poplar.Sequence(), opts)
    assert _added(graph) == before  # a refused call adds nothing


def test_operands_of_the_wrong_shape_or_type(h, graph):
    params = h.layer(1, 0.1, 8, 64, 32)
    w = dynamic.create_fully_connected_weights(graph, poplar.FLOAT, params)
    prog = poplar.Sequence()
    bad_shape = graph.add_variable(poplar.FLOAT, (64, 8), "act_t", mapping="linear")
    with pytest.raises(
        PopsparseError, match=r"activations must be a float tensor of shape \[8, 64\]"
    ):
        dynamic.fully_connected_fwd(graph, w, bad_shape, params, prog)
    half = graph.add_variable(poplar.HALF, (8, 64), "act_h", mapping="linear")
    with pytest.raises(PopsparseError, match="activations must be a float"):
        dynamic.fully_connected_fwd(graph, w, half, params, prog)
    short = dynamic.SparseTensor(w.meta_info[1:], w.nz_values)
    act = graph.add_variable(poplar.FLOAT, (8, 64), "act", mapping="linear")
    with pytest.raises(PopsparseError, match="meta_info must be an unsigned short tensor"):
        dynamic.fully_connected_fwd(graph, short, act, params, prog)
    with pytest.raises(PopsparseError, match=r"weights must be a dynamic\.SparseTensor"):
        dynamic.fully_connected_fwd(graph, (w.meta_info, w.nz_values), act, params, prog)
    with pytest.raises(PopsparseError, match="grad_out must be"):
        dynamic.fully_connected_grad_a(graph, w, act, params, prog)
    with pytest.raises(PopsparseError, match="unknown option"):
        dynamic.fully_connected_fwd(graph, w, act, params, prog, {"doGradBPass": True})


def test_matmul_errors(h, graph):
    sp = dynamic.SparsityParams()
    params = dynamic.MatMulParams.create_with_nz_ratio(sp, 0.1, 1, 32, 64, 8)
    lhs = dynamic.create_sparse_dense_matmul_lhs(graph, poplar.FLOAT, params)
    rhs = graph.add_variable(poplar.FLOAT, (1, 32, 8), "rhs", mapping="linear")
    with pytest.raises(PopsparseError, match=r"rhs must be \[1\]\[64\]\[8\]"):
        dynamic.sparse_dense_matmul(graph, lhs, rhs, poplar.Sequence())
    plain = dynamic.SparseTensor(lhs.meta_info, lhs.nz_values)
    with pytest.raises(PopsparseError, match="records no MatMulParams"):
        dynamic.sparse_dense_matmul(graph, plain, rhs, poplar.Sequence(), transpose_lhs=True)
    fc = h.layer(1, 0.1, 8, 64, 32)
    act = graph.add_variable(poplar.FLOAT, (8, 64), "act", mapping="linear")
    with pytest.raises(PopsparseError, match="created with"):
        dynamic.fully_connected_fwd(graph, lhs, act, fc, poplar.Sequence())


def test_corrupt_meta_info_is_named_when_read(h, rng, sparse_layer):
    run = sparse_layer(h.layer(1, 0.1, 8, 128, 64), "float", {}, passes=("fwd",))
    impl = run.partitioner.create_sparsity_data_impl(h.random_coo(rng, 64, 128, 1, 0.1))
    meta = impl.meta_info.copy()
    head = run.plan.num_overflow_info_elems
    meta[head : head + run.plan.meta_info_elems_per_bucket] = 7  # no terminator, bad header
    run.engine.write_tensor("meta_info", meta)
    run.engine.write_tensor("nz_values", impl.nz_values)
    with pytest.raises(MetaInfoError, match="Invalid meta-info read on the device"):
        run.engine.run()


@pytest.mark.parametrize("shift", [1, 4096])
def test_block_offsets_off_the_grain_or_the_tile_are_named(h, rng, sparse_layer, shift):
    """A block whose column offset is not a multiple of the block, or lies past the tile,
    is refused when the vertex reads it."""
    run = sparse_layer(h.layer(4, 0.1, 8, 128, 64), "float", {}, passes=("fwd",))
    impl = run.partitioner.create_sparsity_data_impl(h.random_coo(rng, 64, 128, 4, 0.1))
    meta = impl.meta_info.copy()
    per = run.plan.meta_info_elems_per_bucket
    starts = run.plan.num_overflow_info_elems + per * np.arange(run.plan.num_buckets)
    at = int(starts[meta[starts] != 0][0])  # a bucket holding a sub-group
    first_row = at + 7 + 4 * int(meta[at + 6])  # block sub-group: 7 header words
    meta[first_row + 2] += shift  # the column offset of the row's first block
    run.engine.write_tensor("meta_info", meta)
    run.engine.write_tensor("nz_values", impl.nz_values)
    with pytest.raises(MetaInfoError, match=r"lies outside the .* tile .* or off its column grain"):
        run.engine.run()
