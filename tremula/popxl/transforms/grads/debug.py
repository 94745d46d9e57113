"""Gradient rules of ``popxl/ops/debug.py``: printing passes the gradient through (printing
it, titled ``<title>_gradient``, with ``print_gradient``); a copy to another IPU or tile set
copies the gradient back."""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl.context import _placed, ipu
from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad


@grad("PrintTensor")
def _print_tensor(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    if not op.attrs["print_gradient"]:
        return [g[0]]
    attrs = {
        **op.attrs,
        "title": f"{op.attrs['title']}_gradient",
        "print_self": True,
        "print_gradient": False,
    }
    return [create_op("PrintTensor", [g[0]], attrs)[0]]


@grad("IpuCopy")
def _ipu_copy(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    source, destination = op.attrs["source"], op.attrs["destination"]
    with ipu(source):
        attrs = {"source": destination, "destination": source}
        return [create_op("IpuCopy", [g[0]], attrs)[0]]


@grad("IoTileCopy")
def _io_tile_copy(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    back = op.inputs[0]._tile_set
    with _placed(tile_set=back):  # as io_tile_copy places a copy: on its destination
        return [create_op("IoTileCopy", [g[0]], {"tile_set": back})[0]]
