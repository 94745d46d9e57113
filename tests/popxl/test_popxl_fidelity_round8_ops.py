"""Probe round 8, the ops side: the open questions of round 7 decided, pinned where
Tremula changed (PopXL's autodiff is PopART's, so the gradients are PopART's grad ops').

- ``median``: PopART's ReduceMedianOp has a second output, the index of the median in the
  reduced elements, and its ReduceMedianGradOp scatters the gradient to that one element
  (was: every element equal to the median got it all, so ``[5, 5, 5, 5, 5]`` passed back
  five times the gradient). Among equal values the index is the one a stable sort puts in
  the middle, which is what ``torch.median(dim)`` returns for the ties below.
- ``scatter_reduce`` with uint32 indices: the gradient of the values reached none of them
  (the in-range test compared the indices with ``-1`` made uint32, 4294967295), now the
  same as with int32 indices.
- ``fmod``: the divisor gets no gradient (zeros where it is required), as PopART's FmodOp
  has only its FmodArg0GradOp; the dividend gets the output gradient (summed to its shape).
  That grad op reads both operands and the output (the grad graph expects the three).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tremula_tests_evaluator import fetch, gradients

import popxl
import popxl.ops as ops

F32 = np.float32
RNG = np.random.default_rng(88)


# ---- median: one element per median gets its gradient ----

TIES = np.array([[3, 1, 3, 1, 2], [5, 5, 5, 5, 5], [1, 2, 2, 1, 0], [4, 4, 0, 9, 9]], F32)


def test_median_gradient_goes_to_one_element_of_ties_as_torch_median_picks() -> None:
    seed = np.array([1, 10, 100, 1000], F32)
    (got,) = gradients(lambda t: ops.median(t, axis=1), [TIES], seed)
    x = torch.tensor(TIES, requires_grad=True)
    med, index = torch.median(x, dim=1)
    (med * torch.tensor(seed)).sum().backward()
    np.testing.assert_array_equal(got, x.grad.numpy())
    # by hand: the element a stable sort puts at position (5 - 1) // 2
    assert [int(np.flatnonzero(row)[0]) for row in got] == [4, 2, 3, 1] == index.tolist()
    np.testing.assert_array_equal(got.sum(axis=1), seed)  # each median's gradient once


def test_median_has_an_int32_index_output_in_the_flattened_reduced_axes() -> None:
    x = np.array([[[2, 7], [7, 1]], [[0, 0], [0, 3]]], F32)  # median over axes 1, 2
    ir = popxl.Ir()
    with ir.main_graph:
        med = ops.median(popxl.variable(x), axis=[1, 2], keepdims=True)
        (op,) = [o for o in ir.main_graph.ops if o.type == "ReduceMedian"]
        index = op.outputs[1]
        assert index.dtype == popxl.int32 and index.shape == med.shape == (2, 1, 1)
        assert med.name == "median_out"
    got_med, got_index = fetch(ir, med, index)
    # rows [2, 7, 7, 1] and [0, 0, 0, 3]: stable order [3, 0, 1, 2] and [0, 1, 2, 3]
    np.testing.assert_array_equal(got_med.ravel(), [2, 0])
    np.testing.assert_array_equal(got_index.ravel(), [0, 1])


@pytest.mark.parametrize("axis", [0, [0, 2], None])
def test_median_gradient_without_ties_agrees_with_torch(axis: int | list[int] | None) -> None:
    x = RNG.permutation(24).reshape(2, 3, 4).astype(F32)
    want_shape = np.median(x, axis=None if axis is None else tuple(np.atleast_1d(axis))).shape
    seed = RNG.uniform(1, 2, want_shape).astype(F32)
    (got,) = gradients(lambda t: ops.median(t, axis=axis), [x], seed)
    # torch reduces one dim: move the reduced axes last and flatten them
    axes = [0, 1, 2] if axis is None else list(np.atleast_1d(axis))
    rest = [d for d in range(3) if d not in axes]
    xt = torch.tensor(x, requires_grad=True)
    rows = xt.permute(*rest, *axes).reshape(*[x.shape[d] for d in rest], -1)
    med, _ = torch.median(rows, dim=-1)
    (med * torch.tensor(seed)).sum().backward()
    np.testing.assert_array_equal(got, xt.grad.numpy())


# ---- scatter_reduce: uint32 indices ----

SOURCE = np.array([1, 3, 3, 2, 0.5], F32)
SEED = np.array([1, 10, 100], F32)
#: reduction -> the gradient of SOURCE scattered to [0, 0, 0, 1, 2] (hand values): sum and
#: mul pass each its target's gradient (times the others' product), max ties in full,
#: none the last write only
SCATTER_GRADS = {
    "sum": [1, 1, 1, 10, 100],
    "max": [0, 1, 1, 10, 100],
    "min": [1, 0, 0, 10, 100],
    "mul": [9, 3, 3, 10, 100],
    "none": [0, 0, 1, 10, 100],
}


@pytest.mark.parametrize("reduction", sorted(SCATTER_GRADS))
@pytest.mark.parametrize("index_type", [np.int32, np.uint32])
def test_scatter_reduce_gradient_reaches_the_values_through_uint32_indices(
    reduction: str, index_type: type
) -> None:
    index = np.array([0, 0, 0, 1, 2], index_type)

    def fn(s: popxl.Tensor) -> popxl.Tensor:
        return ops.scatter_reduce(s, popxl.constant(index), reduction=reduction, axis_size=3)

    (got,) = gradients(fn, [SOURCE], SEED)
    np.testing.assert_array_equal(got, SCATTER_GRADS[reduction])


def test_scatter_reduce_uint32_indices_out_of_range_get_no_gradient() -> None:
    index = np.array([0, 3, 2, 4000000000], np.uint32)  # 3 and 4e9 are out of range

    def fn(s: popxl.Tensor) -> popxl.Tensor:
        return ops.scatter_reduce(s, popxl.constant(index), reduction="sum", axis_size=3)

    (got,) = gradients(fn, [SOURCE[:4]], SEED)
    np.testing.assert_array_equal(got, [1, 0, 100, 0])


# ---- fmod: no gradient for the divisor ----


def test_fmod_divisor_gets_no_gradient_and_the_dividend_all_of_it() -> None:
    a = np.array([[5, -5, 7], [-7.5, 2, 9]], F32)
    b = np.array([3, 3, -2], F32)  # broadcast over the rows
    seed = np.array([[1, 2, 3], [4, 5, 6]], F32)
    ga, gb = gradients(lambda p, q: ops.fmod(p, q), [a, b], seed)
    np.testing.assert_array_equal(ga, seed)
    np.testing.assert_array_equal(gb, np.zeros(3, F32))
    (gb_only,) = gradients(lambda p, q: ops.fmod(p, q), [a, b], seed, wrt=[1])
    np.testing.assert_array_equal(gb_only, np.zeros(3, F32))


def test_fmod_dividend_broadcast_gets_the_summed_gradient() -> None:
    a = np.array([5.5], F32)
    b = np.array([2, 3, -4], F32)
    (ga,) = gradients(lambda p, q: p % q, [a, b], np.array([1, 2, 4], F32), wrt=[0])
    np.testing.assert_array_equal(ga, [7])


def test_fmod_grad_graph_expects_both_operands_and_the_output() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([5, -5, 7], F32), name="a")
        b = popxl.variable(np.array([3, 3, -2], F32), name="b")
        graph = ir.create_graph(lambda p, q: ops.fmod(p, q), a.spec, b.spec)
        info = popxl.transforms.autodiff(graph, grads_required=[graph.inputs[0]])
        site = ops.call_with_info(graph, a, b)
        expected = set(info.inputs_dict(site).values())
    assert expected == {a, b, site.outputs[0]}


# ---- prod: the gradient with zeros in the product ----

ZEROS = np.array([[2, 0, 3], [0, 0, 4], [1.5, 2, -3]], F32)  # one zero, two, none


@pytest.mark.parametrize("axis", [0, 1, None])
def test_prod_gradient_with_zeros_is_the_product_of_the_others(axis: int | None) -> None:
    """Was ``g * y / x``: NaN at each zero (0 / 0)."""
    x = torch.tensor(ZEROS, requires_grad=True)
    want_out = x.prod() if axis is None else x.prod(axis)
    seed = RNG.uniform(1, 2, tuple(want_out.shape)).astype(F32)
    (want_out * torch.tensor(seed)).sum().backward()
    (got,) = gradients(lambda t: ops.prod(t, axis=axis), [ZEROS], seed)
    np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-6)
    assert np.isfinite(got).all()


def test_prod_gradient_by_hand_one_zero_two_zeros_none() -> None:
    (got,) = gradients(lambda t: ops.prod(t, axis=1), [ZEROS], np.array([1, 2, 3], F32))
    want = [[0, 6, 0], [0, 0, 0], [3 * 2 * -3, 3 * 1.5 * -3, 3 * 1.5 * 2]]
    np.testing.assert_array_equal(got, np.array(want, F32))
