"""Element-wise maps over broadcast operands: the N-d view path (operands connected with the
output's shape, linear mapping) and the flat path (any other mapping) agree with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.profile import validate


@pytest.mark.parametrize("mapping", ["linear", "scattered"])
@pytest.mark.parametrize("other_shape", [(5, 1), (1, 7), (7,), (1,)])
def test_broadcast_operands(mapping, other_shape):
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    x = g.add_variable(poplar.FLOAT, (5, 7), "x")
    m = g.add_variable(poplar.FLOAT, other_shape, "m", mapping="linear")
    if mapping == "linear":
        poplar.map_tensor_linearly(g, x)
    else:  # elements of one tile not consecutive: vertices take them out of order
        g.set_tile_mapping(x, np.arange(35).reshape(5, 7) % 4)
    g.create_host_write("x", x)
    g.create_host_write("m", m)
    prog = poplar.Sequence()
    out = popops.map(g, pe.Exp(pe._1 - pe._2) * 2, [x, m], prog)
    popops.sub_in_place(g, x, m, prog)
    g.create_host_read("out", out)
    g.create_host_read("x_after", x)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((5, 7)).astype(np.float32)
    mv = rng.standard_normal(other_shape).astype(np.float32)
    engine.write_tensor("x", xv)
    engine.write_tensor("m", mv)
    engine.run(0)
    np.testing.assert_allclose(engine.read_tensor("out"), np.exp(xv - mv) * 2, rtol=1e-6)
    np.testing.assert_allclose(engine.read_tensor("x_after"), xv - mv, rtol=1e-6)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
