"""Consecutive float32 updates ``data += b * deltas`` of adjacent memory joined into one
replayed run (issue 27: an optimiser step over variables laid out one after the other is
one add, not one per variable): the bits of the updates apart, and updates that read what
an earlier one writes kept apart."""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops
from tremula.libs.popops.codelets.scaled_add import Axpy

F32 = np.float32


def _axpy(data, deltas, b):
    tmp = np.empty(deltas.shape, F32)
    return Axpy([(np.array([[b]], F32), deltas, tmp)], data, tmp)


def test_adjacent_updates_join_with_the_bits_of_the_updates_apart():
    rng = np.random.default_rng(5)
    store = rng.standard_normal((1, 40)).astype(F32)
    grads = rng.standard_normal((1, 40)).astype(F32)
    want = store.copy()
    pieces = [(0, 7, -0.05), (7, 20, -0.05), (20, 21, 0.3), (21, 40, -1.7)]
    for lo, hi, b in pieces:  # the reference: NumPy's float32 product, then the add
        want[:, lo:hi] = want[:, lo:hi] + F32(b) * grads[:, lo:hi][:, ::-1]
    runs = [_axpy(store[:, lo:hi], grads[:, lo:hi][:, ::-1], b) for lo, hi, b in pieces]
    joined = runs[0]
    for run in runs[1:]:
        joined = joined.fuse_next(run)
        assert joined is not None
    assert len(joined.parts) == 4 and joined.data.shape == (1, 40)
    joined()
    assert store.tobytes() == want.tobytes()


def test_updates_that_are_not_adjacent_or_read_joined_data_stay_apart():
    store = np.zeros((2, 30), F32)
    grads = np.ones((2, 30), F32)
    a = _axpy(store[:, 0:5], grads[:, 0:5], 0.5)
    assert a.fuse_next(_axpy(store[:, 6:9], grads[:, 6:9], 0.5)) is None  # a gap
    assert a.fuse_next(_axpy(store[:, 5:9], grads[:, 5:9], 0.5)) is not None
    assert a.fuse_next(_axpy(store[:, 5:9], store[:, 0:4], 0.5)) is None  # reads a's data
    assert a.fuse_next(_axpy(np.zeros((2, 4), F32), grads[:, 5:9], 0.5)) is None  # other memory
    assert _axpy(store[:, 5:9], grads[:, 0:4], 1.0).fuse_next(a) is None  # a comes before
    flat = np.zeros(20, F32)
    rows = flat.reshape(2, 10)  # rows of 10: [0:6] and [6:10] joined would be row 0 whole
    assert (
        _axpy(rows[:, 0:6], grads[:, 0:6], 1.0).fuse_next(_axpy(rows[:, 6:10], grads[:, 6:10], 1.0))
        is not None
    )
    wide = flat.reshape(4, 5)[:, :3]  # rows of 3 every 5: 3 + 3 > 5 would overlap
    assert (
        _axpy(wide[:2, :2], np.ones((2, 2), F32), 1.0).fuse_next(
            _axpy(wide[:2, 2:3], np.ones((2, 1), F32), 1.0)
        )
        is not None
    )
    tight = flat.reshape(5, 4)
    assert (
        _axpy(tight[:, :3], np.ones((5, 3), F32), 1.0).fuse_next(
            _axpy(as_view(flat, 3, 5, 4, 2), np.ones((5, 2), F32), 1.0)
        )
        is None
    )


def as_view(flat, start, rows, stride, n):
    return np.lib.stride_tricks.as_strided(flat[start:], shape=(rows, n), strides=(stride * 4, 4))


def _sgd(device, chained):
    """Variables updated one after the other, the last one's delta the first one's data
    (``chained``: it must read the updated values) or a gradient."""
    rng = np.random.default_rng(1)
    values = [rng.standard_normal(s).astype(F32) for s in ((8, 16), (16,), (16, 4), (4,))]
    grads = [rng.standard_normal(v.shape).astype(F32) for v in values]
    ir = popxl.Ir()
    with ir.main_graph:
        vs = [popxl.variable(v, name=f"v{i}") for i, v in enumerate(values)]
        streams = [popxl.h2d_stream(g.shape, popxl.float32, f"g{i}") for i, g in enumerate(grads)]
        loaded = [ops.host_load(s) for s in streams]
        with popxl.in_sequence():
            for i, (v, g) in enumerate(zip(vs, loaded)):
                if chained and i == 3:
                    row = ops.reshape(ops.slice(vs[0], [0, 0], [1, 4]), (4,))
                    ops.scaled_add_(v, row, b=0.5)
                else:
                    ops.scaled_add_(v, g, b=-0.05)
    want = [v.copy() for v in values]
    with popxl.Session(ir, device) as session:
        for step in range(4):
            feed = {s: (g * (step + 1)).astype(F32) for s, g in zip(streams, grads)}
            session.run(feed)
            for i in range(4):
                if chained and i == 3:
                    delta = want[0][0, :4]
                    want[3] = want[3] + F32(0.5) * delta
                else:
                    want[i] = want[i] + F32(-0.05) * feed[streams[i]]
        got = session.get_tensors_data(vs)
        plan = session._engine._replay._plans[0][1]
    for v, w in zip(vs, want):
        assert got[v].tobytes() == w.tobytes()
    return plan


def test_an_optimiser_step_is_joined_and_keeps_the_bits():
    for device in ("cpu", "ipu_model"):
        plan = _sgd(device, chained=False)
        assert sum(isinstance(step, Axpy) for step in plan) < 4  # some updates joined


def test_an_update_reading_an_earlier_ones_data_keeps_its_order():
    for device in ("cpu", "ipu_model"):
        _sgd(device, chained=True)
