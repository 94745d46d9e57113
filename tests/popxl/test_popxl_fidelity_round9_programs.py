"""Probe round 9, whole programs as PopXL's documentation and tutorials write them: the user
guide's example scripts (PopART ``docs/popxl/user_guide/files``: ``tensor_addition``,
``basic_graph``, ``create_graph`` / ``call`` / ``call_with_info``, ``repeat_graph_*``,
``autodiff``, ``code_loading``, ``conditional``, ``in_sequence``, ``io_tiles``,
``remote_variable``, ``rts_var`` / ``remote_rts_var``, ``replica_grouping``,
``nested_session_contexts``, ``mnist`` / ``mnist_rts``) and Graphcore's PopXL tutorials
(``1_basic_concepts``, ``2_custom_optimiser``, ``3_data_parallelism``,
``5_remote_variables_and_rts``, ``6_phased_execution``), written from memory in PopXL's
idiom, small. Each runs on the IPU Model and is checked against NumPy or a torch
re-implementation of the same maths (training: losses and weights step for step).

The mismatch found (and fixed):

- ``autodiff`` created every grad op in the caller's ``popxl.ipu`` / ``io_tiles`` context.
  PopART's grad ops copy the forward op's settings (virtual graph id, tile set), so a graph
  split over two IPUs (tutorial 4) gets each layer's gradient on that layer's IPU; Tremula
  lowered the IPU 0 layer's weight gradient on the call site's IPU 1, where the
  activations have no tiles, and failed (~85 %). The IPU 0 layer's gradient, an output
  of the grad call on IPU 1, then reports IPU 0 (``SubgraphOp`` introspection, on main).

The rest agreed with PopXL; what the programs pin (each ~80 % or more):

- ``nll_loss_with_softmax_grad`` takes probabilities (the softmax output; PopART's
  ``NlllWithSoftmaxGradDirectOp``), its ``dx`` is the gradient at the softmax's input;
- a subgraph's in-place update of an input reaches the caller only for a by-reference
  input (``popxl.TensorByRef`` annotation, ``graph_input(by_ref=True)``), through
  ``ops.call`` and ``ops.repeat`` alike;
- an optimiser written with ``var_updates`` that reads a state tensor it also updates in
  place needs ``popxl.in_sequence()`` (PopXL's Ir turns ``enableInplaceAmbiguityChecking``
  on), as Graphcore's optimisers are written;
- the default tanh-approximated ``gelu`` (torch ``approximate="tanh"``), ``layer_norm``'s
  ``eps``, the ``TensorSpec`` / Module graph inputs that ``mnist.py`` builds on;
- ``autodiff(..., return_all_grad_graphs=True)`` is a dict keyed by forward graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tremula_tests_evaluator import Linear

import popxl
import popxl.ops as ops

torch = pytest.importorskip("torch")


def _store(t: popxl.Tensor, name: str | None = None) -> popxl.DeviceToHostStream:
    d = popxl.d2h_stream(t.shape, t.dtype, name)
    ops.host_store(d, t)
    return d


class Net(popxl.Module):
    """``mnist.py``'s network, small: reshape, Linear, gelu, Linear."""

    def __init__(self, pixels: int, hidden: int, classes: int) -> None:
        self.fc1, self.fc2 = Linear(), Linear()
        self.sizes = (pixels, hidden, classes)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        pixels, hidden, classes = self.sizes
        x = x.reshape((-1, pixels))
        x = ops.gelu(self.fc1(x, hidden))
        return self.fc2(x, classes)


def _torch_net(p: dict[str, Any], img: np.ndarray, pixels: int) -> Any:
    x = torch.tensor(img).reshape(-1, pixels)
    h = torch.nn.functional.gelu(x @ p["W0"] + p["b0"], approximate="tanh")
    return h @ p["W1"] + p["b1"]


