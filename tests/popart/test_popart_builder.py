"""``popart.Builder`` writes real ONNX with PopART's ids, opsets, attributes and metadata
(spec 1.3, 3.1, 3.2)."""

from __future__ import annotations

import inspect

import numpy as np
import onnx
import pytest

import popart
from popart import CommGroup, CommGroupType, VariableRetrievalMode, VariableSettings


def test_ids_follow_popart() -> None:
    b = popart.Builder()
    info = popart.TensorInfo("FLOAT", [2, 2])
    assert [b.addInputTensor(info) for _ in range(3)] == ["input", "input/1", "input/2"]
    assert b.addInputTensor(info, "label_input_456") == "label_input_456"
    w = np.zeros((2, 2), np.float32)
    assert b.addInitializedInputTensor(w) == "init_input"
    assert b.addInitializedInputTensor(w, "w1") == "w1"
    assert b.addInitializedInputTensor(w) == "init_input/1"
    assert b.aiOnnx.matmul(["input", "w1"]) == "MatMul:0"
    assert b.aiOnnx.add(["input", "input/1"]) == "Add:0"
    assert b.aiOnnx.add(["input", "input/1"]) == "Add:0/1"
    with b.nameScope("layer"), b.nameScope("inner"):
        assert b.aiOnnx.relu(["input"]) == "layer/inner/Relu:0"
    assert b.aiOnnx.relu(["input"], "act") == "act:0"
    assert b.aiOnnx.split(["input"], 2, 0, [1, 1]) == ["Split:0", "Split:1"]
    assert b.getInputTensorIds()[:4] == ["input", "input/1", "input/2", "label_input_456"]
    assert b.isInitializer("w1") and not b.isInitializer("input")


def test_model_proto_checks_and_metadata() -> None:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    vs = VariableSettings(CommGroup(CommGroupType.Orthogonal, 2), VariableRetrievalMode.AllReplicas)
    w = b.addInitializedInputTensor(np.ones((2, 2, 4), np.float32), vs, "w")
    y = b.aiOnnx.matmul([x, b.aiOnnx.constant(np.ones((3, 4), np.float32))])
    loss = b.aiGraphcore.l1loss([b.aiOnnx.add([y, w])], 0.1)
    b.addOutputTensor(loss)
    b.embedReplicationFactor(4)
    model = onnx.load_model_from_string(b.getModelProto())
    onnx.checker.check_model(model)
    assert model.ir_version == 4
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 10), ("ai.graphcore", 1)}
    meta = {p.key: p.value for p in model.metadata_props}
    assert (meta["__comm_group_type/w"], meta["__comm_group_size/w"]) == ("2", "2")
    assert meta["__variable_settings/w"] == "2" and meta["__replicationFactor"] == "4"
    assert {"__tile_set/x", "__exchange_strategy/x", "__debug_id/input/w"} <= set(meta)
    init = {t.name: t for t in model.graph.initializer}["w"]
    assert list(init.dims) == [2, 2, 4]  # the group axis is kept
    node = model.graph.node[-1]
    assert (node.op_type, node.domain) == ("L1", "ai.graphcore")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["lambda"] == pytest.approx(0.1) and attrs["reduction"] == b"Mean"
    assert "__debug_info_id" in attrs
    assert b.getTensorShape(w) == [2, 2, 4]
    assert b.getTensorShape(y) == [2, 4]
    assert b.getTensorShape(loss) == []
    assert b.getTensorDtypeString(y) == "float32"


def test_opsets() -> None:
    b = popart.Builder()
    b.aiOnnxOpset8  # noqa: B018 - selecting defines the version
    with pytest.raises(RuntimeError) as info:
        b.aiOnnxOpset10  # noqa: B018
    assert str(info.value) == (
        "Invalid opset 'aiOnnxOpset10' selected. Opset for domain ai.onnx already defined as 8"
    )
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4]))
    b.aiOnnx.relu([x])
    model = onnx.load_model_from_string(b.getModelProto())
    assert model.ir_version == 3 and model.opset_import[0].version == 8
    sig = inspect.signature(popart.Builder().aiOnnx.gemm)
    assert list(sig.parameters) == ["args", "alpha", "beta", "transA", "transB", "debugContext"]
    assert popart.Builder().aiOnnx.maxpool.__name__ == "maxpool"


def test_initializer_errors_and_attributes() -> None:
    b = popart.Builder()
    with pytest.raises(popart.popart_exception) as info:
        b.addInitializedInputTensor(np.zeros((2, 3)))
    assert info.value.args[0] == "Unsupported data type for initialized data (DOUBLE   [2 3])"
    with pytest.raises(popart.popart_exception, match="not initialised using a `popart::Comm"):
        b.addInitializedInputTensor(np.zeros(2, np.float32), VariableSettings(1, 2, 0))
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]))
    with pytest.raises(popart.popart_exception, match="'nope' is not a tensor of this Builder"):
        b.aiOnnx.add([x, "nope"])
    y = b.aiOnnx.matmul([x, x])
    with pytest.raises(popart.popart_exception, match=r"^availableMemoryProportion must be in"):
        b.setAvailableMemoryProportion(y, 1.5)
    b.setAvailableMemoryProportion(y, 0.3)
    assert b.getFloatNodeAttribute("__available_memory", [y]) == pytest.approx(0.3)
    with b.virtualGraph(1), b.pipelineStage(2):
        z = b.aiOnnx.relu([y])
    assert b.getInt64NodeAttribute("__ipu_number", [z]) == 1
    assert b.getPipelineStage([z]) == 2
    b.addNodeAttribute("custom", [1, 2], {z})
    assert b.getInt64VectorNodeAttribute("custom", [z]) == [1, 2]
    with b.commGroup(popart.CommGroupType.Consecutive, 2):
        r = b.aiGraphcore.replicatedallreduce([z])
    assert b.getInt64VectorNodeAttribute("__collectiveCommGroup", [r]) == [1, 2]
    assert b.reshape_const(b.aiOnnx, [z], [4]) == "Reshape:0"
    assert b.getTensorShape("Reshape:0") == [4]


