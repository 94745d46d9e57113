"""Reductions and scans (popxl/ops/reduce.py) run through a Session against NumPy, and each
op record's NumPy reference against the same expectation."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import check, run

import popxl
import popxl.ops as ops

RNG = np.random.default_rng(7)


NP = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "prod": np.prod,
    "l1": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
    "l2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
    "sumsquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
    "logsum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
    "logsumexp": lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims)),
}


@pytest.mark.parametrize("name", sorted(NP))
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, True), ([0, -1], False)])
def test_reductions_float32(name, axis, keepdims):
    x = RNG.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    ax = tuple(axis) if isinstance(axis, list) else axis
    want = NP[name](x.astype(np.float64), axis=ax, keepdims=keepdims)
    check(lambda t: getattr(ops, name)(t, axis, keepdims), want, x, rtol=1e-5)


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod", "sumsquare", "l1", "mean"])
def test_reductions_int32(name):
    x = RNG.integers(-3, 4, (4, 6)).astype(np.int32)
    want = NP[name](x.astype(np.int64), axis=1, keepdims=False)
    if name == "mean":
        want = np.trunc(np.sum(x, axis=1) / 6)
    check(lambda t: getattr(ops, name)(t, 1), want, x, atol=0)


def test_reductions_half_on_ipu_model():
    x = RNG.uniform(-1, 1, (8, 16)).astype(np.float16)
    want = [np.sum(x.astype(np.float64), 0), np.mean(x.astype(np.float64), 1)]
    got = check(
        lambda t: (ops.sum(t, 0), ops.mean(t, 1)), want, x, rtol=2e-3, atol=2e-3,
        device="ipu_model",
    )  # fmt: skip
    assert got[0].dtype == np.float16


def test_median_is_the_lower_median():
    x = RNG.normal(size=(3, 4, 6)).astype(np.float32)
    moved = np.sort(np.moveaxis(x, 1, -1).reshape(3, 6, 4), axis=-1)
    want = moved[..., 1]  # (4 - 1) // 2
    check(lambda t: ops.median(t, 1), want, x)
    check(lambda t: ops.median(t), np.sort(x.ravel())[(x.size - 1) // 2], x)


def test_reduction_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.ones((2, 3), np.float32), name="w")
        with pytest.raises(ValueError, match="axis 2 is out of range for 'w'"):
            ops.sum(t, 2)
        with pytest.raises(ValueError, match="Axes contains duplicates"):
            ops.sum(t, [1, -1])
        with pytest.raises(TypeError, match=r"popxl\.Tensor"):
            ops.mean(np.ones(3))
    # PopART makes a ReduceL2 of int32 data; the session refuses it (Poplar takes floats)
    with pytest.raises(TypeError, match=r"lowering op ReduceL2 .* must be float16 or float32"):
        run(lambda t: ops.l2(t), np.ones(3, np.int32))


@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False)])
def test_argmax_argmin(dim, keepdim):
    x = RNG.integers(0, 4, (5, 6)).astype(np.float32)  # ties: the first index wins
    want = [
        np.argmax(x, axis=dim, keepdims=keepdim),
        np.argmin(x, axis=dim, keepdims=keepdim),
    ]
    got = check(lambda t: (ops.argmax(t, dim, keepdim), ops.argmin(t, dim, keepdim)), want, x)
    assert got[0].dtype == np.int32


@pytest.mark.parametrize("largest", [True, False])
def test_topk(largest):
    x = RNG.permutation(24).reshape(4, 6).astype(np.float32)
    order = np.argsort(-x if largest else x, axis=0)[:3]
    want = [np.take_along_axis(x, order, 0), order]
    check(lambda t: ops.topk(t, 3, axis=0, largest=largest, sorted=True), want, x)
    with pytest.raises(ValueError, match="k=7"):
        run(lambda t: ops.topk(t, 7), x)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cumsum(dtype):
    x = RNG.integers(-5, 5, (5, 7)).astype(dtype)
    check(lambda t: (ops.cumsum(t, 1), ops.cumsum(t)), [np.cumsum(x, 1), np.cumsum(x, 0)], x)


def test_histogram():
    x = RNG.normal(size=(40,)).astype(np.float32)
    levels = [-1.0, 0.0, 0.5, 1.0]
    want = np.bincount(np.searchsorted(levels, x, side="right"), minlength=5)
    absw = np.bincount(np.searchsorted(levels, np.abs(x), side="right"), minlength=5)
    got = check(
        lambda t: (ops.histogram(t, levels), ops.histogram(t, levels, absolute_of_input=True)),
        [want, absw],
        x,
    )
    assert got[0].dtype == np.uint32
    xi = RNG.integers(-3, 3, (20,)).astype(np.int32)
    want = np.bincount(np.searchsorted([-1.5, 0.5], xi, side="right"), minlength=3)
    check(lambda t: ops.histogram(t, [-1.5, 0.5]), want, xi)
    # levels out of order are sorted, as PopART's HistogramOp sorts them
    want = np.bincount(np.searchsorted([0.0, 1.0], x, side="right"), minlength=3)
    check(lambda t: ops.histogram(t, [1.0, 0.0]), want, x)
    with pytest.raises(ValueError, match="non-empty"):
        run(lambda t: ops.histogram(t, []), x)


def test_lamb_square():
    x = RNG.normal(size=(4, 5)).astype(np.float16)
    check(lambda t: ops.lamb_square(t), np.sum(x.astype(np.float64) ** 2), x, rtol=1e-3)
    i = RNG.integers(-300, 300, size=(3, 7)).astype(np.int32)  # float32, whatever the dtype
    got = check(lambda t: ops.lamb_square(t), np.sum(i.astype(np.float64) ** 2), i, rtol=1e-6)
    assert got[0].dtype == np.float32
