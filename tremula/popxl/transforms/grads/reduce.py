"""Gradient rules of ``popxl/ops/reduce.py``: the reductions (one table), ``cumsum``,
``topk`` and ``lamb_square``; ``argmax`` / ``argmin`` / ``histogram`` are defined
non-differentiable."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor, constant
from tremula.popxl.transforms.grads.base import (
    GradContext,
    GradRule,
    Grads,
    OutputGrads,
    as_float,
    expand,
    from_last,
    grad,
    to_last,
)

Value = Callable[[], Tensor]


def _max_like(x: Value, y: Value, g: Tensor, n: int) -> Tensor:
    """Max, min: to the elements equal to the result (every one of ties)."""
    return g * as_float(ops.equal(x(), y()), g)


#: reduction -> its input gradient from (x, y, g, n): the forward input, the result and its
#: gradient with the reduced axes kept (size 1), and the number of elements reduced
REDUCTIONS: dict[str, Callable[[Value, Value, Tensor, int], Tensor]] = {
    "ReduceSum": lambda x, y, g, n: g,
    "ReduceMean": lambda x, y, g, n: g * (1.0 / n),
    "ReduceMax": _max_like,
    "ReduceMin": _max_like,
    "ReduceL1": lambda x, y, g, n: g * ops.sign(x()),
    "ReduceL2": lambda x, y, g, n: g * x() / y(),
    "ReduceLogSum": lambda x, y, g, n: g * ops.exp(-y()),
    "ReduceLogSumExp": lambda x, y, g, n: g * ops.exp(x() - y()),
    "ReduceSumSquare": lambda x, y, g, n: g * x() * 2.0,
}


def _reduction(fn: Callable[[Value, Value, Tensor, int], Tensor]) -> GradRule:
    def rule(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
        x = op.inputs[0]
        axes = op.attrs["axes"]
        kept = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
        n = int(np.prod([x.shape[d] for d in axes]))
        gk = ops.reshape(g[0], kept)
        y = lambda: ops.reshape(c.fwd(op.outputs[0]), kept)  # noqa: E731
        return [expand(fn(lambda: c.fwd(x), y, gk, n), x.shape)]

    return rule


for _type, _fn in REDUCTIONS.items():
    grad(_type)(_reduction(_fn))


@grad("ReduceProd")
def _prod(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """Each element gets the gradient times the product of the others in its reduction,
    found without dividing by zero (``y / x`` is NaN at a zero): with ``P`` the product of
    the group's non-zero elements and ``Z`` its count of zeros, ``P / x`` where ``Z`` is
    0, ``P`` at the zero where ``Z`` is 1, and 0 where ``Z`` is more. Where PopART's
    programs pass a test with zeros in a product, their gradient is this one (torch's)."""
    x = op.inputs[0]
    axes = op.attrs["axes"]
    kept = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    gk = ops.reshape(g[0], kept)
    xv = c.fwd(x)
    is_zero = ops.equal(xv, constant(0, xv.dtype))
    safe = ops.where(is_zero, constant(1, xv.dtype), xv)
    P = ops.prod(safe, axes, keepdims=True)
    Z = ops.sum(as_float(is_zero, xv), axes, keepdims=True)
    no_zero = gk * P / safe * as_float(ops.equal(Z, constant(0, xv.dtype)), xv)
    one_zero = gk * P * as_float(ops.equal(Z, constant(1, xv.dtype)), xv)
    return [ops.where(is_zero, one_zero, no_zero)]


@grad("ReduceMedian")
def _median(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """Each median's gradient to the one element its index output names, as PopART's
    ReduceMedianGradOp scatters it (not to every element equal to the median)."""
    x = op.inputs[0]
    axes = op.attrs["axes"]
    rest = [d for d in range(x.rank) if d not in axes]
    kept = tuple(x.shape[d] for d in rest)
    n = int(np.prod([x.shape[d] for d in axes]))
    idx = ops.reshape(c.fwd(op.outputs[1]), (*kept, 1))
    iota = constant(np.arange(n, dtype=np.int32), name="positions")
    rows = as_float(ops.equal(idx, iota), g[0]) * ops.reshape(g[0], (*kept, 1))  # [*kept, n]
    moved = ops.reshape(rows, (*kept, *(x.shape[d] for d in axes)))
    back = np.argsort([*rest, *axes])
    return [ops.transpose(moved, tuple(int(i) for i in back))]


@grad("CumSum")
def _cumsum(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """The running sum from the end, as PopART's CumSumGradOp takes it (its forward's scan
    with ``reverse`` flipped): the gradient reversed along the axis, summed, reversed back.
    (Not ``total - cumsum(g) + g``: the same value in exact arithmetic, but a large early
    gradient cancels the later ones out of it.)"""
    dim = op.attrs["dim"]
    flipped = ops.cumsum(ops.slice(g[0], step=-1, axis=dim), dim)
    return [ops.slice(flipped, step=-1, axis=dim), None]


@grad("TopK")
def _topk(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """The values' gradient goes back to the positions the indices name."""
    x = op.inputs[0]
    axis = op.attrs["axis"]
    gv = to_last(g[0], axis)  # [..., k]
    idx = to_last(c.fwd(op.outputs[1]), axis)
    iota = constant(np.arange(x.shape[axis], dtype=idx.dtype.as_numpy()), name="positions")
    hit = as_float(ops.equal(ops.reshape(idx, (*idx.shape, 1)), iota), gv)  # [..., k, n]
    gx = ops.sum(hit * ops.reshape(gv, (*gv.shape, 1)), gv.rank - 1)  # [..., n]
    return [from_last(gx, axis)]


@grad("LambSquare")
def _lamb_square(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    x = op.inputs[0]
    return [ops.cast(g[0], x.dtype) * c.fwd(x) * 2.0]
