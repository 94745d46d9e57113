"""PopXL's IR bindings (``popart._internal.ir``) read against Tremula's IR: the op classes
and op types (as PopXL's own tests check them), the handles PopXL objects carry and the
private constructors popxl-addons calls, patterns, regions, and what Tremula does not bind
(``NotImplementedError`` naming binding and method)."""

from __future__ import annotations

import numpy as np
import pytest

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from popxl.transforms.autodiff import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from tremula.errors import PopartException


def contains_op_of_type(op_type: str, cls: type, graph: popxl.Graph) -> bool:
    """PopXL's test helper (tests/unittests/python/popxl/ops/utils.py), as written there."""
    return any(op.opType() == op_type and isinstance(op, cls) for op in graph._pb_graph.getOps())


def test_module_is_popart_internal_ir() -> None:
    import popart._internal.ir.op.exchange as exchange
    import tremula.popxl._ir as tremula_ir
    from popart._internal import ir
    from popart._internal.ir import Op, Tensor, TopoCons  # popxl-addons' repeat_graph

    assert ir is _ir is tremula_ir
    assert exchange is _ir.op.exchange
    assert (Op, Tensor, TopoCons) == (_ir.Op, _ir.Tensor, _ir.TopoCons)


@pytest.mark.parametrize(
    "build, op_type, cls",
    [
        (lambda a, b: ops.add(a, b), "Add", "AddOp"),
        (lambda a, b: ops.add_(a, b), "AddLhsInplace", "AddLhsInplaceOp"),
        (lambda a, b: ops.sub(a, b), "Sub", "SubtractOp"),
        (lambda a, b: ops.mul(a, b), "Mul", "MulOp"),
        (lambda a, b: ops.div(a, b), "Div", "DivOp"),
        (lambda a, b: ops.matmul(a, b), "MatMul", "MatMulOp"),
        (lambda a, b: ops.negate(a), "Neg", "NegateOp"),
        (lambda a, b: ops.relu(a), "Relu", "ReluOp"),
        (lambda a, b: ops.relu_(a), "ReluInplace", "ReluInplaceOp"),
        (lambda a, b: ops.softmax(a, 1), "Softmax", "SoftmaxOp"),
        (lambda a, b: ops.reshape(a, (4,)), "Reshape", "ReshapeOp"),
        (lambda a, b: ops.transpose(a), "Transpose", "TransposeOp"),
        (lambda a, b: ops.sum(a), "ReduceSum", "ReduceSumOp"),
        (lambda a, b: ops.cast(a, popxl.float16), "Cast", "CastOp"),
        (lambda a, b: ops.gelu(a), "Gelu", "GeluOp"),
        (lambda a, b: ops.var_updates.accumulate_(a, b), "Accumulate", "AccumulateOp"),
    ],
)
def test_op_classes_and_types_as_popxl_tests_check_them(build, op_type, cls) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(np.ones((2, 2), np.float32))
        b = popxl.variable(np.ones((2, 2), np.float32))
        build(a, b)
    assert contains_op_of_type(op_type, getattr(_ir.op, cls), g)
    assert not contains_op_of_type(op_type, _ir.op.CallOp, g)


def test_control_and_exchange_ops() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = popxl.variable(np.ones(3, np.float32))
        sub = ir.create_graph(lambda t: t + 1, x)
        ops.call(sub, x)
        ops.repeat(sub, 3, x)
        ops.init((2,), popxl.float32)
        ops.host_store(popxl.d2h_stream((3,), popxl.float32), x)
        with popxl.ipu(0):
            y = x + 0
        y.copy_to_ipu(1, 0)
    assert contains_op_of_type("Call", _ir.op.CallOp, g)
    assert contains_op_of_type("Loop", _ir.op.LoopOp, g)
    assert contains_op_of_type("Init", _ir.op.InitOp, g)
    assert contains_op_of_type("HostStore", _ir.op.exchange.HostStoreOp, g)
    assert contains_op_of_type("IpuCopy", _ir.op.IpuCopyOp, g)
    assert issubclass(_ir.op.CallOp, _ir.op.SubgraphOp) and issubclass(_ir.op.LoopOp, _ir.Op)
    assert issubclass(_ir.op.exchange.HostLoadOp, _ir.op.exchange.ExchangeBaseOp)
    assert issubclass(_ir.op.AccumulateOp, _ir.op.VarUpdateOp)
    assert "CallOp" in dir(_ir.op) and "HostLoadOp" in dir(_ir.op.exchange)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchOp'"):
        _ir.op.NoSuchOp  # noqa: B018


