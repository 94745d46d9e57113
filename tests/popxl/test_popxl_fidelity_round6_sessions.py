"""Probe round 6, the integration side: programs written the way PopXL's integration tests
write them (build an Ir, run it in a ``Session``, compare with NumPy or hand-computed
values), pinning what the round changed and what it checked that no other test did.

- Ops whose operands must share a dtype (``matmul``, ``where``, ``conv``, ``scatter``)
  refuse a mismatch as PopART's op setup does, with ``popart.popart_exception`` (Tremula's
  error is also a ``TypeError``, which callers may catch instead).
- ``interpolate``'s four nearest modes at a scale that is not an integer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops

Var = Callable[[np.ndarray], popxl.Tensor]


def _matmul(v: Var) -> popxl.Tensor:
    return ops.matmul(v(np.ones((2, 3), np.float16)), v(np.ones((3, 2), np.float32)))


def _where(v: Var) -> popxl.Tensor:
    cond = v(np.ones(2, np.bool_))
    return ops.where(cond, v(np.ones(2, np.float16)), v(np.ones(2, np.float32)))


def _conv(v: Var) -> popxl.Tensor:
    return ops.conv(v(np.ones((1, 2, 3, 3), np.float16)), v(np.ones((2, 2, 2, 2), np.float32)))


def _scatter(v: Var) -> popxl.Tensor:
    data = v(np.zeros((3, 2), np.float32))
    return ops.scatter(data, v(np.zeros((1, 2), np.int32)), v(np.ones((1, 2), np.float16)))


@pytest.mark.parametrize(
    "name, build",
    [("matmul", _matmul), ("where", _where), ("conv", _conv), ("scatter", _scatter)],
    ids=["matmul", "where", "conv", "scatter"],
)
def test_operands_of_two_dtypes_are_refused_as_popart_s_op_setup_refuses_them(
    name: str, build: Callable[[Var], popxl.Tensor]
) -> None:
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(popart.popart_exception) as info:
        build(popxl.variable)
    assert isinstance(info.value, TypeError)
    assert name in str(info.value) and "float16" in str(info.value)
    assert not ir.main_graph._pb_graph.getOps()  # the refused op left nothing behind


@pytest.mark.parametrize(
    "mode, expected",
    [
        # half_pixel: output i samples input (i + 0.5) / 1.5 - 0.5 = -1/6, 1/2, 7/6,
        # 11/6, 5/2, 19/6; each mode rounds that, clamped into [0, 3]
        ("round_prefer_floor", [0, 0, 1, 2, 2, 3]),
        ("round_prefer_ceil", [0, 1, 1, 2, 3, 3]),
        ("floor", [0, 0, 1, 1, 2, 3]),
        ("ceil", [0, 1, 2, 2, 3, 3]),
    ],
)
def test_interpolate_nearest_modes_at_a_fractional_scale(mode: str, expected: list[int]) -> None:
    ir = popxl.Ir()
    x = np.array([10.0, 11.0, 12.0, 13.0], np.float32).reshape(1, 1, 1, 4)
    with ir.main_graph:
        y = ops.interpolate(popxl.variable(x), scale_factor=(1.0, 1.0, 1.0, 1.5), nearest_mode=mode)
        out = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(out, y)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[out]
    assert got.shape == (1, 1, 1, 6)
    np.testing.assert_array_equal(got.ravel(), 10.0 + np.array(expected))