def test_tensor_addition_and_the_session_api_of_basic_concepts() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(3, dtype=popxl.int8, name="variable_a")
        b = popxl.constant(1, dtype=popxl.int8, name="constant_b")
        o_d2h = _store(a + b, "output_stream")
        x_h2d = popxl.h2d_stream((2, 2), popxl.float32, name="x_stream")
        w = popxl.variable(np.ones((2, 2), np.float32), name="w")
        y_d2h = _store(ops.matmul(ops.host_load(x_h2d, "x"), w), "y_stream")
    ir.num_host_transfers = 1
    session = popxl.Session(ir, "ipu_model")
    assert session.expected_inputs() == {x_h2d}
    outputs = session.create_host_outputs()
    assert set(outputs) == {o_d2h, y_d2h}
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    with session:
        session.run_with_outputs({x_h2d: x}, outputs)
        assert outputs[o_d2h].dtype == np.int8 and outputs[o_d2h] == 4
        np.testing.assert_array_equal(outputs[y_d2h], x @ np.ones((2, 2)))
    session.write_variable_data(w, np.full((2, 2), 2, np.float32))
    assert list(session.get_tensors_data([w])) == [w]
    with session:
        np.testing.assert_array_equal(session.run({x_h2d: x})[y_d2h], x @ np.full((2, 2), 2))


