"""Gradient rules of ``popxl/ops/nn.py``: softmax, the NLL loss and group / layer norm
(``nll_loss_with_softmax_grad`` is defined non-differentiable; ``batch_norm_inference``
refuses autodiff, as PopART does)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tremula.errors import PopartException
from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor, constant
from tremula.popxl.transforms.grads.base import (
    GradContext,
    Grads,
    OutputGrads,
    as_float,
    grad,
    pick,
)


@grad("BatchNormInference")
def _batch_norm_inference(
    c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]
) -> Grads:
    """PopART's ``BatchNormOp::getGradOps`` makes a ``BatchNormGradOp``, which reads the
    forward's saved mean and variance: outputs that only the training form of the op has.
    So autodiff through the inference form fails there; here it says so (passing no
    gradient would silently stop every gradient upstream at the frozen batch norm)."""
    raise PopartException(
        f"Cannot create grad op for BatchNormOp {op.describe()} in inference mode: its "
        f"BatchNormGradOp needs the saved mean and variance of a training-mode batch norm. "
        f"To train through frozen statistics, write the batch norm with element-wise ops "
        f"(x * scale + shift, scale = weight / sqrt(var + eps), shift = bias - mean * scale)"
    )


@grad("Softmax")
def _softmax(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """``y (g - sum(g y))`` along the axis. PopART's SoftmaxGradOp reads the gradient and the
    softmax's input, and its Opx computes the probabilities ``y`` again from them; so does
    this rule, unless the backward pass reads ``y`` already (another gradient reads the
    probabilities: attention's ``probs @ v``, a loss), where those values are used: the
    grad graph's inputs are PopART's either way, and the numbers those of the forward."""
    y = c.read(op.outputs[0])
    if y is None:
        y = ops.softmax(c.fwd(op.inputs[0]), op.attrs["axis"])
    else:
        c.fwd(op.inputs[0])
    return [y * (g[0] - ops.sum(g[0] * y, op.attrs["axis"], keepdims=True))]


@grad("Nll")
def _nll(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """``-scale / p`` (``-scale`` for log-probabilities) at each sample's label, where the
    scale is the loss gradient (per sample for ``"none"``, divided by the samples kept for
    ``"mean"``); zero for ignored samples and labels out of range."""
    probs, labels = op.inputs
    if not need[0]:
        return [None, None]
    lab = c.fwd(labels)
    if lab.shape != probs.shape[:-1]:  # one label per row, in any shape (PopART's)
        lab = ops.reshape(lab, probs.shape[:-1])
    classes = constant(np.arange(probs.shape[-1], dtype=lab.dtype.as_numpy()), name="classes")
    onehot = as_float(ops.equal(ops.reshape(lab, (*lab.shape, 1)), classes), g[0])
    kept = None
    if op.attrs["ignore_index"] is not None:
        ignored = ops.equal(lab, constant(op.attrs["ignore_index"], lab.dtype))
        kept = as_float(ops.logical_not(ignored), g[0])
    scale = g[0]
    if op.attrs["reduction"] == "mean":
        count = ops.sum(kept) if kept is not None else constant(float(lab.nelms), g[0].dtype)
        scale = scale / (count + as_float(ops.equal(count, 0.0), count))
    if op.attrs["reduction"] == "none":
        scale = ops.reshape(scale, (*lab.shape, 1))
    if kept is not None:
        scale = scale * ops.reshape(kept, (*lab.shape, 1))
    d = -(onehot * scale)
    if not op.attrs["log_prob"]:
        d = d / (c.fwd(probs) + (1.0 - onehot))  # 1 off the label: no 0 / 0
    return [d, None]


@grad("GroupNorm")
def _group_norm(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """From the input, the weight and the forward statistics (outputs 1 and 2: mean and
    inverse standard deviation per sample and group), as PopART's GroupNormGradOp: input
    gradient ``inv_std (gx - mean(gx) - xhat mean(gx xhat))`` with ``gx = g weight`` per
    group, plus ``g_mean / m - g_inv_std inv_std^2 xhat / m`` where gradients reach the
    statistics (``m`` elements per group)."""
    t, w, _ = op.inputs
    n, ch = t.shape[:2]
    groups = op.attrs["num_groups"]
    m = t.nelms // (n * groups)
    per_channel = (1, ch) + (1,) * (t.rank - 2)
    others = [0, *range(2, t.rank)]
    stats: dict[str, Tensor] = {}

    def xhat() -> Tensor:  # [n, groups, m], and the inverse standard deviation
        if not stats:
            x = ops.reshape(c.fwd(t), (n, groups, -1))
            mean, inv = (ops.reshape(c.fwd(s), (n, groups, 1)) for s in op.outputs[1:])
            stats["inv"] = inv
            stats["xhat"] = (x - mean) * inv
        return stats["xhat"]

    def grad_t() -> Tensor:
        xh = xhat()
        inv = stats["inv"]
        gx = ops.reshape(g[0] * ops.reshape(c.fwd(w), per_channel), (n, groups, -1))
        m1 = ops.mean(gx, 2, keepdims=True)
        m2 = ops.mean(gx * xh, 2, keepdims=True)
        dx = inv * (gx - m1 - xh * m2)
        g_mean, g_inv = g.provided(1), g.provided(2)
        if g_mean is not None:
            dx = dx + ops.reshape(g_mean, (n, groups, 1)) * (1.0 / m)
        if g_inv is not None:
            dx = dx - ops.reshape(g_inv, (n, groups, 1)) * inv * inv * xh * (1.0 / m)
        return ops.reshape(dx, t.shape)

    return pick(
        need,
        grad_t,
        lambda: ops.sum(g[0] * ops.reshape(xhat(), t.shape), others),
        lambda: ops.sum(g[0], others),
    )
