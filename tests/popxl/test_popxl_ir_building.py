"""Building an IR through ``popart._internal.ir`` alone, as PopART's binding tests and
PopXL's op functions do: ``_ir.Ir()``, ``createGraph``, ``addActGrad`` / ``addVarInit`` /
``addConstInit`` / ``addStream`` / ``addInput``, ``Tensor(id, type, graph)``, the op
factories ``createOp_<X>`` / ``createConnectedOp_<X>`` and the small binding types. What is
built is the popxl IR: a Session runs it, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import PopartException, UnsupportedBindingError

_ir = pytest.importorskip("popart._internal.ir")


def _opid(op_type: str, n_in: int = 1) -> object:
    return _ir.OperatorIdentifier("ai.onnx", op_type, 6, _ir.NumInputs(n_in, n_in), 1)


def _actgrad(g, tid: str, shape: list[int], dtype=None):
    """PopART's tests' helper: an ActGrad tensor whose info is then set."""
    g.addActGrad(tid)
    t = g.getTensor(tid)
    t.info = _ir.TensorInfo(dtype or _ir.DataType.FLOAT, shape)
    return t


def test_ir_construction_gives_a_popxl_ir_with_a_main_graph() -> None:
    ir = _ir.Ir()
    xl = popxl.Ir._from_pb(ir)
    assert isinstance(xl, popxl.Ir) and xl._pb_ir is ir
    assert ir.getMainGraph().id == _ir.GraphId("")
    assert ir.getAllGraphs() == [ir.getMainGraph()]
    assert _ir.Ir().getId() != ir.getId()


def test_create_and_remove_graphs() -> None:
    ir = _ir.Ir()
    a = ir.createGraph(_ir.GraphId("A"))
    assert ir.hasGraph(_ir.GraphId("A")) and not ir.hasGraph(_ir.GraphId("B"))
    assert ir.getGraph(_ir.GraphId("A")) == a and a.getGraphString() == "subgraph 'A'"
    assert popxl.Graph._from_pb(a).name == "A"
    with pytest.raises(PopartException, match=r"Graph\(A\) is already in Ir"):
        ir.createGraph(_ir.GraphId("A"))
    with pytest.raises(PopartException):
        ir.removeGraph(_ir.GraphId(""))
    ir.removeGraph(_ir.GraphId("A"))
    assert ir.getAllGraphs() == [ir.getMainGraph()]
    # a directly constructed Graph is of the Ir but not held by it (PopART's constructor)
    g = _ir.Graph(ir, _ir.GraphId("free"))
    assert g.id == _ir.GraphId("free") and g.getIr() == ir and not ir.hasGraph(g.id)


def test_unique_subgraph_ids_count_up() -> None:
    """PopXL names its graphs through createUniqueSubgraphId: each call gives a new id."""
    ir = _ir.Ir()
    first = ir.createUniqueSubgraphId(_ir.GraphId("f"))
    second = ir.createUniqueSubgraphId(_ir.GraphId("f"))
    assert (first.str(), second.str()) == ("f_subgraph(0)", "f_subgraph(1)")
    assert popxl.Ir._from_pb(ir).create_empty_graph("g").name == "g_subgraph(2)"


def test_intermediate_tensor_ids_count_up() -> None:
    ir = _ir.Ir()
    assert [ir.createIntermediateTensorId("x") for _ in range(2)] == ["x__t0", "x__t1"]
    assert ir.createIntermediateTensorId("y") == "y__t2"
    assert _ir.Ir().createIntermediateTensorId("x") == "x__t0"  # per Ir


def test_graph_inputs_and_outputs() -> None:
    ir = _ir.Ir()
    g = ir.createGraph(_ir.GraphId("g1"))
    info = _ir.TensorInfo(_ir.DataType.FLOAT16, [5, 5])
    for tid in ("inputA", "inputB", "inputC"):
        g.addInput(tid, info)
    assert g.getInputIds() == ["inputA", "inputB", "inputC"]
    assert g.getTensor("inputB").info == info
    assert g.getTensor("inputB").tensorType() == _ir.TensorType.ActGrad
    g.addInput(1, "inputD", info, False)
    assert g.getInputIds() == ["inputA", "inputD", "inputB", "inputC"]
    g.removeInput(1)
    g.removeInput("inputA")
    assert g.getInputIds() == ["inputB", "inputC"]
    with pytest.raises(PopartException, match="already in Tensors"):
        g.addInput("inputB", info)
    with pytest.raises(PopartException, match="removeInput"):
        g.removeInput(7)
    _actgrad(g, "t", [2])
    g.markAsInput("t")
    assert g.getInputIds() == ["inputB", "inputC", "t"]
    assert [t.id for t in popxl.Graph._from_pb(g).inputs] == ["inputB", "inputC", "t"]
    for tid in ("o1", "o2"):
        g.addActGrad(tid)
        g.markAsOutput(tid)
    g.removeOutput("o1")
    assert g.getOutputIds() == ["o2"]


def test_scopes() -> None:
    """A subgraph's scope is its id: its tensor ids are ``<graph>/<name>``."""
    ir = _ir.Ir()
    g = ir.createGraph(_ir.GraphId("g1"))
    assert _ir.addScope(g, "tensor1") == "g1/tensor1"
    assert _ir.removeScope(g, "g1/tensor1") == "tensor1"
    with pytest.raises(PopartException, match="does not start with scope g1"):
        _ir.removeScope(g, "h1/tensor1")
    assert g.getScope().str() == "g1" and ir.getMainGraph().getScope().empty()
    assert _ir.addScope(ir.getMainGraph(), "t") == "t"
    scope = _ir.Scope() / "a" / "b"
    assert (scope.str(), scope.depth()) == ("a/b", 2)
    g.addActGrad("g1/x")
    assert g.getTensors().find("x", _ir.Scope() / "g1") == "g1/x"


