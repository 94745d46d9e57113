"""popxl-addons' ``group_quantize_decompress`` served in Python: the codelet's nibble
order, the scale and bias per group, through the binding and through popxl-addons' wrapper
(with its own compressor, and the ``dim`` transposes), the op's errors, its profile."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl.custom_ops import SERVED
from tremula.popxl.custom_ops import group_quantize_decompress as served
from tremula.popxl.custom_ops.group_quantize_decompress_codelet import (
    DecompressPacked4BitTensor,
    decompress_cycles,
)


def reference(packed: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """From the codelet: uint16 [aaaa|bbbb|cccc|dddd] -> a, b, c, d; then q * scale + bias
    (float16 arithmetic), groups laid end to end."""
    rows, groups, ids = packed.shape
    q = np.zeros((rows, groups, ids, 4), np.float16)
    for k in range(4):
        q[..., k] = (packed.astype(np.int64) // 16 ** (3 - k)) % 16
    q = q.reshape(rows, groups, ids * 4)
    return (q * scale.astype(np.float16) + bias.astype(np.float16)).reshape(rows, -1)


def _store(t):
    d = popxl.d2h_stream(t.shape, t.dtype)
    ops.host_store(d, t)
    return d


@pytest.mark.parametrize("rows, groups, ids", [(3, 4, 5), (8, 16, 200)])
def test_every_nibble_value_in_every_position_through_the_binding(
    rows, groups, ids, check_profile
) -> None:
    """Small (a few elements per tile, workers without work) and large (tile intervals
    split over six workers) packed tensors."""
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 2**16, size=(rows, groups, ids), dtype=np.uint16)
    packed[0, 0, :4] = [0x0123, 0x4567, 0x89AB, 0xCDEF]  # each nibble value, each place
    scale = rng.uniform(0.5, 2, size=(rows, groups, 1)).astype(np.float16)
    bias = rng.uniform(-1, 1, size=(rows, groups, 1)).astype(np.float16)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x, s, b = popxl.variable(packed), popxl.variable(scale), popxl.variable(bias)
        op = served.GroupQuantizeDecompressOp.createOpInGraph(
            g._pb_graph, {0: x.id, 1: s.id, 2: b.id}, {0: g._create_tensor_id("t_dec")}, None
        )
        y = popxl.Tensor._from_pb_tensor(op.outTensor(0))
        d = _store(y)
    assert y.shape == (rows, groups * ids * 4) and y.dtype == popxl.float16
    assert op.opType() == "GroupQuantizeDecompress"
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[d]
    want = reference(packed, scale, bias)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3)
    one = (np.arange(16, dtype=np.float16) * scale[0, 0, 0] + bias[0, 0, 0]).astype(np.float32)
    np.testing.assert_allclose(got[0, :16].astype(np.float32), one, rtol=2e-3)
    check_profile(session, "GroupQuantizeDecompress")
    names = session.engine.get_graph_profile()["vertexTypes"]["names"]
    assert DecompressPacked4BitTensor.name in names


@pytest.mark.parametrize("dim", [-1, 0])
def test_the_wrapper_decompresses_what_popxl_addons_compresses(addons, dim) -> None:
    gq = addons("group_quantize_decompress")
    rng = np.random.default_rng(1)
    w = rng.normal(size=(64, 6) if dim == 0 else (6, 64)).astype(np.float16)
    packed, scale, bias = gq.group_quantize_compress_numpy(w, 16, dim)
    ir = popxl.Ir()
    with ir.main_graph:
        args = [popxl.variable(a) for a in (packed, scale, bias)]
        y = gq.group_quantize_decompress(*args, dim=dim)
        d = _store(y)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[d]
    want = reference(packed, scale, bias)
    if dim == 0:
        want = want.T
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3)
    ours = gq.group_quantize_decompress_numpy(packed, scale, bias, dim)
    np.testing.assert_allclose(got.astype(np.float32), ours.astype(np.float32), rtol=2e-3)
    # 4-bit quantization of each group of 16: within half a step of the original
    step = np.abs(scale).max()
    assert np.abs(got.astype(np.float32) - w.astype(np.float32)).max() <= step / 2 + 1e-2


def test_identifier_is_served_and_the_op_is_not_differentiable() -> None:
    assert SERVED[("popxl.addons.ops", "GroupQuantizeDecompress", 1)] == served.__name__
    from tremula.popxl.ops.base import OPS

    assert not OPS["GroupQuantizeDecompress"].differentiable


def test_setup_errors() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    make = served.GroupQuantizeDecompressOp.createOpInGraph
    with g:
        x = popxl.variable(np.zeros((2, 3, 4), np.uint16))
        x2 = popxl.variable(np.zeros((2, 12), np.uint16))
        xf = popxl.variable(np.zeros((2, 3, 4), np.float16))
        s = popxl.variable(np.ones((2, 3, 1), np.float16))
        s_wide = popxl.variable(np.ones((2, 3, 2), np.float16))
        s_float = popxl.variable(np.ones((2, 3, 1), np.float32))
        s_bad = popxl.variable(np.ones((2, 4, 1), np.float16))
        pb = g._pb_graph
        with pytest.raises(OpSetupError, match="x should have rank 3"):
            make(pb, {0: x2.id, 1: s.id, 2: s.id}, {})
        with pytest.raises(OpSetupError, match="groupScale shape at last dimension should be 1"):
            make(pb, {0: x.id, 1: s_wide.id, 2: s.id}, {})
        with pytest.raises(OpSetupError, match=r"groupBias of shape \(2, 4, 1\) does not"):
            make(pb, {0: x.id, 1: s.id, 2: s_bad.id}, {})
        with pytest.raises(OpSetupTypeError, match="groupScale must be float16"):
            make(pb, {0: x.id, 1: s_float.id, 2: s.id}, {})
        with pytest.raises(OpSetupTypeError, match="x must be uint16"):
            make(pb, {0: xf.id, 1: s.id, 2: s.id}, {})
    assert not [op for op in g.ops if op.type == "GroupQuantizeDecompress"]


def test_cycle_estimate_is_the_worker_shape_of_graphcores_figures() -> None:
    class Info:  # the two things the estimator reads
        def lengths(self, name):
            assert name == "input"
            return np.array([0, 1, 7, 100])

    np.testing.assert_array_equal(decompress_cycles(Info()), [100, 130, 310, 3100])


def test_replicas_decompress_their_own_shards(addons) -> None:
    """Tensor-parallel use (GPT-J's LinearGQ): each replica holds its own packed shard,
    scale and bias (variables grouped one replica per group) and decompresses them."""
    gq = addons("group_quantize_decompress")
    rng = np.random.default_rng(4)
    shards = [
        gq.group_quantize_compress_numpy(rng.normal(size=(4, 32)).astype(np.float16), 8, -1)
        for _ in range(2)
    ]
    packed, scale, bias = (np.stack([s[i] for s in shards]) for i in range(3))
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        per_replica = ir.replica_grouping(group_size=1)
        args = [popxl.variable(a, replica_grouping=per_replica) for a in (packed, scale, bias)]
        y = gq.group_quantize_decompress(*args)
        d = _store(y)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[d]
    assert got.shape == (2, 4, 32)
    for r in range(2):
        want = reference(packed[r], scale[r], bias[r])
        np.testing.assert_allclose(got[r].astype(np.float32), want.astype(np.float32), rtol=2e-3)
    assert not np.allclose(got[0], got[1])
