"""Probe round 7, the gradients: where Tremula's autodiff differed from PopART's grad ops
(PopXL's autodiff is PopART's), pinned against hand-computed values, and torch where torch
computes the same thing.

- ``onehot``'s ``values`` get PopART's OnehotGradOp gradient, ``[sum of the output
  gradient where the output is off, sum where it is on]`` (was: not differentiable, zeros).
- ``Max`` / ``Min`` (``ops.maximum(*ts)``, ``maximum2``, ``minimum2``) give each operand the
  output gradient times ``sign(x - y) + 1`` (``sign(y - x) + 1`` for min), PopART's
  MaxArgGradOp / MinArgGradOp: every operand tied with the result gets the whole gradient
  (was: only the first; torch splits a binary tie in halves), and a NaN among the operands
  passes the gradient to all of them (``sign(NaN)`` is 0).
- ``clip`` passes the gradient where its output equals neither bound, as PopART's ClipGradOp
  reads the clipped output: not at a bound (was: at the bounds too, as torch's clamp).
- ``cumsum``'s gradient is the running sum from the end, as PopART's CumSumGradOp (its
  scan reversed) and torch take it (was: ``total - cumsum(g) + g``, where a large early
  gradient cancels the later ones).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from tremula_tests_evaluator import gradients

import popxl
import popxl.ops as ops

RNG = np.random.default_rng(77)
F32 = np.float32


# ---- onehot: the gradient of its two values ----


def hot_mask(indices: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Where ONNX OneHot's output takes ``values[1]`` (negative indices from the end, out of
    range ones nowhere), by hand."""
    idx = np.where(indices < 0, indices + n, indices)
    out_shape = list(indices.shape)
    ax = axis % (indices.ndim + 1)
    out_shape.insert(ax, n)
    mask = np.zeros(out_shape, bool)
    for pos in np.ndindex(*indices.shape):
        if 0 <= idx[pos] < n:
            full = list(pos)
            full.insert(ax, int(idx[pos]))
            mask[tuple(full)] = True
    return mask


INDICES = np.array([[0, 2, 1], [-1, 5, 2]], np.int32)  # -1 is class 2; 5 is out of range


@pytest.mark.parametrize("values_shape", [(2,), (1, 2)])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot_values_get_the_sums_of_the_gradient_off_and_on(
    axis: int, values_shape: tuple[int, ...]
) -> None:
    n = 4
    values = np.array([0.25, 3.0], F32).reshape(values_shape)
    mask = hot_mask(INDICES, n, axis)
    seed = RNG.uniform(-1, 1, mask.shape).astype(F32)

    def fn(v: popxl.Tensor) -> popxl.Tensor:
        return ops.onehot(popxl.constant(INDICES), n, v, axis)

    (got,) = gradients(fn, [values], seed)
    s = seed.astype(np.float64)
    want = np.array([s[~mask].sum(), s[mask].sum()]).reshape(values_shape)
    assert got.shape == values_shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # sums of signed terms


def test_onehot_values_gradient_agrees_with_torch_and_indices_get_none() -> None:
    torch = pytest.importorskip("torch")
    n, axis = 3, 0
    indices = np.array([2, 0, 0, 1, 2], np.int32)
    values = np.array([-1.5, 2.0], F32)
    seed = RNG.uniform(-1, 1, (n, indices.size)).astype(F32)

    def fn(i: popxl.Tensor, v: popxl.Tensor) -> popxl.Tensor:
        return ops.onehot(i, n, v, axis)

    (got,) = gradients(fn, [indices, values], seed, wrt=[1])
    v = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    hot = torch.nn.functional.one_hot(torch.tensor(indices, dtype=torch.int64), n).T.bool()
    torch.where(hot, v[1], v[0]).backward(torch.tensor(seed, dtype=torch.float64))
    assert v.grad is not None
    np.testing.assert_allclose(got, v.grad.numpy(), rtol=1e-5)


# ---- Max / Min: every operand equal to the result gets the whole gradient ----

MAX2 = getattr(ops, "maximum2")  # noqa: B009  (Tremula's binary forms)
MIN2 = getattr(ops, "minimum2")  # noqa: B009


def test_binary_max_and_min_give_each_tied_operand_the_whole_gradient() -> None:
    a = np.array([1, 2, 3, 3, -1], F32)
    b = np.array([1, 5, 0, 3, -2], F32)
    seed = np.array([1, 2, 4, 8, 16], F32)
    # ties at positions 0 and 3: both operands get the seed there (torch gives halves)
    max_a, max_b = gradients(MAX2, [a, b], seed)
    np.testing.assert_array_equal(max_a, [1, 0, 4, 8, 16])
    np.testing.assert_array_equal(max_b, [1, 2, 0, 8, 0])
    min_a, min_b = gradients(MIN2, [a, b], seed)
    np.testing.assert_array_equal(min_a, [1, 2, 0, 8, 0])
    np.testing.assert_array_equal(min_b, [1, 0, 4, 8, 16])