def test_create_graph_call_call_with_info_and_repeat_with_inputs_dict() -> None:
    rng = np.random.default_rng(1)
    w_np, b_np = rng.standard_normal((4, 3)), rng.standard_normal(3)
    x_np = rng.standard_normal((2, 4)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream(x_np.shape, popxl.float32, name="x_stream")
        x = ops.host_load(x_h2d, "x")
        W, b = popxl.variable(w_np, name="W"), popxl.variable(b_np, name="b")
        lin = Linear()
        g = ir.create_graph(lin, x, out_features=3)
        assert [t.name for t in g.inputs] == ["x", "W", "b"]
        (y,) = ops.call(g, x, inputs_dict={lin.W: W, lin.b: b})
        info = ops.call_with_info(g, x, inputs_dict={lin.W: W, lin.b: b})
        assert info.called_graph is g and info.parent_input(1) is W
        add = ir.create_graph(lambda x1, x2: x1 + x2, W, W)
        (r,) = ops.repeat(add, 3, W, inputs_dict={add.inputs[1]: W * 0 + 1})
        outs = [_store(t) for t in (y, info.outputs[0], r)]
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run({x_h2d: x_np})
    ref = x_np @ w_np.astype(np.float32) + b_np.astype(np.float32)
    np.testing.assert_allclose(got[outs[0]], ref, rtol=1e-5)
    np.testing.assert_allclose(got[outs[1]], ref, rtol=1e-5)
    np.testing.assert_allclose(got[outs[2]], w_np.astype(np.float32) + 3, rtol=1e-6)


def test_autodiff_of_a_module_maps_gradients_to_the_parent_inputs() -> None:
    rng = np.random.default_rng(2)
    x_np, w_np = rng.standard_normal((2, 4)), rng.standard_normal((4, 3))
    ir = popxl.Ir()
    with ir.main_graph:
        x, W = popxl.variable(x_np, name="x"), popxl.variable(w_np, name="W")
        b = popxl.variable(np.zeros(3), name="b")
        lin = Linear()
        fwd = ir.create_graph(lin, x, out_features=3)
        bwd_info = popxl.transforms.autodiff(fwd)
        fwd_call = ops.call_with_info(fwd, x, inputs_dict={lin.W: W, lin.b: b})
        seed = popxl.constant(np.ones((2, 3), np.float32), name="grad_seed")
        bwd_call = ops.call_with_info(
            bwd_info.graph, seed, inputs_dict=bwd_info.inputs_dict(fwd_call)
        )
        grads = bwd_info.fwd_parent_ins_to_grad_parent_outs(fwd_call, bwd_call)
        assert list(grads) == [x, W, b]
        outs = {t.name: _store(g) for t, g in grads.items()}
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()
    ones = np.ones((2, 3))
    np.testing.assert_allclose(got[outs["W"]], x_np.T @ ones, rtol=1e-5)
    np.testing.assert_allclose(got[outs["b"]], [2, 2, 2])
    np.testing.assert_allclose(got[outs["x"]], ones @ w_np.T, rtol=1e-5)


def _mnist_data(steps: int, lead: tuple[int, ...], pixels: int, hidden: int, classes: int):
    rng = np.random.default_rng(0)
    imgs = rng.standard_normal((steps, *lead, pixels)).astype(np.float32)
    labels = rng.integers(0, classes, (steps, *lead)).astype(np.int32)
    init = {
        "W0": (rng.standard_normal((pixels, hidden)) * 0.3).astype(np.float32),
        "b0": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
        "W1": (rng.standard_normal((hidden, classes)) * 0.3).astype(np.float32),
        "b1": np.zeros(classes, np.float32),
    }
    return imgs, labels, init


def _torch_sgd(init, imgs, labels, lr: float, pixels: int) -> tuple[np.ndarray, dict]:
    """Torch SGD on the mean of the per-replica losses (axis 1 of ``imgs`` if 4-D)."""
    p = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    losses = []
    for img, lab in zip(imgs, labels):
        per = [
            torch.nn.functional.cross_entropy(_torch_net(p, i, pixels), torch.tensor(la).long())
            for i, la in (zip(img, lab) if img.ndim == 3 else [(img, lab)])
        ]
        losses.append([v.item() for v in per])
        for v in p.values():
            v.grad = None
        (sum(per) / len(per)).backward()
        with torch.no_grad():
            for v in p.values():
                v -= lr * v.grad
    return np.array(losses), {k: v.detach().numpy() for k, v in p.items()}


def test_mnist_training_matches_torch_sgd_step_for_step() -> None:
    B, pixels, hidden, classes, lr, steps = 4, 16, 8, 5, 0.1, 3
    imgs, labels, init = _mnist_data(steps, (B,), pixels, hidden, classes)
    ir = popxl.Ir()
    ir.replication_factor = 1
    with ir.main_graph:
        img_spec = popxl.TensorSpec((B, pixels), popxl.float32)
        img_stream = popxl.h2d_stream(img_spec.shape, popxl.float32, "image")
        label_stream = popxl.h2d_stream((B,), popxl.int32, "labels")
        img_t, lab = ops.host_load(img_stream), ops.host_load(label_stream, "labels")
        net = Net(pixels, hidden, classes)
        net_graph = ir.create_graph(net, img_spec)
        params = (net.fc1.W, net.fc1.b, net.fc2.W, net.fc2.b)
        variables = {p: popxl.variable(init[k], name=k) for p, k in zip(params, init)}
        fwd_call_info = ops.call_with_info(net_graph, img_t, inputs_dict=variables)
        bwd_graph_info = popxl.transforms.autodiff(net_graph)
        probs = ops.softmax(fwd_call_info.outputs[0], axis=-1)
        loss, dx = ops.nll_loss_with_softmax_grad(probs, lab)
        bwd_call_info = ops.call_with_info(
            bwd_graph_info.graph, dx, inputs_dict=bwd_graph_info.inputs_dict(fwd_call_info)
        )
        grads = bwd_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_call_info, bwd_call_info)
        for t in variables.values():
            ops.scaled_add_(t, grads[t], b=-lr)
        loss_stream = _store(loss, "loss")
    losses = []
    with popxl.Session(ir, "ipu_model") as session:
        for i in range(steps):
            out = session.run({img_stream: imgs[i], label_stream: labels[i]})
            losses.append([float(out[loss_stream])])
    ref_losses, ref_params = _torch_sgd(init, imgs, labels, lr, pixels)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for t, v in session.get_tensors_data(list(variables.values())).items():
        np.testing.assert_allclose(v, ref_params[t.name], rtol=1e-4, atol=1e-6)


