"""``popxl.ops.rnn.gru`` (popnn's GRU as a PopXL op): forward and autodiff gradients on the
CPU and the IPU Model against a NumPy GRU, the NumPy backward against finite differences,
half, and bad shapes."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import finite_differences

import popxl
import popxl.ops as ops
from tremula.popxl.ops.rnn import gru_grad_reference, gru_reference

RNG = np.random.default_rng(31)
T, B, I, H = 4, 2, 3, 5


def _values(dtype=np.float32):
    shapes = [((T, B, I), 1.0), ((B, H), 0.5), ((3, I, H), 0.6), ((3, H, H), 0.6), ((3, H), 0.2)]
    return [(RNG.standard_normal(s) * k).astype(dtype) for s, k in shapes]


def _run(values, dy, device):
    ir = popxl.Ir()
    with ir.main_graph:
        vs = [popxl.variable(v) for v in values]
        fwd = ir.create_graph(lambda *a: ops.rnn.gru(*a), *vs)
        info = popxl.transforms.autodiff(fwd)
        site = ops.call_with_info(fwd, *vs)
        grads = ops.call(info.graph, popxl.variable(dy), inputs_dict=info.inputs_dict(site))
        streams = []
        for t in [site.outputs[0], *grads]:
            streams.append(popxl.d2h_stream(t.shape, t.dtype))
            ops.host_store(streams[-1], t)
    with popxl.Session(ir, device) as session:
        out = session.run()
    return [out[s] for s in streams]


@pytest.mark.parametrize("device", ["cpu", "ipu_model"])
def test_gru_outputs_and_gradients_match_numpy(device):
    values = _values()
    dy = RNG.standard_normal((T, B, H)).astype(np.float32)
    got = _run(values, dy, device)
    y, inter = gru_reference(*values)
    np.testing.assert_allclose(got[0], y, rtol=1e-5, atol=1e-6)
    want = gru_grad_reference(values[1], inter, values[2], values[3], values[0], y, dy)
    for name, g, w in zip(["x", "h0", "wi", "wo", "b"], got[1:], want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)


def test_the_numpy_backward_matches_finite_differences():
    values = [v.astype(np.float64) for v in _values()]
    dy = RNG.standard_normal((T, B, H))
    y, inter = gru_reference(*values)
    grads = gru_grad_reference(values[1], inter, values[2], values[3], values[0], y, dy)
    fds = finite_differences(lambda vals: float(np.sum(gru_reference(*vals)[0] * dy)), values)
    for g, fd in zip(grads, fds):
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_half_forward():
    values = _values(np.float16)
    got = _run(values, np.zeros((T, B, H), np.float16), "cpu")
    np.testing.assert_allclose(got[0], gru_reference(*values)[0], rtol=2e-2, atol=2e-3)


def test_bad_operands():
    ir = popxl.Ir()
    with ir.main_graph:
        x, h0, wi, wo, b = (popxl.variable(v) for v in _values())
        before = len(ir.main_graph.ops)
        with pytest.raises(
            ValueError, match=r"output_weights must be \[3, 5, 5\] .* got \[3, 5, 4\]"
        ):
            ops.rnn.gru(x, h0, wi, popxl.variable(np.zeros((3, 5, 4), np.float32)), b)
        with pytest.raises(TypeError, match=r"biases must be a popxl\.Tensor"):
            ops.rnn.gru(x, h0, wi, wo, np.zeros((3, 5)))
        with pytest.raises(TypeError, match=r"every operand must be popxl\.dtypes\.float32"):
            ops.rnn.gru(x, ops.cast(h0, popxl.float16), wi, wo, b)
        assert len(ir.main_graph.ops) == before + 1  # the cast: the refused grus added nothing