def test_tensors_of_each_type() -> None:
    ir = _ir.Ir()
    g = ir.getMainGraph()
    info = _ir.TensorInfo(_ir.DataType.FLOAT, [2, 3])
    data = np.arange(6, dtype=np.float64)  # converted to the info's type and shape
    g.addVarInit("v", info, data, "v")
    g.addConstInit("c", info, data, "c")
    g.addStream("s", info, "s")
    g.addActGrad("a")
    kinds = {tid: g.getTensor(tid).tensorType() for tid in ("v", "c", "s", "a")}
    assert kinds == {
        "v": _ir.TensorType.Variable,
        "c": _ir.TensorType.Const,
        "s": _ir.TensorType.Stream,
        "a": _ir.TensorType.ActGrad,
    }
    assert g.getTensor("a").info.dataType() == _ir.DataType.UNDEFINED  # not set yet
    assert "v" in g and "nope" not in g
    assert g.getTensor("v").hasTensorData() and not g.getTensor("a").hasTensorData()
    xl = popxl.Ir._from_pb(ir)
    (var,) = xl.main_graph.variables
    assert var.id == "v" and var.dtype == popxl.float32
    np.testing.assert_array_equal(var.host_data, data.reshape(2, 3))
    stream_tensor = popxl.Tensor._from_pb_tensor(g.getTensor("s"))
    stream = popxl.HostToDeviceStream._from_tensor(stream_tensor)
    assert (stream.tensor_id, stream.shape) == ("s", (2, 3))
    tensors = g.getTensors()
    assert tensors.getIds(_ir.TensorType.Const) == ["c"] and tensors.n() == 4
    both = tensors.getOfType([_ir.TensorType.Const, _ir.TensorType.Variable])
    assert [t.id for t in both] == ["v", "c"]
    tensors.remove("a")
    assert not tensors.contains("a")
    with pytest.raises(PopartException, match="3 elements"):
        g.addConstInit("bad", info, [1.0, 2.0, 3.0], "bad")
    with pytest.raises(PopartException, match="main graph only"):
        ir.createGraph(_ir.GraphId("sub")).addVarInit("w", info, data, "w")


def test_tensor_constructed_directly() -> None:
    """``Tensor(id, type, graph)`` is of the graph but not held by it; ``clone`` gives
    ``clone_<id>`` with the same info; the type can be set."""
    ir = _ir.Ir()
    g = ir.createGraph(_ir.GraphId("g"))
    for kind in _ir.TensorType:
        t = _ir.Tensor("t", kind, g, _ir.DebugContext("t"))
        assert (t.tensorType(), t.tensor_type(), t.id) == (kind, kind.name, "t")
        assert t.getGraph() == g and t.getIr() == ir and not g.hasTensor("t")
    t = _ir.Tensor("t0", _ir.TensorType.ActGrad, g)
    t.info = _ir.TensorInfo(_ir.DataType.INT32, [3, 4])
    clone = t.clone(g)
    assert (clone.id, clone.info, clone.tensorType()) == ("clone_t0", t.info, t.tensorType())
    t.setTensorType(_ir.TensorType.Variable)
    assert t.tensorType() == _ir.TensorType.Variable
    info = _ir.TensorInfo()
    assert (info.dataType(), info.shape(), info.nbytes()) == (_ir.DataType.UNDEFINED, [], 0)
    info.set(_ir.DataType.FLOAT16, [4])
    assert (info.data_type(), info.nbytes(), str(info)) == ("FLOAT16", 8, "FLOAT16 [4]")


