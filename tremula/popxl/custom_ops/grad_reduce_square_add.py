"""popxl-addons' ``grad_reduce_square_add`` as its C++ defines it
(``popxl_addons/ops/grad_reduce_square_add``, ``popxl.addons.ops::GradReduceSquareAdd:1``):
``GradReduceSquareAdd(t, scale)`` is the float32 scalar ``scale * sum(t ** 2)`` over every
element of ``t`` (``popops::reduce`` of the flattened ``t`` with ``SQUARE_ADD`` into float,
``ReduceParams(SQUARE_ADD, false, scale)``), ``scale`` a one-element tensor (the wrapper
passes ``1 / loss_scaling ** 2``): the squared norm of a loss-scaled gradient. The C++ op
has no gradient ops: it is not differentiable. Squares accumulate in float (half input too).
Lowering: ``grad_reduce_square_add_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl import dtypes
from tremula.popxl._ir.graph import Graph
from tremula.popxl._ir.op.base import Op
from tremula.popxl._ir.op.classes import define_class
from tremula.popxl.custom_ops._op_binding import connect
from tremula.popxl.ops.base import defop
from tremula.popxl.tensor import TensorSpec

__all__ = ["GradReduceSquareAddOp"]


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    t, scale = specs
    if t.dtype not in (dtypes.float16, dtypes.float32):
        raise OpSetupTypeError(
            f"GradReduceSquareAddOp: input 0 must be float16 or float32, got {t.dtype}"
        )
    if scale.dtype not in (dtypes.float16, dtypes.float32) or int(np.prod(scale.shape)) != 1:
        raise OpSetupError(
            f"GradReduceSquareAddOp: the scale (input 1) must be one float element, got "
            f"{scale.dtype} {scale.shape}"
        )
    return [TensorSpec((), dtypes.float32)]


def _ref(arrays: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t = np.asarray(arrays[0], np.float64)
    scale = float(np.asarray(arrays[1], np.float64).reshape(()))
    return [np.asarray(scale * np.sum(t * t), np.float32)]


defop("GradReduceSquareAdd", _infer, _ref, differentiable=False)


@define_class
class GradReduceSquareAddOp(Op):
    """popxl-addons' ``GradReduceSquareAddOp``."""

    @staticmethod
    def createOpInGraph(
        graph: Graph,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        settings: Any = None,
    ) -> Op:
        what = "GradReduceSquareAddOp"
        return connect(what, graph, "GradReduceSquareAdd", inputs, outputs, 2, {})