def test_op_records_are_the_binding_ops() -> None:
    """What graphs hold, hooks receive and call sites name are the binding ops."""
    ir = popxl.Ir()
    seen: list = []
    with ir.main_graph:
        ir.main_graph.register_op_created_hook(seen.append)
        x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
        sub = ir.create_graph(lambda t: t * 2, x)
        info = ops.call_with_info(sub, x)
    assert isinstance(info._op, _ir.op.CallOp)
    assert seen[-1] is info._op and ir.main_graph._pb_graph.getOps() == seen
    op = info._op
    assert op.getCalledGraphs()[0] == sub._pb_graph == op.getCalledGraph()
    assert op.inTensor(0) == x._pb_tensor and op.inId(0) == "x" and op.hasInputTensor(x._pb_tensor)
    assert op.inIndex(x._pb_tensor) == 0 and op.opInToSubgraphInIndex(0) == 0
    out = info.outputs[0]
    assert op.outTensor(0)._t is out and op.getOutputIndexMap() == {0: out._pb_tensor}
    assert op.getVirtualGraphId() == 0 and op.opType() == "Call" and op.str() == f"{op.id} (Call)"
    with pytest.raises(PopartException, match="no input tensor at index 3"):
        op.inTensor(3)


def test_handles_and_private_constructors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32), name="x")
        sub = ir.create_graph(lambda t: (t + 1, t * 2), x)
        (a, _b) = ops.call(sub, x)
    pb_ir, pb_g, pb_t = ir._pb_ir, sub._pb_graph, x._pb_tensor
    assert pb_ir is ir._pb_ir and popxl.Ir._from_pb(pb_ir) is ir
    assert popxl.Graph._from_pb(pb_g) is sub and popxl.Tensor._from_pb_tensor(pb_t) is x
    assert (
        pb_ir.getMainGraph() == ir.main_graph._pb_graph
        and pb_ir.getMainGraph().id == _ir.GraphId("")
    )
    assert pb_g in pb_ir.getAllGraphs() and pb_ir.getGraph(pb_g.id) == pb_g
    assert pb_g.id.str() == sub.name and str(pb_g.id) == sub.name
    assert pb_g.getInputIds() == [sub.inputs[0].id] and pb_g.getInputIndex(sub.inputs[0].id) == 0
    assert pb_g.getOutputId(1) == sub.outputs[1].id and pb_g.getOutputIndex(sub.outputs[1].id) == 1
    assert popxl.Tensor._from_pb_tensor(pb_g.getOutputTensor(0)) is sub.outputs[0]
    assert popxl.Tensor._from_pb_tensor(pb_g.getInputTensor(0)) is sub.inputs[0]
    assert ir.main_graph._pb_graph.getCalledGraphs() == [pb_g]
    t = a._pb_tensor
    assert t.hasProducer() and isinstance(t.getProducer(), _ir.op.CallOp)
    assert not pb_t.hasProducer() and pb_t.getGraph() == ir.main_graph._pb_graph
    assert (
        pb_t.info.shape() == [2, 3]
        and pb_t.info.nelms() == 6
        and pb_t.tensorType() == _ir.TensorType.Variable
    )
    assert [op.opType() for op in pb_t.consumers.getOps()] == ["Call"]
    with pytest.raises(PopartException, match="No producer for tensor x"):
        pb_t.getProducer()
    with pytest.raises(PopartException, match="No Ir::Tensor with TensorId 'nope'"):
        pb_g.getTensor("nope")


def test_schedule_is_creation_order() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        y = x + 1
        x += 2
        _ = y * 3
    sched = ir.main_graph._pb_graph.getOpSchedule(True)
    assert [op.opType() for op in sched] == ["Add", "AddLhsInplace", "Mul"]
    assert sched == ir.main_graph._pb_graph.getOps()


