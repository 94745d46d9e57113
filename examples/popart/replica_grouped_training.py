"""Replica-grouped training with PopART on the IPU Model.

Four replicas train one model whose weights are shared differently:

* ``A`` (Consecutive, groups of 2): replicas {0, 1} and {2, 3} each train their own copy;
* ``B`` (Orthogonal, groups of 2): replicas {0, 2} and {1, 3} each train their own copy;
* ``c`` (All): one copy for every replica.

Each weight's gradient is summed over its own group only, so the copies of ``A`` follow
their replica pairs' data and the copies of ``B`` theirs. After training the script prints
each group's weights, reads them back with ``readWeights`` and writes an ONNX checkpoint
whose grouped initialisers carry one row per group (``modelToHost``).

Run: ``python examples/popart/replica_grouped_training.py`` (the checkpoint goes to a
temporary directory).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

import popart
from popart import CommGroup, CommGroupType, VariableRetrievalMode, VariableSettings

R, BATCH, IN, HID, OUT = 4, 8, 3, 4, 2
STEPS, BPS = 30, 4
CONSECUTIVE = CommGroup(CommGroupType.Consecutive, 2)
ORTHOGONAL = CommGroup(CommGroupType.Orthogonal, 2)


def build() -> tuple[bytes, str, str, str]:
    """loss = sum((relu(x @ A) @ B + c - target)^2) / batch; A, B, c grouped as above."""
    rng = np.random.default_rng(0)
    cons = VariableSettings(CONSECUTIVE, VariableRetrievalMode.OnePerGroup)
    orth = VariableSettings(ORTHOGONAL, VariableRetrievalMode.AllReplicas)
    b = popart.Builder()
    b.embedReplicationFactor(R)  # the checkpoint knows its grouping
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [BATCH, IN]), "x")
    target = b.addInputTensor(popart.TensorInfo("FLOAT", [BATCH, OUT]), "target")
    # one row per group in the initialisers: [groups, *shape on a replica]
    a0 = 0.5 * rng.standard_normal((2, IN, HID)).astype(np.float32)
    b0 = 0.5 * rng.standard_normal((2, HID, OUT)).astype(np.float32)
    a = b.addInitializedInputTensor(a0, cons, "A")
    w = b.addInitializedInputTensor(b0, orth, "B")
    c = b.addInitializedInputTensor(np.zeros(OUT, np.float32), "c")
    h = b.aiOnnx.relu([b.aiOnnx.matmul([x, a])])
    y = b.aiOnnx.add([b.aiOnnx.matmul([h, w]), c])
    err = b.aiOnnx.sub([y, target])
    loss = b.aiGraphcore.identityloss([b.aiOnnx.mul([err, err])], popart.ReductionType.Mean)
    return b.getModelProto(), x, target, loss


def data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """[BPS, R, BATCH, ...] inputs; each replica has its own target map."""
    x = rng.standard_normal((BPS, R, BATCH, IN)).astype(np.float32)
    maps = np.stack([np.full((IN, OUT), 0.2 * (r + 1)) for r in range(R)]).astype(np.float32)
    return x, np.einsum("brni,rio->brno", x, maps).astype(np.float32)


def main() -> None:
    model, x, target, loss = build()
    opts = popart.SessionOptions()
    opts.enableReplicatedGraphs = True
    opts.replicatedGraphCount = R
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": R, "tilesPerIPU": 4})
    session = popart.TrainingSession(
        fnModel=model,
        dataFlow=popart.DataFlow(BPS, {loss: popart.AnchorReturnType("FINAL")}),
        loss=loss,
        optimizer=popart.SGD({"defaultLearningRate": (0.02, True), "defaultMomentum": (0.9, True)}),
        deviceInfo=device,
        userOptions=opts,
    )
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    rng = np.random.default_rng(1)
    for step in range(STEPS):
        xs, ts = data(rng)
        session.run(popart.PyStepIO({x: xs, target: ts}, anchors))
        if step % 10 == 0 or step == STEPS - 1:
            losses = " ".join(f"{v:.4f}" for v in anchors[loss])
            print(f"step {step:2d}: loss per replica {losses}")

    session.weightsToHost()
    weights = {
        "A": np.zeros((2, IN, HID), np.float32),  # OnePerGroup: one per group
        "B": np.zeros((R, HID, OUT), np.float32),  # AllReplicas: one per replica
        "c": np.zeros(OUT, np.float32),
    }
    session.readWeights(popart.PyWeightsIO(weights))
    with np.printoptions(precision=3, suppress=True):
        for g, replicas in enumerate(VariableSettings(CONSECUTIVE).groups(R)):
            print(f"A, group {g} (replicas {replicas}): column sums {weights['A'][g].sum(0)}")
        for g, replicas in enumerate(VariableSettings(ORTHOGONAL).groups(R)):
            print(f"B, group {g} (replicas {replicas}): {weights['B'][replicas[0]].ravel()}")
        print(f"c, all replicas: {weights['c']}")

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "grouped.onnx")
        session.modelToHost(path)
        saved = onnx.load(path)
    onnx.checker.check_model(saved)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in saved.graph.initializer}
    print(f"checkpoint: initialisers { ({k: list(inits[k].shape) for k in weights}) }")
    assert np.array_equal(inits["B"], weights["B"][[0, 1]])  # one row per group


if __name__ == "__main__":
    main()
