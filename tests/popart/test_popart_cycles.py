"""``getCycleCount`` with ``instrumentWithHardwareCycleCounter``: the modelled cycles of the
last run, against the execution profile's ``simulation.cycles`` of the same run."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_popart_helpers import ipu

import popart

RUNS = 4


def _session(counter: bool = True, run_count: int | None = None, **options):
    """A matmul with a weight, prepared, its weights written, and a step to run it with."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = b.addInitializedInputTensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    y = b.aiOnnx.relu([b.aiOnnx.matmul([x, w])])
    opts = popart.SessionOptions()
    opts.instrumentWithHardwareCycleCounter = counter
    if run_count is not None:
        opts.engineOptions = {"autoReport.executionProfileProgramRunCount": str(run_count)}
    for k, v in options.items():
        setattr(opts, k, v)
    session = popart.InferenceSession(
        b.getModelProto(), popart.DataFlow(1, [y]), ipu(), userOptions=opts
    )
    session.prepareDevice()
    session.weightsFromHost()
    session.engine.reset_execution_profile()  # the profile of the runs only
    out = session.initAnchorArrays()
    return session, popart.PyStepIO({x: np.ones((2, 3), np.float32)}, out)


def _profile_cycles(session) -> int:
    return session.engine.get_execution_profile()["simulation"]["cycles"]


def test_the_cycle_count_is_the_runs_modelled_cycles() -> None:
    assert popart.SessionOptions().hardwareInstrumentations == {popart.Instrumentation.Outer}
    session, step = _session()
    session.run(step)
    cycles = session.getCycleCount()
    assert isinstance(cycles, int)
    assert cycles == session.getCycleCount("") == _profile_cycles(session) > 0


def test_every_run_is_counted_past_the_profiles_run_count() -> None:
    """Two identical sessions count the same cycles each run; each run's count is what a
    profile capturing every run adds for it."""
    one, step_one = _session()
    two, step_two = _session()
    every, step_every = _session(run_count=RUNS)
    for _ in range(RUNS):
        before = _profile_cycles(every)
        for session, step in ((one, step_one), (two, step_two), (every, step_every)):
            session.run(step)
        counts = {s.getCycleCount() for s in (one, two, every)}
        assert counts == {_profile_cycles(every) - before}
    assert _profile_cycles(one) < _profile_cycles(every)  # the default run count, 2


def test_the_cycle_count_needs_the_option_and_a_run() -> None:
    session, step = _session(counter=False)
    assert session.engine.count_cycles is False  # runs past the run count model no cycles
    session.run(step)
    with pytest.raises(popart.popart_exception, match="'instrumentWithHardwareCycleCounter' must"):
        session.getCycleCount()
    session, step = _session()
    with pytest.raises(popart.popart_exception, match="Must call run before getCycleCount"):
        session.getCycleCount()
    session.run(step)
    with pytest.raises(popart.popart_exception, match="no cycle count 'inner'"):
        session.getCycleCount("inner")
    inner = {popart.Instrumentation.Outer, popart.Instrumentation.Inner}
    with pytest.raises(popart.popart_exception, match=r"\{popart\.Instrumentation\.Outer\}"):
        _session(hardwareInstrumentations=inner)


def test_a_cpu_device_counts_no_cycles() -> None:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    y = b.aiOnnx.relu([x])
    opts = popart.SessionOptions()
    opts.instrumentWithHardwareCycleCounter = True
    device = popart.DeviceManager().createCpuDevice()
    session = popart.InferenceSession(
        b.getModelProto(), popart.DataFlow(1, [y]), device, userOptions=opts
    )
    session.prepareDevice()
    out = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.ones(2, np.float32)}, out))
    with pytest.raises(popart.popart_exception, match="CPU target models no cycles"):
        session.getCycleCount()