def test_grad_graph_info_from_pb_round_trip() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32))
        fwd = ir.create_graph(lambda t: ops.sin(t) * t, x)
        info = popxl.transforms.autodiff(fwd)
    pb = info._pb_bwd_info
    assert isinstance(pb, _ir.BwdGraphInfo) and pb.bwdGraphId == info.graph._pb_graph.id
    assert [ec.fwdId for ec in pb.expectedInputs] == [t.id for t in info.inputs]
    again = GradGraphInfo._from_pb(ir._pb_ir, fwd._pb_graph, pb)
    assert again.graph is info.graph and again.forward_graph is fwd
    assert again.expected_inputs == info.expected_inputs
    assert again.expected_outputs == info.expected_outputs
    ec = info.expected_outputs[0]
    assert ec._pb_ec == _ir.ExpectedConnection(fwd.inputs[0].id, _ir.ExpectedConnectionType.FwdGrad)
    assert ExpectedConnection._from_pb(fwd._pb_graph, ec._pb_ec) == ec
    assert _ir.ExpectedConnectionType.Fwd is ExpectedConnectionType.Fwd
    with pytest.raises(PopartException, match="TensorId 'nope'"):
        ExpectedConnection._from_pb(
            fwd._pb_graph, _ir.ExpectedConnection("nope", ExpectedConnectionType.Fwd)
        )
    with pytest.raises(TypeError, match="ExpectedConnectionType"):
        _ir.ExpectedConnection("x", "Fwd")


