"""popxl-addons' Modules, variable factories, named tensors, autodiff (with accumulation and
recomputation) and its Adam step, used as its users use them, checked against NumPy."""

from __future__ import annotations

from functools import partial

import numpy as np
import popxl_addons as addons
import popxl_addons.layers
import pytest
from popxl_addons.optimizers.adam import AdamOptimizerStep
from popxl_addons.transforms.recomputation import recompute_graph

import popxl
from popxl import ops

RNG = np.random.default_rng(3)


class Scale(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        scale = self.add_variable_input("scale", partial(np.ones, x.shape), x.dtype)
        return x * scale


class Net(addons.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = popxl_addons.layers.Linear(4)
        self.fc2 = popxl_addons.layers.Linear(2)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return self.fc2(ops.relu(self.fc1(x)))


def store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    d2h = popxl.d2h_stream(t.shape, t.dtype, name=f"out_{t.name}")
    ops.host_store(d2h, t)
    return d2h


def test_module_instances_and_named_tensors() -> None:
    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0, name="x")
        facts, graph = Scale().create_graph(x)
        a, b = facts.init("a"), facts.init("b")
        (y,) = graph.bind(a).call(x)
        (z,) = graph.bind(b).call(y)
        out = store(z)
    assert list(facts.to_dict()) == ["scale"] and list(a.to_dict()) == ["scale"]
    assert a.scale.name == "a.scale" and isinstance(a.scale, popxl.tensor.Variable)
    assert graph.args.scale in graph.graph.inputs
    with popxl.Session(ir, "ipu_model") as s:
        s.write_variables_data({a.scale: np.full((2, 3), 2, np.float32)})
        s.write_variables_data({b.scale: np.full((2, 3), 3, np.float32)})
        got = s.run()[out]
    np.testing.assert_array_equal(got, x0 * 6)


def _numpy_net(x, w1, b1, w2, b2, dy):
    h = x @ w1 + b1
    r = np.maximum(h, 0)
    y = r @ w2 + b2
    dr = dy @ w2.T
    dh = dr * (h > 0)
    return y, {
        "fc1.weight": x.T @ dh,
        "fc1.bias": dh.sum(0),
        "fc2.weight": r.T @ dy,
        "fc2.bias": dy.sum(0),
        "x": dh @ w1.T,
    }


def _weights():
    return {
        "fc1.weight": RNG.standard_normal((3, 4)).astype(np.float32),
        "fc1.bias": RNG.standard_normal(4).astype(np.float32),
        "fc2.weight": RNG.standard_normal((4, 2)).astype(np.float32),
        "fc2.bias": RNG.standard_normal(2).astype(np.float32),
    }


@pytest.mark.parametrize("recompute", [False, True])
def test_autodiff_of_a_module_matches_numpy(recompute: bool) -> None:
    x0 = RNG.standard_normal((5, 3)).astype(np.float32)
    dy0 = RNG.standard_normal((5, 2)).astype(np.float32)
    w = _weights()
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x0, name="x")
        dy = popxl.variable(dy0, name="dy")
        facts, fwd = Net().create_graph(x)
        bwd = addons.autodiff(fwd)
        if recompute:
            bwd = recompute_graph(bwd)
        v = facts.init()
        call = fwd.bind(v).call_with_info(x)
        grads = bwd.call(dy, args=bwd.grad_graph_info.inputs_dict(call))
        arg_names = {t: k for k, t in fwd.args.to_dict().items()}
        names = [arg_names.get(t, "x") for t in bwd.grad_graph_info.outputs]
        outs = [store(call.outputs[0])] + [store(g) for g in grads]
    with popxl.Session(ir, "ipu_model") as s:
        s.write_variables_data({v.to_dict()[k]: w[k] for k in w})
        got = s.run()
    y, ref = _numpy_net(x0, *w.values(), dy0)
    np.testing.assert_allclose(got[outs[0]], y, rtol=1e-5, atol=1e-5)
    for name, o in zip(names, outs[1:]):
        np.testing.assert_allclose(got[o], ref[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_autodiff_with_accumulation_keeps_running_means() -> None:
    xs = [RNG.standard_normal((5, 3)).astype(np.float32) for _ in range(3)]
    dy0 = RNG.standard_normal((5, 2)).astype(np.float32)
    w = _weights()
    ir = popxl.Ir()
    with ir.main_graph:
        xin = popxl.variable(xs[0], name="xin")
        dy = popxl.variable(dy0, name="dy")
        facts, fwd = Net().create_graph(xin)
        accum_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        assert len(bwd.graph.outputs) == 0  # the accumulated gradients are not outputs
        v, acc = facts.init(), accum_facts.init()
        call = fwd.bind(v).call_with_info(xin)
        bwd.bind(acc).call(dy, args=bwd.grad_graph_info.inputs_dict(call))
    with popxl.Session(ir, "ipu_model") as s:
        s.write_variables_data({v.to_dict()[k]: w[k] for k in w})
        for x in xs:
            s.write_variable_data(xin, x)
            s.run()
        got = s.get_tensors_data(acc.tensors)
    for name, t in acc.to_dict().items():
        if name == "mean_accum_counter":
            assert got[t] == 3
            continue
        key = name.removeprefix("accum.")
        ref = np.mean([_numpy_net(x, *w.values(), dy0)[1][key] for x in xs], axis=0)
        np.testing.assert_allclose(got[t], ref, rtol=1e-4, atol=1e-5, err_msg=name)


def test_adam_optimizer_step_matches_numpy() -> None:
    w0 = RNG.standard_normal((3, 4)).astype(np.float32)
    g0 = RNG.standard_normal((3, 4)).astype(np.float32)
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-5, 1e-2
    ir = popxl.Ir()
    with ir.main_graph:
        var = popxl.variable(w0, name="w")
        grad = popxl.variable(g0, name="g")
        facts, graph = AdamOptimizerStep().create_graph(
            var,
            grad,
            lr=lr,
            beta1=b1,
            beta2=b2,
            eps=eps,
            weight_decay=wd,
            first_order_dtype=popxl.float32,
        )
        state = facts.init()
        graph.bind(state).call(var, grad)
    with popxl.Session(ir, "ipu_model") as s:
        for _ in range(3):
            s.run()
        got = s.get_tensor_data(var)
    w, m, v = w0.astype(np.float64), 0.0, 0.0
    for t in range(1, 4):
        m = b1 * m + (1 - b1) * g0
        v = b2 * v + (1 - b2) * g0**2
        upd = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * w
        w = w - lr * upd
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
