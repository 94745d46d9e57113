"""popxl-addons' ``LinearLayout`` custom op (``linear_layout_impl``, a PopART
``ParameterizedOp``), served in Python: a copy of its input laid out linearly.

``LinearLayout(t)``, parameter ``bs`` (``LinearLayoutParams(bs)``): the output has ``t``'s
shape, dtype and values; on the device it is a new tensor spread over the tiles by
``poputil::mapTensorLinearly(graph, out, 0, bs)`` (every tile's share a multiple of ``bs``
elements, the grain) and filled by one ``Copy`` from ``t``. The op declares no gradient
(``ParameterizedOp`` has no ``getGradOps``): not differentiable, as in PopART.
``bs`` must be at least 1 (the grain of the mapping; 0 would divide by zero in poputil).
Lowering: ``linear_layout_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.popxl.custom_ops._op_binding import OperatorIdentifier, parameterized_binding
from tremula.popxl.ops.base import defop
from tremula.popxl.tensor import TensorSpec

__all__ = ["LinearLayoutOp", "LinearLayoutParams"]

OP = "LinearLayout"
OPID = OperatorIdentifier("popxl.addons.ops", OP, 1, (1, 1), 1)


class LinearLayoutParams:
    """``LinearLayoutParams(bs)``: the grain (elements) of the linear mapping."""

    def __init__(self, bs: int) -> None:
        self.bs = bs

    @property
    def bs(self) -> int:
        return self._bs

    @bs.setter
    def bs(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise TypeError(
                f"LinearLayoutParams: bs must be a positive int (the grain of the linear "
                f"mapping), got {value!r}"
            )
        self._bs = int(value)

    def __repr__(self) -> str:
        return f"LinearLayoutParams(bs={self.bs})"


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    (t,) = specs
    return [TensorSpec(t.shape, t.dtype)]


def _ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    return [np.array(x[0], copy=True)]


defop(OP, _infer, _ref, differentiable=False)


def _attrs(params: Any) -> dict[str, Any]:
    if not isinstance(params, LinearLayoutParams):
        raise TypeError(
            f"LinearLayoutOp.create_op_in_graph: params must be LinearLayoutParams, got "
            f"{type(params).__name__}"
        )
    return {"bs": params.bs}


LinearLayoutOp = parameterized_binding(
    "LinearLayoutOp", OPID, _attrs, "popxl-addons' ``LinearLayoutOp`` binding."
)