def test_operator_identifiers_and_settings() -> None:
    opid = _ir.OperatorIdentifier("ai.onnx", "Add", 7, _ir.NumInputs(2, 2), 1)
    assert (opid.domain, opid.type, opid.version, opid.numOutputs) == ("ai.onnx", "Add", 7, 1)
    assert (opid.numInputs.min, opid.numInputs.max) == (2, 2)
    assert opid == _ir.OperatorIdentifier("ai.onnx", "Add", 7)  # domain, type, version
    assert opid != _ir.OperatorIdentifier("ai.onnx", "Add", 6)
    assert (_ir.NumInputs().min, _ir.NumInputs(3).max) == (0, 3)
    ir = _ir.Ir()
    info = _ir.DebugInfo(_ir.DebugContext("dc"), "popxl")
    assert (info.name, info.layer, info.setValue("k", 1), info.values) == (
        "dc",
        "popxl",
        True,
        {"k": 1},
    )
    s = _ir.Settings(ir.getMainGraph(), "s")
    assert s.name == "s" and s.graph == ir.getMainGraph() and s.vgraphId is None


@pytest.mark.parametrize(
    ("cls", "op_type"),
    [("ReluOp", "Relu"), ("NegateOp", "Neg"), ("ExpOp", "Exp"), ("IdentityOp", "Identity")],
)
def test_create_op_then_connect(cls: str, op_type: str) -> None:
    ir = _ir.Ir()
    main = ir.getMainGraph()
    in0 = _actgrad(main, "in0", [1])
    out0 = _actgrad(main, "out0", [1])
    op = getattr(main, f"createOp_{cls}")(_opid(op_type), _ir.Settings(main, "new_settings"))
    assert isinstance(op, getattr(_ir.op, cls)) and op.opType() == op_type
    assert (op.name(), op.opid, op.getGraph()) == ("new_settings", _opid(op_type), main)
    assert main.getOps() == [op] and not op.hasInput(0)
    op.connectInTensor(0, in0.id)
    op.connectOutTensor(0, out0.id)
    op.setup()
    assert (op.inTensor(0), op.outTensor(0), out0.getProducer()) == (in0, out0, op)
    assert in0.consumers.getOps() == [op]


def test_create_connected_ops_and_run_them() -> None:
    """``createConnectedOp_<X>(ins, outs, opid, settings)`` connects, makes the outputs and
    sets them up (broadcasting as the op does); the Ir runs, matching NumPy."""
    ir = _ir.Ir()
    main = ir.getMainGraph()
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    row = np.array([1.0, -2.0, 3.0], np.float32)
    main.addVarInit("v", _ir.TensorInfo(_ir.DataType.FLOAT, [2, 3]), data, "v")
    main.addConstInit("c", _ir.TensorInfo(_ir.DataType.FLOAT, [3]), row, "c")
    settings = _ir.Settings(main, "mul")
    mul = main.createConnectedOp_MulOp({0: "v", 1: "c"}, {0: "y"}, _opid("Mul", 2), settings)
    assert main.getTensor("y").info == _ir.TensorInfo(_ir.DataType.FLOAT, [2, 3])
    assert mul.getInputTensors() == [main.getTensor("v"), main.getTensor("c")]
    # in-place binary ops are made from settings alone, as PopART's
    settings = _ir.Settings(main, "add")
    add = main.createConnectedOp_AddLhsInplaceOp({0: "y", 1: "c"}, {0: "z"}, settings)
    assert add.opType() == "AddLhsInplace" and isinstance(add, _ir.op.AddLhsInplaceOp)
    # ONNX's variadic Sum (PopART's SumOp): the left fold of its inputs, broadcast
    opid = _ir.OperatorIdentifier("ai.onnx", "Sum", 8, _ir.NumInputs(1, -1), 1)
    total = main.createConnectedOp_SumOp({0: "z", 1: "c", 2: "v"}, {0: "s"}, opid, settings)
    assert total.opType() == "Sum" and isinstance(total, _ir.op.SumOp)
    assert main.getTensor("s").info == _ir.TensorInfo(_ir.DataType.FLOAT, [2, 3])
    xl = popxl.Ir._from_pb(ir)
    with xl.main_graph:
        z = popxl.Tensor._from_pb_tensor(main.getTensor("s"))
        d2h = popxl.d2h_stream(z.shape, z.dtype)
        ops.host_store(d2h, z)
    with popxl.Session(xl, "ipu_model") as session:
        out = session.run()[d2h]
    assert out.tobytes() == (((data * row + row) + row) + data).tobytes()


