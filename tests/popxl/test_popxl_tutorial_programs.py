"""PopXL programs in the style of PopXL's tutorials and user guide (data parallelism,
pipelining over IPUs, replica-sharded optimizer state, phased execution from remote
buffers, gradient accumulation, modules), written as a user of the SDK writes them and
not tuned to Tremula; each runs on the IPU Model and is checked against NumPy."""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops


def _out(t: popxl.Tensor) -> popxl.streams.DeviceToHostStream:
    d = popxl.d2h_stream(t.shape, t.dtype)
    ops.host_store(d, t)
    return d


def test_data_parallel_training():
    R = 2
    rng = np.random.default_rng(0)
    w_np = rng.standard_normal((3, 1)).astype(np.float32)
    xs = rng.standard_normal((R, 4, 3)).astype(np.float32)
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((4, 3), popxl.float32, "x")
        w = popxl.variable(w_np, name="w")

        def fwd(x, w):
            return ops.mean(ops.matmul(x, w) ** 2)

        g = ir.create_graph(fwd, x_h2d.spec, w)
        bwd = popxl.transforms.autodiff(g, grads_required=[g.inputs[1]])
        x = ops.host_load(x_h2d)
        info = ops.call_with_info(g, x, w)
        (gw,) = ops.call(bwd.graph, popxl.constant(1.0), inputs_dict=bwd.inputs_dict(info))
        gw = ops.collectives.replicated_all_reduce(gw, op="mean")
        ops.scaled_add_(w, gw, b=-0.1)
        loss = _out(info.outputs[0])
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({x_h2d: xs})
    grads = [2 * x.T @ (x @ w_np) / 4 for x in xs]
    np.testing.assert_allclose(
        s.get_tensor_data(w), w_np - 0.1 * np.mean(grads, 0), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(out[loss], [np.mean((x @ w_np) ** 2) for x in xs], rtol=1e-5)


def test_pipeline_two_ipus():
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2,), popxl.float32, "x")
        y_d2h = popxl.d2h_stream((2,), popxl.float32, "y")
        with popxl.ipu(0):
            w0 = popxl.variable(np.array([2.0, 3.0], np.float32))
            a = ops.host_load(x_h2d) * w0
            a1 = a.copy_to_ipu(1)
        with popxl.ipu(1):
            w1 = popxl.variable(np.array([1.0, -1.0], np.float32))
            b = a1 + w1
            ops.host_store(y_d2h, b)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({x_h2d: np.array([1, 1], np.float32)})
    np.testing.assert_array_equal(out[y_d2h], [3, 2])


def test_rts_optimizer_reduce_scatter_gather():
    R = 2
    w_np = np.arange(4, dtype=np.float32)
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        g_h2d = popxl.h2d_stream((4,), popxl.float32, "g")
        buf = popxl.replica_sharded_buffer((4,), popxl.float32)
        w = popxl.remote_replica_sharded_variable(w_np, buf, 0, name="w")
        shard = ops.remote_load(buf, 0)
        grad = ops.host_load(g_h2d)
        gshard = ops.collectives.replicated_reduce_scatter(
            grad, op="add", configure_output_for_replicated_tensor_sharding=True
        )
        shard = shard - gshard
        ops.remote_store(buf, 0, shard)
        full = ops.collectives.replicated_all_gather(shard)
        o = _out(full)
    gs = np.array([[1, 1, 1, 1], [1, 2, 3, 4]], np.float32)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({g_h2d: gs})
    ref = w_np - gs.sum(0)
    np.testing.assert_array_equal(out[o][0], ref)
    np.testing.assert_array_equal(s.get_tensor_data(w), ref)


def test_phased_remote_layers():
    n_layers = 3
    ws = [np.full((2, 2), i + 1, np.float32) for i in range(n_layers)]
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2, 2), popxl.float32, n_layers)
        vars_ = [popxl.remote_variable(w, buf, i, name=f"w{i}") for i, w in enumerate(ws)]
        x = popxl.variable(np.eye(2, dtype=np.float32), name="x")

        def layer(x, w):
            return x @ w

        g = ir.create_graph(layer, x, popxl.TensorSpec((2, 2), popxl.float32))
        for i in range(n_layers):
            w = ops.remote_load(buf, i)
            (x,) = ops.call(g, x, w)
            ops.remote_store(buf, i, w * 2)
        o = _out(x)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    np.testing.assert_allclose(out[o], ws[0] @ ws[1] @ ws[2])
    for v, w in zip(vars_, ws):
        np.testing.assert_array_equal(s.get_tensor_data(v), 2 * w)


