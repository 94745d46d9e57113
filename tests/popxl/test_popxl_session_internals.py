"""``Session``'s private helpers that PopXL's tests and tools call (``_validate_run_inputs``,
``_validate_run_outputs``, ``_set_device``), PopXL's words for tensors that hold no data,
and ``get_tensor_data`` on a variable made from a ``np.memmap`` (that very memmap back,
written by ``weights_to_host``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops


def _program() -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((2, 3), popxl.float32, "x")
        y_s = popxl.d2h_stream((2, 3), popxl.float32, "y")
        ops.host_store(y_s, ops.host_load(x_s) * 2)
    return ir, x_s, y_s


def test_validate_run_inputs_and_outputs() -> None:
    ir, x_s, y_s = _program()
    session = popxl.Session(ir, "ipu_model")
    assert session.ir_ is session.ir is ir  # PopXL's attribute, read by its tests
    good = np.ones((2, 3), np.float32)
    session._validate_run_inputs({x_s: good})  # no error, nothing run
    with pytest.raises(ValueError, match="missing \\['x'\\]"):
        session._validate_run_inputs({})
    with pytest.raises(ValueError, match="'x' is a name"):
        session._validate_run_inputs({"x": good})
    with pytest.raises(ValueError, match="stream 'x' has shape \\(3, 2\\)"):
        session._validate_run_inputs({x_s: np.ones((3, 2), np.float32)})
    session._validate_run_outputs(session.create_host_outputs())
    with pytest.raises(TypeError, match="is int32"):
        session._validate_run_outputs({y_s: np.zeros((2, 3), np.int32)})
    with pytest.raises(ValueError, match="missing \\['y'\\]"):
        session._validate_run_outputs({})


def test_set_device_takes_a_device_of_the_compiled_target() -> None:
    ir, x_s, y_s = _program()
    manager = popart.DeviceManager()
    first = manager.createIpuModelDevice({"numIPUs": 1})
    session = popxl.Session(ir, first)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with session:
        np.testing.assert_array_equal(session.run({x_s: x})[y_s], 2 * x)
    second = manager.createIpuModelDevice({"numIPUs": 1})
    session._set_device(second)
    assert session._device is second
    with session:
        np.testing.assert_array_equal(session.run({x_s: x + 1})[y_s], 2 * (x + 1))
        with pytest.raises(ValueError, match="session is attached"):
            session._set_device(first)
    with pytest.raises(ValueError, match="not the device this session was compiled for"):
        session._set_device(manager.createIpuModelDevice({"numIPUs": 2}))
    with pytest.raises(TypeError, match=r"expected a popart\.DeviceInfo"):
        session._set_device("ipu_model")
    assert session._device is second


def test_tensors_without_data_are_refused_in_popxl_s_words() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        c = popxl.constant(np.ones(2, np.float32), name="c")
        a = v + c
    session = popxl.Session(ir, "ipu_model")
    with pytest.raises(TypeError, match=f"Tensor {a.id} is not of type Constant or Variable"):
        session.get_tensor_data(a)
    with pytest.raises(TypeError, match="Tensor c is not of type Variable"):
        session.write_variable_data(c, np.zeros(2, np.float32))


def test_get_tensor_data_returns_the_memmap_the_variable_was_made_from(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    mm = np.memmap(path, dtype=np.float32, mode="w+", shape=(2, 3))
    mm[...] = np.arange(6, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(mm, name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.ones((2, 3), np.float32)))
    session = popxl.Session(ir, "ipu_model")
    assert session.get_tensor_data(w) is mm
    with session:
        session.run()
    got = session.get_tensor_data(w)
    assert got is mm  # written by weights_to_host, flushed to the file
    want = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.fromfile(path, np.float32).reshape(2, 3), want)


def test_was_attached_stack_and_set_engine_is_loaded() -> None:
    """PopXL's stack of whether each ``with session:`` found the session attached; a
    program that hands the device over detaches with ``_pb_session.setEngineIsLoaded(False)``
    (graphcore-examples' GPT-J pipeline) and attaches again later, weights from the host."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros(3, np.float32), name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.ones(3, np.float32)))
    session = popxl.Session(ir, "ipu_model")
    with session:
        assert session._was_attached_stack == [False]
        with session:
            assert session._was_attached_stack == [False, True]
        assert session.is_attached
        session.run()
        session.weights_to_host()
        session._was_attached_stack.pop()  # what the pipeline's detach does
        session._device.detach()
        session._pb_session.setEngineIsLoaded(False)
        assert not session.is_attached
        session._was_attached_stack.append(False)
    np.testing.assert_array_equal(session.get_tensor_data(w), [1, 1, 1])
    with session:  # loaded again: the device gets the host copy, then runs twice
        session.run()
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(w), [3, 3, 3])
    with pytest.raises(popart.popart_exception, match="setEngineIsLoaded\\(True\\)"):
        session._pb_session.setEngineIsLoaded(True)


def test_weight_transfers_log_popart_s_devicex_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """PopART's Devicex logs each weight transfer at DEBUG; programs count the lines to
    check that reads from the device are not repeated (spec popxl.md 6)."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")
        b = popxl.variable(np.ones(2, np.float32), name="b")
        ops.var_updates.accumulate_(a, b)
    session = popxl.Session(ir, "ipu_model")
    logger = popart.getLogger("devicex")
    logger.setLevel("DEBUG")
    try:
        with session:
            session.run()
            session.get_tensor_data(a)  # syncs once: the device ran since
            session.get_tensor_data(b)  # in sync: no transfer
        err = capsys.readouterr().err
    finally:
        logger.setLevel("OFF")
    assert err.count("Writing weights from host, ") == 1
    assert err.count("Writing weights to host complete.") == 2  # the sync, and leaving
    assert capsys.readouterr().err == ""


def test_popart_log_level_variable_sets_the_level_at_load() -> None:
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np, popxl, popxl.ops as ops\n"
        "ir = popxl.Ir()\n"
        "with ir.main_graph:\n"
        "    popxl.variable(np.ones(2, np.float32)) + 1\n"
        "with popxl.Session(ir, 'ipu_model'):\n"
        "    pass\n"
    )
    env = {**os.environ, "POPART_LOG_LEVEL": "DEBUG"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "[popart:popart.devicex] [DEBUG] Writing weights to host complete." in run.stderr
    env["POPART_LOG_LEVEL"] = "LOUD"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and "POPART_LOG_LEVEL='LOUD'" in run.stderr