def test_recursive_autodiff_flag() -> None:
    """A graph marked not recursively differentiable is refused where autodiff would
    differentiate it on the way (popxl-addons marks graphs with their own grad graph)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32))
        inner = ir.create_graph(lambda t: t * t, x)
        outer = ir.create_graph(lambda t: ops.call(inner, t)[0] + 1, x)
    inner._pb_graph.setCanBeRecursivelyAutodiffed(False)
    assert not inner._pb_graph.canBeRecursivelyAutodiffed()
    with pytest.raises(PopartException, match="marked as unsafe to autodiff"):
        popxl.transforms.autodiff(outer)
    inner_info = popxl.transforms.autodiff(inner)
    info = popxl.transforms.autodiff(outer, called_graphs_grad_info={inner: inner_info})
    assert info.graph.outputs


def test_patterns_and_session_options() -> None:
    P = _ir.patterns
    default = P.Patterns(P.PatternsLevel.Default)
    assert default.isPatternEnabled("PreUniRepl") and default.isInPlaceEnabled()
    assert not P.Patterns(P.PatternsLevel.NoPatterns).isPatternEnabled("PreUniRepl")
    assert P.Patterns(P.PatternsLevel.All).isPatternEnabled("SplitGather")
    assert not P.Patterns(P.PatternsLevel.Minimal).isPatternEnabled("PostNRepl")
    assert P.Patterns(["SumToAdd"]).enabledPatterns() == ["SumToAdd"]
    with pytest.raises(ValueError, match="unknown pattern 'Nope'"):
        P.Patterns(["Nope"])
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32))
        g = ir.create_graph(lambda t: t * 3, x)
        ops.call(g, x)
    ops_before = [op.opType() for op in g._pb_graph.getOps()]
    ir._pb_ir.setPatterns(default)
    assert ir._pb_ir.getPatterns() is default
    for pb_g in ir._pb_ir.getAllGraphs():
        ir._pb_ir.applyPreAliasPatterns(pb_g)
        ir._pb_ir.applyInplacePattern(pb_g)
    assert [op.opType() for op in g._pb_graph.getOps()] == ops_before
    opts = ir._pb_ir.getSessionOptions()
    assert opts is ir._pb_ir.getSessionOptions() and opts.numIOTiles == 0
    assert opts.enableReplicatedGraphs and opts.replicatedGraphCount == 2
    assert opts.enableExplicitMainLoops and opts.useHostCopyOps
    opts.numIOTiles = 32
    assert ir._pb_ir.getSessionOptions().numIOTiles == 32
    with pytest.raises(PopartException, match="not a graph of this Ir"):
        ir._pb_ir.applyPreAliasPatterns(popxl.Ir().main_graph._pb_graph)


def test_regions() -> None:
    R = _ir.view.Region
    full, empty = R.getFull((2, 3)), R.getEmpty(2)
    assert full.nelms() == 6 and not full.isEmpty() and empty.isEmpty() and empty.rank() == 2
    assert R.getFull(()).nelms() == 1 and R.getEmpty(0).isEmpty()
    assert R([0, 1], [2, 3]).nelms() == 4 and full != empty
    with pytest.raises(ValueError, match="differ in rank"):
        R([0], [1, 2])


def test_modified_regions_by_ops() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32))
        sub = ir.create_graph(lambda t: t * 2, x)
        with sub:
            v = sub.inputs[0]
            view = v.reshape_((4,))
            ops.var_updates.accumulate_(view, popxl.constant(np.ones(4, np.float32)))
    pb_v = v._pb_tensor
    (full,) = pb_v.modifiedRegionsByOps(sub._pb_graph.getOps())
    assert full == _ir.view.Region.getFull((2, 2))
    (none,) = pb_v.modifiedRegionsByOps(
        [op for op in sub._pb_graph.getOps() if op.opType() == "Mul"]
    )
    assert none.isEmpty()


def test_unsupported_bindings_name_binding_and_method() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        y = x + 1
        call = ops.call_with_info(ir.create_graph(lambda t: t, x), x)._op
    with pytest.raises(NotImplementedError, match=r"popart._internal.ir.Ir.dotCheckpoint is not"):
        ir._pb_ir.dotCheckpoint()
    with pytest.raises(NotImplementedError, match=r"ir.Graph.removeIsolatedTensors"):
        ir.main_graph._pb_graph.removeIsolatedTensors(True, True, True, True)
    with pytest.raises(NotImplementedError, match=r"ir.Op.getGradOps"):
        y._pb_tensor.getProducer().getGradOps()
    with pytest.raises(NotImplementedError, match=r"ir.Tensor.anyAlias"):
        x._pb_tensor.anyAlias()
    op = y._pb_tensor.getProducer()
    assert not hasattr(op, "getCalledGraph")  # PopART binds no such method on AddOp
    assert hasattr(call, "getCalledGraph")


def _bindings() -> dict[str, object]:
    """One object of each binding class that has unsupported methods."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        y = x + 1
        body = ir.create_graph(lambda t: t * 2, x)
        loop = ops.repeat_with_info(body, 2, x)._op
        then = ir.create_graph(lambda t: t + 1, x)
        cond = ops.conditional(popxl.constant(True), then, then, [x], [x])
        cond_op = cond[0]._pb_tensor.getProducer()
    session = popxl.Session(ir, "ipu_model")
    return {
        "Ir": ir._pb_ir,
        "Graph": ir.main_graph._pb_graph,
        "TopoCons": ir.main_graph._pb_graph.topoCons(),
        "Tensor": x._pb_tensor,
        "Op": y._pb_tensor.getProducer(),
        "LoopOp": loop,
        "IfOp": cond_op,
        "Session": session._pb_session,
    }


@pytest.fixture(scope="module")
def bindings() -> dict[str, object]:
    return _bindings()


#: PopART's names (python/popart._internal.ir/bindings/*.cpp, popart.cpp) Tremula lacks
POPART_ONLY = [
    ("Op", "getSettings"),
    ("Op", "getPipelineStage"),
    ("Op", "isIpuCopyOp"),
    ("Op", "getDebugInfo"),
    ("Op", "getGradOps"),
    ("LoopOp", "getSettings"),  # inherited from Op
    ("LoopOp", "removeLoopInput"),
    ("IfOp", "opInToSubgraphInIndex"),
    ("Tensor", "isWeightTensor"),
    ("Tensor", "setReplicatedStreamMode"),
    ("Graph", "copyFrom"),
    ("Graph", "getLiveSets"),
    ("Ir", "setDataFlow"),
    ("Ir", "dotCheckpoint"),
    ("Session", "getCycleCount"),
]