def test_builder_reads_a_model() -> None:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    b.aiOnnx.relu([x])
    again = popart.Builder(b.getModelProto())
    assert again.getInputTensorIds() == ["x"]
    assert again.aiOnnx.relu([x]) == "Relu:0/1"


def _run(proto: bytes, feeds: dict, anchors: list[str]) -> dict:
    session = popart.InferenceSession(proto, popart.DataFlow(1, anchors),
                                      popart.DeviceManager().createCpuDevice())  # fmt: skip
    session.prepareDevice()
    out = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, out))
    return out


@pytest.mark.parametrize("cond", [True, False])
def test_subgraph_builders_make_if_branches(cond: bool) -> None:
    """PopART's If: two subgraph Builders reading the parent's tensors by name
    (``addInputTensorFromParentGraph``), ``logical_if(args, num_outputs, else, then)``."""
    b = popart.Builder()
    i1 = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]), "i1")
    i2 = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]), "i2")
    c = b.addInputTensor(popart.TensorInfo("BOOL", []), "cond")
    branches = []
    for op in ("add", "sub"):
        sub = b.createSubgraphBuilder()
        sub.addInputTensorFromParentGraph(i1)
        sub.addInputTensorFromParentGraph(i2)
        sub.addOutputTensor(getattr(sub.aiOnnx, op)([i1, i2]))
        branches.append(sub)
    (out,) = b.aiOnnx.logical_if([c], 1, branches[1], branches[0])
    x, y = np.arange(4, dtype=np.float32).reshape(2, 2), np.full((2, 2), 0.5, np.float32)
    got = _run(b.getModelProto(), {i1: x, i2: y, c: np.array(cond)}, [out])[out]
    np.testing.assert_array_equal(got, x + y if cond else x - y)


def test_subgraph_builder_makes_a_loop_body() -> None:
    """PopART's Loop: a body with the iteration number, untyped condition and carried
    inputs; ``acc = acc + x + i`` five times."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    trips = b.aiOnnx.constant(np.array(5, np.int64))
    keep = b.aiOnnx.constant(np.array(True))
    body = b.createSubgraphBuilder()
    body.setGraphName("body")
    i = body.addInputTensor(popart.TensorInfo("INT64", []), "i")
    c = body.addUntypedInputTensor("c")
    acc = body.addUntypedInputTensor("acc")
    body.addInputTensorFromParentGraph(x)
    step = body.aiOnnx.add([body.aiOnnx.add([acc, x]), body.aiOnnx.cast([i], "FLOAT")])
    body.addOutputTensor(body.aiOnnx.identity([c]))
    body.addOutputTensor(step)
    (out,) = b.aiOnnx.loop([trips, keep, x], 1, body)
    xv = np.array([1.0, -2.0], np.float32)
    got = _run(b.getModelProto(), {x: xv}, [out])[out]
    np.testing.assert_array_equal(got, xv * 6 + sum(range(5)))


def test_graphcore_call_of_a_subgraph_trains() -> None:
    """``aiGraphcore.call`` of one subgraph twice (``relu(h @ w)``) and an SGD step: the
    outputs and the new ``w`` against NumPy."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 3)).astype(np.float32)
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = b.addInitializedInputTensor(w0, "w")
    sub = b.createSubgraphBuilder()
    si = sub.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    sw = sub.addInputTensor(popart.TensorInfo("FLOAT", [3, 3]))
    sub.addOutputTensor(sub.aiOnnx.relu([sub.aiOnnx.matmul([si, sw])]))
    (h1,) = b.aiGraphcore.call([x, w], 1, sub)
    (h2,) = b.aiGraphcore.call([h1, w], 1, sub)
    loss = b.aiGraphcore.l1loss([h2], 1.0, reduction=popart.ReductionType.Sum)
    cpu = popart.DeviceManager().createCpuDevice()
    session = popart.TrainingSession(
        b.getModelProto(), popart.DataFlow(1, [h2]), loss, popart.ConstSGD(0.1), cpu
    )
    session.prepareDevice()
    session.weightsFromHost()
    out = session.initAnchorArrays()
    xv = rng.standard_normal((2, 3)).astype(np.float32)
    session.run(popart.PyStepIO({x: xv}, out))
    a1 = xv @ w0
    r1 = np.maximum(a1, 0)
    a2 = r1 @ w0
    np.testing.assert_allclose(out[h2], np.maximum(a2, 0), rtol=1e-5, atol=1e-6)
    d2 = np.sign(np.maximum(a2, 0)) * (a2 > 0)  # d loss / d a2
    d1 = (d2 @ w0.T) * (a1 > 0)
    grad = r1.T @ d2 + xv.T @ d1
    session.weightsToHost()
    got = np.zeros_like(w0)
    session.readWeights(popart.PyWeightsIO({w: got}))
    np.testing.assert_allclose(got, w0 - 0.1 * grad, rtol=1e-5, atol=1e-6)


def test_a_subgraph_reads_only_tensors_of_its_parents() -> None:
    b = popart.Builder()
    sub = b.createSubgraphBuilder()
    with pytest.raises(popart.popart_exception, match="'nope' is not a tensor of an enclosing"):
        sub.addInputTensorFromParentGraph("nope")
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    with pytest.raises(popart.popart_exception, match="'x' is not a tensor of this Builder"):
        sub.aiOnnx.relu([x])  # not taken with addInputTensorFromParentGraph
