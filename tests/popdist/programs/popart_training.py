"""A PopART training session across the instances of a PopRun job, and the same session
with all replicas in one process (the reference): a two-layer classifier whose first
weight is shared by all replicas and whose second is grouped orthogonally (replicas
``{0, 2}`` and ``{1, 3}``: groups that span the instances), trained with SGD + momentum,
Mean reduction, gradient accumulation and two batches per step.

Under poprun each instance calls ``popdist.popart.configureSessionOptions``, takes its
device from ``popdist.popart.getDevice`` and feeds its replicas' block of the global
batch. Every instance but ``ROOT`` writes other initial weights, and
``broadcastWeights(ROOT)`` gives all of them the root's. Each instance saves the losses of
its replicas and the (global) weights to ``<folder>/instance<i>.npz``::

    tremula poprun --num-instances 2 --num-replicas 4 python popart_training.py <folder>
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

import popart
import popdist
import popdist.popart
from popart import CommGroup, CommGroupType, VariableSettings

R, IN, HID, OUT, BATCH = 4, 5, 6, 3, 2
STEPS, BPS, A = 3, 2, 2
ROOT = 1  # the instance whose initial weights broadcastWeights gives every instance


def model() -> tuple[bytes, str, str, str]:
    """``loss = nll(softmax(relu(x w1) w2), label)`` with ``w1`` on all replicas and ``w2``
    in two orthogonal groups."""
    rng = np.random.default_rng(1)
    w1 = (rng.standard_normal((IN, HID)) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((2, HID, OUT)) * 0.5).astype(np.float32)
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [BATCH, IN]), "x")
    label = b.addInputTensor(popart.TensorInfo("INT32", [BATCH]), "label")
    all_ = VariableSettings(CommGroup(CommGroupType.All, 0))
    orth = VariableSettings(CommGroup(CommGroupType.Orthogonal, 2))
    t1 = b.addInitializedInputTensor(w1, all_, "w1")
    t2 = b.addInitializedInputTensor(w2, orth, "w2")
    h = b.aiOnnx.relu([b.aiOnnx.matmul([x, t1])])
    probs = b.aiOnnx.softmax([b.aiOnnx.matmul([h, t2])], axis=1)
    loss = b.aiGraphcore.nllloss([probs, label], popart.ReductionType.Mean)
    return b.getModelProto(), x, label, loss


def data() -> tuple[np.ndarray, np.ndarray]:
    """The global inputs of every step: ``[STEPS, BPS * A, R, ...]``."""
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((STEPS, BPS * A, R, BATCH, IN)).astype(np.float32)
    labels = rng.integers(0, OUT, (STEPS, BPS * A, R, BATCH)).astype(np.int32)
    return xs, labels


def options(distributed: bool) -> popart.SessionOptions:
    opts = popart.SessionOptions()
    opts.enableGradientAccumulation = True
    opts.accumulationFactor = A
    opts.accumulationAndReplicationReductionType = popart.ReductionType.Mean
    if distributed:
        popdist.popart.configureSessionOptions(opts)
    else:
        opts.enableReplicatedGraphs = True
        opts.replicatedGraphCount = R
    return opts


def train(distributed: bool) -> dict[str, np.ndarray]:
    """Train; returns this process's replicas' losses ``[STEPS, BPS, L * BATCH]`` and the
    weights as ``readWeights`` gives them."""
    proto, x, label, loss = model()
    opts = options(distributed)
    if distributed:
        device = popdist.popart.getDevice()
    else:
        device = popart.DeviceManager().acquireAvailableDevice(R)
    sgd = popart.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.9, True)})
    flow = popart.DataFlow(BPS, {loss: popart.AnchorReturnType("All")})
    session = popart.TrainingSession(proto, flow, loss, sgd, device, userOptions=opts)
    session.prepareDevice()
    if distributed and popdist.getInstanceIndex() != ROOT:
        scramble(session)  # other initial weights: broadcastWeights replaces them
    session.weightsFromHost()
    if distributed:
        session.broadcastWeights(ROOT)
    first, L = popdist.getReplicaIndexOffset(), popdist.getNumLocalReplicas()
    if not distributed:
        first, L = 0, R
    xs, labels = data()
    anchors = session.initAnchorArrays()
    losses = []
    for k in range(STEPS):
        feeds: dict[str, Any] = {
            x: xs[k, :, first : first + L].reshape(BPS, A, L, BATCH, IN),
            label: labels[k, :, first : first + L].reshape(BPS, A, L, BATCH),
        }
        session.run(popart.PyStepIO(feeds, anchors))
        losses.append(anchors[loss].copy())
    session.weightsToHost()
    weights = {"w1": np.zeros((IN, HID), np.float32), "w2": np.zeros((2, HID, OUT), np.float32)}
    session.readWeights(popart.PyWeightsIO(weights))
    return {"losses": np.stack(losses), **weights}


def scramble(session: popart.TrainingSession) -> None:
    """Write host weights other than the model's (as an instance that seeded its
    initialisation differently would)."""
    weights = {"w1": np.full((IN, HID), 7.0, np.float32), "w2": np.zeros((2, HID, OUT), np.float32)}
    session.writeWeights(popart.PyWeightsIO(weights))


def main() -> None:
    out = train(distributed=True)
    np.savez(Path(sys.argv[1]) / f"instance{popdist.getInstanceIndex()}.npz", **out)
    print(f"instance {popdist.getInstanceIndex()}: w1 sum {out['w1'].sum():.6f}", flush=True)


if __name__ == "__main__":
    main()
