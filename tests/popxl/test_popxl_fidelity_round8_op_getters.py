"""Round 8 of PopXL fidelity, ``popart._internal.ir``: the attribute getters of PopART's op
classes, as PopXL's op tests read them after finding ``_ir.op.<X>Op`` by type
(``tremula/popxl/_ir/op/getters.py``).

Confidence that PopART / PopXL behave so, per test: *high* where the C++ getter's name and
meaning are PopART's public op headers' (``op/softmax.hpp`` ``getAxis``, ...), *medium*
where it rests on how PopXL names its ops (``_get_op_settings``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popart
import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from tremula.errors import PopartException

F32 = np.float32


def _built(build: Callable[[dict[str, Any]], Any]) -> Any:
    """Build one op with ``build(tensors)`` in a fresh Ir; the op (the producer of what
    ``build`` returns)."""
    ir = popxl.Ir()
    with ir.main_graph:
        t = {
            "x": popxl.variable(np.ones((4, 6), F32), name="x"),
            "seed": popxl.variable(np.array([1, 2], np.uint32), name="seed"),
            "i": popxl.variable(np.array([0, 2], np.int32), name="i"),
            "off": popxl.variable(np.array([1], np.uint32), name="off"),
        }
        out = build(t)
    out = out[0] if isinstance(out, (tuple, list)) else out
    return out._pb_tensor.getProducer()


def _ones(n: int) -> Any:
    return popxl.constant(np.ones(n, F32))


# (build, PopART class, {getter: what PopART gives}); negative axes come back resolved
# against the input, as PopART's setup() resolves them (high confidence)
GETTERS = [
    (lambda t: ops.softmax(t["x"], axis=-1), "SoftmaxOp", {"getAxis": 1}),
    (lambda t: ops.concat([t["x"], t["x"]], axis=-2), "ConcatOp", {"getAxis": 0}),
    (lambda t: ops.concat_([t["x"], t["x"]], axis=1), "ConcatInplaceOp", {"getAxis": 1}),
    (lambda t: ops.transpose(t["x"]), "TransposeOp", {"getPerm": [1, 0]}),
    (lambda t: ops.transpose_(t["x"], (1, 0)), "TransposeInplaceOp", {"getPerm": [1, 0]}),
    (lambda t: ops.reshape(t["x"], (3, 8)), "ReshapeOp", {"getOutShape": [3, 8]}),
    (
        lambda t: ops.cast(t["x"], popxl.float16),
        "CastOp",
        {"toDataType": _ir.DataType.FLOAT16},
    ),
    (
        lambda t: ops.gather(t["x"], t["i"], axis=-1, available_memory_proportion=0.3),
        "GatherOp",
        {"getAxis": 1, "getAvailableMemoryProportion": 0.3, "zeroOutOfRangeIndices": False},
    ),
    (
        lambda t: ops.gather(t["x"], t["i"], zero_OOR=True),
        "GatherOp",
        {"getAvailableMemoryProportion": None, "zeroOutOfRangeIndices": True},
    ),
    (
        lambda t: ops.dynamic_slice(t["x"], t["off"], axes=[1], sizes=[2], no_overlap=True),
        "DynamicSliceOp",
        {"getAxes": [1], "getSizes": [2], "isNotOverlapping": True},
    ),
    (
        lambda t: ops.sum(t["x"], axis=-1, keepdims=True),
        "ReduceSumOp",
        {"getAxes": [1], "getKeepDims": True},
    ),
    (lambda t: ops.mean(t["x"], axis=[0]), "ReduceMeanOp", {"getAxes": [0], "getKeepDims": False}),
    (lambda t: ops.dropout(t["x"], t["seed"], p=0.25), "DropoutOp", {"getRatio": 0.25}),
    (
        lambda t: ops.topk(t["x"], 2, axis=-1, largest=False, sorted=True),
        "TopKOp",
        {"getK": 2, "getAxis": 1, "getLargest": False, "getSorted": True},
    ),
    (
        lambda t: ops.group_norm(t["x"], _ones(6), _ones(6), num_groups=3, eps=1e-3),
        "GroupNormOp",
        {"getNumGroups": 3, "getEpsilon": pytest.approx(1e-3)},
    ),
    (
        lambda t: ops.random_uniform(t["seed"], (2,), low=-1.0, high=2.0),
        "RandomUniformOp",
        {"getLow": -1.0, "getHigh": 2.0},
    ),
    (
        lambda t: ops.random_normal(t["seed"], (2,), mean=1.0, std=3.0),
        "RandomNormalOp",
        {"getMean": 1.0, "getScale": 3.0},
    ),
    (
        lambda t: ops.scaled_add(t["x"], t["x"], a=0.5, b=2.0),
        "ScaledAddOp",
        {"getScale0": 0.5, "getScale1": 2.0},
    ),
    (lambda t: ops.clip(t["x"], -1.0, 1.0), "ClipOp", {"getClipMin": -1.0, "getClipMax": 1.0}),
    (lambda t: ops.argmax(t["x"], 1, True), "ArgMaxOp", {"getAxis": 1, "getKeepDims": 1}),
    (
        lambda t: ops.increment_mod(t["x"], 1.0, 5.0),
        "IncrementModOp",
        {"getIncrement": 1.0, "getModulus": 5.0},
    ),
    (
        lambda t: ops.nll_loss(ops.softmax(t["x"], 1), popxl.constant(np.zeros(4, np.int32)), 3),
        "NllOp",
        {
            "hasIgnoreIndex": True,
            "getIgnoreIndex": 3,
            "getReductionType": popart.ReductionType.Mean,
            "inputIsLogProbability": False,
        },
    ),
    (
        lambda t: ops.init((2, 3), popxl.float16, "z", "zero"),
        "InitOp",
        {
            "getTensorInfo": _ir.TensorInfo(_ir.DataType.FLOAT16, [2, 3]),
            "getTensorType": _ir.TensorType.ActGrad,
            "getInitType": _ir.InitType.Zero,
            "getBatchAxis": -1,
        },
    ),
    (
        lambda t: ops.init((2,), popxl.float32, "u", "undef"),
        "InitOp",
        {"getInitType": _ir.InitType.NoInit},
    ),
    (lambda t: ops.print_tensor(t["x"], "title"), "PrintTensorOp", {"getTitle": "title"}),
    (lambda t: ops.histogram(t["x"], [0.0, 1.0], True), "HistogramOp", {"getLevels": [0.0, 1.0]}),
]


@pytest.mark.parametrize(("build", "cls", "expected"), GETTERS)
def test_op_classes_read_their_attributes_as_popart_s_getters(build, cls, expected) -> None:
    """An op test finds the op by class and reads its attributes through PopART's getters
    (high confidence in the names and values: PopART's op headers)."""
    op = _built(build)
    assert isinstance(op, getattr(_ir.op, cls))
    assert {name: getattr(op, name)() for name in expected} == expected


def test_exchange_ops_name_their_buffer_and_stream() -> None:
    """``RemoteLoadOp`` / ``RemoteStoreOp.getRemoteBufferId()``, ``HostLoadOp`` /
    ``HostStoreOp.getHostStreamTensorId()`` (high confidence)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2,), F32))
        buf = popxl.RemoteBuffer((2,), popxl.float32, 2)
        ops.remote_store(buf, 1, x)
        y = ops.remote_load(buf, 0)
        s = popxl.h2d_stream((2,), popxl.float32, name="in")
        z = ops.host_load(s, "z")
    store = next(op for op in ir.main_graph._pb_graph.getOps() if op.opType() == "RemoteStore")
    assert store.getRemoteBufferId() == buf.remote_buffer_id
    assert y._pb_tensor.getProducer().getRemoteBufferId() == buf.remote_buffer_id
    assert z._pb_tensor.getProducer().getHostStreamTensorId() == s.tensor_id


def test_derived_classes_inherit_the_getters() -> None:
    """``TiedGatherOp`` is a ``GatherOp`` (op/tiedgather.hpp) and answers its getters."""
    op = _built(lambda t: ops.tied_gather(t["x"], t["i"]))
    assert isinstance(op, _ir.op.GatherOp) and type(op).__name__ == "TiedGatherOp"
    assert (op.getAxis(), op.zeroOutOfRangeIndices()) == (0, False)


def test_getters_refuse_what_the_op_does_not_have() -> None:
    """An unset ignore index and a scale given as a tensor are refused by name (PopART's
    optional access throws); an op with no such getter has no attribute (hasattr False)."""
    nll = _built(
        lambda t: ops.nll_loss(ops.softmax(t["x"], 1), popxl.constant(np.zeros(4, np.int32)))
    )
    assert not nll.hasIgnoreIndex()
    with pytest.raises(PopartException, match="getIgnoreIndex"):
        nll.getIgnoreIndex()
    sa = _built(lambda t: ops.scaled_add(t["x"], t["x"], a=popxl.constant(0.5, F32)))
    assert sa.getScale1() == 1.0
    with pytest.raises(PopartException, match="getScale0"):
        sa.getScale0()
    assert not hasattr(_built(lambda t: t["x"] + 1), "getAxis")


def test_getter_of_an_op_made_by_the_bindings_is_resolved_at_setup() -> None:
    """``createOp_SoftmaxOp(opid, -1, settings)``: ``getAxis()`` is PopART's resolved axis
    once the op is set up; before, the getter says so."""
    ir = _ir.Ir()
    g = ir.getMainGraph()
    info = _ir.TensorInfo(_ir.DataType.FLOAT, [2, 3])
    g.addVarInit("x", info, np.zeros((2, 3), F32), "x")
    opid = _ir.OperatorIdentifier("ai.onnx", "Softmax", 11, _ir.NumInputs(1, 1), 1)
    op = g.createOp_SoftmaxOp(opid, -1, _ir.Settings(g, "sm"))
    with pytest.raises(PopartException, match="setup"):
        op.getAxis()
    op.connectInTensor(0, "x")
    op.createAndConnectOutTensor(0, "y")
    op.setup()
    assert (op.getAxis(), op.name(), op.opid.type) == (1, "sm", "Softmax")