def test_subgraph_built_through_the_bindings_is_called() -> None:
    ir = _ir.Ir()
    sub = ir.createGraph(_ir.GraphId("sub"))
    sub.addInput(_ir.addScope(sub, "x"), _ir.TensorInfo(_ir.DataType.FLOAT, [2]))
    sub.createConnectedOp_NegateOp({0: "sub/x"}, {0: "sub/y"}, _opid("Neg"), _ir.Settings(sub, "n"))
    sub.markAsOutput("sub/y")
    xl = popxl.Ir._from_pb(ir)
    with xl.main_graph:
        x = popxl.variable(np.array([1.0, -2.0], np.float32))
        (y,) = ops.call(popxl.Graph._from_pb(sub), x)
        d2h = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(d2h, y)
    with popxl.Session(xl, "ipu_model") as session:
        np.testing.assert_allclose(session.run()[d2h], [-1.0, 2.0])


def test_op_factories_refuse_what_they_cannot_make() -> None:
    ir = _ir.Ir()
    main = ir.getMainGraph()
    _actgrad(main, "a", [2])
    settings = _ir.Settings(main, "x")
    # an unknown input: nothing is left behind
    with pytest.raises(PopartException, match="nope"):
        main.createConnectedOp_AddOp({0: "a", 1: "nope"}, {0: "c"}, _opid("Add", 2), settings)
    assert main.getOps() == [] and not main.hasTensor("c")
    # PopART constructor attributes are not mapped onto Tremula's ops
    with pytest.raises(UnsupportedBindingError, match="BatchNormOp are not mapped"):
        main.createConnectedOp_BatchNormOp(
            {0: "a"}, {0: "s"}, _opid("BatchNormalization"), 1e-5, 0.9, 1, False, settings
        )
    assert main.getOps() == []
    # settings of another graph, and classes of no op
    other = ir.createGraph(_ir.GraphId("g"))
    with pytest.raises(PopartException, match="another graph"):
        main.createOp_ReluOp(_opid("Relu"), _ir.Settings(other, "r"))
    assert not hasattr(main, "createOp_NoSuchOp")
    # an existing output tensor is taken from its producer
    first = main.createConnectedOp_ReluOp({0: "a"}, {0: "o"}, _opid("Relu"), settings)
    second = main.createConnectedOp_ReluOp({0: "a"}, {0: "o"}, _opid("Relu"), settings)
    assert main.getTensor("o").getProducer() == second and not first.hasOutput(0)


def test_popxl_made_ops_have_no_opid() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        y = popxl.variable(1.0) + 1
    with pytest.raises(UnsupportedBindingError, match=r"Op\.opid"):
        y._pb_tensor.getProducer().opid  # noqa: B018


def test_bwd_graph_info_and_expected_connections() -> None:
    fwd = _ir.ExpectedConnection("a", _ir.ExpectedConnectionType.Fwd)
    grad = _ir.ExpectedConnection("b", _ir.ExpectedConnectionType.FwdGrad)
    assert (fwd.fwdId, fwd.type) == ("a", _ir.ExpectedConnectionType.Fwd)
    assert fwd == _ir.ExpectedConnection("a", _ir.ExpectedConnectionType.Fwd) != grad
    info = _ir.BwdGraphInfo(_ir.GraphId("bwd"), [fwd], [grad])
    assert info.bwdGraphId == _ir.GraphId("bwd")
    assert (info.expectedInputs, info.expectedOutputs) == ([fwd], [grad])


def test_ops_take_the_settings_of_the_popxl_context() -> None:
    """PopXL's op functions make ops with ``Context._get_op_settings(name)``: the op gets
    its name, virtual IPU and tile set; ``_ir.Settings`` fields do the same."""
    from popxl.context import get_current_context

    ir = popxl.Ir()
    pb = ir.main_graph._pb_graph
    with ir.main_graph, popxl.ipu(1), popxl.io_tiles():
        x = popxl.variable(np.ones(2, np.float32), name="x")
        settings = get_current_context()._get_op_settings("relu")
        op = pb.createConnectedOp_ReluOp({0: x.id}, {0: "r"}, _opid("Relu"), settings)
    assert (op.name(), op.getVirtualGraphId(), op.settings.tileSet) == ("relu", 1, _ir.TileSet.IO)
    own = _ir.Settings(pb, "own")
    own.vgraphId, own.tileSet = 2, _ir.TileSet.IO
    op = pb.createConnectedOp_ReluOp({0: x.id}, {0: "r2"}, _opid("Relu"), own)
    assert (op.getVirtualGraphId(), op.settings.tileSet) == (2, _ir.TileSet.IO)
    assert popxl.Tensor._from_pb_tensor(op.outTensor(0)).ipu == 2
