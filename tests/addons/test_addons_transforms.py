"""popxl-addons' transforms that edit the IR through PopXL's bindings (repeat_graph,
route_tensor_into_graph, patterns, FLOP counts) and its remote-buffer helpers, on Tremula,
against NumPy."""

from __future__ import annotations

from functools import partial

import numpy as np
import popxl_addons as addons
from popxl_addons.patterns import apply_pre_alias_patterns
from popxl_addons.remote import load_remote_graph, named_variable_buffers, store_remote_graph
from popxl_addons.transforms.repeat_graph import repeat_graph

import popxl
from popxl import ops

X0 = np.arange(6, dtype=np.float32).reshape(2, 3)


class Scale(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return x * self.add_variable_input("scale", partial(np.ones, x.shape), x.dtype)


def test_repeat_graph_moves_the_main_graph_into_a_loop() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros((2, 3), np.float32), name="w")
        x = popxl.variable(X0, name="x")
        ops.var_updates.accumulate_(w, ops.cos(x) + 1.0)
    body = repeat_graph(ir.main_graph, 4)
    assert [op.opType() for op in ir.main_graph._pb_graph.getOps()] == ["Loop"]
    assert "Accumulate" in [op.opType() for op in body._pb_graph.getOps()]
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        got = s.get_tensor_data(w)
    np.testing.assert_allclose(got, 4 * (np.cos(X0) + 1), rtol=1e-6)


def test_route_tensor_into_a_nested_graph() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        acc = popxl.variable(np.zeros(3, np.float32), name="acc")
        x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
        inner = ir.create_graph(lambda t: t * 3.0, x)
        outer = ir.create_graph(lambda t: ops.call(inner, t)[0], x)
        ops.repeat(outer, 2, x)
        with inner:  # through the repeat's and the call's sites
            routed = addons.route_tensor_into_graph(acc, modified=True)
            ops.var_updates.accumulate_(routed, inner.outputs[0])
    assert routed in inner.inputs and len(outer.inputs) == 2
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        got = s.get_tensor_data(acc)
    x_ = np.arange(3)
    np.testing.assert_allclose(got, 3 * x_ + 9 * x_)  # x, then 3x, carried


def test_flops_and_patterns() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((4, 5), np.float32))
        b = popxl.variable(np.ones((5, 5), np.float32))
        g = ir.create_graph(lambda p, q: ops.matmul(p, q) + 1.0, a, b)
        ops.repeat(g, 3, a, b)  # the (4, 5) result is carried into p
    assert addons.total_FLOPs(ir) == 3 * (2 * 5 * 4 * 5 + 4 * 5)
    before = [op.opType() for op in g._pb_graph.getOps()]
    apply_pre_alias_patterns(ir, "default")
    assert [op.opType() for op in g._pb_graph.getOps()] == before


def test_remote_buffers_load_and_store() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")
        facts, _ = Scale().create_graph(x)
        buffers = named_variable_buffers(facts, entries=2)
        v0 = facts.init_remote(buffers, 0)
        facts.init_remote(buffers, 1)
        load, names = load_remote_graph(buffers, entries=2)
        store = store_remote_graph(buffers, entries=2)
        (w,) = load.call(0)
        store.call(1, w * 10.0)
        (w1,) = load.call(1)
        d2h = popxl.d2h_stream(w1.shape, w1.dtype)
        ops.host_store(d2h, w1)
    assert names == ["scale"]
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()[d2h]
        first = s.get_tensor_data(v0.scale)
    np.testing.assert_array_equal(got, np.full((2, 3), 10, np.float32))
    np.testing.assert_array_equal(first, np.ones((2, 3), np.float32))
