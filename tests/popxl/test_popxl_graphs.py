"""The graph chapter's semantics (seeds/popxl-graphs.txt): create_graph, call, graph_input,
call_with_info with set_parent_input_modified, repeat; run on the IPU Model."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops


def _run(ir, inputs=None, device="ipu_model"):
    with popxl.Session(ir, device) as session:
        return session.run(inputs or {}), session


def test_listing_9_1_increment_subgraph():
    ir = popxl.Ir()
    main = ir.main_graph

    def increment_fn(x: popxl.Tensor):
        return x + np.ones(x.shape, x.dtype.as_numpy())

    with main:
        input = popxl.h2d_stream([2, 2], popxl.float32, name="input_stream")
        x = ops.host_load(input, "x")
        increment_graph = ir.create_graph(increment_fn, x)
        (o,) = ops.call(increment_graph, x)
        out = popxl.d2h_stream(o.shape, o.dtype, name="out")
        ops.host_store(out, o)
    assert increment_graph.name.endswith("increment_fn_subgraph(0)")  # qualname, no <locals>
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    outputs, _ = _run(ir, {input: data})
    np.testing.assert_array_equal(outputs[out], data + 1)


def test_listing_9_3_graph_input_and_two_calls():
    ir = popxl.Ir()
    main = ir.main_graph

    def increment_fn(x: popxl.Tensor):
        value = popxl.graph_input(x.shape, x.dtype, "value")
        return x + value

    with main:
        input = popxl.h2d_stream([2, 2], popxl.float32, name="input_stream")
        x = ops.host_load(input, "x")
        increment_graph = ir.create_graph(increment_fn, x)
        value1 = popxl.variable(np.ones(x.shape, x.dtype.as_numpy()), name="value1")
        value2 = popxl.variable(2 * np.ones(x.shape, x.dtype.as_numpy()), name="value2")
        (o,) = ops.call(increment_graph, x, value1)
        (o,) = ops.call(increment_graph, o, value2)
        out = popxl.d2h_stream(o.shape, o.dtype, name="out")
        ops.host_store(out, o)
    assert [t.name for t in increment_graph.inputs] == ["x", "value"]
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    outputs, _ = _run(ir, {input: data}, device="cpu")
    np.testing.assert_array_equal(outputs[out], data + 3)


def test_listing_9_4_modified_input_reaches_the_parent():
    ir = popxl.Ir()
    main = ir.main_graph

    def increment_fn(x: popxl.Tensor):
        value = popxl.graph_input(x.shape, x.dtype, "value")
        ops.var_updates.copy_var_update_(x, x + value)

    with main, popxl.in_sequence():
        x = popxl.variable(1)
        value1 = popxl.constant(1)
        increment_graph = ir.create_graph(increment_fn, x)
        info = ops.call_with_info(increment_graph, x, value1)
        info.set_parent_input_modified(x)
        o_d2h = popxl.d2h_stream(x.shape, x.dtype, name="output_stream")
        ops.host_store(o_d2h, x)
    outputs, session = _run(ir)
    assert outputs[o_d2h] == 2
    assert session.get_tensor_data(x) == 2


def test_call_is_pass_by_value_without_the_mark():
    ir = popxl.Ir()

    def increment_fn(x: popxl.Tensor):
        ops.var_updates.copy_var_update_(x, x + 1)

    with ir.main_graph:
        x = popxl.variable(1, name="x")
        g = ir.create_graph(increment_fn, x)
        ops.call(g, x)
    _, session = _run(ir)
    assert session.get_tensor_data(x) == 1


def test_listing_9_5_repeat_is_loop_carried():
    ir = popxl.Ir()

    def increment_fn(x: popxl.Tensor, value: popxl.Tensor):
        return x + value

    with ir.main_graph:
        input = popxl.h2d_stream([2, 2], popxl.float32, name="input_stream")
        x = ops.host_load(input, "x")
        value = popxl.variable(np.ones(x.shape, x.dtype.as_numpy()), name="value")
        increment_graph = ir.create_graph(increment_fn, x, value)
        (o,) = ops.repeat(increment_graph, 2, x, value)
        out = popxl.d2h_stream(o.shape, o.dtype, name="out")
        ops.host_store(out, o)
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    outputs, _ = _run(ir, {input: data})
    np.testing.assert_array_equal(outputs[out], data + 2)


def test_matmul_subgraphs_of_different_shapes():
    ir = popxl.Ir()

    def matmul_fn(x: popxl.Tensor, w: popxl.Tensor):
        return x @ w

    with ir.main_graph:
        input = popxl.h2d_stream([2, 2], popxl.float32, name="input_stream")
        x = ops.host_load(input, "x")
        w1 = popxl.variable(np.ones(x.shape, x.dtype.as_numpy()), name="w1")
        w2 = popxl.variable(np.ones(x.shape[-1], x.dtype.as_numpy()), name="w2")
        g1 = ir.create_graph(matmul_fn, x, w1)
        g2 = ir.create_graph(matmul_fn, x, w2)
        (o1,) = ops.call(g1, x, w1)
        (o2,) = ops.call(g2, x, w2)
        s1, s2 = popxl.d2h_stream(o1.shape, o1.dtype), popxl.d2h_stream(o2.shape, o2.dtype)
        ops.host_store(s1, o1)
        ops.host_store(s2, o2)
    assert g1.outputs[0].shape == (2, 2) and g2.outputs[0].shape == (2,)
    data = np.array([[1, 2], [3, 4]], dtype=np.float32)
    outputs, _ = _run(ir, {input: data})
    np.testing.assert_array_equal(outputs[s1], data @ np.ones((2, 2)))
    np.testing.assert_array_equal(outputs[s2], data @ np.ones(2))


def test_create_graph_keyword_argument_after_a_defaulted_one_binds_to_itself():
    """``create_graph(f, a, seed=s)`` with ``f(a, positions=None, seed=None)`` (BERT's
    embeddings): ``seed`` is ``seed`` in the traced call, not ``positions``; the graph's
    inputs are the tensors passed, in the signature's order."""
    ir = popxl.Ir()
    seen = {}

    def fn(a, positions=None, seed=None, *, scale=1.0):
        seen.update(positions=positions, seed_shape=seed.shape)
        return a * scale + ops.cast(ops.reshape(seed, (2, 1)), popxl.float32)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with ir.main_graph:
        a = popxl.variable(x)
        s = popxl.variable(np.array([5, 7], np.uint32))
        g = ir.create_graph(fn, a, seed=s, scale=2.0)
        (o,) = ops.call(g, a, s)
        out = popxl.d2h_stream(o.shape, o.dtype)
        ops.host_store(out, o)
    assert seen == {"positions": None, "seed_shape": (2,)}
    assert [t.shape for t in g.inputs] == [(2, 3), (2,)]
    got, _ = _run(ir, device="cpu")
    np.testing.assert_array_equal(got[out], x * 2 + np.array([[5], [7]]))


def test_session_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream([2], popxl.float32, name="s")
        t = ops.host_load(s)
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        ops.var_updates.copy_var_update_(v, t)
    session = popxl.Session(ir, "cpu")
    with pytest.raises(ValueError, match="not attached"):
        session.run({s: np.ones(2, np.float32)})
    with session:
        with pytest.raises(ValueError, match=r"input streams given .*missing \[.s.\]"):
            session.run({})
        with pytest.raises(ValueError, match="expected"):
            session.run({s: np.ones(3, np.float32)})
        session.run({s: np.full(2, 5, np.float32)})  # still usable after the errors
        with pytest.raises(TypeError):
            session.get_tensor_data(t)
    np.testing.assert_array_equal(session.get_tensor_data(v), [5, 5])
    with pytest.raises(ValueError, match="Incorrect device type provided: gpu"):
        popxl.Session(ir, "gpu")
