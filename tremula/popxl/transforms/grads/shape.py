"""Gradient rules of ``popxl/ops/shape.py``: ``Concat``, and ``Subsample`` / ``Split``
(their gradients written into zeros where they read). ``slice`` and ``squeeze`` make
``Slice`` / ``Reshape`` ops, whose rules are in ``tensor_ops.py``."""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad
from tremula.popxl.transforms.grads.tensor_ops import scatter_into_zeros


@grad("Concat")
def _concat(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
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


@grad("Subsample")
def _subsample(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    return [scatter_into_zeros(g[0], op.inputs[0].shape, op.attrs["key"])]


@grad("Split")
def _split(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """Zeros with each part's gradient written where the part was read (parts no gradient
    reached stay zero)."""
    x = op.inputs[0]
    full = ops.init(x.shape, x.dtype, "split_grad")
    for k, key in enumerate(op.attrs["keys"]):
        part = g.provided(k)
        if part is not None:
            (window,) = create_op("SliceInplace", [full], {"key": key})
            ops.var_updates.copy_var_update_(window, part)
    return [full]