def test_mnist_rts_data_parallel_with_sharded_weights_matches_torch() -> None:
    R, B, pixels, hidden, classes, lr, steps = 2, 3, 16, 8, 4, 0.1, 2
    imgs, labels, init = _mnist_data(steps, (R, B), pixels, hidden, classes)
    ir = popxl.Ir(replication=R)
    with ir.main_graph, popxl.in_sequence():
        img_stream = popxl.h2d_stream((B, pixels), popxl.float32, "image")
        label_stream = popxl.h2d_stream((B,), popxl.int32, "labels")
        img, lab = ops.host_load(img_stream), ops.host_load(label_stream)
        net = Net(pixels, hidden, classes)
        g = ir.create_graph(net, img)
        params = (net.fc1.W, net.fc1.b, net.fc2.W, net.fc2.b)
        remote, shard, full = {}, {}, {}
        for p, k in zip(params, init):
            remote[p], shard[p] = popxl.replica_sharded_variable(init[k], popxl.float32, k)
            full[p] = ops.collectives.replicated_all_gather(shard[p]).reshape(p.shape)
        info = ops.call_with_info(g, img, inputs_dict=full)
        loss, dx = ops.nll_loss_with_softmax_grad(ops.softmax(info.outputs[0], -1), lab)
        bwd = popxl.transforms.autodiff(g)
        grads = bwd.fwd_graph_ins_to_grad_parent_outs(
            ops.call_with_info(bwd.graph, dx, inputs_dict=bwd.inputs_dict(info))
        )
        for p, s in shard.items():
            gs = ops.collectives.replicated_reduce_scatter(
                grads[p], op="mean", configure_output_for_replicated_tensor_sharding=True
            )
            ops.scaled_add_(s, gs, b=-lr)
        loss_stream = _store(loss, "loss")
    with popxl.Session(ir, "ipu_model") as s:
        losses = [
            s.run({img_stream: imgs[i], label_stream: labels[i]})[loss_stream] for i in range(steps)
        ]
    ref_losses, ref_params = _torch_sgd(init, imgs, labels, lr, pixels)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for p, k in zip(params, init):
        np.testing.assert_allclose(
            s.get_tensor_data(remote[p]), ref_params[k], rtol=1e-4, atol=1e-6
        )


class Adam:
    """Tutorial 2's optimiser written with ``popxl.ops.var_updates``."""

    @popxl.in_sequence()
    def __call__(self, var: popxl.Tensor, grad: popxl.Tensor, lr: float, wd: float) -> None:
        zeros = np.zeros(var.shape, np.float32)
        first_order = popxl.variable(zeros, name=var.name + "_m")
        ops.var_updates.accumulate_moving_average_(first_order, grad, f=0.9)
        second_order = popxl.variable(zeros, name=var.name + "_v")
        ops.var_updates.accumulate_moving_average_square_(second_order, grad, f=0.999)
        step = popxl.variable(0, popxl.float32, name=var.name + "_step")
        updater = ops.var_updates.adam_updater(
            first_order, second_order, weight=var, weight_decay=wd, time_step=step,
            beta1=0.9, beta2=0.999, epsilon=1e-5,
        )  # fmt: skip
        ops.scaled_add_(var, updater, b=-lr)


def test_custom_adam_optimiser_matches_torch_autograd_with_numpy_adam() -> None:
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((5, 2)).astype(np.float32)
    X, Y = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 4, 2))
    X, Y = X.astype(np.float32), Y.astype(np.float32)
    lr, wd = 0.01, 0.1
    ir = popxl.Ir()
    with ir.main_graph:
        xs, ys = (
            popxl.h2d_stream((4, 5), popxl.float32, "x"),
            popxl.h2d_stream((4, 2), popxl.float32, "y"),
        )
        W = popxl.variable(w0, name="W")
        g = ir.create_graph(lambda x, w, y: ops.mean((x @ w - y) ** 2), xs.spec, W, ys.spec)
        bwd = popxl.transforms.autodiff(g, grads_required=[g.inputs[1]])
        info = ops.call_with_info(g, ops.host_load(xs), W, ops.host_load(ys))
        (gw,) = ops.call(bwd.graph, popxl.constant(1.0), inputs_dict=bwd.inputs_dict(info))
        Adam()(W, gw, lr=lr, wd=wd)
        loss = _store(info.outputs[0], "loss")
    with popxl.Session(ir, "ipu_model") as s:
        losses = [float(s.run({xs: X[i], ys: Y[i]})[loss]) for i in range(3)]
    w, m, v, ref = w0.astype(np.float64), 0.0, 0.0, []
    for t in range(1, 4):
        wt = torch.tensor(w, requires_grad=True)
        lt = (
            (torch.tensor(X[t - 1], dtype=torch.float64) @ wt - torch.tensor(Y[t - 1])) ** 2
        ).mean()
        lt.backward()
        grad = wt.grad.numpy()
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad**2
        upd = (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-5) + wd * w
        ref.append(lt.item())
        w = w - lr * upd
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    np.testing.assert_allclose(s.get_tensor_data(W), w, rtol=1e-4, atol=1e-6)


