"""PopART training sessions across the instances of a PopRun job (launched through the real
mpirun): ``popdist.popart.configureSessionOptions`` / ``getDevice``, each instance feeding
its replicas' block of the batch, give the same losses and weights, bit for bit, as the
same session with all replicas in one process; distributed options that do not match the
job are refused naming both.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import onnx
import pytest
from tremula_tests_popdist_launch import PROGRAMS, poprun, program

import popart

PopartException = popart.popart_exception


def _training():
    spec = importlib.util.spec_from_file_location(
        "tremula_tests_popdist_popart_training", PROGRAMS / "popart_training.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_two_instances_train_like_four_replicas_in_one_process(tmp_path) -> None:
    # instance 0 starts from other weights; broadcastWeights(1) gives it instance 1's
    training = _training()
    want = training.train(distributed=False)
    proto = training.model()[0]
    initial = {t.name: t for t in onnx.load_model_from_string(proto).graph.initializer}
    assert "w1" in initial and "w2" in initial
    job = poprun(
        "--num-instances", "2", "--num-replicas", "4",
        "python", program("popart_training.py"), str(tmp_path),
    )  # fmt: skip
    assert job.rc == 0, job.stderr[-3000:]
    L = 2
    for i in range(2):
        got = np.load(tmp_path / f"instance{i}.npz")
        # this instance's replicas' losses: [steps, batches per step, accumulation, L]
        assert np.array_equal(got["losses"], want["losses"][..., i * L : (i + 1) * L]), i
        for name in ("w1", "w2"):  # global weights, identical on every instance
            assert np.array_equal(got[name], want[name]), f"instance {i}: {name} differs"
    # the run trained: the orthogonal groups moved apart from their initial values
    w2 = np.frombuffer(initial["w2"].raw_data, np.float32).reshape(want["w2"].shape)
    assert not np.allclose(want["w2"], w2)
    losses = want["losses"]
    assert np.all(np.isfinite(losses)) and losses[-1].mean() < losses[0].mean()


def _distributed_options(total: int, local: int, offset: int) -> popart.SessionOptions:
    opts = popart.SessionOptions()
    opts.enableReplicatedGraphs = local > 1
    opts.replicatedGraphCount = local
    opts.enableDistributedReplicatedGraphs = True
    opts.globalReplicationFactor = total
    opts.globalReplicaOffset = offset
    return opts


def _session(opts: popart.SessionOptions):
    training = _training()
    proto, _, _, loss = training.model()
    flow = popart.DataFlow(1, {loss: popart.AnchorReturnType("All")})
    device = popart.DeviceManager().acquireAvailableDevice(opts.replicatedGraphCount)
    return popart.TrainingSession(proto, flow, loss, popart.ConstSGD(0.1), device, userOptions=opts)


def test_distributed_options_without_poprun_are_refused() -> None:
    with pytest.raises(PopartException, match=r"replicas \[0, 2\) of 4.*launch it with poprun"):
        _session(_distributed_options(4, 2, 0))


def test_distributed_options_that_are_not_this_instances_block_are_refused(monkeypatch) -> None:
    for name, value in (
        ("POPDIST_NUM_TOTAL_REPLICAS", "4"),
        ("POPDIST_NUM_LOCAL_REPLICAS", "2"),
        ("POPDIST_REPLICA_INDEX_OFFSET", "2"),
    ):
        monkeypatch.setenv(name, value)
    with pytest.raises(PopartException, match=r"replicas \[0, 2\) of 4.*runs replicas \[2, 4\)"):
        _session(_distributed_options(4, 2, 0))


def test_a_distributed_session_of_one_instance_runs_without_poprun() -> None:
    session = _session(_distributed_options(4, 4, 0))
    assert (session.replicationFactor, session.localReplicationFactor) == (4, 4)


def test_broadcast_weights_needs_a_prepared_session_and_an_instance() -> None:
    session = _session(_distributed_options(4, 4, 0))
    with pytest.raises(PopartException, match="broadcastWeights: call prepareDevice first"):
        session.broadcastWeights()
    session.prepareDevice()
    for bad in (1, -1, 0.0):
        with pytest.raises(PopartException, match=r"rootRank .* \(instances 0 to 0\)"):
            session.broadcastWeights(bad)


def test_broadcast_weights_in_one_instance_writes_the_host_weights() -> None:
    training = _training()
    session = _session(_distributed_options(4, 4, 0))
    session.prepareDevice()
    session.weightsFromHost()
    w1 = np.full((training.IN, training.HID), 3.0, np.float32)
    session.writeWeights(popart.PyWeightsIO({"w1": w1}))  # on the host only
    session.broadcastWeights(0)
    session.weightsToHost()
    out = {"w1": np.zeros_like(w1)}
    session.readWeights(popart.PyWeightsIO(out))
    assert np.array_equal(out["w1"], w1)