@pytest.mark.parametrize(("cls", "name"), POPART_ONLY)
def test_popart_methods_tremula_lacks_raise_not_implemented(bindings, cls, name) -> None:
    """NotImplementedError naming the binding and the method; hasattr says no (the error is
    also an AttributeError) and getattr with a default gives the default."""
    obj = bindings[cls]
    owner = "Op" if (cls, name) == ("LoopOp", "getSettings") else cls
    with pytest.raises(NotImplementedError, match=rf"popart._internal.ir.{owner}.{name} is not "):
        getattr(obj, name)()
    assert not hasattr(obj, name)
    assert getattr(obj, name, "default") == "default"


@pytest.mark.parametrize(
    ("cls", "name"),
    [
        ("Op", "getSetings"),
        ("Tensor", "isWeight"),
        ("Graph", "addInputs"),
        ("Ir", "logIR"),
        ("Session", "getCycles"),
        ("TopoCons", "after"),
        ("Op", "getCalledGraph"),
    ],
)
def test_names_popart_does_not_bind_raise_attribute_error(bindings, cls, name) -> None:
    """Typos, and names PopART binds on other classes only, are plain AttributeErrors."""
    obj = bindings[cls]
    with pytest.raises(AttributeError, match=name) as info:
        getattr(obj, name)
    assert not isinstance(info.value, NotImplementedError)
    assert not hasattr(obj, name)


def test_the_unsupported_table_lists_no_method_tremula_has(bindings) -> None:
    from tremula.popxl._ir.unsupported import UNSUPPORTED

    assert set(UNSUPPORTED) == set(bindings)
    for cls, names in UNSUPPORTED.items():
        have = {n for k in type(bindings[cls]).__mro__ for n in vars(k)}
        assert not have & set(names), (cls, sorted(have & set(names)))


def test_tensor_virtual_graph_and_tile_set() -> None:
    """A tensor's virtual graph and tile set are its producer's, else its first
    consumer's (what PopXL's ``Tensor.ipu`` reads through
    ``getVirtualGraphIdAndTileSetUnsafe``); ``-1`` and ``TileSet.Undefined`` for a tensor no
    op touches, for which the safe forms raise."""
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        lone = popxl.variable(np.ones(2, np.float32))
        with popxl.ipu(1):
            y = v + 1
        with popxl.io_tiles():
            z = ops.io_tile_copy(y)
    assert (y._pb_tensor.getVirtualGraphId(), y._pb_tensor.hasVirtualGraphId()) == (1, True)
    assert v._pb_tensor.getVirtualGraphIdAndTileSet() == (1, _ir.TileSet.Compute)
    assert z._pb_tensor.getVirtualGraphIdAndTileSet() == (0, _ir.TileSet.IO)
    pb_lone = lone._pb_tensor
    assert not pb_lone.hasVirtualGraphId() and pb_lone.getVirtualGraphIdUnsafe() == -1
    assert pb_lone.getVirtualGraphIdAndTileSetUnsafe() == (-1, _ir.TileSet.Undefined)
    with pytest.raises(PopartException, match="does not have one"):
        pb_lone.getVirtualGraphId()
    assert pb_lone.getProducerUnsafe() is None
    assert y._pb_tensor.getProducerUnsafe() == y._pb_tensor.getProducer()


def test_views_do_not_keep_their_objects_alive() -> None:
    """An Ir whose Ir, graph and tensor views were asked for is freed with its last
    reference (the views live on their objects, not in a global table), and each object
    has one view."""
    import gc
    import weakref

    def build() -> weakref.ref:
        ir = popxl.Ir()
        with ir.main_graph:
            y = popxl.variable(np.zeros((64, 64), np.float32)) + 1
        assert ir._pb_ir is ir._pb_ir and y._pb_tensor is y._pb_tensor
        assert ir.main_graph._pb_graph is ir.main_graph._pb_graph
        assert popxl.Ir._from_pb(_ir.Ir()) is not None  # made through the bindings too
        return weakref.ref(ir)

    ref = build()
    gc.collect()
    assert ref() is None