def test_data_parallel_gradient_accumulation_over_host_transfers() -> None:
    """Tutorial 3: replicas, ``num_host_transfers`` micro-batches loaded inside a repeated
    Module that accumulates into a by-reference accumulator, a mean all-reduce, SGD."""
    R, ga, B, lr = 2, 3, 2, 0.1
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((3, 1)).astype(np.float32)
    X, Y = rng.standard_normal((ga, R, B, 3)), rng.standard_normal((ga, R, B, 1))
    X, Y = X.astype(np.float32), Y.astype(np.float32)
    ir = popxl.Ir()
    ir.replication_factor = R
    with ir.main_graph, popxl.in_sequence():
        xs, ys = (
            popxl.h2d_stream((B, 3), popxl.float32, "x"),
            popxl.h2d_stream((B, 1), popxl.float32, "y"),
        )
        W = popxl.variable(w0, name="W")
        acc = popxl.variable(np.zeros_like(w0), name="acc")
        ld = popxl.d2h_stream((), popxl.float32, "loss")
        g = ir.create_graph(lambda w: ops.mean((ops.host_load(xs) @ w - ops.host_load(ys)) ** 2), W)
        bwd = popxl.transforms.autodiff(g)

        class Step(popxl.Module):
            def build(self, w: popxl.Tensor, acc: popxl.TensorByRef) -> None:
                info = ops.call_with_info(g, w)
                ops.host_store(ld, info.outputs[0])
                (gw,) = ops.call(bwd.graph, popxl.constant(1.0), inputs_dict=bwd.inputs_dict(info))
                ops.var_updates.accumulate_(acc, gw)

        ops.repeat(ir.create_graph(Step(), W, acc), ga, W, acc)
        ops.scaled_add_(W, ops.collectives.replicated_all_reduce(acc, op="mean"), b=-lr / ga)
        ops.var_updates.accumulator_zero_(acc)
    ir.num_host_transfers = ga
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({xs: X, ys: Y})
    residual = X @ w0 - Y  # (ga, R, B, 1)
    np.testing.assert_allclose(out[ld], np.mean(residual**2, axis=(2, 3)), rtol=1e-5)
    grads = 2 * np.swapaxes(X, 2, 3) @ residual / B
    np.testing.assert_allclose(s.get_tensor_data(W), w0 - lr * grads.mean((0, 1)), rtol=1e-5)
    np.testing.assert_array_equal(s.get_tensor_data(acc), 0)


def test_remote_variable_rts_variables_and_replica_grouping() -> None:
    """``remote_variable.py``, ``rts_var.py``, ``remote_rts_var.py`` (two entries) and
    ``replica_grouping.py``."""
    R = 2
    ir = popxl.Ir(replication=R)
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.remote_buffer((), popxl.int32, 1)
        remote_x = popxl.remote_variable(np.array(1, np.int32), buffer, 0)
        ops.remote_store(buffer, 0, ops.remote_load(buffer, 0, "x") + popxl.variable(2))
        data = np.arange(6, dtype=np.float32)
        v_remote, v_shard = popxl.replica_sharded_variable(data, popxl.float32, "w")
        assert (v_remote.shape, v_shard.shape, v_shard.meta_shape) == ((6,), (3,), (6,))
        full = _store(ops.collectives.replicated_all_gather(v_shard), "full")
        ops.var_updates.accumulate_(v_shard, popxl.constant(np.ones(3, np.float32)))
        buf = popxl.replica_sharded_buffer((4,), popxl.float32, entries=2)
        a = popxl.remote_replica_sharded_variable(np.arange(4, dtype=np.float32), buf, 0, name="a")
        b = popxl.remote_replica_sharded_variable(
            np.arange(4, dtype=np.float32) * 10, buf, 1, name="b"
        )
        ops.remote_store(buf, 0, ops.remote_load(buf, 0) + ops.remote_load(buf, 1))
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    assert s.get_tensor_data(remote_x) == 3
    np.testing.assert_array_equal(out[full], [data, data])
    np.testing.assert_array_equal(s.get_tensor_data(v_remote), data + 1)
    np.testing.assert_array_equal(s.get_tensors_data([a, b])[a], np.arange(4) * 11)
    np.testing.assert_array_equal(s.get_tensor_data(b), np.arange(4) * 10)

    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        grouping = ir.replica_grouping(stride=2, group_size=2)
        assert (grouping.num_groups, grouping.assignment) == (2, [0, 1, 0, 1])
        values = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
        v = popxl.variable(values, replica_grouping=grouping, retrieval_mode="all_replicas")
        total = _store(ops.collectives.replicated_all_reduce(v, op="add"))
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()
    np.testing.assert_array_equal(out[total], np.tile(2 * values.sum(0), (4, 1)))
    np.testing.assert_array_equal(s.get_tensor_data(v), values[[0, 1, 0, 1]])


