"""Sessions: anchors (spec 1.5 examples), input layouts and checks, weights IO layouts
(spec 2.6 to 2.8), ``constantWeights`` and the errors of bad input."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_popart_helpers import infer, ipu, replicated

import popart
from popart import CommGroup, CommGroupType, VariableRetrievalMode, VariableSettings

OPG, ALLR = VariableRetrievalMode.OnePerGroup, VariableRetrievalMode.AllReplicas


def _identity_model() -> tuple[bytes, str, str]:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [1]), "x")
    y = b.aiOnnx.identity([x])
    return b.getModelProto(), x, y


@pytest.mark.parametrize(
    ("art", "want"),
    [
        (popart.AnchorReturnType("EVERYN", 4), [[4.0], [8.0]]),
        (popart.AnchorReturnType("FINAL"), [8.0]),
        (popart.AnchorReturnType("SUM"), [36.0]),
        (popart.AnchorReturnType("ALL"), [[float(i)] for i in range(1, 9)]),
    ],
)
def test_anchor_return_types(art: popart.AnchorReturnType, want: list) -> None:
    model, x, y = _identity_model()
    data = np.arange(1, 9, dtype=np.float32).reshape(8, 1)
    out = infer(model, {x: data}, [y], art=art, bps=8)
    np.testing.assert_array_equal(out[y], want)


@pytest.mark.parametrize(
    ("art", "want"),
    [
        (popart.AnchorReturnType("EVERYN", 2), [[[3.0], [4.0]], [[7.0], [8.0]]]),
        (popart.AnchorReturnType("FINAL"), [[7.0], [8.0]]),
        (popart.AnchorReturnType("SUM"), [[16.0], [20.0]]),
    ],
)
def test_anchor_return_types_replicated(art: popart.AnchorReturnType, want: list) -> None:
    model, x, y = _identity_model()
    data = np.arange(1, 9, dtype=np.float32).reshape(4, 2, 1)
    out = infer(model, {x: data}, [y], art=art, bps=4, userOptions=replicated(2))
    np.testing.assert_array_equal(out[y], want)


def test_anchor_and_dataflow_errors() -> None:
    cases = [
        (lambda: popart.AnchorReturnType("LAST"), "Invalid anchor return type ID supplied: LAST"),
        (lambda: popart.AnchorReturnType("EVERYN"), "Must specify return period with option"),
        (lambda: popart.AnchorReturnType("EVERYN", 0), "Anchor return period must be greater"),
        (lambda: popart.AnchorReturnType("ALL", 2), "A return period should not be supplied"),
        (lambda: popart.DataFlow(0, ["y"]), "'Batches per step' must be greater than zero"),
        (lambda: popart.DataFlow(2, {"y": popart.AnchorReturnType("EVERYN", 4)}),
         "Return period must be <= to the number of batches per step"),
        (lambda: popart.DataFlow(6, {"y": popart.AnchorReturnType("EVERYN", 4)}),
         "Return period must be a factor of the number of batches per step"),
    ]  # fmt: skip
    for fn, message in cases:
        with pytest.raises(popart.popart_exception) as info:
            fn()
        assert info.value.args[0].startswith(message)
    art = popart.AnchorReturnType("all")
    assert art.id() == popart.AnchorReturnTypeId.All
    df = popart.DataFlow(3, ["a", "b"])
    assert (df.nAnchors(), df.batchesPerStep(), df.isAnchored("b")) == (2, 3, True)


def test_anchor_shapes() -> None:
    model, x, y = _identity_model()
    opts = replicated(2)
    session = popart.InferenceSession(
        model, popart.DataFlow(4, {y: popart.AnchorReturnType("EVERYN", 2)}), ipu(2),
        userOptions=opts,
    )  # fmt: skip
    assert session.initAnchorArrays()[y].shape == (2, 2, 1)
    assert session.getInfo(x).shape() == [1]


def _two_layer() -> tuple[bytes, str, str, np.ndarray]:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    wid = b.addInitializedInputTensor(w, "w")
    y = b.aiOnnx.matmul([x, wid])
    return b.getModelProto(), x, y, w


def test_input_checks() -> None:
    model, x, y, _ = _two_layer()
    session = popart.InferenceSession(model, popart.DataFlow(2, [y]), ipu())
    session.prepareDevice()
    session.weightsFromHost()
    out = session.initAnchorArrays()
    with pytest.raises(popart.popart_exception, match=f"No tensor {x} provided in PyStepIO's"):
        session.run(popart.PyStepIO({}, out))
    with pytest.raises(popart.popart_exception) as info:
        session.run(popart.PyStepIO({x: np.zeros((2, 2, 2), np.float32)}, out))
    assert info.value.args[0].startswith(
        f"Unexpected number of input elements for Tensor {x}. Expected 12, but received 8."
    )
    with pytest.raises(popart.popart_exception) as info:
        session.run(popart.PyStepIO({x: np.zeros((2, 2, 3), np.float64)}, out))
    assert info.value.args[0] == (
        f"Type discrepancy for tensor {x}. User provided : DOUBLE and expected : FLOAT. "
        "Consider a custom copy here (as memcpy cannot be used)"
    )
    # a flat array of the right element count is accepted (only the count is checked)
    session.run(popart.PyStepIO({x: np.ones(12, np.float32)}, out))
    np.testing.assert_allclose(out[y], np.ones((2, 2, 3)) @ (np.arange(12).reshape(3, 4) / 10),
                               rtol=1e-6)  # fmt: skip


def test_model_errors() -> None:
    model, _x, y, _ = _two_layer()
    with pytest.raises(popart.popart_exception, match="Anchor tensor 'nope' is not in the model"):
        popart.InferenceSession(model, popart.DataFlow(1, ["nope"]), ipu())
    b = popart.Builder()
    t = b.addInputTensor(popart.TensorInfo("FLOAT", [4]), "t")
    out = b.aiOnnx.nonzero([t])  # a data-dependent shape of a device value: refused
    with pytest.raises(popart.popart_exception, match=r"NonZero node .*computed on the device"):
        popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, [out]), ipu())
    from onnx import TensorProto, helper  # an op no rule converts

    graph = helper.make_graph(
        [helper.make_node("Unique", ["u"], ["v"], name="uniq")], "g",
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None)],
    )  # fmt: skip
    unique = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(popart.popart_exception, match=r"Unique node 'uniq'.*ai.onnx.Unique is not"):
        popart.InferenceSession(unique.SerializeToString(), popart.DataFlow(1, ["v"]), ipu())
    with pytest.raises(popart.popart_exception, match="neither a file nor a serialized ONNX"):
        popart.InferenceSession(b"not a model", popart.DataFlow(1, [out]), ipu())
    opts = popart.SessionOptions()
    opts.replicatedGraphCount = 2
    with pytest.raises(popart.popart_exception, match="enableReplicatedGraphs is false, but"):
        popart.InferenceSession(model, popart.DataFlow(1, [y]), ipu(2), userOptions=opts)


def _grouped_model(settings: VariableSettings, init: np.ndarray) -> tuple[bytes, str, str]:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [3, 5]), "x")
    w = b.addInitializedInputTensor(init, settings, "w")
    y = b.aiOnnx.add([x, w])
    return b.getModelProto(), x, y


def _grouped_session(settings: VariableSettings, init: np.ndarray, R: int = 4, **kw):
    model, x, y = _grouped_model(settings, init)
    opts = replicated(R, **kw)
    session = popart.InferenceSession(model, popart.DataFlow(1, [y]), ipu(R), userOptions=opts)
    session.prepareDevice()
    return session, x, y


@pytest.mark.parametrize("mode", [OPG, ALLR])
def test_grouped_weights_round_trip(mode: VariableRetrievalMode) -> None:
    """Spec 2.7: after weightsFromHost and weightsToHost, OnePerGroup returns the
    initialiser, AllReplicas ``buffer[r] == initializer[group_of(r)]``; each replica adds its
    own group's value."""
    R = 4
    vs = VariableSettings(CommGroup(CommGroupType.Consecutive, 2), mode)
    init = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    session, x, y = _grouped_session(vs, init, R)
    session.weightsFromHost()
    out = session.initAnchorArrays()
    xs = np.zeros((R, 3, 5), np.float32)
    session.run(popart.PyStepIO({x: xs}, out))
    np.testing.assert_array_equal(out[y], init[[0, 0, 1, 1]])
    session.weightsToHost()
    buf = np.zeros([vs.numReplicasReturningVariable(R), 3, 5], np.float32)
    session.readWeights(popart.PyWeightsIO({"w": buf}))
    np.testing.assert_array_equal(buf, init if mode == OPG else init[[0, 0, 1, 1]])