def test_gradient_accumulation_repeat():
    ir = popxl.Ir()
    N = 4
    with ir.main_graph, popxl.in_sequence():
        x_h2d = popxl.h2d_stream((3,), popxl.float32, "x")
        w = popxl.variable(np.ones(3, np.float32), name="w")
        acc = popxl.variable(np.zeros(3, np.float32), name="acc")

        def fwd(x, w):
            return ops.sum(x * w)

        fg = ir.create_graph(fwd, x_h2d.spec, w)
        bwd = popxl.transforms.autodiff(fg, grads_required=[fg.inputs[1]])

        def step(w: popxl.TensorByRef, acc: popxl.TensorByRef):
            x = ops.host_load(x_h2d)
            info = ops.call_with_info(fg, x, w)
            (gw,) = ops.call(bwd.graph, popxl.constant(1.0), inputs_dict=bwd.inputs_dict(info))
            ops.var_updates.accumulate_(acc, gw)

        sg = ir.create_graph(step, w, acc)
        ops.repeat(sg, N, w, acc)
        ops.scaled_add_(w, acc, b=-1.0 / N)
        ops.var_updates.accumulator_zero_(acc)
    ir.num_host_transfers = N
    xs = np.arange(12, dtype=np.float32).reshape(N, 3)
    with popxl.Session(ir, "ipu_model") as s:
        s.run({x_h2d: xs})
    np.testing.assert_allclose(s.get_tensor_data(w), 1 - xs.mean(0))
    np.testing.assert_array_equal(s.get_tensor_data(acc), 0)


def test_custom_module_layers_nested():
    class Linear(popxl.Module):
        def __init__(self, out):
            self.out = out

        def build(self, x):
            self.w = popxl.graph_input((x.shape[-1], self.out), x.dtype, "w")
            self.b = popxl.graph_input((self.out,), x.dtype, "b")
            return ops.relu(x @ self.w + self.b)

    ir = popxl.Ir()
    rng = np.random.default_rng(4)
    x_np = rng.standard_normal((2, 4)).astype(np.float32)
    w1 = rng.standard_normal((4, 3)).astype(np.float32)
    b1 = np.zeros(3, np.float32)
    with ir.main_graph:
        x = popxl.variable(x_np)
        l1 = Linear(3)
        g1 = ir.create_graph(l1, x)
        W1, B1 = popxl.variable(w1), popxl.variable(b1)
        (y,) = ops.call(g1, x, inputs_dict={l1.w: W1, l1.b: B1})
        o = _out(y)
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_allclose(s.run()[o], np.maximum(x_np @ w1, 0), rtol=1e-5)


def test_replicated_streams_and_replication_setter():
    ir = popxl.Ir()
    ir.replication_factor = 2
    assert ir.replication_factor == 2
    with ir.main_graph:
        a = popxl.h2d_stream((3,), popxl.float32, "a")
        x = ops.host_load(a)
        y = ops.collectives.replicated_all_reduce(x, op="mean")
        b = _out(y)
    data = np.array([[1, 2, 3], [3, 4, 5]], np.float32)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({a: data})
    assert out[b].shape == (2, 3)
    np.testing.assert_array_equal(out[b], [[2, 3, 4], [2, 3, 4]])


def test_grouped_variable_all_replicas_retrieval():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=2)
        v = popxl.variable(
            np.array([[1.0, 1.0], [2.0, 2.0]], np.float32),
            replica_grouping=rg,
            retrieval_mode="all_replicas",
            name="v",
        )
        w = popxl.variable(
            np.array([[1.0, 1.0], [2.0, 2.0]], np.float32), replica_grouping=rg, name="w"
        )
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
        ops.var_updates.accumulate_(w, popxl.constant(np.ones(2, np.float32)))
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
    assert s.get_tensor_data(v).shape == (4, 2), s.get_tensor_data(v).shape
    np.testing.assert_array_equal(s.get_tensor_data(w), [[2, 2], [3, 3]])


