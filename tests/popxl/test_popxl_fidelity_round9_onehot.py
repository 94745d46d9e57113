"""Round 9 of PopXL fidelity, ``onehot``: what PopXL's ``tests/integration/popxl/ops/
test_onehot.py`` and the binding test ``tests/integration/popart._internal.ir/ops/
test_onehot.py`` (``createConnectedOp_OnehotOp``) check.

PopXL's ``ops.onehot(t, num_classes, values, axis)`` calls
``createConnectedOp_OnehotOp({0: t.id, 1: num_classes.id, 2: values.id}, ..., opid, axis,
settings)``: PopART's ``OnehotOp`` has three inputs, the indices, the depth and the values
(high confidence, ~90 %), its constructor ``OnehotOp(opid, axis, settings)`` (~85 %). The
depth must be a constant (its value sizes the output); only the values get a gradient
(PopART's ``OnehotGradOp``, high). Values checked against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from tremula.errors import PopartException

F32 = np.float32
IDX = np.array([[2, 0, -1], [3, 1, 2]], np.int32)
VALUES = np.array([-0.5, 2.0], F32)


def _onehot_np(idx: np.ndarray, n: int, values: np.ndarray, axis: int) -> np.ndarray:
    """Independent reference: ``values[1]`` where the class equals the index."""
    idx = np.where(idx < 0, idx + n, idx)
    hot = np.moveaxis(np.eye(n, dtype=bool)[idx], -1, axis)
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def _run(ir: popxl.Ir, *tensors: popxl.Tensor) -> list[np.ndarray]:
    with ir.main_graph:
        streams = []
        for t in tensors:
            s = popxl.d2h_stream(t.shape, t.dtype, f"{t.id}_d2h")
            ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    return [out[s] for s in streams]


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_onehot_has_popart_s_three_inputs(axis: int) -> None:
    """The op's inputs are the indices, the num_classes tensor and the values, in that
    order, in the op and in its ``_pb_graph`` view; the output as NumPy's."""
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(IDX, popxl.int32, name="t")
        n = popxl.constant(np.array(4, np.int32), popxl.int32, name="n")
        v = popxl.variable(VALUES, popxl.float32, name="v")
        y = ops.onehot(t, n, v, axis)
    (op,) = ir.main_graph._pb_graph.getOps()
    assert type(op).__name__ == "OnehotOp" and op.opType() == "OneHot"
    assert [op.inId(i) for i in range(3)] == [t.id, n.id, v.id]
    assert op.getAxis() == axis % 3 and op.outShape(0) == list(y.shape)
    assert op.inTensorCount() == 3 and op.inShape(1) == [] and op.inInfo(2).shape() == [2]
    (got,) = _run(ir, y)
    np.testing.assert_array_equal(got, _onehot_np(IDX, 4, VALUES, axis))


def test_an_int_num_classes_becomes_the_depth_constant() -> None:
    """Tremula also takes an int (PopXL needs a tensor): a constant holding it is input 1."""
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(IDX, popxl.int32, name="t")
        v = popxl.variable(VALUES, popxl.float32, name="v")
        before = set(ir.main_graph.tensors)
        y = ops.onehot(t, 5, v, 1)
    (op,) = ir.main_graph._pb_graph.getOps()
    depth = op.inTensor(1)
    assert depth.id not in {x.id for x in before}
    assert depth.tensorType() == _ir.TensorType.Const
    np.testing.assert_array_equal(np.asarray(popxl.Tensor._from_pb_tensor(depth)._data), 5)
    (got,) = _run(ir, y)
    np.testing.assert_array_equal(got, _onehot_np(IDX, 5, VALUES, 1))


def test_a_depth_without_data_is_refused() -> None:
    """A computed depth has no value when the graph is built: refused, nothing added.
    (A variable's initial value is taken, as PopART's ``getInTensorData`` reads any tensor
    with data: ~60 %, left as it was.)"""
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(IDX, popxl.int32, name="t")
        n = ops.identity(popxl.constant(np.array(4, np.int32), popxl.int32), "n")
        v = popxl.variable(VALUES, popxl.float32, name="v")
        n_ops = len(ir.main_graph._pb_graph.getOps())
        with pytest.raises(ValueError, match="num_classes 'n' must be a one-element constant"):
            ops.onehot(t, n, v, 1)
    assert len(ir.main_graph._pb_graph.getOps()) == n_ops


