"""More of popxl-addons' public API as its users call it, against NumPy: its cross-entropy
with gradient, its host stream helpers, the replica-sharded reduction graph, and the
transforms that set matmul options through the IR bindings."""

from __future__ import annotations

import numpy as np
import popxl_addons as addons
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.rts import reduce_replica_sharded_graph
from popxl_addons.transforms import disable_fc_pass, set_available_memory_proportion_by_ipu

import popxl
from popxl import ops

RNG = np.random.default_rng(5)


def store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    d2h = popxl.d2h_stream(t.shape, t.dtype)
    ops.host_store(d2h, t)
    return d2h


def test_cross_entropy_with_grad_matches_numpy() -> None:
    x0 = RNG.standard_normal((4, 5)).astype(np.float32)
    labels = np.array([0, 3, 1, 4], np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0)
        lab = popxl.variable(labels, popxl.int32)
        loss, dx = addons.cross_entropy_with_grad(x, lab, loss_scaling=2.0)
        streams = store(loss), store(dx)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    p = np.exp(x0 - x0.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    grad = p.copy()
    grad[np.arange(4), labels] -= 1
    np.testing.assert_allclose(out[streams[0]], -np.log(p[np.arange(4), labels]).mean(), rtol=1e-5)
    np.testing.assert_allclose(out[streams[1]], grad / 4 * 2, rtol=1e-4, atol=1e-6)


def test_host_load_and_store_helpers() -> None:
    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        _, h2d, x = addons.host_load(x0, popxl.float32, "x")
        d2h = addons.host_store(x * 2)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({h2d: x0})
    np.testing.assert_allclose(out[d2h], x0 * 2)


def test_replica_sharded_reduction_graph() -> None:
    """Each replica's gradient summed over the 2 replicas, replica r keeping shard r."""
    data = RNG.standard_normal((2, 8)).astype(np.float32)
    ir = popxl.Ir()
    ir.replication_factor = 2
    with ir.main_graph:
        h2d = popxl.h2d_stream((8,), popxl.float32, "g")
        grads = NamedTensors.from_dict({"g": ops.host_load(h2d, "g")})
        graph, names = reduce_replica_sharded_graph(grads)
        (shard,) = graph.bind(grads).call()
        d2h = store(shard)
    assert names == ["g"] and shard.shape == (4,)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({h2d: data})
    np.testing.assert_allclose(out[d2h], data.sum(0).reshape(2, 4), rtol=1e-6)


def test_matmul_settings_transforms_reach_nested_graphs() -> None:
    a0, b0 = RNG.standard_normal((2, 4, 4)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        a, b = popxl.variable(a0), popxl.variable(b0)
        g = ir.create_graph(lambda p, q: p @ q, a, b)
        (c,) = ops.call(g, a, b)
        d2h = store(c)
    set_available_memory_proportion_by_ipu(ir, [0.3])
    disable_fc_pass(ir)
    (mm,) = g._pb_graph.getOps()
    assert abs(mm.getAvailableMemoryProportion() - 0.3) < 1e-6 and not mm.useFullyConnectedPass()
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    np.testing.assert_allclose(out[d2h], a0 @ b0, rtol=1e-5, atol=1e-6)
