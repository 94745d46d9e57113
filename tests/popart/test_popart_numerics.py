"""PopART's folding of constant sub-graphs uses the device's numeric rules
(``tremula.numerics``): a Div or Mod of host constants gives what the same node gives on
the device. Was: Div folded as ``trunc(a / b)`` through float64 (integer division by zero
gave ``INT_MIN`` with a warning, 64-bit quotients were rounded) and Mod through
``np.fmod`` / ``np.mod`` (warnings on a zero divisor)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tremula_tests_popart_helpers import infer

A = np.array([7, -7, 0, -(2**31), -(2**31), 2**30 + 1, -9, 9], np.int32)
B = np.array([0, 0, 0, -1, 0, 3, 4, -4], np.int32)


def _model(op: str, fold: bool, **attrs: Any) -> tuple[bytes, dict[str, np.ndarray]]:
    """``y = op(a, b)``: ``a`` a Constant node (folded on the host) or a fed input (run
    on the device); ``b`` a Constant node."""
    consts = [helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(B))]
    inputs, feeds = [], {"a": A}
    if fold:
        consts.append(helper.make_node("Constant", [], ["a"], value=numpy_helper.from_array(A)))
        feeds = {}
    else:
        inputs = [helper.make_tensor_value_info("a", TensorProto.INT32, list(A.shape))]
    nodes = [*consts, helper.make_node(op, ["a", "b"], ["y"], **attrs)]
    out = [helper.make_tensor_value_info("y", TensorProto.INT32, list(A.shape))]
    graph = helper.make_graph(nodes, "fold", inputs, out)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString(), feeds


def _c(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    q = q if (a < 0) == (b < 0) else -q
    return -(2**31) if q == 2**31 else q


@pytest.mark.parametrize(
    "op, attrs, want",
    [
        ("Div", {}, [_c(int(a), int(b)) for a, b in zip(A, B)]),
        (
            "Mod",
            {"fmod": 1},
            [
                0 if b == 0 else int(math.copysign(abs(int(a)) % abs(int(b)), a))
                for a, b in zip(A, B)
            ],
        ),
        ("Mod", {}, [0 if b == 0 else int(a) % int(b) for a, b in zip(A, B)]),
    ],
)
def test_folded_integer_division_is_the_devices(op: str, attrs: dict, want: list[int]) -> None:
    results = []
    for fold in (True, False):
        proto, feeds = _model(op, fold, **attrs)
        results.append(infer(proto, feeds, ["y"])["y"])
    folded, device = results
    assert device.tolist() == want
    np.testing.assert_array_equal(folded, device)
