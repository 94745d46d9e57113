"""Programs in the style of PopXL's own unit tests (``tests/unittests/python/popxl``): each
builds a graph with popxl, then inspects the IR through ``popart._internal.ir`` (``_pb_ir``,
``_pb_graph``, ``_pb_tensor``): op types and binding classes, op and tensor counts, tensor
ids, producers and consumers, called graphs, schedules, virtual graph ids. The expected
values are PopXL's (spec/popxl.md, spec/popxl-fidelity.md), not read back from Tremula."""

from __future__ import annotations

import numpy as np
import pytest

import popart
import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from popxl.transforms.autodiff import ExpectedConnectionType


def contains_op_of_type(op_type: str, cls: type, graph: popxl.Graph) -> bool:
    """PopXL's test helper (tests/unittests/python/popxl/ops/utils.py)."""
    return any(op.opType() == op_type and isinstance(op, cls) for op in graph._pb_graph.getOps())


def _ops_of(graph: popxl.Graph, cls: type) -> list:
    return [op for op in graph._pb_graph.getOps() if isinstance(op, cls)]


def _var(shape: tuple[int, ...] = (2, 3), dtype: type = np.float32, name: str | None = None):
    return popxl.variable(np.ones(shape, dtype), name=name)


# ---- binary and unary ops: counts, classes, producers --------------------------------------
def test_add_variable_and_constant() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(1)
        b = popxl.constant(2)
        c = ops.add(a, b)
    assert len(g.tensors) == 3 and len(g.variables) == 1 and len(g.constants) == 1
    assert contains_op_of_type("Add", _ir.op.AddOp, g)
    assert c._pb_tensor.hasProducer() and c._pb_tensor.getProducer().opType() == "Add"
    assert not a._pb_tensor.hasProducer()


def test_add_python_scalar_becomes_a_constant() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(1.0)
        _ = a + 1.0
    assert len(g.tensors) == 3 and len(g.constants) == 1
    assert len(g._pb_graph.getOps()) == 1


@pytest.mark.parametrize(
    "fn, op_type, cls",
    [
        (ops.sub, "Sub", "SubtractOp"),
        (ops.mul, "Mul", "MulOp"),
        (ops.div, "Div", "DivOp"),
        (ops.pow, "Pow", "PowOp"),
        (ops.fmod, "Fmod", "FmodOp"),
        (ops.maximum, "Max", "MaxOp"),
        (ops.equal, "Equal", "EqualOp"),
        (ops.greater, "Greater", "GreaterOp"),
    ],
)
def test_binary_op(fn, op_type: str, cls: str) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a, b = _var(), _var()
        c = fn(a, b)
    assert len(g.tensors) == 3 and len(g.variables) == 2
    assert contains_op_of_type(op_type, getattr(_ir.op, cls), g)
    (op,) = g._pb_graph.getOps()
    assert op.inId(0) == a.id and op.inId(1) == b.id and op.outId(0) == c.id


@pytest.mark.parametrize(
    "fn, op_type, cls",
    [
        (ops.sub_, "SubLhsInplace", "SubtractLhsInplaceOp"),
        (ops.mul_, "MulLhsInplace", "MulLhsInplaceOp"),
        (ops.div_, "DivLhsInplace", "DivLhsInplaceOp"),
    ],
)
def test_binary_inplace_op_modifies_its_lhs(fn, op_type: str, cls: str) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a, b = _var(), _var()
        fn(a, b)
    assert contains_op_of_type(op_type, getattr(_ir.op, cls), g)
    (op,) = g._pb_graph.getOps()
    assert op.modifiesIndex(0) and not op.modifiesIndex(1)


@pytest.mark.parametrize(
    "fn, op_type, cls",
    [
        (ops.exp, "Exp", "ExpOp"),
        (ops.log, "Log", "LogOp"),
        (ops.sqrt, "Sqrt", "SqrtOp"),
        (ops.sin, "Sin", "SinOp"),
        (ops.cos, "Cos", "CosOp"),
        (ops.tanh, "Tanh", "TanhOp"),
        (ops.abs, "Abs", "AbsOp"),
        (ops.gelu, "Gelu", "GeluOp"),
        (ops.swish, "Swish", "SwishOp"),
        (ops.detach, "Detach", "DetachOp"),
        (ops.isnan, "IsNaN", "IsNaN"),
        (ops.isinf, "IsInf", "IsInf"),
    ],
)
def test_unary_op(fn, op_type: str, cls: str) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = _var()
        fn(a)
    assert len(g.tensors) == 2 and len(g.variables) == 1
    assert contains_op_of_type(op_type, getattr(_ir.op, cls), g)


