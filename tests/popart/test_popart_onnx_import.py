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


def _transformer_block(axis: int) -> bytes:
    """What PyTorch exports for ``gelu(layer_norm(x) @ w)`` at opset 17: LayerNormalization
    (over ``x.shape[axis:]``) and GELU as ``x * 0.5 * (1 + Erf(x / sqrt(2)))``."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    shape = [2, 3, 4]
    norm = shape[axis:]
    inits = {
        "scale": rng.uniform(0.5, 1.5, norm).astype(np.float32),
        "bias": rng.uniform(-0.5, 0.5, norm).astype(np.float32),
        "w": rng.standard_normal((4, 5)).astype(np.float32),
        "sqrt2": np.array(np.sqrt(2.0), np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    nodes = [
        helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["ln"], axis=axis),
        helper.make_node("MatMul", ["ln", "w"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["hs"]),
        helper.make_node("Erf", ["hs"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["he"]),
        helper.make_node("Mul", ["he", "half"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_layer_norm_and_erf_gelu_match_onnxruntime(axis: int) -> None:
    """LayerNormalization over the last axis of a rank-3 input (and over the last two, and
    all three) and the Erf of an exact GELU, against onnxruntime."""
    proto = _transformer_block(axis)
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32) * 3
    ref = ort.InferenceSession(proto, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    session = popart.InferenceSession(proto, popart.DataFlow(1, ["y"]), ipu())
    session.prepareDevice()
    session.weightsFromHost()
    out = session.initAnchorArrays()
    session.run(popart.PyStepIO({"x": x}, out))
    np.testing.assert_allclose(out["y"], ref[0], rtol=1e-5, atol=1e-5)


def test_erf_gelu_trains_with_the_exact_gradient() -> None:
    """One SGD step through LayerNormalization and the Erf GELU: the new ``w`` is
    ``w - lr * dL/dw``, L = sum of y, with the gradient computed in NumPy (float64)."""
    import onnx

    proto = _transformer_block(-1)
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    b = popart.Builder(proto)
    loss = b.aiGraphcore.identityloss(["y"], popart.ReductionType.Sum)
    session = popart.TrainingSession(
        b.getModelProto(), popart.DataFlow(1, [loss]), loss, popart.ConstSGD(0.1), ipu()
    )
    session.prepareDevice()
    session.weightsFromHost()
    session.run(popart.PyStepIO({"x": x}, session.initAnchorArrays()))
    session.weightsToHost()
    w_new = np.zeros((4, 5), np.float32)
    session.readWeights(popart.PyWeightsIO({"w": w_new}))

    from scipy.special import erf

    model = onnx.load_model_from_string(proto)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    w0, x64 = inits["w"], x.astype(np.float64)
    mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    normed = (x64 - mu) / np.sqrt(var + 1e-5) * inits["scale"] + inits["bias"]
    h = normed @ w0
    dgelu = 0.5 * (1 + erf(h / np.sqrt(2))) + h * np.exp(-h * h / 2) / np.sqrt(2 * np.pi)
    grad = np.einsum("bti,btj->ij", normed, dgelu)
    np.testing.assert_allclose(w_new, w0 - 0.1 * grad, rtol=1e-4, atol=1e-5)
