"""Lowering fuses chains of element-wise ops into one ``popops.map`` expression: which ops
form a chain, and that fused and unfused lowerings give the same numbers (bit for bit, in
float32 and float16, with broadcasting, casts and comparisons) with fewer compute sets."""

from __future__ import annotations

import numpy as np
import pytest
import tremula_tests_evaluator as evaluator

import popxl
import popxl.ops as ops
from tremula.lowering import Lowerer
from tremula.lowering.fusion import Chain, plan


def _types(items):
    """The plan's op types, without the loads of the inputs (an init and a host load each)."""
    types = [[op.type for op in i.ops] if isinstance(i, Chain) else i.type for i in items]
    return [t for t in types if t not in ("Init", "HostLoad")]


def _run(ir, feeds, outs, device, fuse, monkeypatch):
    monkeypatch.setattr(Lowerer, "fuse_elementwise", fuse)
    session = popxl.Session(ir, device)
    with session:
        got = session.run(feeds)
    cs = len(session.engine.get_graph_profile()["computeSets"]["names"])
    return [got[s] for s in outs], cs


def _dense_relu(x, w, b):
    return ops.relu(ops.matmul(x, w) + b)


def _relu_grad(y, dy):
    return dy * ops.cast(ops.greater(y, popxl.constant(0.0, y.dtype)), y.dtype)


def test_chains_are_runs_of_single_use_element_wise_ops():
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 6), (6,)))
    ir, _, _ = evaluator.graph(_dense_relu, x, w, b)
    assert _types(plan(ir.main_graph)) == ["MatMul", ["Add", "Relu"], "HostStore"]

    def shared(a, b):  # the sum is used twice: it is materialised, not fused forward
        s = a + b
        return ops.exp(s) * s

    ir, _, _ = evaluator.graph(shared, x, x)
    assert _types(plan(ir.main_graph)) == ["Add", ["Exp", "Mul"], "HostStore"]

    def visible(a):  # an intermediate stored to the host is not fused away
        s = ops.exp(a)
        return [s, ops.log(s)]

    ir, _, _ = evaluator.graph(visible, x)
    assert not any(isinstance(i, Chain) for i in plan(ir.main_graph))


@pytest.mark.parametrize("device", ["cpu", "ipu_model"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fused_chains_give_the_unfused_numbers(device, dtype, monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 10)).astype(dtype)
    w = rng.standard_normal((10, 12)).astype(dtype)
    b = rng.standard_normal((12,)).astype(dtype)
    dy = rng.standard_normal((6, 12)).astype(dtype)

    def build(x, w, b, dy):
        y = _dense_relu(x, w, b)
        g = _relu_grad(y, dy)
        z = ops.sqrt(ops.abs(ops.tanh(y) * 3.0 - g)) / 2.0
        return [y, g, z]

    results = {}
    for fuse in (False, True):
        ir, feeds, outs = evaluator.graph(build, x, w, b, dy)
        results[fuse] = _run(ir, feeds, outs, device, fuse, monkeypatch)
    (plain, cs_plain), (fused, cs_fused) = results[False], results[True]
    for a, f in zip(plain, fused):
        assert a.dtype == f.dtype
        np.testing.assert_array_equal(a, f)
    assert cs_fused < cs_plain
    # and against NumPy (float64 reference, the op type's tolerance)
    y = np.maximum(x.astype(np.float64) @ w + b, 0)
    tol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(plain[0], y, rtol=tol, atol=tol)
    np.testing.assert_allclose(plain[1], dy * (plain[0] > 0), rtol=tol, atol=tol)