def test_matmul_output_info() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(np.ones((2, 3), np.float32))
        b = popxl.variable(np.ones((3, 4), np.float32))
        c = ops.matmul(a, b)
    assert contains_op_of_type("MatMul", _ir.op.MatMulOp, g)
    assert c._pb_tensor.info.shape() == [2, 4]
    assert c._pb_tensor.id == c.id


# ---- shape ops -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build, op_type, cls, shape",
    [
        (lambda t: ops.reshape(t, (3, 2)), "Reshape", "ReshapeOp", [3, 2]),
        (lambda t: ops.transpose(t), "Transpose", "TransposeOp", [3, 2]),
        (lambda t: ops.slice(t, start=0, stop=1, axis=0), "Slice", "SliceOp", [1, 3]),
        (lambda t: ops.concat([t, t], axis=0), "Concat", "ConcatOp", [4, 3]),
        (lambda t: ops.softmax(t, axis=1), "Softmax", "SoftmaxOp", [2, 3]),
        (lambda t: ops.sum(t, axis=1), "ReduceSum", "ReduceSumOp", [2]),
        (lambda t: ops.mean(t, axis=0), "ReduceMean", "ReduceMeanOp", [3]),
        (lambda t: ops.max(t), "ReduceMax", "ReduceMaxOp", []),
        (lambda t: ops.cast(t, popxl.float16), "Cast", "CastOp", [2, 3]),
    ],
)
def test_shape_op(build, op_type: str, cls: str, shape: list[int]) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        out = build(_var())
    assert contains_op_of_type(op_type, getattr(_ir.op, cls), g)
    assert out._pb_tensor.info.shape() == shape


def test_split_and_subsample_are_their_own_ops() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = _var((4, 6))
        parts = ops.split(t, 3, axis=1)
        sub = ops.subsample(t, [2, 3])
    assert contains_op_of_type("Split", _ir.op.SplitOp, g)
    (split,) = _ops_of(g, _ir.op.SplitOp)
    assert split.outTensorCount() == 3 and split.inId(0) == t.id
    assert all(p._pb_tensor.getProducer() == split for p in parts)
    assert [p._pb_tensor.info.shape() for p in parts] == [[4, 2]] * 3
    assert contains_op_of_type("Subsample", _ir.op.SubsampleOp, g)
    assert sub._pb_tensor.info.shape() == [2, 2] and len(g._pb_graph.getOps()) == 2


def test_gather_and_dynamic_slice() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = _var((4, 3))
        idx = popxl.variable(np.array([0, 2], np.int32))
        ops.gather(t, idx)
        off = popxl.variable(np.array([1], np.uint32))
        ops.dynamic_slice(t, off, axes=[0], sizes=[2], no_overlap=True)
        ops.dynamic_update_(t, off, _var((2, 3)), axes=[0], sizes=[2], no_overlap=True)
    assert contains_op_of_type("Gather", _ir.op.GatherOp, g)
    assert contains_op_of_type("DynamicSlice", _ir.op.DynamicSliceOp, g)
    assert contains_op_of_type("DynamicUpdateInplace", _ir.op.DynamicUpdateInplaceOp, g)


def test_topk_and_argmax() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = _var((2, 5))
        values, indices = ops.topk(t, 2, axis=1)
        ops.argmax(t, dim=1)
    assert contains_op_of_type("TopK", _ir.op.TopKOp, g)
    assert contains_op_of_type("ArgMax", _ir.op.ArgMaxOp, g)
    producer = values._pb_tensor.getProducer()
    assert producer == indices._pb_tensor.getProducer() and producer.outTensorCount() == 2


# ---- creation, random, nn -------------------------------------------------------------------
def test_init_op() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = ops.init((2, 2), popxl.float32, "zeros", "zero")
    assert contains_op_of_type("Init", _ir.op.InitOp, g)
    assert len(g.tensors) == 1 and t._pb_tensor.getProducer().opType() == "Init"


def test_random_ops_and_seed_split() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        seed = popxl.variable(np.array([1, 2], np.uint32), popxl.uint32)
        s0, s1 = ops.split_random_seed(seed)
        ops.random_normal(s0, (2, 2))
        ops.random_uniform(s1, (2, 2))
    assert contains_op_of_type("SplitRandomSeed", _ir.op.SplitRandomSeedOp, g)
    assert contains_op_of_type("RandomNormal", _ir.op.RandomNormalOp, g)
    assert contains_op_of_type("RandomUniform", _ir.op.RandomUniformOp, g)