def test_variadic_maximum_gives_every_tied_operand_the_whole_gradient_summed_to_its_shape() -> None:
    a = np.array([[1, 4, 2], [0, 0, 7]], F32)  # (2, 3)
    b = np.array([4, 4, 2], F32)  # (3,): broadcast over rows
    c = np.array([[4], [0]], F32)  # (2, 1): broadcast over columns
    seed = np.array([[1, 2, 4], [8, 16, 32]], F32)
    # result [[4, 4, 4], [4, 4, 7]]; hand-made masks where each operand equals it
    in_a = np.array([[0, 1, 0], [0, 0, 1]], F32)
    in_b = np.array([[1, 1, 0], [1, 1, 0]], F32)
    in_c = np.array([[1, 1, 1], [0, 0, 0]], F32)
    got = gradients(lambda x, y, z: ops.maximum(x, y, z), [a, b, c], seed)
    np.testing.assert_array_equal(got[0], seed * in_a)
    np.testing.assert_array_equal(got[1], (seed * in_b).sum(axis=0))
    np.testing.assert_array_equal(got[2], (seed * in_c).sum(axis=1, keepdims=True))


def test_maximum_of_one_tensor_passes_the_gradient_and_a_repeated_operand_gets_it_twice() -> None:
    a = np.array([3, 1, 2], F32)
    b = np.array([3, 0, 5], F32)
    seed = np.array([1, 2, 4], F32)
    (alone,) = gradients(lambda x: ops.maximum(x), [a], seed)
    np.testing.assert_array_equal(alone, seed)
    twice_a, once_b = gradients(lambda x, y: ops.maximum(x, y, x), [a, b], seed)
    np.testing.assert_array_equal(twice_a, [2, 4, 0])  # once per use, both equal the result
    np.testing.assert_array_equal(once_b, [1, 0, 4])


@pytest.mark.parametrize("op", [MAX2, MIN2], ids=["max", "min"])
def test_a_nan_operand_passes_the_gradient_to_every_operand(op: Callable) -> None:
    """``x - y`` is NaN wherever an operand is NaN (whatever the result there), and the
    mask ``sign(NaN) + 1`` is 1; infinities of one sign tie (``inf - inf`` is NaN too)."""
    a = np.array([np.nan, 1, np.inf, -np.inf, 2], F32)
    b = np.array([0, np.nan, np.inf, -np.inf, 3], F32)
    seed = np.array([1, 2, 4, 8, 16], F32)
    got_a, got_b = gradients(op, [a, b], seed)
    last_a, last_b = (0, 16) if op is MAX2 else (16, 0)
    np.testing.assert_array_equal(got_a, [1, 2, 4, 8, last_a])
    np.testing.assert_array_equal(got_b, [1, 2, 4, 8, last_b])


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_binary_max_and_min_without_ties_agree_with_torch(name: str) -> None:
    torch = pytest.importorskip("torch")
    a = RNG.permutation(24).astype(F32).reshape(2, 3, 4)  # distinct values: no ties
    b = (RNG.permutation(4).astype(F32) + 0.5).reshape(1, 4)
    seed = RNG.uniform(-1, 1, (2, 3, 4)).astype(F32)
    got = gradients(MAX2 if name == "maximum" else MIN2, [a, b], seed)
    ta, tb = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (a, b))
    getattr(torch, name)(ta, tb).backward(torch.tensor(seed, dtype=torch.float64))
    for mine, theirs in zip(got, (ta.grad, tb.grad)):
        assert theirs is not None
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-5)


# ---- clip: nothing passes at a bound ----


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_clip_passes_the_gradient_strictly_inside_its_bounds(dtype: type) -> None:
    x = np.array([-2, -0.5, 0, 0.5, 0.75, 1, np.nan, np.inf], dtype)
    seed = np.arange(1, 9).astype(dtype)
    (both,) = gradients(lambda t: ops.clip(t, -0.5, 0.75), [x], seed)
    np.testing.assert_array_equal(both, [0, 0, 3, 4, 0, 0, 7, 0])  # NaN is on neither bound
    (upper,) = gradients(lambda t: ops.clip(t, max=0.75), [x], seed)
    np.testing.assert_array_equal(upper, [1, 2, 3, 4, 0, 0, 7, 0])


# ---- cumsum: the running sum from the end ----


@pytest.mark.parametrize("dim", [0, 1])
def test_cumsum_gradient_is_the_running_sum_from_the_end(dim: int) -> None:
    x = np.zeros((2, 3), F32)
    seed = np.array([[1e8, 1, 1], [1, 2, 3]], F32)
    (got,) = gradients(lambda t: ops.cumsum(t, dim), [x], seed)
    # summed from the end in float32: 1 + 1 = 2 survives, 2 + 1e8 rounds to 1e8
    want = {0: [[1e8, 3, 4], [1, 2, 3]], 1: [[1e8, 2, 1], [6, 5, 3]]}[dim]
    np.testing.assert_array_equal(got, np.array(want, F32))


def test_cumsum_gradient_agrees_with_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.zeros((3, 5), F32)
    seed = RNG.uniform(-1, 1, (3, 5)).astype(F32)
    seed[:, 0] = 3e7  # large at the start of each row: cancels in total - cumsum + g
    (got,) = gradients(lambda t: ops.cumsum(t, 1), [x], seed)
    t = torch.tensor(x, requires_grad=True)
    torch.cumsum(t, 1).backward(torch.tensor(seed))
    assert t.grad is not None
    # the orders of the additions differ (a log-step scan here); a cancelled sum is off by
    # the spacing of float32 at 3e7 (2), far beyond this
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-6, atol=1e-5)
