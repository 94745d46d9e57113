"""Gradient rules of ``popxl/ops/random.py``: a dropout's gradient is the same dropout of
the output gradient (the same seed and seed modifier draw the same mask); the generators
and ``split_random_seed`` are defined non-differentiable."""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad


@grad("Dropout", "ShapedDropout")
def _dropout(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    seed = c.fwd(op.inputs[1])
    return [create_op(op.type, [g[0], seed], dict(op.attrs))[0], None]