def test_dropout_layer_norm_and_group_norm() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = _var((2, 4))
        w, b = _var((4,)), _var((4,))
        seed = popxl.variable(np.array([1, 2], np.uint32), popxl.uint32)
        ops.dropout(x, seed, p=0.5)
        ops.layer_norm(x, w, b)
        ops.group_norm(x, w, b, num_groups=2)
    assert contains_op_of_type("Dropout", _ir.op.DropoutOp, g)
    assert len(_ops_of(g, _ir.op.GroupNormOp)) == 2  # layer_norm is a one-group GroupNorm


def test_where_onehot_and_print() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        c = popxl.variable(np.array([True, False]), popxl.bool)
        a, b = _var((2,)), _var((2,))
        ops.where(c, a, b)
        ops.onehot(
            popxl.variable(np.array([0, 1], np.int32)),
            popxl.constant(3),
            popxl.constant(np.array([0.0, 1.0], np.float32)),
            axis=1,
        )
        ops.print_tensor(a)
    assert contains_op_of_type("Where", _ir.op.WhereOp, g)
    assert contains_op_of_type("OneHot", _ir.op.OnehotOp, g)
    assert contains_op_of_type("PrintTensor", _ir.op.PrintTensorOp, g)


# ---- var updates ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build, op_type, cls",
    [
        (lambda w, g: ops.var_updates.accumulate_(w, g), "Accumulate", "AccumulateOp"),
        (lambda w, g: ops.var_updates.copy_var_update_(w, g), "CopyVarUpdate", "CopyVarUpdateOp"),
        (
            lambda w, g: ops.var_updates.accumulator_scale_(w, 0.5),
            "AccumulatorScale",
            "AccumulatorScaleOp",
        ),
    ],
)
def test_var_update_ops(build, op_type: str, cls: str) -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        w, grad = _var(), _var()
        out = build(w, grad)
    assert contains_op_of_type(op_type, getattr(_ir.op, cls), main)
    op = out._pb_tensor.getProducer()
    assert isinstance(op, _ir.op.VarUpdateOp) and op.modifiesIndex(0)


def test_increment_mod_inplace() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        counter = popxl.variable(np.zeros((1,), np.uint32), popxl.uint32)
        ops.increment_mod_(counter, 1, 3)
    assert contains_op_of_type("IncrementModInplace", _ir.op.IncrementModInplaceOp, g)


# ---- host and remote exchange -----------------------------------------------------------------
def test_host_load_is_init_then_host_load() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        h2d = popxl.h2d_stream((2, 3), popxl.float32, "x_stream")
        x = ops.host_load(h2d, "x")
    assert contains_op_of_type("Init", _ir.op.InitOp, g)
    assert contains_op_of_type("HostLoad", _ir.op.exchange.HostLoadOp, g)
    load = x._pb_tensor.getProducer()
    assert isinstance(load, _ir.op.exchange.HostLoadOp)
    init = load.inTensor(0).getProducer()  # the tensor loaded into is the Init's output
    assert isinstance(init, _ir.op.InitOp)
    assert [op.id for op in g._pb_graph.getOpSchedule()] == [init.id, load.id]


def test_host_store() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = _var()
        d2h = popxl.d2h_stream(x.shape, x.dtype, "y_stream")
        ops.host_store(d2h, x)
    assert contains_op_of_type("HostStore", _ir.op.exchange.HostStoreOp, g)
    (store,) = _ops_of(g, _ir.op.exchange.HostStoreOp)
    assert store.inId(0) == x.id and store.outTensorCount() == 0


def test_remote_load_and_store() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        buf = popxl.remote_buffer((2, 3), popxl.float32, 2)
        x = _var()
        ops.remote_store(buf, 1, x)
        ops.remote_load(buf, 1)
    assert contains_op_of_type("RemoteStore", _ir.op.exchange.RemoteStoreOp, g)
    assert contains_op_of_type("RemoteLoad", _ir.op.exchange.RemoteLoadOp, g)
    assert all(
        isinstance(op, _ir.op.exchange.ExchangeBaseOp)
        for op in _ops_of(g, _ir.op.exchange.RemoteStoreOp)
    )


