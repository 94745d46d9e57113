"""Gradient rules of ``popxl/ops/misc.py``: ``where``, ``clip``, ``scaled_add`` (``maximum``
is made of ``Max`` ops; ``increment_mod`` is defined non-differentiable)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grads.base import (
    GradContext,
    Grads,
    OutputGrads,
    as_float,
    grad,
    pick,
    sum_to,
)


@grad("Where")
def _where(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    cond, lhs, rhs = op.inputs
    return pick(
        need,
        lambda: None,
        lambda: sum_to(ops.where(c.fwd(cond), g[0], 0.0), lhs.shape),
        lambda: sum_to(ops.where(c.fwd(cond), 0.0, g[0]), rhs.shape),
    )


@grad("Clip")
def _clip(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """As PopART's ClipGradOp, from the clipped output ``y``: the gradient passes where ``y``
    equals neither bound, so not at a bound itself (torch's clamp passes it there)."""
    y = c.fwd(op.outputs[0])
    inside = None
    for bound in (op.attrs["min"], op.attrs["max"]):
        if bound is not None:
            ok = ops.logical_not(ops.equal(y, bound))
            inside = ok if inside is None else ops.logical_and(inside, ok)
    return [g[0] if inside is None else g[0] * as_float(inside, g[0])]


@grad("ScaledAdd")
def _scaled_add(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """``a X + b Y``; a scale is a number (attribute) or a one-element tensor (input)."""
    x, y = op.inputs[:2]
    scales = list(op.inputs[2:])
    a = scales.pop(0) if op.attrs["a"] is None else op.attrs["a"]
    b = scales.pop(0) if op.attrs["b"] is None else op.attrs["b"]

    def value(s: Tensor | float) -> Tensor | float:
        if not isinstance(s, Tensor):
            return s
        v = c.fwd(s)
        return v if v.dtype == g[0].dtype else ops.cast(v, g[0].dtype)

    def like(t: Tensor, dtype: Any) -> Tensor:  # X and Y may be float16 and float32
        return t if t.dtype == dtype else ops.cast(t, dtype)

    def scale_grad(s: Tensor, operand: Tensor) -> Tensor:
        total = ops.sum(g[0] * like(c.fwd(operand), g[0].dtype))
        return ops.reshape(like(total, s.dtype), s.shape)

    grads: list[Tensor | None] = pick(
        need[:2],
        lambda: sum_to(g[0] * value(a), x.shape),
        lambda: like(sum_to(g[0] * value(b), y.shape), y.dtype),
    )
    for s, operand in ((a, x), (b, y)):
        if isinstance(s, Tensor):
            grads.append(scale_grad(s, operand) if need[len(grads)] else None)
    return grads