def test_code_loading_io_tiles_conditional_and_in_sequence() -> None:
    ir = popxl.Ir()
    ir._pb_ir.getSessionOptions().numIOTiles = 32
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2,), popxl.float32, "x")
        c_h2d = popxl.h2d_stream((), popxl.bool, "c")
        with popxl.io_tiles():
            x_io = ops.host_load(x_h2d)
        assert x_io.tile_set == "io"
        x = ops.io_tile_copy(x_io)
        g = ir.create_graph(lambda t: t * 2 + 1, x)
        ops.remote_code_load(g, destination="executable")
        (y,) = ops.call(g, x)
        (y,) = ops.call(g, y)
        then_g = ir.create_graph(lambda t: t + 10, y)
        else_g = ir.create_graph(lambda t: t * 10, y)
        (r,) = ops.conditional(ops.host_load(c_h2d), then_g, else_g, [y], [y])
        with popxl.in_sequence():
            v = popxl.variable(np.zeros(2, np.float32), name="v")
            ops.var_updates.accumulate_(v, r)
            v2 = ops.var_updates.accumulate_(v, r, f=2.0)
        with popxl.io_tiles():
            out = _store(ops.io_tile_copy(v2), "v")
    x_np = np.array([1, 2], np.float32)
    with popxl.Session(ir, "ipu_model") as s:
        then_out = s.run({x_h2d: x_np, c_h2d: np.array(True)})[out]
        else_out = s.run({x_h2d: x_np, c_h2d: np.array(False)})[out]
    y_np = (x_np * 2 + 1) * 2 + 1
    np.testing.assert_array_equal(then_out, 3 * (y_np + 10))
    np.testing.assert_array_equal(else_out, 3 * (y_np + 10) + 3 * (y_np * 10))


def test_nested_session_contexts_keep_the_device_until_the_outer_one_exits() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(1, popxl.int32, name="a")
        ops.var_updates.accumulate_(a, popxl.constant(1, popxl.int32))
    session = popxl.Session(ir, "ipu_model")
    with session:
        session.run()
        with session:
            session.run()
            assert session.get_tensor_data(a) == 3
        assert session.is_attached
        session.run()
    assert not session.is_attached and session.get_tensor_data(a) == 4


