"""popxl-addons' ``rotary_pos_embed`` served in Python: the rotation of interleaved
(real, imaginary) feature pairs against a complex-number reference written from the C++
opx, its gradient op against the closed form (and finite differences of the reference),
through the binding and through popxl-addons' wrapper as GPT-J calls it."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import OpSetupError, OpSetupTypeError, PopartException
from tremula.popxl.custom_ops import SERVED
from tremula.popxl.custom_ops import rotary_pos_embed as served


def rope_reference(x: np.ndarray, sin: np.ndarray, cos: np.ndarray, rd: int) -> np.ndarray:
    """x [b, s, h, hh]; sin/cos [1 or b, s, rd/2]: pairs (x[2i], x[2i+1]) as complex numbers
    times exp(i phi) where cos/sin give phi, broadcast over the heads."""
    r = min(rd, x.shape[-1])
    z = x[..., 0:r:2].astype(np.complex128) + 1j * x[..., 1:r:2]
    turn = cos[:, :, None, :].astype(np.float64) + 1j * sin[:, :, None, :]
    w = z * turn
    out = x.astype(np.float64).copy()
    out[..., 0:r:2], out[..., 1:r:2] = w.real, w.imag
    return out


def _tables(rng: np.random.Generator, lead: int, s: int, k: int, dtype=np.float32):
    phi = rng.uniform(-3, 3, size=(lead, s, k))
    return np.sin(phi).astype(dtype), np.cos(phi).astype(dtype)


def _session_run(ir, outs):
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    return session, [got[o] for o in outs]


def _store(t):
    d = popxl.d2h_stream(t.shape, t.dtype)
    ops.host_store(d, t)
    return d


@pytest.mark.parametrize(
    "shape, rd, lead, dtype",
    [
        ((2, 5, 3, 8), 6, 1, np.float32),  # part of the features, one table for the batch
        ((2, 4, 2, 8), 8, 2, np.float32),  # all features, a table per batch row
        ((1, 3, 2, 4), 16, 1, np.float32),  # rotary_dim beyond hh rotates all of them
        ((2, 4, 2, 8), 4, 1, np.float16),
    ],
)
def test_forward_through_the_binding(shape, rd, lead, dtype, check_profile) -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=shape).astype(dtype)
    r = min(rd, shape[-1])
    sin, cos = _tables(rng, lead, shape[1], r // 2, dtype)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        xt, st, ct = popxl.variable(x), popxl.constant(sin), popxl.constant(cos)
        op = served.RotaryPosEmbedOp.createOpInGraph(
            g._pb_graph,
            {0: xt.id, 1: st.id, 2: ct.id},
            {0: g._create_tensor_id("t_rotated")},
            rd,
            popxl.context.get_current_context()._get_op_settings("RotaryPosEmbedOp"),
        )
        y = popxl.Tensor._from_pb_tensor(op.outTensor(0))
        d = _store(y)
    assert y.id == "t_rotated" and y.shape == shape and y.dtype == popxl.dtype.as_dtype(dtype)
    assert op.opType() == "RotaryPosEmbed"
    session, (got,) = _session_run(ir, [d])
    tol = 1e-6 if dtype == np.float32 else 4e-3
    np.testing.assert_allclose(got, rope_reference(x, sin, cos, rd), rtol=tol, atol=tol)
    np.testing.assert_array_equal(got[..., r:], x[..., r:])
    check_profile(session, "RotaryPosEmbed")


def test_identifiers_are_served() -> None:
    for op_type in ("RotaryPosEmbed", "RotaryPosEmbedGrad"):
        assert SERVED[("popxl.addons.ops", op_type, 1)] == served.__name__


def test_the_wrapper_as_gptj_calls_it_and_its_gradient(addons, check_profile) -> None:
    """GPT-J: query [batch, seq, heads, head] rotated by trig_table_constants(seq, rd)."""
    rope = addons("rotary_pos_embed")
    b, s, h, hh, rd = 2, 6, 2, 8, 4
    rng = np.random.default_rng(3)
    x = rng.normal(size=(b, s, h, hh)).astype(np.float32)
    dy = rng.normal(size=x.shape).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        fwd = ir.create_graph(
            lambda t: rope.rotary_pos_embed(t, *rope.trig_table_constants(s, rd), rd),
            popxl.TensorSpec(x.shape, popxl.float32),
        )
        bwd = popxl.transforms.autodiff(fwd)
        xt = popxl.variable(x)
        call = ops.call_with_info(fwd, xt)
        y = call.outputs[0]  # autodiff added the tables as outputs
        (dx,) = ops.call(bwd.graph, popxl.constant(dy), inputs_dict=bwd.inputs_dict(call))
        dy_out, dx_out = _store(y), _store(dx)
    assert [op.type for op in fwd.ops].count("RotaryPosEmbed") == 1
    assert [op.type for op in bwd.graph.ops].count("RotaryPosEmbedGrad") == 1
    session, (got, grad) = _session_run(ir, [dy_out, dx_out])
    sin, cos = rope.trig_tables(s, rd)
    sin, cos = sin[None], cos[None]
    np.testing.assert_allclose(got, rope_reference(x, sin, cos, rd), rtol=1e-5, atol=1e-6)
    # closed form: the transpose of a rotation is the rotation by -phi
    np.testing.assert_allclose(grad, rope_reference(dy, -sin, cos, rd), rtol=1e-5, atol=1e-6)
    # the op is linear in x, so its finite differences are exact: the device's gradient is
    # the adjoint of the device's forward, <R x, dy> = <x, R^T dy>
    assert float(np.sum(got * dy)) == pytest.approx(float(np.sum(x * grad)), rel=1e-5)
    # and the reference's own finite differences agree with it
    eps, k = 1e-6, (1, 2, 1, 3)
    bump = np.zeros_like(x, dtype=np.float64)
    bump[k] = eps
    f = lambda v: float(np.sum(rope_reference(v, sin, cos, rd) * dy))  # noqa: E731
    fd = (f(x + bump) - f(x - bump)) / (2 * eps)
    assert fd == pytest.approx(float(grad[k]), rel=1e-4, abs=1e-5)
    check_profile(session, "RotaryPosEmbedGrad")


def test_setup_refuses_what_the_cpp_refuses() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = popxl.variable(np.zeros((1, 2, 1, 4), np.float32))
        sin = popxl.constant(np.zeros((1, 2, 2), np.float32))
        x3 = popxl.variable(np.zeros((2, 1, 4), np.float32))
        half = popxl.constant(np.zeros((1, 2, 2), np.float16))
        bad_seq = popxl.constant(np.zeros((1, 3, 2), np.float32))
        make = served.RotaryPosEmbedOp.createOpInGraph
        with pytest.raises(OpSetupError, match="rotary_dim must be a multiple of 2"):
            make(g._pb_graph, {0: x.id, 1: sin.id, 2: sin.id}, {}, 3, None)
        with pytest.raises(OpSetupError, match="x should have rank 4"):
            make(g._pb_graph, {0: x3.id, 1: sin.id, 2: sin.id}, {}, 4, None)
        with pytest.raises(OpSetupError, match=r"sin of shape \(1, 3, 2\) does not broadcast"):
            make(g._pb_graph, {0: x.id, 1: bad_seq.id, 2: sin.id}, {}, 4, None)
        with pytest.raises(OpSetupTypeError, match="cos must have the dtype of x"):
            make(g._pb_graph, {0: x.id, 1: sin.id, 2: half.id}, {}, 4, None)
        with pytest.raises(PopartException, match="inputs at indices"):
            make(g._pb_graph, {0: x.id, 1: sin.id}, {}, 4, None)
    assert not [op for op in g.ops if op.type == "RotaryPosEmbed"]


def test_replicas_rotate_their_own_heads(addons) -> None:
    """Tensor-parallel attention (GPT-J on 2 replicas): each replica rotates its own heads
    with the same tables; the gradient too."""
    rope = addons("rotary_pos_embed")
    b, s, h, hh, rd = 1, 4, 2, 8, 8
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, b, s, h, hh)).astype(np.float32)
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xin = popxl.h2d_stream((b, s, h, hh), popxl.float32, "x")
        fwd = ir.create_graph(
            lambda t: rope.rotary_pos_embed(t, *rope.trig_table_constants(s, rd)),
            popxl.TensorSpec((b, s, h, hh), popxl.float32),
        )
        bwd = popxl.transforms.autodiff(fwd)
        t = ops.host_load(xin, "x")
        call = ops.call_with_info(fwd, t)
        (dx,) = ops.call(bwd.graph, call.outputs[0], inputs_dict=bwd.inputs_dict(call))
        out, grad = _store(call.outputs[0]), _store(dx)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({xin: x})
    sin, cos = (a[None] for a in rope.trig_tables(s, rd))
    for r in range(2):
        y = rope_reference(x[r], sin, cos, rd)
        np.testing.assert_allclose(got[out][r], y, rtol=1e-5, atol=1e-6)
        # dy = y: rotating back gives x
        np.testing.assert_allclose(got[grad][r], x[r], rtol=1e-5, atol=1e-5)
