"""Listing 9.2: two subgraphs from one function, for weights of different shapes."""

import numpy as np

import popxl
import popxl.ops as ops

ir = popxl.Ir()
main = ir.main_graph


def matmul_fn(x: popxl.Tensor, w: popxl.Tensor):
    return x @ w


with main:
    # host load
    input = popxl.h2d_stream([2, 2], popxl.float32, name="input_stream")
    x = ops.host_load(input, "x")

    w1 = popxl.variable(np.ones(x.shape, x.dtype.as_numpy()), name="w1")
    w2 = popxl.variable(np.ones(x.shape[-1], x.dtype.as_numpy()), name="w2")

    # create two graphs
    matmul_graph1 = ir.create_graph(matmul_fn, x, w1)
    matmul_graph2 = ir.create_graph(matmul_fn, x, w2)

    # call them
    (o1,) = ops.call(matmul_graph1, x, w1)
    (o2,) = ops.call(matmul_graph2, x, w2)
    d1 = popxl.d2h_stream(o1.shape, o1.dtype, name="o1")
    d2 = popxl.d2h_stream(o2.shape, o2.dtype, name="o2")
    ops.host_store(d1, o1)
    ops.host_store(d2, o2)

data = np.array([[1, 2], [3, 4]], dtype=np.float32)
with popxl.Session(ir, "ipu_model") as session:
    outputs = session.run({input: data})
np.testing.assert_array_equal(outputs[d1], data @ np.ones((2, 2), np.float32))
np.testing.assert_array_equal(outputs[d2], data @ np.ones(2, np.float32))
print("listing 9.2:", outputs[d1].tolist(), outputs[d2].tolist())