def test_phased_layers_from_one_remote_buffer_indexed_by_a_loop_counter() -> None:
    """Tutorial 6: each repeat iteration loads one layer's weights from a remote buffer at
    a by-reference counter, applies it and stores the weights back changed."""
    N, D, B = 3, 4, 2
    rng = np.random.default_rng(7)
    ws_np = (rng.standard_normal((N, D, D)) * 0.5).astype(np.float32)
    x_np = rng.standard_normal((B, D)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        buf = popxl.remote_buffer((D, D), popxl.float32, entries=N)
        ws = [popxl.remote_variable(ws_np[i], buf, i, name=f"w{i}") for i in range(N)]
        x_h2d = popxl.h2d_stream((B, D), popxl.float32, "x")
        x = ops.host_load(x_h2d)
        index = popxl.variable(0, popxl.int32, name="layer_index")

        class Layer(popxl.Module):
            def build(self, h: popxl.Tensor, i: popxl.TensorByRef) -> popxl.Tensor:
                w = ops.remote_load(buf, i)
                h = ops.relu(h @ w)
                ops.remote_store(buf, i, w * 2)
                ops.var_updates.accumulate_(i, popxl.constant(1, popxl.int32))
                return h

        (h,) = ops.repeat(ir.create_graph(Layer(), x, index), N, x, index)
        out = _store(h, "h")
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run({x_h2d: x_np})[out]
    ref = x_np
    for w in ws_np:
        ref = np.maximum(ref @ w, 0)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    assert s.get_tensor_data(index) == N
    for v, w in zip(ws, ws_np):
        np.testing.assert_array_equal(s.get_tensor_data(v), w * 2)


def test_a_transformer_block_gradients_match_torch() -> None:
    V, S, H, NH = 11, 5, 8, 2
    rng = np.random.default_rng(2)
    shapes = {"emb": (V, H), "pos": (S, H), "ln_w": (H,), "ln_b": (H,), "qkv": (H, 3 * H),
              "proj": (H, H), "ff": (H, H), "head": (H, V)}  # fmt: skip
    p0 = {k: (rng.standard_normal(s) * 0.4).astype(np.float32) for k, s in shapes.items()}
    ids, tgt = rng.integers(0, V, (S,)).astype(np.int32), rng.integers(0, V, (S,)).astype(np.int32)
    mask = np.triu(np.full((S, S), -1e4, np.float32), 1)

    def block(ids, emb, pos, ln_w, ln_b, qkv, proj, ff, head, mask):
        x = ops.gather(emb, ids) + pos
        q, k, v = ops.split(ops.layer_norm(x, ln_w, ln_b, eps=1e-5) @ qkv, 3, axis=-1)
        q, k, v = (t.reshape((S, NH, H // NH)).transpose((1, 0, 2)) for t in (q, k, v))
        a = ops.softmax(q @ k.transpose((0, 2, 1)) * (1 / np.sqrt(H // NH)) + mask, axis=-1)
        x = x + (a @ v).transpose((1, 0, 2)).reshape((S, H)) @ proj
        return (x + ops.gelu(x @ ff)) @ head

    ir = popxl.Ir()
    with ir.main_graph:
        params = [popxl.variable(v, name=k) for k, v in p0.items()]
        args = [popxl.variable(ids, name="ids"), *params, popxl.constant(mask, name="mask")]
        g = ir.create_graph(block, *args)
        bwd = popxl.transforms.autodiff(g, grads_required=g.inputs[1:-1])
        info = ops.call_with_info(g, *args)
        loss, dx = ops.nll_loss_with_softmax_grad(
            ops.softmax(info.outputs[0], -1), popxl.constant(tgt)
        )
        bcall = ops.call_with_info(bwd.graph, dx, inputs_dict=bwd.inputs_dict(info))
        grads = bwd.fwd_parent_ins_to_grad_parent_outs(info, bcall)
        outs = {t.name: _store(grads[t]) for t in params}
        loss_out = _store(loss)
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()
    t = {k: torch.tensor(v, requires_grad=True) for k, v in p0.items()}
    x = t["emb"][torch.tensor(ids).long()] + t["pos"]
    h = torch.nn.functional.layer_norm(x, (H,), t["ln_w"], t["ln_b"], eps=1e-5)
    q, k, v = ((u.reshape(S, NH, H // NH).transpose(0, 1)) for u in (h @ t["qkv"]).split(H, -1))
    a = torch.softmax(q @ k.transpose(1, 2) / np.sqrt(H // NH) + torch.tensor(mask), -1)
    x = x + (a @ v).transpose(0, 1).reshape(S, H) @ t["proj"]
    y = (x + torch.nn.functional.gelu(x @ t["ff"], approximate="tanh")) @ t["head"]
    ref = torch.nn.functional.cross_entropy(y, torch.tensor(tgt).long())
    ref.backward()
    np.testing.assert_allclose(got[loss_out], ref.item(), rtol=1e-5)
    for k in p0:
        np.testing.assert_allclose(got[outs[k]], t[k].grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_autodiff_through_nested_calls_returns_every_grad_graph() -> None:
    rng = np.random.default_rng(4)
    w_np, x_np = rng.standard_normal((3, 3)), rng.standard_normal((2, 3))
    ir = popxl.Ir()
    with ir.main_graph:
        W, x = popxl.variable(w_np, name="W"), popxl.variable(x_np, name="x")
        inner = ir.create_graph(lambda a, w: ops.tanh(a @ w), x, W)

        def outer(a: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            (h,) = ops.call(inner, a, w)
            (h,) = ops.call(inner, h, w)
            return ops.sum(h * h)

        og = ir.create_graph(outer, x, W)
        infos = popxl.transforms.autodiff(og, return_all_grad_graphs=True)
        assert isinstance(infos, dict) and set(infos) == {og, inner}
        assert infos[og].forward_graph is og
        call = ops.call_with_info(og, x, W)
        bcall = ops.call_with_info(
            infos[og].graph, popxl.constant(1.0), inputs_dict=infos[og].inputs_dict(call)
        )
        dW = _store(infos[og].fwd_parent_ins_to_grad_parent_outs(call, bcall)[W])
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()[dW]
    wt = torch.tensor(w_np.astype(np.float32), requires_grad=True)
    h = torch.tanh(torch.tanh(torch.tensor(x_np.astype(np.float32)) @ wt) @ wt)
    (h * h).sum().backward()
    np.testing.assert_allclose(got, wt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_autodiff_of_a_graph_over_two_ipus_places_each_grad_op_with_its_forward_op() -> None:
    """Tutorial 4's model split over two IPUs inside one graph, differentiated outside any
    ``popxl.ipu`` block. PopART's grad ops copy the forward op's settings (virtual graph
    id, tile set), so the gradient of the IPU 0 layer is computed on IPU 0 where its
    activations live (~85 %). Tremula put every grad op in the caller's context: the call
    on IPU 1 lowered ``x^T @ dh`` on IPU 1, where ``x`` has no tiles, and failed."""
    rng = np.random.default_rng(9)
    w0_np, w1_np = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    x_np = rng.standard_normal((5, 3)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        with popxl.ipu(0):
            w0, x = popxl.variable(w0_np, name="w0"), popxl.variable(x_np, name="x")
        with popxl.ipu(1):
            w1 = popxl.variable(w1_np, name="w1")

        def fwd(x: popxl.Tensor, w0: popxl.Tensor, w1: popxl.Tensor) -> popxl.Tensor:
            with popxl.ipu(0):
                h = ops.ipu_copy(ops.relu(x @ w0), 1)
            with popxl.ipu(1), popxl.io_tiles():
                h = ops.io_tile_copy(h)  # back and forth: the grads copy back to IO tiles
            with popxl.ipu(1):
                return ops.sum(ops.tanh(ops.io_tile_copy(h) @ w1))

        g = ir.create_graph(fwd, x, w0, w1)
        bwd = popxl.transforms.autodiff(g, grads_required=g.inputs[1:])
        with popxl.ipu(1):
            info = ops.call_with_info(g, x, w0, w1)
            bcall = ops.call_with_info(
                bwd.graph, popxl.constant(1.0), inputs_dict=bwd.inputs_dict(info)
            )
            grads = bwd.fwd_parent_ins_to_grad_parent_outs(info, bcall)
            outs = {t.name: _store(grads[t]) for t in (w0, w1)}
        # a call output is where the callee's op that makes it is (PopART's introspection)
        assert (grads[w0].ipu, grads[w1].ipu, info.outputs[0].ipu) == (0, 1, 1)
    placed = {
        (op.getVirtualGraphId(), str(op.settings.tileSet))
        for op in bwd.graph._pb_graph.getOps()
        if type(op).__name__ == "MatMulOp"
    }
    assert placed == {(0, "TileSet.Compute"), (1, "TileSet.Compute")}
    copies = [op for op in bwd.graph._pb_graph.getOps() if type(op).__name__ == "IoTileCopyOp"]
    assert sorted(str(op.settings.tileSet) for op in copies) == ["TileSet.Compute", "TileSet.IO"]
    with popxl.Session(ir, "ipu_model") as s:
        got = s.run()
    W0, W1 = (torch.tensor(w.astype(np.float32), requires_grad=True) for w in (w0_np, w1_np))
    torch.tanh(torch.relu(torch.tensor(x_np) @ W0) @ W1).sum().backward()
    np.testing.assert_allclose(got[outs["w0"]], W0.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[outs["w1"]], W1.grad.numpy(), rtol=1e-5, atol=1e-6)
