"""The constructor arguments of PopART's op classes through ``Graph.createConnectedOp_<X>``
(``tremula/popxl/_ir/constructors.py``): positional in the C++ constructor's order, around
the settings, or as keywords (PopXL's ``_to=``); resolved against the inputs at ``setup()``
as PopART's ops resolve them (a negative axis, an empty permutation, a 0 or -1 in a shape).
Each built program runs and is checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import PopartException

_ir = pytest.importorskip("popart._internal.ir")


def _opid(op_type: str, n_in: int = 1) -> object:
    return _ir.OperatorIdentifier("ai.onnx", op_type, 1, _ir.NumInputs(n_in, n_in), 1)


def _var(g, tid: str, arr: np.ndarray) -> None:
    g.addVarInit(tid, _ir.TensorInfo(_ir.DataType.FLOAT, list(arr.shape)), arr, tid)


def _run(ir, tid: str) -> np.ndarray:
    xl = popxl.Ir._from_pb(ir)
    with xl.main_graph:
        y = popxl.Tensor._from_pb_tensor(ir.getMainGraph().getTensor(tid))
        d2h = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(d2h, y)
    with popxl.Session(xl, "ipu_model") as session:
        return session.run()[d2h]


def test_softmax_with_a_negative_axis() -> None:
    ir = _ir.Ir()
    g = ir.getMainGraph()
    x = np.random.default_rng(0).random((2, 3)).astype(np.float32)
    _var(g, "x", x)
    op = g.createConnectedOp_SoftmaxOp(
        {0: "x"}, {0: "y"}, _opid("Softmax"), -1, _ir.Settings(g, "s")
    )
    assert op.attrs["axis"] == 1
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(ir, "y"), e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_transpose_reshape_concat_cast() -> None:
    ir = _ir.Ir()
    g = ir.getMainGraph()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _var(g, "x", x)
    s = _ir.Settings(g, "s")
    g.createConnectedOp_TransposeOp({0: "x"}, {0: "t"}, _opid("Transpose"), [], s)  # reverse
    g.createConnectedOp_ReshapeOp({0: "t"}, {0: "r"}, _opid("Reshape"), [0, -1], s)
    g.createConnectedOp_ConcatOp({0: "r", 1: "r"}, {0: "c"}, _opid("Concat", 2), -2, s)
    g.createConnectedOp_CastOp(
        {0: "c"}, {0: "i"}, _to=_ir.DataType.INT32, opid=_opid("Cast"), settings=s
    )
    assert g.getTensor("r").info.shape() == [3, 2]
    assert g.getTensor("i").info == _ir.TensorInfo(_ir.DataType.INT32, [6, 2])
    np.testing.assert_array_equal(_run(ir, "i"), np.concatenate([x.T, x.T]).astype(np.int32))


def test_init_between_the_settings() -> None:
    """``InitOp(opid, info, tensorType, initType, settings, batchAxis)``."""
    ir = _ir.Ir()
    g = ir.getMainGraph()
    info = _ir.TensorInfo(_ir.DataType.FLOAT, [2, 2])
    g.createConnectedOp_InitOp(
        {}, {0: "z"}, _opid("Init", 0), info, _ir.TensorType.ActGrad, _ir.InitType.Zero,
        _ir.Settings(g, "init"), -1,
    )  # fmt: skip
    np.testing.assert_array_equal(_run(ir, "z"), np.zeros((2, 2), np.float32))


def test_call_of_a_graph_built_through_the_bindings() -> None:
    ir = _ir.Ir()
    g, sub = ir.getMainGraph(), ir.createGraph(_ir.GraphId("sub"))
    sub.addInput("sub/x", _ir.TensorInfo(_ir.DataType.FLOAT, [2]))
    sub.createConnectedOp_ExpOp({0: "sub/x"}, {0: "sub/y"}, _opid("Exp"), _ir.Settings(sub, "e"))
    sub.markAsOutput("sub/y")
    x = np.array([0.0, 1.0], np.float32)
    _var(g, "x", x)
    op = g.createConnectedOp_CallOp({0: "x"}, {0: "y"}, _opid("Call"), sub, _ir.Settings(g, "c"))
    assert isinstance(op, _ir.op.CallOp) and op.getCalledGraphs() == [sub]
    assert op.modified == ()
    np.testing.assert_allclose(_run(ir, "y"), np.exp(x), rtol=1e-6)
    # modifiedInputsViaAttrs: the call writes its input 0
    other = g.createOp_CallOp(_opid("Call"), sub, [0], _ir.Settings(g, "c2"))
    assert other.modified == (0,)


def test_arguments_the_op_refuses() -> None:
    ir = _ir.Ir()
    g = ir.getMainGraph()
    g.addActGrad("a")
    g.getTensor("a").info = _ir.TensorInfo(_ir.DataType.FLOAT, [2, 3])
    s = _ir.Settings(g, "s")
    with pytest.raises(PopartException, match="not a permutation"):
        g.createConnectedOp_TransposeOp({0: "a"}, {0: "t"}, _opid("Transpose"), [0, 0], s)
    with pytest.raises(PopartException, match="cannot reshape"):
        g.createConnectedOp_ReshapeOp({0: "a"}, {0: "t"}, _opid("Reshape"), [4], s)
    with pytest.raises(PopartException, match="out of range"):
        g.createConnectedOp_SoftmaxOp({0: "a"}, {0: "t"}, _opid("Softmax"), 2, s)
    with pytest.raises(TypeError, match="missing"):
        g.createConnectedOp_SoftmaxOp({0: "a"}, {0: "t"}, _opid("Softmax"), s)
    with pytest.raises(TypeError, match="unexpected"):
        g.createConnectedOp_SoftmaxOp({0: "a"}, {0: "t"}, _opid("Softmax"), s, dim=0)
    assert g.getOps() == [] and g.getTensorIds() == ["a"]


def test_ipu_copy_takes_its_source_with_its_input() -> None:
    """``IpuCopyOp(opid, destIpu, settings)``, then ``connectInTensor(0, id, sourceIpu)``
    (as PopXL's ipu_copy makes it); the copy runs on its destination."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.ipu(0):
        x = popxl.variable(np.array([1.0, 2.0], np.float32), name="x")
        y = x + 1
    pb = ir.main_graph._pb_graph
    op = pb.createOp_IpuCopyOp(_opid("IpuCopy"), 1, _ir.Settings(pb, "copy"))
    assert isinstance(op, _ir.op.IpuCopyOp) and op.getDestIpu() == 1
    op.connectInTensor(0, y.id)
    op.createAndConnectOutTensor(0, "y_on_1")
    with pytest.raises(PopartException, match="no source IPU"):
        op.setup()
    op.connectInTensor(0, y.id, 0)
    op.setup()
    assert op.getSourceIpu() == 0
    copied = popxl.Tensor._from_pb_tensor(op.outTensor(0))
    assert copied.ipu == 1 and copied.shape == (2,)
    with ir.main_graph, popxl.ipu(1):
        z = copied * 3
        d2h = popxl.d2h_stream(z.shape, z.dtype)
        ops.host_store(d2h, z)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_allclose(session.run()[d2h], [6.0, 9.0])


def test_host_load_and_store_by_stream_tensor_id() -> None:
    """``HostLoadOp(opid, settings, streamTensorId)`` / ``HostStoreOp`` (what PopXL's
    host_load and host_store make): a program streamed in and out, built through the
    bindings, runs."""
    ir = _ir.Ir()
    g = ir.getMainGraph()
    info = _ir.TensorInfo(_ir.DataType.FLOAT, [3])
    g.addStream("x_stream", info, "x_stream")
    xl = popxl.Ir._from_pb(ir)
    with xl.main_graph:
        d2h = popxl.d2h_stream((3,), popxl.float32, name="y_stream")
    s = _ir.Settings(g, "s")
    g.createConnectedOp_InitOp(
        {}, {0: "x_init"}, _opid("Init", 0), info, _ir.TensorType.ActGrad, _ir.InitType.Zero, s
    )
    g.createConnectedOp_HostLoadOp({0: "x_init"}, {0: "x"}, _opid("HostLoad"), s, "x_stream")
    g.createConnectedOp_ReluOp({0: "x"}, {0: "y"}, _opid("Relu"), s)
    store = g.createConnectedOp_HostStoreOp({0: "y"}, {}, _opid("HostStore"), s, d2h.tensor_id)
    assert isinstance(store, _ir.op.exchange.HostStoreOp)
    with pytest.raises(PopartException, match="no HostToDeviceStream of tensor 'nope'"):
        g.createConnectedOp_HostLoadOp({0: "x_init"}, {0: "x2"}, _opid("HostLoad"), s, "nope")
    h2d = popxl.HostToDeviceStream._from_tensor(
        popxl.Tensor._from_pb_tensor(g.getTensor("x_stream"))
    )
    data = np.array([-1.0, 0.5, 2.0], np.float32)
    with popxl.Session(xl, "ipu_model") as session:
        np.testing.assert_allclose(session.run({h2d: data})[d2h], np.maximum(data, 0))


def test_gather_with_popxls_keywords() -> None:
    """PopXL's gather: ``createConnectedOp_GatherOp(ins, outs, opid=..., axis_=...,
    settings=..., available_memory_proportion_=..., zeroOutOfRangeIndices_=...)``; an index
    out of range gives zeros."""
    ir = _ir.Ir()
    g = ir.getMainGraph()
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[3, 0], [1, 9]], np.int32)
    _var(g, "t", table)
    g.addConstInit("i", _ir.TensorInfo(_ir.DataType.INT32, [2, 2]), idx, "i")
    op = g.createConnectedOp_GatherOp(
        {0: "t", 1: "i"},
        {0: "y"},
        opid=_opid("Gather", 2),
        axis_=-1,
        settings=_ir.Settings(g, "gather"),
        available_memory_proportion_=0.4,
        zeroOutOfRangeIndices_=True,
    )
    assert op.attrs["axis"] == 1 and g.getTensor("y").info.shape() == [3, 2, 2]
    expected = np.where(idx < 4, np.take(table, np.clip(idx, 0, 3), axis=1), 0)
    np.testing.assert_array_equal(_run(ir, "y"), expected)
