"""``popxl.transforms.autodiff`` on graphs (spec section 1.12): the mnist-style training
pattern, the forward graph and its call sites gaining outputs, nested calls, subsets of the
gradients, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops
from popxl.transforms.autodiff import ExpectedConnection, ExpectedConnectionType
from tremula.errors import GraphError

Fwd, FwdGrad = ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad
RNG = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _fetch(
    ir: popxl.Ir, tensors: dict[str, popxl.Tensor], variables: dict | None = None
) -> dict[str, np.ndarray]:
    """Store ``tensors`` (main-graph tensors) to the host, run once on "cpu"; with the
    values of ``variables`` after the run."""
    with ir.main_graph:
        streams = {}
        for name, t in tensors.items():
            streams[name] = popxl.d2h_stream(t.shape, t.dtype, name=name)
            ops.host_store(streams[name], t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return {name: out[s] for name, s in streams.items()} | {
        name: session.get_tensor_data(v) for name, v in (variables or {}).items()
    }


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_d(x: np.ndarray) -> np.ndarray:
    t = np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * math.sqrt(2 / math.pi) * (
        1 + 3 * 0.044715 * x**2
    )


class Linear(popxl.Module):
    def build(self, x: popxl.Tensor, out_features: int) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        self.b = popxl.graph_input((out_features,), popxl.float32, "b")
        return x @ self.W + self.b


class Net(popxl.Module):
    def __init__(self) -> None:
        self.fc1 = Linear()
        self.fc2 = Linear()

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return self.fc2(ops.gelu(self.fc1(x, 8)), 3)


def test_mnist_style_training_step_matches_numpy() -> None:
    x_np, labels_np = f32(4, 5), np.array([0, 2, 1, 2], np.int32)
    params = {"W0": f32(5, 8), "b0": f32(8), "W1": f32(8, 3), "b1": f32(3)}
    lr = 0.1
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np, name="x")
        labels = popxl.variable(labels_np, name="labels")
        v = {k: popxl.variable(a, name=k) for k, a in params.items()}
        net = Net()
        fwd = ir.create_graph(net, x)
        bwd_info = popxl.transforms.autodiff(fwd)
        fwd_info = ops.call_with_info(
            fwd,
            x,
            inputs_dict={
                net.fc1.W: v["W0"],
                net.fc1.b: v["b0"],
                net.fc2.W: v["W1"],
                net.fc2.b: v["b1"],
            },
        )
        probs = ops.softmax(fwd_info.outputs[0], 1)
        loss, dlogits = ops.nll_loss_with_softmax_grad(probs, labels)
        bwd_info_call = ops.call_with_info(
            bwd_info.graph, dlogits, inputs_dict=bwd_info.inputs_dict(fwd_info)
        )
        grads = bwd_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info_call)
        for t in v.values():
            ops.var_updates.accumulate_(t, grads[t], -lr)
    out = _fetch(ir, {"loss": loss}, v)
    # NumPy: forward, loss, backward, SGD
    z = x_np @ params["W0"] + params["b0"]
    h = _gelu(z)
    logits = h @ params["W1"] + params["b1"]
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.eye(3)[labels_np]
    np.testing.assert_allclose(out["loss"], -np.mean(np.log(p[range(4), labels_np])), rtol=1e-5)
    dl = (p - onehot) / 4
    dz = (dl @ params["W1"].T) * _gelu_d(z)
    expect = {"W0": x_np.T @ dz, "b0": dz.sum(0), "W1": h.T @ dl, "b1": dl.sum(0)}
    for k in params:
        np.testing.assert_allclose(out[k], params[k] - lr * expect[k], rtol=1e-5, atol=1e-6)


def test_loss_inside_the_graph_relu_mse() -> None:
    """The forward graph ends in a scalar loss; the grad seed is 1."""
    data = {"x": f32(6, 4), "W0": f32(4, 5), "b0": f32(5), "W1": f32(5, 2), "t": f32(6, 2)}

    def model(x, W0, b0, W1, t):
        y = ops.relu(x @ W0 + b0) @ W1
        d = y - t
        return ops.mean(d * d)

    ir = popxl.Ir()
    with ir.main_graph:
        v = {k: popxl.variable(a, name=k) for k, a in data.items()}
        fwd = ir.create_graph(model, *v.values())
        wanted = [fwd.inputs[i] for i in (1, 2, 3)]
        info = popxl.transforms.autodiff(fwd, grads_required=wanted)
        site = ops.call_with_info(fwd, *v.values())
        grads = ops.call(info.graph, 1.0, inputs_dict=info.inputs_dict(site))
    out = _fetch(ir, {"loss": site.outputs[0], "W0": grads[0], "b0": grads[1], "W1": grads[2]})
    x, W0, b0, W1, t = data.values()
    a = x @ W0 + b0
    r = np.maximum(a, 0)
    y = r @ W1
    np.testing.assert_allclose(out["loss"], np.mean((y - t) ** 2), rtol=1e-5)
    dy = 2 * (y - t) / y.size
    da = (dy @ W1.T) * (a > 0)
    for name, e in {"W0": x.T @ da, "b0": da.sum(0), "W1": r.T @ dy}.items():
        np.testing.assert_allclose(out[name], e, rtol=1e-4, atol=1e-6)


def _exp_mul(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
    return ops.exp(x) * w  # the backward reads exp(x): an intermediate


def test_forward_graph_and_existing_call_sites_gain_outputs() -> None:
    x_np, w_np, g_np = f32(2, 3), f32(2, 3), f32(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        x, w, g = (popxl.variable(a) for a in (x_np, w_np, g_np))
        fwd = ir.create_graph(_exp_mul, x, w)
        before = ops.call_with_info(fwd, x, w)
        assert len(fwd.outputs) == 1 and len(before.outputs) == 1
        info = popxl.transforms.autodiff(fwd)
        assert len(fwd.outputs) == 2 and len(before.outputs) == 2
        exposed = fwd.outputs[1]
        assert exposed.producer.type == "Exp"
        assert info.expected_inputs[0] == ExpectedConnection(fwd.outputs[0], FwdGrad)
        assert ExpectedConnection(exposed, Fwd) in info.expected_inputs
        assert info.expected_outputs == tuple(ExpectedConnection(t, FwdGrad) for t in fwd.inputs)
        assert info.inputs[0] is fwd.outputs[0] and info.outputs == fwd.inputs
        after = ops.call_with_info(fwd, x, w)
        assert len(after.outputs) == 2
        g_before = ops.call(info.graph, g, inputs_dict=info.inputs_dict(before))
        g_after = ops.call(info.graph, g, inputs_dict=info.inputs_dict(after))
    out = _fetch(
        ir,
        {"y": before.outputs[0], "xb": g_before[0], "wb": g_before[1], "xa": g_after[0]},
    )
    np.testing.assert_allclose(out["y"], np.exp(x_np) * w_np, rtol=1e-6)
    for key in ("xb", "xa"):
        np.testing.assert_allclose(out[key], g_np * w_np * np.exp(x_np), rtol=1e-5)
    np.testing.assert_allclose(out["wb"], g_np * np.exp(x_np), rtol=1e-5)


def test_second_autodiff_reuses_exposed_outputs_and_names_graphs_uniquely() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(3))
        fwd = ir.create_graph(_exp_mul, x, x)
        first = popxl.transforms.autodiff(fwd)
        second = popxl.transforms.autodiff(fwd)
    assert len(fwd.outputs) == 2
    assert first.graph.name != second.graph.name
    assert first.graph.name.startswith(fwd.name)


def test_nested_calls_are_differentiated_recursively() -> None:
    x_np, w1_np, w2_np, g_np = f32(2, 2), f32(2, 2), f32(2, 2), f32(2, 2)
    ir = popxl.Ir()
    with ir.main_graph:
        x, w1, w2, g = (popxl.variable(a) for a in (x_np, w1_np, w2_np, g_np))
        inner = ir.create_graph(lambda a, b: ops.exp(a * b) * 2.0, x, w1)

        def outer(a, b1, b2):
            (h,) = ops.call(inner, a, b1)
            (o,) = ops.call(inner, h, b2)
            return o * a  # a used twice: its gradients are summed

        fwd = ir.create_graph(outer, x, w1, w2)
        infos = popxl.transforms.autodiff(fwd, return_all_grad_graphs=True)
        assert set(infos) == {fwd, inner}
        # the constant 2.0 (read by the gradient of the product's first operand) and
        # exp(a * b) (read by exp's gradient and by the constant's) became outputs, in
        # the order PopART's Mul grad ops read them
        assert [t.name for t in inner.outputs[1:]] == ["t", "exp_out"]
        assert all(len(op.outputs) == 3 for op in fwd.ops if op.type == "Call")
        info = infos[fwd]
        site = ops.call_with_info(fwd, x, w1, w2)
        grads = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
    out = _fetch(ir, {"x": grads[0], "w1": grads[1], "w2": grads[2]})
    h = 2 * np.exp(x_np * w1_np)
    o = 2 * np.exp(h * w2_np)
    go = g_np * x_np
    gh = go * o * w2_np
    np.testing.assert_allclose(out["w2"], go * o * h, rtol=1e-4)
    np.testing.assert_allclose(out["w1"], gh * h * x_np, rtol=1e-4)
    np.testing.assert_allclose(out["x"], g_np * o + gh * h * w1_np, rtol=1e-4)


def test_called_graphs_grad_info_is_used_not_rebuilt() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(3))
        inner = ir.create_graph(lambda a: ops.sin(a), x)
        inner_info = popxl.transforms.autodiff(inner)
        fwd = ir.create_graph(lambda a: ops.call(inner, a)[0] * 3.0, x)
        n = len(ir.graphs)
        infos = popxl.transforms.autodiff(
            fwd, called_graphs_grad_info={inner: inner_info}, return_all_grad_graphs=True
        )
        assert set(infos) == {fwd} and len(ir.graphs) == n + 1
        calls = [op for op in infos[fwd].graph.ops if op.type == "Call"]
        assert [op.attrs["graphs"][0] for op in calls] == [inner_info.graph]


def test_grads_required_and_provided_subsets_keep_their_order() -> None:
    a_np, b_np, c_np, g_np = f32(3), f32(3), f32(3), f32(3)
    ir = popxl.Ir()
    with ir.main_graph:
        a, b, c, g = (popxl.variable(v) for v in (a_np, b_np, c_np, g_np))
        fwd = ir.create_graph(lambda p, q, r: (p * q + r, ops.exp(r)), a, b, c)
        pa, pb, pc = fwd.inputs
        y1, _ = fwd.outputs
        info = popxl.transforms.autodiff(fwd, grads_provided=[y1], grads_required=[pc, pa])
        assert info.expected_outputs == (
            ExpectedConnection(pc, FwdGrad),
            ExpectedConnection(pa, FwdGrad),
        )
        assert info.expected_inputs[0] == ExpectedConnection(y1, FwdGrad)
        fwd_reads = [e.fwd_tensor for e in info.expected_inputs if e.connection_type is Fwd]
        # d/da reads b; as PopART grows the grad ops of both operands of p * q and
        # prunes the unwanted d/db, keeping what it reads, a is read too; d/dc reads nothing
        assert fwd_reads == [pb, pa]
        site = ops.call_with_info(fwd, a, b, c)
        call = ops.call_with_info(info.graph, g, inputs_dict=info.inputs_dict(site))
        by_input = info.fwd_graph_ins_to_grad_parent_outs(call)
        by_parent = info.fwd_parent_ins_to_grad_parent_outs(site, call)
        assert set(by_input) == {pa, pc} and set(by_parent) == {a, c}
        assert by_parent[a] is call.outputs[1]
    out = _fetch(ir, {"c": call.outputs[0], "a": call.outputs[1]})
    np.testing.assert_allclose(out["c"], g_np)  # only y1's gradient flows
    np.testing.assert_allclose(out["a"], g_np * b_np, rtol=1e-6)


def test_integer_input_gets_a_zero_gradient_and_tensor_used_twice_sums() -> None:
    x_np, n_np, g_np = f32(4), np.array([1, 2, 3, 4], np.int32), f32(4)

    def fn(x, n):
        return x * x + x * ops.cast(n, popxl.float32)

    ir = popxl.Ir()
    with ir.main_graph:
        x, n, g = popxl.variable(x_np), popxl.variable(n_np), popxl.variable(g_np)
        fwd = ir.create_graph(fn, x, n)
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, x, n)
        gx, gn = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
    assert gn.dtype == popxl.int32
    out = _fetch(ir, {"x": gx, "n": gn})
    np.testing.assert_allclose(out["x"], g_np * (2 * x_np + n_np), rtol=1e-6)
    np.testing.assert_array_equal(out["n"], 0)


def test_unreached_required_tensor_gets_zeros() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(2))
        fwd = ir.create_graph(lambda a, b: a * 2.0, x, x)
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, x, x)
        ga, gb = ops.call(info.graph, np.ones(2, np.float32), inputs_dict=info.inputs_dict(site))
    out = _fetch(ir, {"a": ga, "b": gb})
    np.testing.assert_allclose(out["a"], 2.0)
    np.testing.assert_array_equal(out["b"], 0.0)


def test_graph_modifying_its_input_raises_and_leaves_the_ir_unchanged() -> None:
    def modifies(x):
        ops.add_(x, 1.0)
        return x * 2.0

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(3))
        fwd = ir.create_graph(modifies, x)
        site = ops.call_with_info(fwd, x)
        n_graphs, n_tensors = len(ir.graphs), len(fwd.tensors)
        message = r"The graph \S*modifies_subgraph\(0\) contains a modifying op"
        with pytest.raises(popart.popart_exception, match=message) as caught:
            popxl.transforms.autodiff(fwd)
        assert isinstance(caught.value, GraphError)  # and a ValueError, as Tremula's own
    assert (len(ir.graphs), len(fwd.tensors), len(fwd.outputs), len(site.outputs)) == (
        n_graphs,
        n_tensors,
        1,
        1,
    )


def test_by_ref_input_modified_through_a_view_is_a_modifying_op() -> None:
    def fn(x: popxl.TensorByRef):
        ops.var_updates.copy_var_update_(x.reshape_((4,)), ops.init((4,), popxl.float32))
        return x + 1.0

    ir = popxl.Ir()
    with ir.main_graph:
        fwd = ir.create_graph(fn, popxl.variable(f32(2, 2)))
        with pytest.raises(GraphError, match="modifying op CopyVarUpdate"):
            popxl.transforms.autodiff(fwd)


def test_inplace_views_and_updates_of_intermediates_are_fine() -> None:
    def fn(x):
        y = x.reshape_((4,)) * 2.0  # a view of the input: not a modification
        ops.add_(y, 1.0)  # updates an intermediate the backward does not read
        return ops.exp(y)

    x_np, g_np = f32(2, 2), f32(4)
    ir = popxl.Ir()
    with ir.main_graph:
        x, g = popxl.variable(x_np), popxl.variable(g_np)
        fwd = ir.create_graph(fn, x)
        info = popxl.transforms.autodiff(fwd)
        (gx,) = ops.call(info.graph, g, inputs_dict=info.inputs_dict(ops.call_with_info(fwd, x)))
    out = _fetch(ir, {"x": gx})
    expect = 2 * g_np * np.exp(2 * x_np.ravel() + 1)
    np.testing.assert_allclose(out["x"], expect.reshape(2, 2), rtol=1e-5)


def test_argument_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(2))
        fwd = ir.create_graph(lambda a: a * 2.0, x)
        other = ir.create_graph(lambda a: a * 3.0, x)
        with pytest.raises(TypeError, match="expected a Graph"):
            popxl.transforms.autodiff("fwd")
        with pytest.raises(ValueError, match="not the main graph"):
            popxl.transforms.autodiff(ir.main_graph)
        with pytest.raises(ValueError, match="belongs to graph"):
            popxl.transforms.autodiff(fwd, grads_required=other.inputs)
        with pytest.raises(ValueError, match="more than once"):
            popxl.transforms.autodiff(fwd, grads_required=[fwd.inputs[0]] * 2)
        info = popxl.transforms.autodiff(fwd)
        # PopXL's GradGraphInfo.inputs_dict documents a TypeError for a call site of
        # another graph, with these words
        words = "The called graph does not match the graph that was auto-differentiated"
        other_site = ops.call_with_info(other, x)
        with pytest.raises(TypeError, match=words):
            info.inputs_dict(other_site)
        fwd_site = ops.call_with_info(fwd, x)
        with pytest.raises(TypeError, match=words):
            info.fwd_parent_ins_to_grad_parent_outs(other_site, fwd_site)
        with pytest.raises(TypeError, match="expected a call of"):
            info.fwd_graph_ins_to_grad_parent_outs(fwd_site)


def test_repeat_inside_is_not_supported_and_rolls_back() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(2))
        body = ir.create_graph(lambda a: a * 2.0, x)
        fwd = ir.create_graph(lambda a: ops.repeat(body, 2, a)[0] * 3.0, x)
        n = len(ir.graphs)
        with pytest.raises(NotImplementedError, match="repeat"):
            popxl.transforms.autodiff(fwd)
        assert len(ir.graphs) == n


def test_repr_and_import_paths() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(2))
        fwd = ir.create_graph(lambda a: ops.sin(a), x)
        info = popxl.transforms.autodiff(fwd)
    text = repr(info)
    assert text.startswith(f"GradGraphInfo[graph={info.graph.id} expected_inputs=[")
    assert "expected_outputs=[(ExpectedConnectionType.FwdGrad" in text
    assert info.forward_graph is fwd
    from popxl.transforms.autodiff import GradGraphInfo  # the module, found by its name

    assert callable(popxl.transforms.autodiff)  # still the function, as in PopXL
    assert GradGraphInfo is popxl.transforms.GradGraphInfo


def test_conditional_is_differentiated_through_both_branches() -> None:
    x_np, w_np, g_np = f32(2, 3), f32(2, 3), f32(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        x, w, g = (popxl.variable(a) for a in (x_np, w_np, g_np))
        yes, no = popxl.variable(True), popxl.variable(False)
        then_g = ir.create_graph(_exp_mul, x, w)  # its grad reads exp(x): a new output
        else_g = ir.create_graph(lambda a: ops.sin(a) * 3.0, x)

        def fn(c, a, b):
            return ops.conditional(c, then_g, else_g, [a, b], [a])[0]

        fwd = ir.create_graph(fn, yes, x, w)
        info = popxl.transforms.autodiff(fwd)
        # then's grad reads exp(x); else's the constant 3.0 and sin(a) (the grad ops of
        # both operands of the product); each branch gains zero outputs for the other's
        assert [t.name for t in then_g.outputs] == [
            "mul_out", "exp_out", "unused_t", "unused_sin_out"
        ]  # fmt: skip
        assert [t.name for t in else_g.outputs] == ["mul_out", "unused_exp_out", "t", "sin_out"]
        grads = {}
        for name, cond in (("then", yes), ("else", no)):
            site = ops.call_with_info(fwd, cond, x, w)
            grads[name] = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
    out = _fetch(
        ir,
        {
            "tx": grads["then"][1],
            "tw": grads["then"][2],
            "ex": grads["else"][1],
            "ew": grads["else"][2],
        },
    )
    np.testing.assert_allclose(out["tx"], g_np * w_np * np.exp(x_np), rtol=1e-5)
    np.testing.assert_allclose(out["tw"], g_np * np.exp(x_np), rtol=1e-5)
    np.testing.assert_allclose(out["ex"], 3 * g_np * np.cos(x_np), rtol=1e-5)
    np.testing.assert_array_equal(out["ew"], 0.0)


def test_print_gradient_prints_the_gradient(capfd: pytest.CaptureFixture[str]) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0], np.float32))
        fwd = ir.create_graph(
            lambda a: ops.print_tensor(a, "seen", print_self=False, print_gradient=True) * 2.0, x
        )
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, x)
        (gx,) = ops.call(info.graph, np.ones(2, np.float32), inputs_dict=info.inputs_dict(site))
    out = _fetch(ir, {"x": gx})
    np.testing.assert_allclose(out["x"], 2.0)
    printed = "".join(capfd.readouterr())  # stderr in PopXL; the engine prints to stdout now
    assert "seen_gradient" in printed and "print_seen" not in printed


def test_group_norm_gradient_reads_the_forward_statistics() -> None:
    """A GroupNorm op has PopART's three outputs (result, and mean and inverse standard
    deviation per sample and group); its gradient reads the input, the weight and those
    statistics, as PopART's GroupNormGradOp, rather than recomputing them (BERT's graph
    tests count the gradient graph's inputs). The statistics and the gradients match
    float64 NumPy."""
    n, ch, groups = 4, 6, 2
    x, w, b, dy = f32(n, ch), f32(ch) + 1.5, f32(ch), f32(n, ch)
    ir = popxl.Ir()
    with ir.main_graph:
        tx, tw, tb = (popxl.variable(v) for v in (x, w, b))
        fwd = ir.create_graph(lambda a, ww, bb: ops.group_norm(a, ww, bb, groups), tx, tw, tb)
        (op,) = [o for o in fwd._pb_graph.getOps() if o.opType() == "GroupNormalization"]
        shapes = [tuple(t.info.shape()) for t in op.getOutputTensors()]
        assert shapes == [(n, ch), (n * groups,), (n * groups,)]
        bwd = popxl.transforms.autodiff(fwd)
        got_inputs = [(c.connection_type, c.fwd_tensor.shape) for c in bwd.expected_inputs]
        assert sorted(got_inputs, key=str) == sorted(
            [(FwdGrad, (n, ch)), (Fwd, (n, ch)), (Fwd, (ch,))] + [(Fwd, (n * groups,))] * 2,
            key=str,
        )
        site = ops.call_with_info(fwd, tx, tw, tb)
        grads = ops.call(bwd.graph, popxl.constant(dy), inputs_dict=bwd.inputs_dict(site))
        stats = [site.graph_to_parent(fwd.outputs[k]) for k in (1, 2)]
    got = _fetch(ir, {"dx": grads[0], "dw": grads[1], "db": grads[2], "m": stats[0], "i": stats[1]})
    g = x.astype(np.float64).reshape(n, groups, -1)
    mean, inv = g.mean(2), 1 / np.sqrt(g.var(2) + 1e-5)
    xhat = ((g - mean[..., None]) * inv[..., None]).reshape(n, ch)
    gx = (dy * w).reshape(n, groups, -1)
    xh3 = xhat.reshape(n, groups, -1)
    dx = inv[..., None] * (gx - gx.mean(2, keepdims=True) - xh3 * (gx * xh3).mean(2, keepdims=True))
    np.testing.assert_allclose(got["m"], mean.reshape(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["i"], inv.reshape(-1), rtol=1e-4)
    np.testing.assert_allclose(got["dx"], dx.reshape(n, ch), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["dw"], (dy * xhat).sum(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["db"], dy.sum(0), rtol=1e-5, atol=1e-6)


def test_mixed_precision_scaled_add_gradients_have_their_inputs_types() -> None:
    """``scaled_add(X, Y, a, b)`` with X float32 and Y float16: the gradients are ``a g``
    (float32) and ``b g`` (float16), and the scale tensor's ``sum(g Y)`` (float32)."""
    x, y, seed = f32(2, 3), f32(2, 3).astype(np.float16), f32(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        tx, ty = popxl.variable(x), popxl.variable(y)
        tb = popxl.variable(np.float32(-0.5))
        fwd = ir.create_graph(lambda a, b, s: ops.scaled_add(a, b, 2.0, s), tx, ty, tb)
        bwd = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, tx, ty, tb)
        dx, dy, db = ops.call(bwd.graph, popxl.constant(seed), inputs_dict=bwd.inputs_dict(site))
    got = _fetch(ir, {"dx": dx, "dy": dy, "db": db})
    assert (got["dx"].dtype, got["dy"].dtype, got["db"].dtype) == (
        np.float32,
        np.float16,
        np.float32,
    )
    np.testing.assert_allclose(got["dx"], 2 * seed, rtol=1e-6)
    np.testing.assert_allclose(got["dy"], (-0.5 * seed).astype(np.float16), rtol=1e-3)
    np.testing.assert_allclose(got["db"], np.sum(seed * y.astype(np.float32)), rtol=1e-5)