# ---- placement ------------------------------------------------------------------------------
def test_ipu_copy_and_virtual_graph_ids() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        with popxl.ipu(0):
            a = _var()
            b = a + 1
        c = b.copy_to_ipu(1)
        with popxl.ipu(1):
            d = c * 2
    assert contains_op_of_type("IpuCopy", _ir.op.IpuCopyOp, g)
    copy = c._pb_tensor.getProducer()
    assert copy.getDestIpu() == 1 and copy.getSourceIpu() == 0
    assert b._pb_tensor.getProducer().getVirtualGraphId() == 0
    assert d._pb_tensor.getProducer().getVirtualGraphId() == 1


def test_io_tile_copy() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = _var()
        with popxl.io_tiles():
            y = ops.io_tile_copy(x)
    assert contains_op_of_type("IoTileCopy", _ir.op.IoTileCopyOp, g)
    assert y._pb_tensor.getProducer().inId(0) == x.id


# ---- graphs: call, repeat, conditional ------------------------------------------------------
def test_call_graph_ids_and_io() -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        x = _var(name="x")
        sg = ir.create_graph(lambda t: t * 2, x)
        (y,) = ops.call(sg, x)
    assert contains_op_of_type("Call", _ir.op.CallOp, main)
    (call,) = _ops_of(main, _ir.op.CallOp)
    assert call.getCalledGraph().id == sg._pb_graph.id
    assert [gr.id for gr in call.getCalledGraphs()] == [sg._pb_graph.id]
    assert sg._pb_graph.getInputIds() == [t.id for t in sg.inputs]
    assert sg._pb_graph.getOutputIds() == [t.id for t in sg.outputs]
    assert all(i.startswith(sg.name + "/") for i in sg._pb_graph.getInputIds())
    assert call.inId(0) == x.id and call.outId(0) == y.id
    assert call.opInToSubgraphInIndex(0) == 0 and call.subgraphOutToOpOutIndex(0) == 0
    assert len(sg.tensors) == 3  # the input, the constant 2, the product


def test_call_with_info_maps_graph_and_parent_tensors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a, b = _var(name="a"), _var(name="b")
        sg = ir.create_graph(lambda p, q: p - q, a, b)
        info = ops.call_with_info(sg, a, b)
    assert isinstance(info._op, _ir.op.CallOp)
    assert info.called_graph == sg
    assert info.graph_to_parent(sg.inputs[1]) == b and info.parent_to_graph(a) == sg.inputs[0]
    assert info.graph_to_parent(sg.outputs[0]) == info.outputs[0]


def test_by_ref_input_is_modified_at_the_call_site() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = _var(name="w")
        sg = ir.create_empty_graph("acc")
        with sg:
            t = popxl.graph_input(w.shape, w.dtype, "t", by_ref=True)
            ops.var_updates.accumulate_(t, popxl.constant(np.ones(w.shape, np.float32)))
        info = ops.call_with_info(sg, w)
    assert t in sg._by_ref_inputs
    assert info._op.modifiesIndex(0)
    assert sg._pb_graph.getInputTensor(0).modifiedRegionsByOps(sg._pb_graph.getOps())


def test_repeat_is_a_loop_over_popxls_wrapper_graph() -> None:
    """PopXL's structure (spec/popxl-fidelity.md section 6): the Loop op calls the wrapper
    ``<id>__loop_wrapper``, with inputs ``Iterator___``, ``LoopCond___`` and the graph's
    inputs, holding a CallOp of the repeated graph; loop input k is wrapper input k, loop
    output j is wrapper output j + 1."""
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        x = _var(name="x")
        w = _var(name="w")
        body = ir.create_graph(lambda t, v: t + v, x, w)
        info = ops.repeat_with_info(body, 4, x, w)
    assert len(ir._pb_ir.getAllGraphs()) == 3  # main, body, wrapper
    (loop,) = main._pb_graph.getOps()
    assert isinstance(loop, _ir.op.LoopOp) and loop.opType() == "Loop"
    assert info._op == loop and loop.getTripCountValue() == 4
    wrapper = loop.getCalledGraph()
    assert wrapper.id.str().startswith(f"{body.name}__loop_wrapper")
    ids = wrapper.getInputIds()
    assert ids[0].endswith("Iterator___") and ids[1].endswith("LoopCond___") and len(ids) == 4
    assert wrapper.getInputTensor(0).info.shape() == [] and wrapper.getOutputId(0) == ids[1]
    (call,) = wrapper.getOps()
    assert isinstance(call, _ir.op.CallOp) and call.getCalledGraph().id == body._pb_graph.id
    assert [t.id for t in call.getInputTensors()] == ids[2:]
    assert wrapper.getOutputIds()[1:] == [call.outId(0)]
    assert sorted(loop.getInputIndexMap()) == [2, 3] and not loop.hasInput(0)
    assert loop.inId(2) == x.id and loop.inId(3) == w.id
    assert loop.opInToSubgraphInIndex(2) == 2 and loop.subgraphOutToOpOutIndex(1) == 0
    assert info.called_graph == body and info.graph_to_parent(body.inputs[1]) == w
    assert [gr.id for gr in main._pb_graph.getCalledGraphs()] == [wrapper.id]


