"""Element-wise ops with attributes (popxl/ops/misc.py) and Tensor indexing with tensors,
through a Session against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import check, run

import popxl
import popxl.ops as ops

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_where_broadcasts_and_coerces(dtype):
    c = RNG.integers(0, 2, (3, 1)).astype(bool)
    a = RNG.integers(-5, 5, (3, 4)).astype(dtype)
    b = RNG.integers(-5, 5, (4,)).astype(dtype)
    check(lambda c_, a_, b_: ops.where(c_, a_, b_), np.where(c, a, b), c, a, b)
    check(lambda c_, a_: ops.where(c_, a_, 7), np.where(c, a, 7), c, a)
    ci = c.astype(np.int32)  # a non-bool condition is cast
    check(lambda c_, a_: ops.where(c_, 2, a_), np.where(c, 2, a), ci, a)
    with pytest.raises(TypeError, match="must match"):
        run(lambda c_, a_, b_: ops.where(c_, a_, b_), c, a, b.astype(np.float64).astype(np.uint32))


def test_clip_and_clamp():
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    x[0, 0] = np.nan
    got, ref = run(lambda t: (ops.clip(t, -0.5, 0.5), ops.clamp(t, max=0.0), ops.clip(t)), x)
    want = [np.clip(x, -0.5, 0.5), np.minimum(x, 0.0), x]
    for g, r, w in zip(got, ref, want):
        np.testing.assert_array_equal(g, w)  # NaN propagates
        np.testing.assert_array_equal(r, w)
    xi = RNG.integers(-9, 9, (10,)).astype(np.int32)
    check(lambda t: ops.clip(t, -2.5, 3.7), np.clip(xi, -2, 3), xi)


def test_maximum_of_n_tensors():
    a, b, c = (RNG.normal(size=s).astype(np.float32) for s in [(2, 3), (3,), (2, 1)])
    check(lambda *t: ops.maximum(*t), np.maximum(np.maximum(a, b), c), a, b, c)
    check(lambda t: ops.maximum(t), a, a)
    with pytest.raises(ValueError, match="at least one"):
        run(lambda t: ops.maximum(), a)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_scaled_add(dtype):
    x = RNG.normal(size=(3, 4)).astype(dtype)
    y = RNG.normal(size=(3, 4)).astype(dtype)
    yb = RNG.normal(size=(4,)).astype(dtype)
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {}

    def build(X, Y, Yb):
        a = ops.scaled_add(X, Y)
        b = ops.scaled_add(X, Yb, 0.5, -2.0)
        s = popxl.constant(3.0, popxl.float32)
        c = ops.scaled_add(X, Y, s, 0.25)
        d = ops.scaled_add_(X, Yb, b=s)  # X = X + 3 Yb
        return a, b, c, d, X

    x64, y64, yb64 = (v.astype(np.float64) for v in (x, y, yb))
    after = x64 + 3 * yb64
    want = [x64 + y64, 0.5 * x64 - 2 * yb64, 3 * x64 + 0.25 * y64, after, after]
    check(build, want, x, y, yb, **tol)


@pytest.mark.parametrize(("xt", "yt"), [(np.float16, np.float32), (np.float32, np.float16)])
def test_scaled_add_mixed_float16_float32(xt, yt):
    """float16 weights updated by float32 optimizer state (popxl-addons' Adam:
    ``scaled_add_(var, updater, b=-lr)``) and the other way round: computed in float32,
    rounded once to X's type, in place and not, with number and tensor scales."""
    x = RNG.normal(size=(3, 4)).astype(xt)
    y = RNG.normal(size=(3, 4)).astype(yt)
    yb = RNG.normal(size=(4,)).astype(yt)

    def build(X, Y, Yb):
        a = ops.scaled_add(X, Y, 0.5, -2.0)
        s = popxl.constant(3.0, popxl.float32)
        b = ops.scaled_add(X, Y, s, 0.25)
        c = ops.scaled_add_(X, Yb, b=-1e-2)
        return a, b, c

    x32, y32, yb32 = (v.astype(np.float32) for v in (x, y, yb))
    want = [0.5 * x32 - 2 * y32, 3 * x32 + 0.25 * y32, x32 - np.float32(1e-2) * yb32]
    want = [w.astype(xt).astype(np.float64) for w in want]
    got = check(build, want, x, y, yb, rtol=1e-3, atol=1e-3)
    assert all(g.dtype == xt for g in got)
    with pytest.raises(TypeError, match="float16 and float32"):
        run(lambda a, b: ops.scaled_add(a, b), x, y.astype(np.int32))


def test_scaled_add_int_and_errors():
    x = RNG.integers(-5, 5, (6,)).astype(np.int32)
    y = RNG.integers(-5, 5, (6,)).astype(np.int32)
    check(lambda a, b: ops.scaled_add(a, b, 2, -3), 2 * x - 3 * y, x, y)
    with pytest.raises(ValueError, match="must be an integer"):
        run(lambda a, b: ops.scaled_add(a, b, 0.5), x, y)
    with pytest.raises(ValueError, match="in place"):
        run(lambda a, b: ops.scaled_add_(a, b), x[:1], y)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_increment_mod(dtype):
    x = RNG.integers(-6, 6, (8,)).astype(dtype)

    def build(t):
        a = ops.increment_mod(t, 3, 4)
        ops.increment_mod_(t, 1, 5)
        return a, t

    check(build, [np.fmod(x + 3, 4), np.fmod(x + 1, 5)], x)
    with pytest.raises(ValueError, match="modulus"):
        run(lambda t: ops.increment_mod(t, 1, 0), x)


def test_getitem_with_tensors():
    x = RNG.normal(size=(5, 3)).astype(np.float32)
    idx = np.array([[4, 0], [1, 1]], np.int32)
    mask = RNG.integers(0, 2, (5, 3)).astype(bool)

    def build(t, i, m):
        return t[i], t[[3, 1]], t[np.array([2])], t[m], t[np.array([True, False, True])]

    want = [x[idx], x[[3, 1]], x[[2]], np.where(mask, x, 0), np.where([1, 0, 1], x, 0)]
    check(build, want, x, idx, mask)
    with pytest.raises(TypeError, match="int32 or uint32"):
        run(lambda t: t[popxl.constant(np.array([1.0], np.float32))], x)
