"""Listing 9.7.4: nested code loading: a graph that loads another graph's code."""

import numpy as np

import popxl
import popxl.ops as ops

ir = popxl.Ir()
with ir.main_graph:
    x = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")


def expensive_id(x: popxl.Tensor) -> popxl.Tensor:
    return x.T.T


g1 = ir.create_graph(expensive_id, x.spec)


def load_g1():
    ops.remote_code_load(g1, destination="executable")


g2 = ir.create_graph(load_g1)

with ir.main_graph, popxl.in_sequence():
    # Loads code for g1
    ops.remote_code_load(g1, destination="executable")

    # Loads code for g1
    ops.call(g2)

    # Execute g1
    (o,) = ops.call(g1, x)
    out = popxl.d2h_stream(o.shape, o.dtype, name="out")
    ops.host_store(out, o)


def load_graph(g: popxl.Graph):
    ops.remote_code_load(g, destination="executable")


g3 = ir.create_graph(load_graph, g1)
g4 = ir.create_graph(load_graph, g2)

with ir.main_graph, popxl.in_sequence():
    ops.remote_code_load(g3, destination="executable")
    ops.call(g3)

    ops.remote_code_load(g4, destination="executable")
    ops.call(g4)

with popxl.Session(ir, "ipu_model") as session:
    result = session.run()[out]
np.testing.assert_array_equal(result, np.arange(6).reshape(2, 3))
print("listing 9.7.4:", result.tolist())