def test_repeat_refuses_negative_count() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = _var()
        body = ir.create_graph(lambda t: t + 1, x)
        with pytest.raises(ValueError, match="Repeat count must be >= 0"):
            ops.repeat(body, -1, x)
    assert len(ir._pb_ir.getAllGraphs()) == 2 and not ir.main_graph._pb_graph.getOps()


def test_conditional_is_an_if_op() -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        x = _var()
        cond = popxl.variable(True, popxl.bool)
        then_g = ir.create_graph(lambda t: t + 1, x)
        else_g = ir.create_graph(lambda t: t - 1, x)
        ops.conditional(cond, then_g, else_g, [x], [x])
    assert contains_op_of_type("If", _ir.op.IfOp, main)
    (op,) = _ops_of(main, _ir.op.IfOp)
    assert [gr.id for gr in op.getCalledGraphs()] == [then_g._pb_graph.id, else_g._pb_graph.id]


def test_remote_code_load() -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        x = _var()
        sg = ir.create_graph(lambda t: t + 1, x)
        ops.remote_code_load(sg, "executable")
        ops.call(sg, x)
    assert contains_op_of_type("RemoteCodeLoad", _ir.op.exchange.RemoteCodeLoadOp, main)


# ---- the Ir and its graphs ------------------------------------------------------------------
def test_main_graph_handles() -> None:
    ir = popxl.Ir()
    pb_main = ir._pb_ir.getMainGraph()
    assert pb_main == ir.main_graph._pb_graph
    assert popxl.Graph._from_pb(pb_main) is ir.main_graph
    assert popxl.Ir._from_pb(ir._pb_ir) is ir
    assert ir._pb_ir.getAllGraphs() == [pb_main]


def test_graphs_are_listed_and_found_by_id() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = _var()
        sg = ir.create_graph(lambda t: t + 1, x)
    pb = sg._pb_graph
    assert pb in ir._pb_ir.getAllGraphs() and ir._pb_ir.hasGraph(pb.id)
    assert ir._pb_ir.getGraph(pb.id) == pb and pb.getIr() == ir._pb_ir
    assert main_ops_count(ir) == 0  # create_graph adds nothing to the main graph


def main_ops_count(ir: popxl.Ir) -> int:
    return len(ir._pb_ir.getMainGraph().getOps())


def test_tensor_from_pb_tensor_is_the_same_tensor() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = _var(name="a")
        b = a * 2
    pb = b._pb_tensor
    assert popxl.Tensor._from_pb_tensor(pb) is b
    assert pb.getGraph() == ir.main_graph._pb_graph
    assert ir.main_graph._pb_graph.getTensor(b.id) == pb
    assert a.id in ir.main_graph._pb_graph.getTensorIds()


def test_tensor_consumers() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = _var(name="a")
        b = a + 1
        c = a * b
    consumers = a._pb_tensor.consumers.getOps()
    assert sorted(op.opType() for op in consumers) == ["Add", "Mul"]
    assert [op.opType() for op in b._pb_tensor.consumers.getOps()] == ["Mul"]
    assert not c._pb_tensor.consumers.getOps()


def test_subgraph_tensor_ids_have_the_graph_scope() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = _var(name="x")
        sg = ir.create_graph(lambda t: t + 1, x)
    assert all(t._pb_tensor.id.startswith(f"{sg.name}/") for t in sg.tensors)
    assert all(t.name == t.id[len(sg.name) + 1 :] for t in sg.tensors)


def test_graph_input_and_output_indices() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a, b = _var(name="a"), _var(name="b")
        sg = ir.create_graph(lambda p, q: (p + q, p * q), a, b)
    pb = sg._pb_graph
    assert pb.getNumInputs() == 2 and pb.getNumOutputs() == 2
    assert pb.getInputIndex(sg.inputs[1].id) == 1 and pb.getOutputIndex(sg.outputs[1].id) == 1
    assert pb.getInputTensor(0).isGraphInput() and pb.getOutputTensor(1).isGraphOutput()
    assert pb.getInputId(0) == sg.inputs[0].id and pb.getOutputId(0) == sg.outputs[0].id


