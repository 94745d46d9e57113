"""Gradient rules of ``popxl/ops/sparse.py``. The three ops are bilinear, and each one's
gradients are the other two (``W`` is the sparse matrix ``meta_info`` and ``nz_values``
encode, ``M`` its pattern as a 0/1 mask):

* ``y = x W^T``: ``dx = dy W`` (GradA), ``dW = (dy^T x)[M]`` (GradW);
* ``dx = g W`` (GradA): ``dg = dx' W^T`` (forward), ``dW = (g^T dx')[M]`` (GradW);
* ``w = (g^T x)[M]`` (GradW): ``dg = x dw^T`` (forward, with ``dw`` as the values),
  ``dx = g dw`` (GradA).

``meta_info`` gets no gradient. GradA needs the layer planned with ``doGradAPass`` and GradW
with ``doGradWPass`` (its work split lives in the meta-info): ``ValueError`` from autodiff
otherwise, which then leaves the Ir as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad, pick

_PASSES = {
    "SparseFullyConnectedGradA": ("do_grad_a_pass", "doGradAPass", "the input"),
    "SparseFullyConnectedGradW": ("do_grad_w_pass", "doGradWPass", "nz_values"),
}


def _op(op_type: str, inputs: list[Tensor], attrs: dict[str, Any], fwd: OpNode) -> Tensor:
    """Add the pass ``op_type``, if the layer's options planned it."""
    flag = _PASSES.get(op_type)
    if flag is not None and not getattr(attrs["options"], flag[0]):
        raise ValueError(
            f"autodiff: the gradient of {flag[2]} of {fwd.type} {fwd.outputs[0].id!r} needs "
            f"the sparse layer planned with option {flag[1]}=True (given to "
            f"ops.sparse.fully_connected and to the partitioner that made its meta_info)"
        )
    return create_op(op_type, inputs, attrs)[0]


@grad("SparseFullyConnected")
def _fwd(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    x, meta, nz = op.inputs
    a = op.attrs
    return pick(
        need,
        lambda: _op("SparseFullyConnectedGradA", [g[0], c.fwd(meta), c.fwd(nz)], a, op),
        lambda: None,
        lambda: _op("SparseFullyConnectedGradW", [c.fwd(meta), g[0], c.fwd(x)], a, op),
    )


@grad("SparseFullyConnectedGradA")
def _grad_a(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    dy, meta, nz = op.inputs
    a = op.attrs
    return pick(
        need,
        lambda: _op("SparseFullyConnected", [g[0], c.fwd(meta), c.fwd(nz)], a, op),
        lambda: None,
        lambda: _op("SparseFullyConnectedGradW", [c.fwd(meta), c.fwd(dy), g[0]], a, op),
    )


@grad("SparseFullyConnectedGradW")
def _grad_w(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    meta, dy, x = op.inputs
    a = op.attrs
    return pick(
        need,
        lambda: None,
        lambda: _op("SparseFullyConnected", [c.fwd(x), c.fwd(meta), g[0]], a, op),
        lambda: _op("SparseFullyConnectedGradA", [c.fwd(dy), c.fwd(meta), g[0]], a, op),
    )
