"""Gradient rules of ``popxl/ops/shape.py`` (``slice``, ``squeeze``, ``split`` and
``subsample`` make ``Slice`` / ``Reshape`` ops, whose rules are in ``tensor_ops.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl.ops.base import Op, create_op
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad


@grad("Concat")
def _concat(c: GradContext, op: Op, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """Each input's gradient is its slice of the output gradient."""
    axis = op.attrs["axis"]
    result: list[Tensor | None] = []
    start = 0
    for t, wanted in zip(op.inputs, need):
        size = t.shape[axis]
        if wanted:
            key = (*(slice(None),) * axis, slice(start, start + size))
            result.append(create_op("Slice", [g[0]], {"key": key})[0])
        else:
            result.append(None)
        start += size
    return result
