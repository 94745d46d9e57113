"""Gradient rules of ``popxl/ops/roi_align.py``. RoiAlign is linear in its input, so the
input's gradient is the transposed op (``RoiAlignGrad``: the output gradient scatter-added
with the same bilinear weights), and that op's gradient is RoiAlign again. The rois and
batch indices get none, as in PopART."""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad

_PLAN = ("output_size", "spatial_scale", "sampling_ratio", "aligned")


@grad("RoiAlign")
def _roi_align(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    if not need[0]:
        return [None, None, None]
    t, rois, bidx = op.inputs
    attrs = {**{k: op.attrs[k] for k in _PLAN}, "input_shape": t.shape}
    return [create_op("RoiAlignGrad", [g[0], c.fwd(rois), c.fwd(bidx)], attrs)[0], None, None]


@grad("RoiAlignGrad")
def _roi_align_grad(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    if not need[0]:
        return [None, None, None]
    _, rois, bidx = op.inputs
    attrs = {k: op.attrs[k] for k in _PLAN}
    return [create_op("RoiAlign", [g[0], c.fwd(rois), c.fwd(bidx)], attrs)[0], None, None]
