"""Listing 9.1 of PopXL's user guide ("Graphs"): create a subgraph and call it."""

import numpy as np

import popxl
import popxl.ops as ops

ir = popxl.Ir()
main = ir.main_graph


def increment_fn(x: popxl.Tensor):
    return x + np.ones(x.shape, x.dtype.as_numpy())


with main:
    # host load
    input = popxl.h2d_stream([2, 2], popxl.float32, name="input_stream")
    x = ops.host_load(input, "x")

    # create graph
    increment_graph = ir.create_graph(increment_fn, x)

    # call graph
    (o,) = ops.call(increment_graph, x)

    o_d2h = popxl.d2h_stream(o.shape, o.dtype, name="output_stream")
    ops.host_store(o_d2h, o)

data = np.arange(4, dtype=np.float32).reshape(2, 2)
with popxl.Session(ir, "ipu_model") as session:
    outputs = session.run({input: data})
np.testing.assert_array_equal(outputs[o_d2h], data + 1)
print("listing 9.1:", outputs[o_d2h].tolist())
