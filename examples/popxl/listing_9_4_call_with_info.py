"""Listing 9.4: call_with_info and set_parent_input_modified: the variable becomes 2."""

import popxl
import popxl.ops as ops

ir = popxl.Ir()
main = ir.main_graph


def increment_fn(x: popxl.Tensor):
    value = popxl.graph_input(x.shape, x.dtype, "value")
    # inplace increment of the input tensor
    ops.var_updates.copy_var_update_(x, x + value)


with main, popxl.in_sequence():
    x = popxl.variable(1)
    value1 = popxl.constant(1)

    # create graph
    increment_graph = ir.create_graph(increment_fn, x)
    # call graph
    info = ops.call_with_info(increment_graph, x, value1)
    info.set_parent_input_modified(x)
    # host store
    o_d2h = popxl.d2h_stream(x.shape, x.dtype, name="output_stream")
    ops.host_store(o_d2h, x)

with popxl.Session(ir, "ipu_model") as session:
    outputs = session.run()
assert outputs[o_d2h] == 2
assert session.get_tensor_data(x) == 2
print("listing 9.4:", int(outputs[o_d2h]))
