"""popxl-addons' ``cross_entropy_sharded_loss`` (a C++ custom op served in Python:
``tremula/popxl/custom_ops/cross_entropy_sharded_loss.py``), through its public wrapper and
autodiff as GPT-J's LM head uses it, with the classes sharded over replica groups, against
a plain cross-entropy over the whole class axis in NumPy (the C++ semantics: each replica's
indices pre-adjusted to its shard, out-of-range ones picking nothing)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import popxl
from popxl import ops

ADDONS = Path(__file__).resolve().parents[3].parent / "shared" / "clients" / "popxl-addons"
if not (ADDONS / "popxl_addons").exists():
    pytest.skip(f"popxl-addons not found at {ADDONS}", allow_module_level=True)
if str(ADDONS) not in sys.path:
    sys.path.insert(0, str(ADDONS))

from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss  # noqa: E402

R, N, C = 4, 6, 5  # replicas, samples, classes per shard
RNG = np.random.default_rng(11)
LOGITS = RNG.normal(0, 3.0, (R, N, C)).astype(np.float32)
IGNORE = -100


def _groups(stride: int, size: int) -> list[list[int]]:
    firsts = [g0 for g0 in range(R) if g0 % (stride * size) < stride]
    return [[g0 + k * stride for k in range(size)] for g0 in firsts]


def _labels(size: int) -> np.ndarray:
    """One label per sample over the whole class axis of a group (the same on every member:
    the data is replicated), sample 1 ignored."""
    t = RNG.integers(0, C * size, N)
    t[1] = IGNORE
    return t


def reference(groups, labels, reduction: str) -> tuple[np.ndarray, np.ndarray]:
    """(loss per replica, dlogits per replica) of a plain cross-entropy over each group's
    concatenated classes, float64."""
    loss = np.zeros((R,) + ((N,) if reduction == "none" else ()))
    grads = np.zeros((R, N, C))
    for members in groups:
        x = np.concatenate([LOGITS[r] for r in members], axis=1).astype(np.float64)
        t = labels[members[0]]
        kept = t != IGNORE
        logp = x - x.max(axis=1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
        per = np.where(kept, -logp[np.arange(N), np.where(kept, t, 0)], 0.0)
        onehot = np.zeros_like(x)
        onehot[np.flatnonzero(kept), t[kept]] = 1
        d = (np.exp(logp) - onehot) * kept[:, None]
        if reduction == "mean":
            value, d = per.sum() / kept.sum(), d / kept.sum()
        else:
            value = per.sum() if reduction == "sum" else per
        for k, r in enumerate(members):
            loss[r] = value
            grads[r] = d[:, k * C : (k + 1) * C]
    return loss, grads


def _run(stride: int, size: int, reduction: str, dtype=np.float32):
    groups = _groups(stride, size)
    labels = np.zeros((R, N), np.int64)
    for members in groups:
        labels[members] = _labels(size)
    ir = popxl.Ir(replication=R)
    one_each = ir.replica_grouping(group_size=1)
    member = np.zeros(R, np.int64)
    for members in groups:
        member[members] = np.arange(size)
    # each replica's indices adjusted to its shard, as the model does before the op
    adjusted = np.where(labels == IGNORE, IGNORE, labels - member[:, None] * C).astype(np.int32)
    with ir.main_graph:
        x = popxl.variable(LOGITS.astype(dtype), name="logits", replica_grouping=one_each)
        idx = popxl.variable(adjusted, name="indices", replica_grouping=one_each)
        rg = ir.replica_grouping(stride=stride, group_size=size)

        def loss_fn(x, idx):
            ignore = popxl.constant(IGNORE, popxl.int32, name="ignore")
            return cross_entropy_sharded_loss(
                x, idx, ignore_index=ignore, replica_grouping=rg, reduction=reduction
            )

        g = ir.create_graph(loss_fn, x, idx)
        info = popxl.transforms.autodiff(g, grads_required=[g.inputs[0]])
        call = ops.call_with_info(g, x, idx)
        loss = call.outputs[0]
        seed = popxl.constant(np.ones(loss.shape, dtype), name="seed")
        (dx,) = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(call))
        streams = {}
        for name, t in (("loss", loss), ("dx", dx)):
            streams[name] = popxl.d2h_stream(t.shape, t.dtype, name=name)
            ops.host_store(streams[name], t)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    return {k: got[s] for k, s in streams.items()}, reference(groups, labels, reduction), g, info


@pytest.mark.parametrize("stride, size", [(1, 2), (2, 2), (1, 4)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_and_gradient_over_sharded_classes(stride, size, reduction) -> None:
    got, (loss, dx), fwd, info = _run(stride, size, reduction)
    np.testing.assert_allclose(got["loss"], loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["dx"], dx, rtol=1e-5, atol=1e-6)
    assert fwd.ops[0].opType() == "CrossEntropySharded"
    assert "CrossEntropyShardedGrad" in [op.opType() for op in info.graph.ops]


def test_half_precision() -> None:
    got, (loss, dx), _, _ = _run(1, 2, "mean", np.float16)
    assert got["loss"].dtype == np.float16
    np.testing.assert_allclose(got["loss"], loss, rtol=3e-3, atol=3e-3)
    np.testing.assert_allclose(got["dx"], dx, rtol=3e-3, atol=3e-3)


def test_the_op_reads_under_its_own_name_in_the_profile() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.name_scope("head"):
        x = popxl.variable(LOGITS[:2], name="x", replica_grouping=ir.replica_grouping(group_size=1))
        idx = popxl.variable(
            np.zeros((2, N), np.int32), replica_grouping=ir.replica_grouping(group_size=1)
        )
        loss = cross_entropy_sharded_loss(x, idx, reduction="none")
        s = popxl.d2h_stream(loss.shape, loss.dtype)
        ops.host_store(s, loss)
    (op,) = [op for op in ir.main_graph.ops if op.opType() == "CrossEntropySharded"]
    assert op.getAvailableMemoryProportion() == pytest.approx(0.4)
    op.setAvailableMemoryProportion(0.2)  # as popxl-addons' transform does
    assert op.getAvailableMemoryProportion() == pytest.approx(0.2)
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        names = session.engine.get_graph_profile()["computeSets"]["names"]
    mine = [n for n in names if n.startswith("head/CrossEntropySharded/")]
    assert any("negLogSoftmax" in n for n in mine) and any("lossPartial" in n for n in mine), names


def test_bad_shapes_are_refused_with_the_cpp_message() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.zeros((3, 4), np.float32))
        idx = popxl.variable(np.zeros(2, np.int32))
        with pytest.raises(ValueError, match="indices and logits must have the same number"):
            cross_entropy_sharded_loss(x, idx)
        assert not ir.main_graph.ops


def test_the_reference_gradient_is_the_losss_derivative() -> None:
    """The closed form the tests hold the op to, against central finite differences."""
    groups = _groups(1, 2)
    labels = np.zeros((R, N), np.int64)
    for members in groups:
        labels[members] = _labels(2)
    _, grads = reference(groups, labels, "sum")
    r, n, c, eps = 2, 3, 1, 1e-4
    saved = LOGITS[r, n, c]
    try:
        LOGITS[r, n, c] = saved + eps
        up = reference(groups, labels, "sum")[0][r]
        LOGITS[r, n, c] = saved - eps
        down = reference(groups, labels, "sum")[0][r]
    finally:
        LOGITS[r, n, c] = saved
    assert (up - down) / (2 * eps) == pytest.approx(grads[r, n, c], rel=1e-3, abs=1e-5)
