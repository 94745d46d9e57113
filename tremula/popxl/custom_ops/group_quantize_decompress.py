"""popxl-addons' ``GroupQuantizeDecompress`` custom op
(``group_quantize_decompress_binding``), served in Python: the decompression of 4-bit
group-quantized tensors (FlexGen), as its C++ source defines it.

``GroupQuantizeDecompress(x, group_scale, group_bias)``, no attributes:

- ``x`` uint16 ``[rows, groups, ids]``, each element four packed 4-bit integers, most
  significant nibble first (``group_quantize_decompress_codelet.py``);
- ``group_scale`` and ``group_bias`` float16, rank 3 with a last dimension of 1,
  broadcasting against ``[rows, groups, 1]``;
- output ``[rows, groups * ids * 4]`` of the scale's dtype: ``nibble * scale + bias``,
  each group's ``ids * 4`` values with its own scale and bias.

The C++ op declares no gradient (the packed input is an integer tensor): not
differentiable. Beyond its setup's checks (ranks, the last dimensions of 1), what its opx
would refuse when lowered is refused here at op creation: ``x`` must be uint16 (the
vertex reads ``uint16_t``) and the scale and bias float16 (the vertex writes ``half`` and
the ``popops::map`` that scales it needs one type), with shapes that broadcast.
Lowering: ``group_quantize_decompress_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl import dtypes
from tremula.popxl.custom_ops._op_binding import OperatorIdentifier, connect
from tremula.popxl.custom_ops.group_quantize_decompress_codelet import unpack_nibbles
from tremula.popxl.ops.base import OpNode, defop
from tremula.popxl.tensor import TensorSpec

__all__ = ["GroupQuantizeDecompressOp", "decompress"]

OP = "GroupQuantizeDecompress"
OPID = OperatorIdentifier("popxl.addons.ops", OP, 1, (3, 3), 1)
_WHERE = "GroupQuantizeDecompressOp::setup"


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    x, scale, bias = specs
    if len(x.shape) != 3:
        raise OpSetupError(f"{_WHERE} x should have rank 3, got shape {x.shape}")
    for name, t in (("groupScale", scale), ("groupBias", bias)):
        if len(t.shape) != 3:
            raise OpSetupError(f"{_WHERE} {name} should same rank as x, got shape {t.shape}")
        if t.shape[2] != 1:
            raise OpSetupError(
                f"{_WHERE} {name} shape at last dimension should be 1, got shape {t.shape}"
            )
        try:
            np.broadcast_shapes(t.shape, (*x.shape[:2], 1))
        except ValueError:
            raise OpSetupError(
                f"{_WHERE} {name} of shape {t.shape} does not broadcast over the groups of x "
                f"{x.shape}: it must be [1 or {x.shape[0]}, 1 or {x.shape[1]}, 1]"
            ) from None
        if t.dtype != dtypes.float16:
            raise OpSetupTypeError(
                f"{_WHERE} {name} must be float16 (the decompression writes half), got {t.dtype}"
            )
    if x.dtype != dtypes.uint16:
        raise OpSetupTypeError(
            f"{_WHERE} x must be uint16 (four packed 4-bit values each), got {x.dtype}"
        )
    rows, groups, ids = x.shape
    return [TensorSpec((rows, groups * ids * 4), scale.dtype)]


def decompress(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """NumPy reference: the nibbles of ``x`` times ``scale`` plus ``bias`` (float16)."""
    unpacked = unpack_nibbles(x)  # [rows, groups, ids * 4]
    out = unpacked * np.asarray(scale, np.float16) + np.asarray(bias, np.float16)
    return out.reshape(x.shape[0], -1)


def _ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, scale, bias = x
    return [decompress(t, scale, bias)]


defop(OP, _infer, _ref, differentiable=False)  # the C++ op has no getGradOps


class GroupQuantizeDecompressOp:
    """popxl-addons' ``GroupQuantizeDecompressOp`` binding."""

    @staticmethod
    def createOpInGraph(
        graph: Any,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        settings: Any = None,
    ) -> OpNode:
        """Connect ``GroupQuantizeDecompress`` with inputs ``{0: x, 1: scale, 2: bias}``."""
        return connect("GroupQuantizeDecompressOp", graph, OP, inputs, outputs, 3, {})
