"""The inputs of ``autodiff``'s grad graph are those PopART's autodiff gives (spec section
1.12): for each op it differentiates, PopART grows the grad ops of every input
(``Op::getGradOps``), takes the forward values each reads (``gradInputInfo``) as grad-graph
inputs, and prunes the grad ops nobody needs, keeping those inputs. Forward constants are
inputs like any other forward value, and softmax's gradient reads the softmax's input
(PopART's SoftmaxGradOp recomputes the probabilities; here the forward's are used where
another gradient reads them). The gradients' values do not change.
Graphcore's BERT attention test (16 grad-graph inputs) rests on these rules."""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops
from popxl.transforms.autodiff import ExpectedConnectionType

Fwd, FwdGrad = ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad
RNG = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _run(ir: popxl.Ir, tensors: dict[str, popxl.Tensor]) -> dict[str, np.ndarray]:
    with ir.main_graph:
        streams = {
            name: popxl.d2h_stream(t.shape, t.dtype, name=name) for name, t in tensors.items()
        }
        for name, t in tensors.items():
            ops.host_store(streams[name], t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return {name: out[s] for name, s in streams.items()}


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_softmax_of_a_scaled_input_reads_what_popart_grad_ops_read() -> None:
    x_np, g_np = f32(2, 5), f32(2, 5)
    ir = popxl.Ir()
    with ir.main_graph:
        x, g = popxl.variable(x_np), popxl.variable(g_np)
        fwd = ir.create_graph(lambda a: ops.softmax(a * 0.5, axis=-1), x)
        info = popxl.transforms.autodiff(fwd)
        (a,) = fwd.inputs
        (mul,) = [op for op in fwd.ops if op.type == "Mul"]
        scaled, c = mul.outputs[0], mul.inputs[1]
        assert isinstance(c, popxl.Constant)
        # softmax's grad reads its input; Mul's grad of a reads c, the (pruned) grad of
        # c reads a; the probabilities themselves are not read
        got = [(e.fwd_tensor, e.connection_type) for e in info.expected_inputs]
        assert got == [(fwd.outputs[0], FwdGrad), (scaled, Fwd), (c, Fwd), (a, Fwd)]
        assert fwd.outputs[1:] == (scaled, c)  # the constant is a forward output too
        # nothing of the constant's own (unwanted) gradient is computed: it would be a
        # sum down to a scalar
        assert all(t.shape != () for op in info.graph.ops for t in op.outputs)
        # no other gradient reads the probabilities: they are computed again
        assert [op.type for op in info.graph.ops].count("Softmax") == 1
        site = ops.call_with_info(fwd, x)
        (dx,) = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
    out = _run(ir, {"dx": dx})
    y = _softmax(0.5 * x_np)
    expected = 0.5 * y * (g_np - (g_np * y).sum(-1, keepdims=True))
    np.testing.assert_allclose(out["dx"], expected, rtol=1e-5, atol=1e-7)


def test_softmax_gradient_uses_the_probabilities_another_gradient_reads() -> None:
    # attention's probs @ v: the matmul's gradient reads the probabilities, so softmax's
    # gradient uses them (the forward's values) and reads its input besides, as PopART's
    x_np, v_np, g_np = f32(2, 4, 4), f32(2, 4, 3), f32(2, 4, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        x, v, g = popxl.variable(x_np), popxl.variable(v_np), popxl.variable(g_np)
        fwd = ir.create_graph(lambda a, b: ops.softmax(a, axis=-1) @ b, x, v)
        info = popxl.transforms.autodiff(fwd)
        pa, pb = fwd.inputs
        (sm,) = [op for op in fwd.ops if op.type == "Softmax"]
        probs = sm.outputs[0]
        reads = [e.fwd_tensor for e in info.expected_inputs if e.connection_type is Fwd]
        assert reads == [pb, probs, pa]  # MatMul's lhs, rhs gradients; softmax's
        assert "Softmax" not in [op.type for op in info.graph.ops]
        site = ops.call_with_info(fwd, x, v)
        dx, dv = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
        y_out = site.outputs[1]  # the probabilities, exposed for the gradient
    out = _run(ir, {"dx": dx, "dv": dv, "y": y_out})
    y = _softmax(x_np)
    np.testing.assert_allclose(out["y"], y, rtol=1e-6)
    gy = g_np @ v_np.transpose(0, 2, 1)
    expected = y * (gy - (gy * y).sum(-1, keepdims=True))
    np.testing.assert_allclose(out["dx"], expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out["dv"], y.transpose(0, 2, 1) @ g_np, rtol=1e-5, atol=1e-7)


def test_weight_gradient_alone_still_reads_the_weight() -> None:
    # a Linear layer whose input needs no gradient (an embedding's, say): PopART grows
    # MatMulLhsGradOp as well as MatMulRhsGradOp, so the weight is a grad-graph input
    x_np, w_np, b_np, g_np = f32(4, 3), f32(3, 2), f32(2), f32(4, 2)
    ir = popxl.Ir()
    with ir.main_graph:
        x, w, b, g = (popxl.variable(v) for v in (x_np, w_np, b_np, g_np))
        fwd = ir.create_graph(lambda p, q, r: p @ q + r, x, w, b)
        px, pw, pb = fwd.inputs
        info = popxl.transforms.autodiff(fwd, grads_required=[pw, pb])
        reads = [e.fwd_tensor for e in info.expected_inputs if e.connection_type is Fwd]
        assert reads == [pw, px]
        assert len(fwd.outputs) == 1  # both are inputs already: nothing exposed
        site = ops.call_with_info(fwd, x, w, b)
        dw, db = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
    out = _run(ir, {"dw": dw, "db": db})
    np.testing.assert_allclose(out["dw"], x_np.T @ g_np, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["db"], g_np.sum(0), rtol=1e-5, atol=1e-6)


def test_a_repeated_graph_gains_outputs_through_its_wrappers_call() -> None:
    # a repeat's body is called by the Call in the loop's wrapper, which gains outputs as
    # any call site does (PopART's stitcher adds outputs to every CallOp of the graph); the
    # loop carries only the outputs the wrapper had, so the repeat computes what it did
    x_np, w_np, g_np = f32(3), f32(3), f32(3)
    ir = popxl.Ir()
    with ir.main_graph:
        x, w, g = popxl.variable(x_np), popxl.variable(w_np), popxl.variable(g_np)
        body = ir.create_graph(lambda a, b: (a + 1.0) * b * 3.0, x, w)
        (looped,) = ops.repeat(body, 2, x, inputs_dict={body.inputs[1]: w})
        info = popxl.transforms.autodiff(body, grads_required=[body.inputs[0]])
        b = body.inputs[1]
        plus_one, product = body.ops[0].outputs[0], body.ops[1].outputs[0]  # a + 1, (a + 1) b
        three = body.outputs[1]  # the constant 3.0, read by the gradient of the product
        got = [(e.fwd_tensor, e.connection_type) for e in info.expected_inputs]
        assert got == [
            (body.outputs[0], FwdGrad), (three, Fwd), (product, Fwd), (b, Fwd), (plus_one, Fwd)
        ]  # fmt: skip
        assert body.outputs[1:] == (three, product, plus_one)
        site = ops.call_with_info(body, x, w)
        (dx,) = ops.call(info.graph, g, inputs_dict=info.inputs_dict(site))
    out = _run(ir, {"dx": dx, "looped": looped})
    np.testing.assert_allclose(out["dx"], g_np * 3.0 * w_np, rtol=1e-6)
    once = (x_np + 1.0) * w_np * 3.0
    np.testing.assert_allclose(out["looped"], (once + 1.0) * w_np * 3.0, rtol=1e-6)
