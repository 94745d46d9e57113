"""popxl-addons' ``cross_entropy_sharded_wr_loss`` (a C++ custom op served in Python:
``tremula/popxl/custom_ops/cross_entropy_sharded_wr_loss.py``): the classes sharded over
the IPUs of one replica, through its public wrapper and autodiff, against a plain
cross-entropy over the whole class axis in NumPy (the C++ semantics: the indices are the
true classes, the same on every shard; the loss on the first shard's IPU)."""

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

from popxl_addons.ops.cross_entropy_sharded_wr_loss import (  # noqa: E402
    cross_entropy_sharded_wr_loss,
)

N = 5
RNG = np.random.default_rng(5)


def reference(shards: list[np.ndarray], labels: np.ndarray):
    x = np.concatenate(shards, axis=1).astype(np.float64)
    logp = x - x.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    ok = (labels >= 0) & (labels < x.shape[1])
    loss = np.where(ok, -logp[np.arange(N), np.where(ok, labels, 0)], 0.0)
    onehot = np.zeros_like(x)
    onehot[np.flatnonzero(ok), labels[ok]] = 1
    d = np.exp(logp) - onehot
    return loss, np.split(d, np.cumsum([s.shape[1] for s in shards])[:-1], axis=1)


@pytest.mark.parametrize("widths", [(4, 4), (3, 5, 2)])
def test_loss_and_gradients_per_shard(widths) -> None:
    shards = [RNG.normal(0, 2.0, (N, c)).astype(np.float32) for c in widths]
    labels = RNG.integers(0, sum(widths), N)
    labels[2] = -1  # out of every shard's range: no loss, no gradient
    ir = popxl.Ir()
    with ir.main_graph:
        xs, idx = [], []
        for k, s in enumerate(shards):
            with popxl.ipu(k):
                xs.append(popxl.variable(s, name=f"logits{k}") + 0)
                idx.append(popxl.variable(labels.astype(np.int32), name=f"labels{k}") + 0)
        n = len(widths)

        def loss_fn(*t):  # a subgraph's inputs have no IPU of their own: name them
            return cross_entropy_sharded_wr_loss(list(t[:n]), list(t[n:]), ipus=range(n))

        g = ir.create_graph(loss_fn, *xs, *idx)
        info = popxl.transforms.autodiff(g, grads_required=g.inputs[:n])
        call = ops.call_with_info(g, *xs, *idx)
        with popxl.ipu(0):
            seed = popxl.constant(np.ones(N, np.float32), name="seed") + 0
        grads = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(call))
        streams = []
        for k, t in enumerate([call.outputs[0], *grads]):
            with popxl.ipu(0 if k == 0 else k - 1):
                streams.append(popxl.d2h_stream(t.shape, t.dtype, name=f"out{k}"))
                ops.host_store(streams[-1], t)
    fwd_op = g.ops[0]
    assert fwd_op.opType() == "CrossEntropyShardedWR" and fwd_op.getIpus() == list(range(n))
    assert [fwd_op.ipu_of(t) for t in fwd_op.outputs] == [0, *range(n)]
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
        names = session.engine.get_graph_profile()["computeSets"]["names"]
    loss, dx = reference(shards, labels)
    np.testing.assert_allclose(out[streams[0]], loss, rtol=1e-5, atol=1e-6)
    for k in range(n):
        np.testing.assert_allclose(out[streams[1 + k]], dx[k], rtol=1e-5, atol=1e-6)
    assert any(s.startswith("CrossEntropyShardedWR/") for s in names), names
    assert any(s.startswith("CrossEntropyShardedGradWR/") for s in names), names