def test_schedule_follows_in_sequence() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence(True):
        a = _var()
        b = ops.exp(a)
        c = ops.sin(a)
        d = ops.cos(a)
    sched = [op.opType() for op in g._pb_graph.getOpSchedule(False)]
    assert sched == ["Exp", "Sin", "Cos"]
    first, middle, last = (t._pb_tensor.getProducer() for t in (b, c, d))
    topo = g._pb_graph.topoCons()
    assert topo.contains(first, middle) and topo.contains(middle, last)
    # PopART's TopoCons::contains: direct constraints only, not the chain through `middle`
    assert not topo.contains(first, last) and not topo.contains(last, first)
    assert middle in g._pb_graph.getOps()


def test_name_scope_names_tensors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = _var(name="a")
        with popxl.name_scope("foo"):
            b = ops.add(a, a)
    assert b.id.startswith("foo/") and b._pb_tensor.id == b.id


def test_op_created_hooks_see_binding_ops() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    seen: list = []
    with g:
        handle = g.register_op_created_hook(seen.append)
        a = _var()
        _ = a + 1
        _ = ops.relu(a)
        g.remove_op_created_hook(handle)
        _ = ops.exp(a)
    assert [op.opType() for op in seen] == ["Add", "Relu"]
    assert all(isinstance(op, _ir.Op) for op in seen)
    assert seen[0] in g._pb_graph.getOps()


def test_session_options_num_io_tiles() -> None:
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    opts.numIOTiles = 32
    assert ir._pb_ir.getSessionOptions().numIOTiles == 32


# ---- autodiff ---------------------------------------------------------------------------
def test_autodiff_grad_graph_in_the_ir() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = _var(name="x")
        w = _var(name="w")
        fwd = ir.create_graph(lambda a, b: a * b, x, w)
    info = popxl.transforms.autodiff(fwd)
    grad = info.graph
    assert grad._pb_graph in ir._pb_ir.getAllGraphs()
    assert contains_op_of_type("Mul", _ir.op.MulOp, grad)
    kinds = {c.connection_type for c in info.expected_inputs}
    assert kinds == {ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad}
    assert len(info.expected_outputs) == 2 and len(grad.outputs) == 2
    assert info.expected_outputs[0].fwd_tensor == fwd.inputs[0]


def test_replicated_all_reduce_class() -> None:
    ir = popxl.Ir()
    ir.replication_factor = 2
    g = ir.main_graph
    with g:
        x = _var()
        ops.collectives.replicated_all_reduce(x)
        ops.collectives.replicated_reduce_scatter(x)
        ops.collectives.replicated_all_gather(x)
    coll = _ir.op.collectives
    assert contains_op_of_type("ReplicatedAllReduce", coll.ReplicatedAllReduceOp, g)
    assert contains_op_of_type("ReplicatedReduceScatter", coll.ReplicatedReduceScatterOp, g)
    assert contains_op_of_type("ReplicatedAllGather", coll.ReplicatedAllGatherOp, g)
    assert len(_ops_of(g, coll.CollectivesBaseOp)) == 3


# ---- bad input -----------------------------------------------------------------------------
def test_unbound_method_names_binding_and_method() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = _var()
        b = a + 1
    op = b._pb_tensor.getProducer()
    with pytest.raises(NotImplementedError, match=r"Op.*getGradOps"):
        op.getGradOps()
    with pytest.raises(NotImplementedError, match=r"Ir.*removeIsolatedGraphs"):
        ir._pb_ir.removeIsolatedGraphs()
    with pytest.raises(NotImplementedError, match=r"Graph.*removeIsolatedTensors"):
        ir.main_graph._pb_graph.removeIsolatedTensors(True)


def test_inconsistent_edit_raises_popart_exception() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = _var((2, 3))
        b = _var((4,))
        c = a + 1
    op = c._pb_tensor.getProducer()
    with pytest.raises(popart.popart_exception):
        op.connectInTensor(0, "no_such_tensor")
    op.disconnectAllInputs()
    with pytest.raises(popart.popart_exception, match="not connected"):
        op.setup()
    op.connectInTensor(0, b.id)
    op.connectInTensor(1, a.id)
    with pytest.raises(popart.popart_exception):
        op.setup()  # (4,) + (2, 3) do not broadcast