def test_orthogonal_groups_receive_their_rows() -> None:
    R = 4
    vs = VariableSettings(CommGroup(CommGroupType.Orthogonal, 2))
    init = np.stack([np.full((3, 5), 10.0), np.full((3, 5), 20.0)]).astype(np.float32)
    session, x, y = _grouped_session(vs, init, R, constantWeights=False)
    session.weightsFromHost()
    out = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.zeros((R, 3, 5), np.float32)}, out))
    np.testing.assert_array_equal(out[y][:, 0, 0], [10.0, 20.0, 10.0, 20.0])  # r % (R / k)


def test_weights_io_errors() -> None:
    vs = VariableSettings(CommGroup(CommGroupType.Consecutive, 2), OPG)
    init = np.zeros((2, 3, 5), np.float32)
    session, _, _ = _grouped_session(vs, init, constantWeights=False)
    session.weightsFromHost()
    session.weightsToHost()
    with pytest.raises(popart.popart_runtime_error) as info:
        session.readWeights(popart.PyWeightsIO({"w": np.zeros((2, 3, 5), np.float64)}))
    assert info.value.args[0] == (
        "sizes (in bytes) of src (120) and dst (240) differ in hostStreamToHost for w"
    )
    with pytest.raises(popart.popart_exception, match="not c-contiguous"):
        popart.PyWeightsIO({"w": np.zeros((5, 3, 2), np.float32).T})
    with pytest.raises(popart.popart_internal_exception) as info:
        session.writeWeights(popart.PyWeightsIO({"w": np.zeros((4, 3, 5), np.float32)}))
    assert info.value.args[0] == (
        "The shape of the MutableVoidData for IO does not not match the expected write "
        "region of this tensor. Tensor Write (3): [2, 3, 5] != MutableVoidData (3): [4, 3, 5]"
    )
    with pytest.raises(popart.popart_exception, match=r"\['v'\] are not weights"):
        session.writeWeights(popart.PyWeightsIO({"v": np.zeros(1, np.float32)}))
    # the failed calls changed nothing: a good write then reads back
    new = np.arange(30, dtype=np.float32).reshape(2, 3, 5)
    session.writeWeights(popart.PyWeightsIO({"w": new}))
    session.weightsFromHost()
    session.weightsToHost()
    buf = np.zeros((2, 3, 5), np.float32)
    session.readWeights(popart.PyWeightsIO({"w": buf}))
    np.testing.assert_array_equal(buf, new)


