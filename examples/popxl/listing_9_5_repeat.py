"""Listing 9.5: repeat calls the graph twice; outputs feed the next iteration's inputs."""

import numpy as np

import popxl
import popxl.ops as ops

ir = popxl.Ir()
main = ir.main_graph


def increment_fn(x: popxl.Tensor, value: popxl.Tensor):
    return x + value


with main:
    # host load
    x = popxl.variable(np.ones([2, 2], np.float32), name="x")
    value = popxl.variable(np.ones(x.shape, x.dtype.as_numpy()), name="value")

    # create graph
    increment_graph = ir.create_graph(increment_fn, x, value)

    # call graph in a loop
    (o,) = ops.repeat(increment_graph, 2, x, value)
    o_d2h = popxl.d2h_stream(o.shape, o.dtype, name="output_stream")
    ops.host_store(o_d2h, o)

with popxl.Session(ir, "ipu_model") as session:
    outputs = session.run()
np.testing.assert_array_equal(outputs[o_d2h], np.full((2, 2), 3.0))  # 1 + 1 + 1
print("listing 9.5:", outputs[o_d2h].tolist())
