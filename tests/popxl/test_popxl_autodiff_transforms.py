"""The numerically transparent transforms: ``merge_exchange``, ``io_tile_exchange`` and
``decompose_sum`` leave results unchanged (spec 1.12)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import pytest

import popxl
import popxl.ops as ops

A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


def _exchange_program(
    context: Callable[[], AbstractContextManager],
) -> tuple[np.ndarray, np.ndarray, list]:
    ir = popxl.Ir()
    with ir.main_graph:
        a_in = popxl.h2d_stream((2, 3), popxl.float32, name="a")
        b_in = popxl.h2d_stream((2, 3), popxl.float32, name="b")
        out = popxl.d2h_stream((2, 3), popxl.float32, name="out")
        buffer = popxl.remote_buffer((2, 3), popxl.float32, 1)
        with context():
            a = ops.host_load(a_in, "a")
            b = ops.host_load(b_in, "b")
        y = a * b + 1.0
        with context():
            ops.remote_store(buffer, 0, y)
        with context():
            z = ops.remote_load(buffer, 0)
        d = z - a
        with context():
            ops.host_store(out, d)
    with popxl.Session(ir, "cpu") as session:
        result = session.run({a_in: A, b_in: B})[out]
    merged = [
        len(op.attrs["descriptors"]) for op in ir.main_graph.ops if op.type == "MultiExchange"
    ]
    return result, A * B + 1.0 - A, merged


@pytest.mark.parametrize(
    "context",
    [nullcontext, popxl.transforms.merge_exchange, popxl.transforms.io_tile_exchange],
    ids=["plain", "merge_exchange", "io_tile_exchange"],
)
def test_exchange_contexts_are_numerically_transparent(context) -> None:
    got, expected, merged = _exchange_program(context)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert merged == ([] if context is nullcontext else [2, 1, 1, 1])  # the two loads merge


def test_io_tile_exchange_refuses_ops_that_cannot_overlap() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a_in = popxl.h2d_stream((2,), popxl.float32, name="a")
        match = "More than one Op remained after `io_tile_exchange`: 2 ops remain"
        with pytest.raises(RuntimeError, match=match), popxl.transforms.io_tile_exchange():
            a = ops.host_load(a_in, "a")
            a = a + 1.0
        with popxl.transforms.io_tile_exchange(verify_overlap=False):
            b = ops.host_load(a_in, "b") * 2.0
        assert b.producer.tile_set == "io"


def test_decompose_sum_keeps_gradient_sums() -> None:
    x_np, g_np = np.array([0.5, -1.0, 2.0], np.float32), np.ones(3, np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np)
        fwd = ir.create_graph(lambda a: a * a * a + a * 2.0 + ops.sin(a), x)
        info = popxl.transforms.autodiff(fwd)
        assert popxl.transforms.decompose_sum(info.graph) is info.graph
        site = ops.call_with_info(fwd, x)
        (gx,) = ops.call(info.graph, g_np, inputs_dict=info.inputs_dict(site))
        out = popxl.d2h_stream(gx.shape, gx.dtype, name="gx")
        ops.host_store(out, gx)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[out]
    np.testing.assert_allclose(got, 3 * x_np**2 + 2 + np.cos(x_np), rtol=1e-5)
    with pytest.raises(TypeError, match="expected a Graph"):
        popxl.transforms.decompose_sum("graph")
