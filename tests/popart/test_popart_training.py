"""Training sessions against a NumPy reference: replica-grouped weights (each group's
gradient summed over its own replicas only), SGD with momentum and weight decay, Adam,
gradient accumulation, batches per step, Mean reduction, anchored gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tremula_tests_popart_helpers import ipu, replicated

import popart
from popart import CommGroup, CommGroupType, VariableSettings

R = 4
IN, OUT, BATCH = 3, 2, 2


def _groups(kind: CommGroupType, k: int) -> list[list[int]]:
    return VariableSettings(CommGroup(kind, k)).groups(R)


def _model(settings: VariableSettings, w0: np.ndarray) -> tuple[bytes, str, str, str]:
    """loss = sum((x @ w)^2) / 2 with a grouped weight w."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [BATCH, IN]), "x")
    w = b.addInitializedInputTensor(w0, settings, "w")
    y = b.aiOnnx.matmul([x, w])
    sq = b.aiOnnx.mul([y, y])
    loss = b.aiGraphcore.identityloss([b.aiOnnx.mul([sq, b.aiOnnx.constant(np.float32(0.5))])],
                                      popart.ReductionType.Sum)  # fmt: skip
    return b.getModelProto(), x, w, loss


def _grad(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.T @ (x @ w)


def _session(model: bytes, loss: str, opt: Any, bps: int = 1, A: int = 1, **kw: Any):
    opts = replicated(R, **kw)
    if A > 1:
        opts.enableGradientAccumulation = True
        opts.accumulationFactor = A
    s = popart.TrainingSession(model, popart.DataFlow(bps, {loss: popart.AnchorReturnType("ALL")}),
                               loss, opt, ipu(R), userOptions=opts)  # fmt: skip
    s.prepareDevice()
    s.weightsFromHost()
    return s


def _read(s: popart.TrainingSession, shape: tuple[int, ...]) -> np.ndarray:
    s.weightsToHost()
    buf = np.zeros(shape, np.float32)
    s.readWeights(popart.PyWeightsIO({"w": buf}))
    return buf


@pytest.mark.parametrize(
    ("kind", "k"),
    [(CommGroupType.All, 0), (CommGroupType.Consecutive, 2), (CommGroupType.Orthogonal, 2),
     (CommGroupType.Ungrouped, 0)],
)  # fmt: skip
def test_grouped_sgd_matches_numpy(kind: CommGroupType, k: int) -> None:
    groups = _groups(kind, k)
    G = len(groups)
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((G, IN, OUT) if G > 1 else (IN, OUT)).astype(np.float32)
    vs = VariableSettings(CommGroup(kind, k))
    model, x, _, loss = _model(vs, w0)
    s = _session(model, loss, popart.SGD({"defaultLearningRate": (0.05, True),
                                          "defaultMomentum": (0.9, True),
                                          "defaultWeightDecay": (0.01, True)}))  # fmt: skip
    ref = w0.reshape(G, IN, OUT).astype(np.float64)
    v = np.zeros_like(ref)
    anchors = s.initAnchorArrays()
    for _step in range(3):
        xs = rng.standard_normal((R, BATCH, IN)).astype(np.float32)
        s.run(popart.PyStepIO({x: xs}, anchors))
        losses = [0.5 * ((xs[r] @ ref[g]) ** 2).sum() for g, grp in enumerate(groups) for r in grp]
        order = [r for grp in groups for r in grp]
        np.testing.assert_allclose(anchors[loss][order], losses, rtol=1e-5)
        for g, grp in enumerate(groups):
            d = sum(_grad(xs[r], ref[g]) for r in grp) + 0.01 * ref[g]
            v[g] = 0.9 * v[g] + d
            ref[g] -= 0.05 * v[g]
    np.testing.assert_allclose(_read(s, w0.shape).reshape(G, IN, OUT), ref, rtol=1e-4, atol=1e-5)


def test_adam_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((IN, OUT)).astype(np.float32)
    model, x, _, loss = _model(VariableSettings(), w0)
    values = {"defaultLearningRate": (0.01, True), "defaultBeta1": (0.8, True),
              "defaultBeta2": (0.95, True), "defaultEps": (1e-6, True),
              "defaultWeightDecay": (0.1, True), "lossScaling": (4.0, True)}  # fmt: skip
    s = _session(model, loss, popart.Adam(values))
    w, m, v = w0.astype(np.float64), np.zeros((IN, OUT)), np.zeros((IN, OUT))
    anchors = s.initAnchorArrays()
    for t in range(1, 4):
        xs = rng.standard_normal((R, BATCH, IN)).astype(np.float32)
        s.run(popart.PyStepIO({x: xs}, anchors))
        g = sum(_grad(xs[r], w) for r in range(R))  # the loss gradient (scaled and unscaled)
        m = 0.8 * m + 0.2 * g
        v = 0.95 * v + 0.05 * g * g
        mc, vc = m / (1 - 0.8**t), v / (1 - 0.95**t)
        w = w - 0.01 * (mc / (np.sqrt(vc) + 1e-6) + 0.1 * w)
    np.testing.assert_allclose(_read(s, (IN, OUT)), w, rtol=1e-4, atol=1e-5)


def test_accumulation_bps_and_mean_reduction() -> None:
    """bps 2 x accumulation 3, Mean reduction: each step averages 3 micro-batches x R
    replicas' gradients (Consecutive groups of 2: each group its own 3 x 2)."""
    groups = _groups(CommGroupType.Consecutive, 2)
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((2, IN, OUT)).astype(np.float32)
    model, x, _, loss = _model(VariableSettings(CommGroup(CommGroupType.Consecutive, 2)), w0)
    s = _session(model, loss, popart.ConstSGD(0.1), bps=2, A=3,
                 accumulationAndReplicationReductionType=popart.ReductionType.Mean)  # fmt: skip
    xs = rng.standard_normal((2, 3, R, BATCH, IN)).astype(np.float32)
    anchors = s.initAnchorArrays()
    assert anchors[loss].shape == (2, 3, R)
    s.run(popart.PyStepIO({x: xs}, anchors))
    ref = w0.astype(np.float64)
    for step in range(2):
        for g, grp in enumerate(groups):
            grads = [_grad(xs[step, a, r], ref[g]) for a in range(3) for r in grp]
            np.testing.assert_allclose(
                [anchors[loss][step, a, r] for a in range(3) for r in grp],
                [0.5 * ((xs[step, a, r] @ ref[g]) ** 2).sum() for a in range(3) for r in grp],
                rtol=1e-5,
            )
            ref[g] = ref[g] - 0.1 * sum(grads) / len(grads)
    np.testing.assert_allclose(_read(s, w0.shape), ref, rtol=1e-4, atol=1e-5)


def test_gradient_anchor_and_optimizer_update() -> None:
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((IN, OUT)).astype(np.float32)
    model, x, w, loss = _model(VariableSettings(), w0)
    opts = replicated(R)
    grad = popart.reservedGradientPrefix() + w
    df = popart.DataFlow(1, {grad: popart.AnchorReturnType("ALL")})
    sgd = popart.SGD({"defaultLearningRate": (0.1, False)})
    s = popart.TrainingSession(model, df, loss, sgd, ipu(R), userOptions=opts)
    s.prepareDevice()
    with pytest.raises(popart.popart_exception, match="Must call weightsFromHost before run"):
        s.run(popart.PyStepIO({x: np.zeros((R, BATCH, IN), np.float32)}, s.initAnchorArrays()))
    s.weightsFromHost()
    xs = rng.standard_normal((R, BATCH, IN)).astype(np.float32)
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO({x: xs}, anchors))
    np.testing.assert_allclose(anchors[grad], [_grad(xs[r], w0) for r in range(R)], rtol=1e-5)
    s.updateOptimizerFromHost(popart.SGD({"defaultLearningRate": (0.0, False)}))
    before = _read(s, (IN, OUT))
    s.run(popart.PyStepIO({x: xs}, anchors))
    np.testing.assert_array_equal(_read(s, (IN, OUT)), before)  # learning rate 0 now
    with pytest.raises(popart.popart_exception, match="defaultLearningRate is not const"):
        s.updateOptimizerFromHost(popart.SGD({"defaultLearningRate": (0.1, True)}))


