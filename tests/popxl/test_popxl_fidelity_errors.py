"""Calls PopXL refuses (its C++ core at op setup) that Tremula refuses the same way: the
type and the opening words of the message, and nothing added to the graph."""

from __future__ import annotations

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops


@pytest.mark.parametrize("dilation", [(2, 2), (1, 2)])
def test_conv_transpose_refuses_dilations_as_popart_does(dilation) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.ones((1, 2, 4, 4), np.float32))
        w = popxl.variable(np.ones((2, 2, 3, 3), np.float32))
        before = len(ir.main_graph.tensors)
        with pytest.raises(popart.popart_exception, match=r"^Non default value for dilations"):
            ops.conv_transpose(t, w, dilation=dilation)
        assert len(ir.main_graph.tensors) == before
        x8 = popxl.variable(np.zeros((1, 2, 4, 4), np.uint8), popxl.float8_143)
        w8 = popxl.variable(np.zeros((2, 2, 3, 3), np.uint8), popxl.float8_143)
        with pytest.raises(popart.popart_exception, match=r"^Non default value for dilations"):
            ops.conv_transpose_pow2scaled(x8, w8, 0, dilation=dilation)


def test_dilated_conv_still_differentiates() -> None:
    """The gradient of a dilated conv is a dilated ConvTranspose made by autodiff (not
    through ops.conv_transpose): checked against a finite difference of the sum."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, 6, 6)).astype(np.float32)
    w = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    ir = popxl.Ir()
    g = ir.create_graph(
        lambda a, b: ops.conv(a, b, dilation=(2, 2)),
        popxl.TensorSpec(x.shape, popxl.float32),
        popxl.TensorSpec(w.shape, popxl.float32),
    )
    grad = popxl.transforms.autodiff(g, grads_required=[g.inputs[0]])
    with ir.main_graph:
        xv, wv = popxl.variable(x), popxl.variable(w)
        info = ops.call_with_info(g, xv, wv)
        ones = popxl.constant(np.ones(info.outputs[0].shape, np.float32))
        (dx,) = ops.call(grad.graph, ones, inputs_dict=grad.inputs_dict(info))
        s = popxl.d2h_stream(dx.shape, dx.dtype)
        ops.host_store(s, dx)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[s]
    want = np.zeros_like(x)  # d(sum conv)/dx[i, j] = sum of the weights that touch it
    for i in range(2):
        for j in range(2):
            want[0, 0, 2 * i : 2 * i + 4, 2 * j : 2 * j + 4] += w[0, 0, i, j]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [ops.conv, ops.conv_transpose])
@pytest.mark.parametrize("groups", [0, 3])
def test_conv_groups_are_refused_at_op_setup(op, groups) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.ones((1, 2, 4, 4), np.float32), name="t")
        w = popxl.variable(np.ones((2, 2, 3, 3), np.float32))
        with pytest.raises(popart.popart_exception, match=r"groups .* channels of 't'"):
            op(t, w, groups=groups)


def _ops_with_popxl_wording():
    """(what, call, error type, PopXL's words) for checks PopXL's frontend makes itself."""
    t = popxl.variable(np.zeros((1, 2, 4, 4), np.float32))
    return [
        ("slice", lambda: ops.slice(t, start=[0, 0], stop=[1]), ValueError,
         "All inputs must have same length"),
        ("interpolate", lambda: ops.interpolate(t, mode="area"), ValueError,
         "interpolate type area is not valid"),
        ("collective op", lambda: ops.collectives.replicated_all_reduce(t, "xor"), ValueError,
         "Not a valid op: xor. Must choose from: add"),
        ("create_graph", lambda: popxl.gir().create_graph(lambda ts: ts[0], [t, 1]), TypeError,
         "can't contain a mixture of Tensors and other types"),
    ]  # fmt: skip


def test_frontend_checks_use_popxl_words() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        cases = _ops_with_popxl_wording()
        before = len(ir.main_graph.tensors)
        for what, call, error, words in cases:
            with pytest.raises(error) as info:
                call()
            assert words in str(info.value), what
        assert len(ir.main_graph.tensors) == before


@pytest.mark.parametrize(
    "op", [ops.add, ops.sub, ops.mul, ops.div, ops.matmul, ops.add_, ops.logical_and]
)
def test_binary_ops_check_their_operands_placement(op) -> None:
    """PopXL's binary ops run check_tensor_ipu_and_tile_set on lhs and rhs: operands on
    different IPUs or tile sets are refused (a tensor no op placed yet is not compared)."""
    ir = popxl.Ir()
    with ir.main_graph:
        dtype = np.bool_ if op is ops.logical_and else np.float32
        v = [popxl.variable(np.ones((2, 2), dtype)) for _ in range(3)]
        with popxl.ipu(0):
            a = ops.identity(v[0])
        with popxl.ipu(1):
            b = ops.identity(v[1])
        with popxl.io_tiles():
            c = ops.identity(v[2])
        before = len(ir.main_graph.tensors)
        ipus = r"Tensors `lhs` and `rhs` are located on different IPUs: "
        with pytest.raises(ValueError, match=ipus + "0 != 1"):
            op(a, b)
        with pytest.raises(ValueError, match="located on different tile sets: compute != io"):
            op(a, c)
        with pytest.raises(ValueError, match=ipus + "1 != 0"):
            op(b, v[0])  # v[0] is read on IPU 0: PopART places it by that reader
        assert len(ir.main_graph.tensors) == before
        fresh = popxl.variable(np.ones((2, 2), dtype))
        with popxl.ipu(1):
            op(b, fresh)  # placed nowhere yet: not compared
