"""Gradient rules of ``popxl/ops/tensor_ops.py``: matmul, views, copies and casts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grads.base import (
    GradContext,
    Grads,
    OutputGrads,
    grad,
    pick,
    reshape,
    sum_to,
)


def _swap_last(t: Tensor) -> Tensor:
    return ops.transpose(t, (*range(t.rank - 2), t.rank - 1, t.rank - 2))


@grad("MatMul")
def _matmul(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """NumPy matmul: 1-D operands as a row / column, batch axes broadcast. The gradient
    matmuls keep the forward's available memory proportion and partials type, as PopART's
    MatMulLhsGradOp / MatMulRhsGradOp take them from the forward op (and its grad patterns
    give them to the matmuls they become)."""
    a, b = op.inputs
    keep = {k: op.attrs.get(k) for k in ("available_memory_proportion", "partials_type")}
    a2s = (1, *a.shape) if a.rank == 1 else a.shape
    b2s = (*b.shape, 1) if b.rank == 1 else b.shape
    out = (*np.broadcast_shapes(a2s[:-2], b2s[:-2]), a2s[-2], b2s[-1])
    g2 = reshape(g[0] if g[0].dtype == a.dtype else ops.cast(g[0], a.dtype), out)

    def grad_a() -> Tensor:
        ga = ops.matmul(g2, _swap_last(reshape(c.fwd(b), b2s)), **keep)
        return reshape(sum_to(ga, a2s), a.shape)

    def grad_b() -> Tensor:
        gb = ops.matmul(_swap_last(reshape(c.fwd(a), a2s)), g2, **keep)
        return reshape(sum_to(gb, b2s), b.shape)

    return pick(need, grad_a, grad_b)


@grad("Identity")
def _identity(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    return [g[0]]


@grad("Reshape")
def _reshape(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    return [ops.reshape(g[0], op.inputs[0].shape)]


@grad("Transpose")
def _transpose(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    inverse = tuple(int(i) for i in np.argsort(op.attrs["permutation"]))
    return [ops.transpose(g[0], inverse)]


def scatter_into_zeros(g: Tensor, shape: tuple[int, ...], key: object) -> Tensor:
    """Zeros of ``shape`` with ``g`` written at the basic-indexing ``key``."""
    full = ops.init(shape, g.dtype, "slice_grad")
    (window,) = create_op("SliceInplace", [full], {"key": key})
    ops.var_updates.copy_var_update_(window, g)
    return full


@grad("Slice")
def _slice(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    return [scatter_into_zeros(g[0], op.inputs[0].shape, op.attrs["key"])]


@grad("Cast")
def _cast(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    x = op.inputs[0]
    return [ops.cast(g[0], x.dtype) if x.dtype.is_floating_point else None]