def test_optimizer_errors() -> None:
    with pytest.raises(popart.popart_exception) as info:
        popart.SGD({"defaultLearningRate": 0.1})
    assert info.value.args[0] == (
        "A value in the optimizer map must be a py::tuple (in getOptimizerValueDictionary)"
    )
    with pytest.raises(popart.popart_exception) as info:
        popart.SGD({"learningRate": (0.1, True)})
    assert info.value.args[0] == (
        "Invalid SGD key, learningRate, the allowed keys are ( defaultLearningRate "
        "defaultWeightDecay defaultMomentum defaultDampening defaultVelocityScaling lossScaling "
        "nesterov )"
    )


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_norm(max_norm: float) -> None:
    """ClipNormSettings: the gradients are scaled by maxNorm / global norm when the norm
    (of the unscaled gradients) exceeds it; untouched otherwise."""
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((IN, OUT)).astype(np.float32)
    model, x, w, loss = _model(VariableSettings(), w0)
    clip = popart.ClipNormSettings.clipWeights([w], max_norm)
    sgd = popart.SGD({"defaultLearningRate": (0.1, True), "lossScaling": (2.0, True)}, [clip])
    s = _session(model, loss, sgd)
    xs = rng.standard_normal((R, BATCH, IN)).astype(np.float32)
    s.run(popart.PyStepIO({x: xs}, s.initAnchorArrays()))
    g = sum(_grad(xs[r], w0.astype(np.float64)) for r in range(R))
    g *= min(1.0, max_norm / np.linalg.norm(g))
    np.testing.assert_allclose(_read(s, (IN, OUT)), w0 - 0.1 * g, rtol=1e-4, atol=1e-5)