def test_only_the_values_get_a_gradient() -> None:
    """autodiff: the values' gradient is ``[sum of the gradient off, sum on]``; the indices
    and the depth (a constant of the graph) get none."""
    ir = popxl.Ir()
    g_np = np.arange(24, dtype=F32).reshape(2, 4, 3) / 7 - 1

    def fwd_fn(a: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
        n = popxl.constant(np.array(4, np.int32), popxl.int32, name="n")
        return ops.onehot(a, n, b, 1)

    with ir.main_graph:
        t = popxl.variable(IDX, popxl.int32, name="t")
        v = popxl.variable(VALUES, popxl.float32, name="v")
        gv = popxl.variable(g_np, popxl.float32, name="g")
        fwd = ir.create_graph(fwd_fn, t, v)
        grad = popxl.transforms.autodiff(fwd, grads_required=[fwd.inputs[1]])
        assert len(grad.graph.outputs) == 1
        info = ops.call_with_info(fwd, t, v)
        (dv,) = ops.call(grad.graph, gv, inputs_dict=grad.inputs_dict(info))
    (op,) = fwd._pb_graph.getOps()
    assert op.inTensor(1).tensorType() == _ir.TensorType.Const
    (got,) = _run(ir, dv)
    hot = _onehot_np(IDX, 4, np.array([0, 1], F32), 1).astype(bool)
    np.testing.assert_allclose(got, [g_np[~hot].sum(), g_np[hot].sum()], rtol=1e-6)


def test_create_connected_onehot_op_from_the_bindings() -> None:
    """``createConnectedOp_OnehotOp({0: indices, 1: depth, 2: values}, {0: out}, opid, axis,
    settings)`` builds the op PopXL's function builds; a negative axis counts from the end
    of the output; a depth that is not a constant is refused at ``setup()``, leaving the
    graph as it was."""
    ir = popxl.Ir()
    g = ir._pb_ir.getMainGraph()
    g.addConstInit("idx", _ir.TensorInfo(_ir.DataType.INT32, [2, 3]), IDX)
    g.addConstInit("depth", _ir.TensorInfo(_ir.DataType.INT32, []), np.array(4, np.int32))
    g.addVarInit("vals", _ir.TensorInfo(_ir.DataType.FLOAT, [2]), VALUES)
    with ir.main_graph:  # a depth computed on the device: no value at setup()
        computed = ops.identity(popxl.constant(np.array(4, np.int32), popxl.int32), "cdepth")
    opid = _ir.OperatorIdentifier("ai.onnx", "OneHot", 11, _ir.NumInputs(3, 3), 1)
    make = g.createConnectedOp_OnehotOp
    op = make({0: "idx", 1: "depth", 2: "vals"}, {0: "oh"}, opid, -2, _ir.Settings(g, "oh"))
    assert op.getAxis() == 1 and op.outShape(0) == [2, 4, 3]
    assert [op.inId(i) for i in range(3)] == ["idx", "depth", "vals"]
    n_ops = len(g.getOps())
    with pytest.raises(PopartException, match="depth \\(input 1\\) must be a one-element constant"):
        make({0: "idx", 1: computed.id, 2: "vals"}, {0: "bad"}, opid, 0, _ir.Settings(g, "bad"))
    assert len(g.getOps()) == n_ops and not g.hasTensor("bad")
    with pytest.raises(PopartException, match="OnehotOp takes 3 inputs"):
        make({0: "idx", 1: "depth"}, {0: "bad"}, opid, 0, _ir.Settings(g, "bad"))
    assert len(g.getOps()) == n_ops and not g.hasTensor("bad")
    out = popxl.Tensor._from_pb_tensor(g.getTensor("oh"))
    (got,) = _run(ir, out)
    np.testing.assert_array_equal(got, _onehot_np(IDX, 4, VALUES, 1))
