"""Where PopXL places the outputs of a call or a repeat, as popxl-addons' transforms read it
(its batch serialisation with overlapped IO stores a loop's outputs from IO tiles; its remote
load graph on IO tiles returns IO-tile tensors). No PopXL test file is known to pin this
directly; it stands for what popxl-addons' own tests (batch serialisation, remote) need of
``Tensor.tile_set`` / ``Tensor.ipu`` after ``ops.call`` and ``ops.repeat``.

PopART's ``SubgraphOp`` (``CallOp``, ``LoopOp``) finds the virtual graph and tile set of an
output in the called graph: those of the op producing the graph output it carries
(``getIntrospectionOutVirtualGraphId``); ~75 % sure for the IPU, ~85 % for the tile set
(popxl-addons' overlapped batch serialisation cannot build without it). A graph output that
is a graph input passed through keeps the call's own placement here (PopART looks before the
graph then; not pinned)."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops


def _ir_with_io_tiles() -> popxl.Ir:
    ir = popxl.Ir()
    ir._pb_ir.getSessionOptions().numIOTiles = 32
    return ir


def test_call_outputs_take_the_tile_set_of_the_graph_outputs() -> None:
    ir = _ir_with_io_tiles()
    with ir.main_graph:
        x = popxl.variable(np.arange(2, dtype=np.float32))

        def body(a: popxl.Tensor) -> tuple[popxl.Tensor, ...]:
            with popxl.io_tiles():
                on_io = ops.io_tile_copy(a)
            return on_io, a + 1, a

        g = ir.create_graph(body, x)
        io_out, compute_out, passed = ops.call(g, x)
        assert io_out.tile_set == "io"
        assert compute_out.tile_set == "compute"
        assert passed.tile_set == "compute"
        # an IO-tile tensor from a call meets an IO-tile offset without a copy, and a
        # compute-tile one only through a copy
        buffer = popxl.remote_buffer((2,), popxl.float32, 1)
        with popxl.io_tiles():
            offset = popxl.variable(0, popxl.int32) + 0
            ops.remote_store(buffer, offset, io_out)
            with pytest.raises(ValueError, match="different tile sets: io != compute"):
                ops.remote_store(buffer, offset, compute_out)
        d2h = popxl.d2h_stream((2,), popxl.float32)
        ops.host_store(d2h, ops.remote_load(buffer, 0))
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_allclose(s.run()[d2h], [0, 1])


def test_repeat_outputs_take_the_tile_set_of_the_body_outputs() -> None:
    ir = _ir_with_io_tiles()
    with ir.main_graph:
        with popxl.io_tiles():
            x = ops.io_tile_copy(popxl.variable(np.ones(2, np.float32)))

        def body(a: popxl.Tensor) -> popxl.Tensor:
            with popxl.io_tiles():
                return a * 2

        g = ir.create_graph(body, x)
        (y,) = ops.repeat(g, 3, x)
        assert y.tile_set == "io"
        d2h = popxl.d2h_stream((2,), popxl.float32)
        ops.host_store(d2h, ops.io_tile_copy(y))
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_allclose(s.run()[d2h], [8, 8])


def test_call_output_ipu_is_that_of_the_graph_output() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        with popxl.ipu(1):
            g = ir.create_graph(lambda a: a * 3, x)
        (y,) = ops.call(g, x)
        assert y.ipu == 1
        assert ops.add(x, x).ipu == 0
