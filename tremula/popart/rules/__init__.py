"""The one table from ONNX op types to PopXL: ``ONNX_RULES[(domain, op_type)]`` is a function
``rule(node) -> outputs`` that adds the PopXL ops computing the node (``node`` is a
:class:`tremula.popart.convert.Node`: attributes, inputs as PopXL tensors or host
constants). Rules return PopXL tensors, or NumPy arrays for values known on the host (shapes
and other constants, folded instead of computed on the device).

The rules live in files by op family (``elementwise``, ``shape``, ``nn``, ``rnn``,
``rearrange``, ``control``, ``graphcore``); each contributes a dict merged here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tremula.popart.rules.control import CONTROL
from tremula.popart.rules.elementwise import ELEMENTWISE
from tremula.popart.rules.graphcore import GRAPHCORE
from tremula.popart.rules.nn import NN
from tremula.popart.rules.rearrange import REARRANGE
from tremula.popart.rules.rnn import RNN
from tremula.popart.rules.shape import SHAPE

Rule = Callable[[Any], list[Any]]

_ONNX = {**ELEMENTWISE, **SHAPE, **NN, **RNN, **REARRANGE, **CONTROL}
ONNX_RULES: dict[tuple[str, str], Rule] = {
    **{("", k): v for k, v in _ONNX.items()},
    **{("ai.graphcore", k): v for k, v in GRAPHCORE.items()},
}

__all__ = ["ONNX_RULES", "Rule"]
