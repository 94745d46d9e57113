"""ONNX checkpoints (spec section 3): ``modelToHost`` writes grouped initialisers ``[G, ...]``
with the replication factor and comm-group metadata; the file opens with ``onnx.load`` and
passes the checker; ``resetHostWeights`` reads it into a new session; bad models are refused
without changing the session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from tremula_tests_popart_helpers import ipu, replicated

import popart
from popart import CommGroup, CommGroupType, VariableRetrievalMode, VariableSettings

R = 4


def _model(embed: bool) -> tuple[bytes, str, str, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    a0 = rng.standard_normal((2, 3, 3)).astype(np.float32)  # Consecutive 2: 2 groups
    c0 = rng.standard_normal((3, 3)).astype(np.float32)  # All
    cons = VariableSettings(CommGroup(CommGroupType.Consecutive, 2),
                            VariableRetrievalMode.AllReplicas)  # fmt: skip
    a = b.addInitializedInputTensor(a0, cons, "a")
    c = b.addInitializedInputTensor(c0, "c")
    y = b.aiOnnx.matmul([b.aiOnnx.matmul([x, a]), c])
    loss = b.aiGraphcore.l1loss([y], 0.5, popart.ReductionType.Sum)
    if embed:
        b.embedReplicationFactor(R)
    return b.getModelProto(), x, loss, a0, c0


def _train(model: bytes, x: str, loss: str, steps: int = 2) -> popart.TrainingSession:
    s = popart.TrainingSession(model, popart.DataFlow(1, [loss]), loss,
                               popart.SGD({"defaultLearningRate": (0.1, True),
                                           "defaultMomentum": (0.5, True)}),
                               ipu(R), userOptions=replicated(R))  # fmt: skip
    s.prepareDevice()
    s.weightsFromHost()
    rng = np.random.default_rng(1)
    anchors = s.initAnchorArrays()
    for _ in range(steps):
        s.run(popart.PyStepIO({x: rng.standard_normal((R, 2, 3)).astype(np.float32)}, anchors))
    return s


def _weights(s: popart.TrainingSession) -> dict[str, np.ndarray]:
    s.weightsToHost()
    bufs = {"a": np.zeros((4, 3, 3), np.float32), "c": np.zeros((3, 3), np.float32)}
    s.readWeights(popart.PyWeightsIO(bufs))
    return bufs


def test_model_to_host_round_trip(tmp_path: Path) -> None:
    model, x, loss, a0, _ = _model(embed=True)
    s = _train(model, x, loss)
    trained = _weights(s)
    assert not np.allclose(trained["a"][0], a0[0])
    path = str(tmp_path / "checkpoint.onnx")
    s.modelToHost(path)
    saved = onnx.load(path)
    onnx.checker.check_model(saved)
    inits = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}
    np.testing.assert_array_equal(inits["a"], trained["a"][[0, 2]])  # one per group
    np.testing.assert_array_equal(inits["c"], trained["c"])
    assert "Accl___a" in inits  # the optimizer state is saved too
    meta = {p.key: p.value for p in saved.metadata_props}
    assert meta["__replicationFactor"] == str(R)
    assert (meta["__comm_group_type/a"], meta["__comm_group_size/a"]) == ("1", "2")
    assert meta["__variable_settings/a"] == "2"
    # a new session from the original model takes the checkpoint's weights
    fresh = _train(model, x, loss, steps=0)
    fresh.resetHostWeights(path)
    fresh.weightsFromHost()
    after = _weights(fresh)
    np.testing.assert_array_equal(after["a"], trained["a"])
    np.testing.assert_array_equal(after["c"], trained["c"])
    # and a session made from the checkpoint itself keeps its grouping
    again = _train(Path(path).read_bytes(), x, loss, steps=0)
    np.testing.assert_array_equal(_weights(again)["a"], trained["a"])


def test_reset_host_weights_errors(tmp_path: Path) -> None:
    model, x, loss, _a0, c0 = _model(embed=True)
    s = _train(model, x, loss, steps=0)
    other = onnx.load_model_from_string(model)
    other.graph.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), "stranger"))
    with pytest.raises(popart.popart_exception) as info:
        s.resetHostWeights(other.SerializeToString())
    assert info.value.args[0] == "resetWeights, no tensor 'stranger' in tensors"
    s.resetHostWeights(other.SerializeToString(), True)  # ignored with the flag
    bad = onnx.load_model_from_string(model)
    for i, t in enumerate(bad.graph.initializer):
        if t.name == "c":
            bad.graph.initializer[i].CopyFrom(
                numpy_helper.from_array(np.ones((3, 4), np.float32), "c")
            )
    with pytest.raises(popart.popart_exception) as info:
        s.resetHostWeights(bad.SerializeToString())
    assert info.value.args[0] == (
        "Trying to reset weights using tensor with non matching tensor info. Tensor ID: c"
    )
    s.weightsFromHost()
    np.testing.assert_array_equal(_weights(s)["c"], c0)  # unchanged by the failed calls


def test_without_replication_factor_group_axis_is_not_read() -> None:
    """Without ``__replicationFactor`` the initialisers must have the replica shape, so a
    grouped checkpoint is refused (spec 3.4)."""
    model, x, loss, _, _ = _model(embed=False)
    s = _train(model, x, loss, steps=0)
    with pytest.raises(popart.popart_exception, match=r"non matching tensor info\. Tensor ID: a"):
        s.resetHostWeights(model)