def test_autodiff_grads_provided_and_mapping():
    ir = popxl.Ir()
    with ir.main_graph:
        x_np = np.array([1.0, 2.0, 3.0], np.float32)
        x = popxl.variable(x_np, name="x")
        y = popxl.variable(np.array([2.0, 2.0, 2.0], np.float32), name="y")

        def f(a, b):
            return a * b, a + b

        g = ir.create_graph(f, x, y)
        ga = popxl.transforms.autodiff(g, grads_provided=g.outputs[:1], grads_required=g.inputs[:1])
        info = ops.call_with_info(g, x, y)
        (dx,) = ops.call(
            ga.graph, popxl.constant(np.ones(3, np.float32)), inputs_dict=ga.inputs_dict(info)
        )
        m = ga.fwd_graph_ins_to_grad_parent_outs(
            ops.call_with_info(
                ga.graph, popxl.constant(np.ones(3, np.float32)), inputs_dict=ga.inputs_dict(info)
            )
        )
        assert list(m.keys()) == [g.inputs[0]], m
        o = _out(dx)
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_array_equal(s.run()[o], [2, 2, 2])


def test_all_gather_new_axis_and_slice():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        a = popxl.h2d_stream((2, 2), popxl.float32, "a")
        x = ops.host_load(a)
        g = ops.collectives.replicated_all_gather(x, axis=0, output_shape="new_axis")
        assert g.shape == (2, 2, 2), g.shape
        s = ops.collectives.replicated_slice(x, axis=1)
        assert s.shape == (2,), s.shape  # slice of size 1 drops the axis
        o1, o2 = _out(g), _out(s)
    data = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    with popxl.Session(ir, "ipu_model") as sess:
        out = sess.run({a: data})
    np.testing.assert_array_equal(out[o1][0], data)
    np.testing.assert_array_equal(out[o2], [data[0][:, 0], data[1][:, 1]])


def test_remote_variable_replica_grouping():
    R = 4
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=2)  # 2 groups: {0,2}, {1,3}
        data = np.array([[1.0], [2.0]], np.float32)  # (num_groups, 1)
        buf = popxl.RemoteBuffer((1,), popxl.float32, 1)
        v = popxl.remote_variable(data, buf, 0, replica_grouping=rg, retrieval_mode="one_per_group")
        assert v.shape == (1,) and v.shape_on_host == (2, 1)
        x = ops.remote_load(buf, 0)
        ops.remote_store(buf, 0, x * 10)
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
    np.testing.assert_array_equal(s.get_tensor_data(v), [[10.0], [20.0]])


def test_all_reduce_identical_inputs_grad():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0], np.float32))

        def fwd(a, b):
            outs = ops.collectives.all_reduce_identical_inputs([a, b], ipus=[0, 1])
            return outs[0] + outs[1].copy_to_ipu(0)  # one IPU per binary op

        g = ir.create_graph(fwd, x, x)
        bwd = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, x, x)
        grads = ops.call(
            bwd.graph, popxl.constant(np.ones(2, np.float32)), inputs_dict=bwd.inputs_dict(info)
        )
        y = _out(info.outputs[0])
        gs = [_out(t) for t in grads]
    with popxl.Session(ir, "ipu_model") as s:
        r = s.run()
    np.testing.assert_array_equal(r[y], [2, 4])  # identity forward
    for gg in gs:
        np.testing.assert_array_equal(r[gg], [2, 2])  # all-reduce of the two grads


def test_interpolate_nearest_positional_mode():
    x_np = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np)
        y = ops.interpolate(x, (1.0, 1.0, 2.0, 2.0), "nearest")
        z = ops.interpolate(
            x,
            scale_factor=(1.0, 1.0, 2.0, 2.0),
            mode="linear",
            coordinate_transformation_mode="align_corners",
        )
        o1, o2 = _out(y), _out(z)
    with popxl.Session(ir, "ipu_model") as s:
        r = s.run()
    np.testing.assert_array_equal(r[o1], x_np.repeat(2, 2).repeat(2, 3))
    assert r[o2].shape == (1, 1, 4, 4)
    np.testing.assert_allclose(r[o2][0, 0, 0], [0, 1 / 3, 2 / 3, 1], rtol=1e-5)


def test_subsample_int():
    x_np = np.arange(10, dtype=np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.subsample(popxl.variable(x_np), 3)
        o = _out(y)
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_array_equal(s.run()[o], x_np[::3])


def test_ipu_none_and_ipu_copy():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        with popxl.ipu(None):
            y = v + 1
        try:
            ops.ipu_copy(y, 1)
        except ValueError as e:
            assert "Could not infer the ipu" in str(e)
        else:
            raise AssertionError
        z = ops.ipu_copy(v + 0, 1)
        assert z.ipu == 1
        with popxl.ipu(1):
            o = _out(z * 3)
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_array_equal(s.run()[o], [3, 3])
