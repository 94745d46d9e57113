"""Gradient rules of ``popxl/ops/resize.py``: a resize is linear along each axis (output
``j`` blends the inputs of its taps), so its gradient applies each axis's blending
matrix transposed, as a matmul with a constant built when the graph is."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.resize import axis_plan
from tremula.popxl.tensor import Tensor, constant
from tremula.popxl.transforms.grads.base import (
    GradContext,
    Grads,
    OutputGrads,
    grad,
)


def _blend(n_in: int, n_out: int, scale: float, attrs: dict) -> np.ndarray:
    """``[n_out, n_in]``: the matrix the forward applies along one axis."""
    idx, w = axis_plan(n_in, n_out, scale, attrs)
    m = np.zeros((n_out, n_in))
    for i, wk in zip(idx, w):
        np.add.at(m, (np.arange(n_out), i), wk)
    return m


@grad("Resize")
def _resize(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    x, a = op.inputs[0], op.attrs
    gx: Tensor = g[0]
    for ax, (n_in, n_out, scale) in enumerate(zip(x.shape, a["shape"], a["scales"])):
        if n_out == n_in and scale == 1.0:
            continue
        order = (*(d for d in range(gx.rank) if d != ax), ax)
        m = constant(_blend(n_in, n_out, scale, a).astype(x.dtype.as_numpy()), name="resize")
        moved = ops.transpose(gx, order) if ax != gx.rank - 1 else gx
        back = ops.matmul(moved, m)  # [..., n_out] @ [n_out, n_in]
        gx = (
            ops.transpose(back, tuple(int(i) for i in np.argsort(order)))
            if ax != gx.rank - 1
            else back
        )
    return [gx]