def test_group_shape_errors() -> None:
    vs = VariableSettings(CommGroup(CommGroupType.Consecutive, 2))
    model, _, y = _grouped_model(vs, np.zeros((3, 3, 5), np.float32))
    with pytest.raises(popart.popart_internal_exception) as info:
        popart.InferenceSession(model, popart.DataFlow(1, [y]), ipu(4), userOptions=replicated(4))
    assert info.value.args[0] == (
        'Return mismatch with possibly appended outer dimension (3) of Tensor: "w". should '
        "match numGroups: 2"
    )
    vs3 = VariableSettings(CommGroup(CommGroupType.Consecutive, 3))
    model, _, y = _grouped_model(vs3, np.zeros((1, 3, 5), np.float32))
    with pytest.raises(popart.popart_exception, match=r"group size 3 .* does not divide .* 4"):
        popart.InferenceSession(model, popart.DataFlow(1, [y]), ipu(4), userOptions=replicated(4))
    # forgetting enableReplicatedGraphs: the group count is computed for 1 replica
    model, _, y = _grouped_model(vs, np.zeros((2, 3, 5), np.float32))
    opts = popart.SessionOptions()
    opts.replicatedGraphCount = 4
    with pytest.raises(popart.popart_exception):
        popart.InferenceSession(model, popart.DataFlow(1, [y]), ipu(4), userOptions=opts)


def test_constant_weights() -> None:
    model, _x, y, w = _two_layer()
    session = popart.InferenceSession(model, popart.DataFlow(1, [y]), ipu())
    session.prepareDevice()
    with pytest.raises(popart.popart_exception) as info:
        session.writeWeights(popart.PyWeightsIO({"w": w}))
    assert info.value.args[0].startswith("Cannot call writeWeights when constantWeights is set.")
    with pytest.raises(popart.popart_exception, match="Cannot call resetHostWeights when"):
        session.resetHostWeights(model)
    buf = np.zeros_like(w)
    session.weightsToHost()
    session.readWeights(popart.PyWeightsIO({"w": buf}))  # a constant is not a weight: skipped
    assert not buf.any()


def test_profiles_through_engine_options(tmp_path) -> None:
    """``engineOptions`` reach the Poplar engine: autoReport writes the profiles of a PopART
    run, and they pass the validator."""
    import gc
    import json

    from tremula.profile import validate

    model, x, y, _ = _two_layer()
    opts = popart.SessionOptions()
    opts.engineOptions = {"autoReport.all": "true", "autoReport.directory": str(tmp_path)}
    session = popart.InferenceSession(model, popart.DataFlow(1, [y]), ipu(), userOptions=opts)
    session.prepareDevice()
    session.weightsFromHost()
    out = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.ones((2, 3), np.float32)}, out))
    assert "cycles" in session.getSummaryReport(resetProfile=False).lower()
    del session  # as in Poplar, the execution profile is written when the engine goes
    gc.collect()
    graph = json.loads((tmp_path / "graph.json").read_text())
    execution = json.loads((tmp_path / "execution.json").read_text())
    validate(graph, execution)
    assert execution["simulation"]["cycles"] > 0


def test_broadcast_input() -> None:
    """An input with ``ReplicatedStreamMode.Broadcast`` takes one value for every replica."""
    b = popart.Builder()
    settings = popart.InputSettings(replicatedStreamMode=popart.ReplicatedStreamMode.Broadcast)
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2]), settings, "x")
    y = b.aiOnnx.identity([x])
    data = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)  # [bps, shape]: no replica axis
    out = infer(b.getModelProto(), {x: data}, [y], bps=2, userOptions=replicated(2))
    np.testing.assert_array_equal(out[y], np.stack([data, data], axis=1))
