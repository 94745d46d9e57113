"""Gradient rules of ``popxl/ops/rnn.py``: a GRU's gradients are one ``GruGrad`` op
(PopLibs' ``gruBwdWithWU``: backpropagation through time and the weight gradients)."""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad


@grad("Gru")
def _gru(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """The outputs' gradient flows back through the loop; the intermediates' (forward
    values for the backward pass, not results) is ignored."""
    x, h0, wi, wo, b = op.inputs
    y, inter = op.outputs
    args = [c.fwd(h0), c.fwd(inter), c.fwd(wi), c.fwd(wo), c.fwd(b), c.fwd(x), c.fwd(y), g[0]]
    grads = create_op("GruGrad", args)
    return [gi if n else None for gi, n in zip(grads, need)]
