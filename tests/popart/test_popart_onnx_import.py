"""ONNX files Tremula did not write (PyTorch exports made by ``data/make_models.py``) run in
an inference session with onnxruntime's outputs, and train when a loss is added."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tremula_tests_popart_helpers import ipu, replicated

import popart

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize(
    ("name", "shape"), [("mlp", (8, 16)), ("cnn", (2, 1, 8, 8)), ("recurrent", (5, 2, 4))]
)
def test_matches_onnxruntime(name: str, shape: tuple[int, ...]) -> None:
    path = str(DATA / f"{name}.onnx")
    x = np.random.default_rng(0).standard_normal((3, *shape)).astype(np.float32)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = np.stack([ref.run(None, {"x": xb})[0] for xb in x])
    session = popart.InferenceSession(path, popart.DataFlow(3, ["y"]), ipu())  # file name
    session.prepareDevice()
    session.weightsFromHost()
    out = session.initAnchorArrays()
    session.run(popart.PyStepIO({"x": x}, out))  # three batches per step
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)


def test_imported_mlp_trains() -> None:
    """The exported MLP (log-softmax output) extended with PopART's nllloss trains with
    replication 2; its loss falls."""
    b = popart.Builder(str(DATA / "mlp.onnx"))
    labels = b.addInputTensor(popart.TensorInfo("INT32", [8]), "labels")
    loss = b.aiGraphcore.nllloss(["y", labels], popart.ReductionType.Mean,
                                 inputIsLogProbability=True)  # fmt: skip
    session = popart.TrainingSession(
        b.getModelProto(), popart.DataFlow(1, [loss]), loss, popart.ConstSGD(0.2), ipu(2),
        userOptions=replicated(2),
    )  # fmt: skip
    session.prepareDevice()
    session.weightsFromHost()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    y = (x[..., 0] > 0).astype(np.int32) + 2 * (x[..., 1] > 0)
    out = session.initAnchorArrays()
    losses = []
    for _ in range(15):
        session.run(popart.PyStepIO({"x": x, labels: y}, out))
        losses.append(float(out[loss].mean()))
    assert losses[-1] < 0.5 * losses[0]


def test_unknown_dimension_needs_input_shape_info() -> None:
    import onnx

    model = onnx.load(str(DATA / "mlp.onnx"))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    proto = model.SerializeToString()
    with pytest.raises(popart.popart_exception, match=r"popart\.InputShapeInfo"):
        popart.InferenceSession(proto, popart.DataFlow(1, ["y"]), ipu())
    info = popart.InputShapeInfo()
    info.add("x", popart.TensorInfo("FLOAT", [4, 16]))
    session = popart.InferenceSession(proto, popart.DataFlow(1, ["y"]), ipu(), info)
    assert session.initAnchorArrays()["y"].shape == (4, 10)
