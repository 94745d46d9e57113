"""Round 8 of the PopXL fidelity probe (issue 26): sessions, devices and remote buffers,
written as PopXL's own integration tests (``test_session.py``, ``test_session_ctxtmgr.py``,
``test_remote_buffer.py``) would write them. Each case states how sure we are that PopXL
behaves so (PopXL's sources are not here; they are recalled).

- The device a session runs on is attached while the session is and detached after
  (PopXL's ``is_attached`` reads ``device.isAttached``; its ``_detach`` detaches the
  device, as graphcore-examples' GPT-J pipeline, which repeats it, shows).
- A session compiled for an offline device runs on an IPU of that target inside
  ``with session:`` and has the offline device back afterwards (the stack entry that
  GPT-J's pipeline gives back with ``_set_device``).
- ``run_with_outputs`` takes ``outputs=None`` (its default) like ``inputs``.
- ``get_tensors_data`` of constants only does not read the weights back.
- ``RemoteBuffer.set_remote_buffer_info`` defaults to one entry.
"""

from __future__ import annotations

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops


def _counter() -> tuple[popxl.Ir, popxl.tensor.Variable]:
    """A program adding one to ``w`` each run."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros(2, np.float32), name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.ones(2, np.float32)))
    return ir, w


# ---- the device's attachment follows the session's (confidence: fair, ~70%) ----


@pytest.mark.parametrize("device_desc", ["cpu", "ipu_model", "ipu_hw"])
def test_a_device_string_gives_a_device_attached_only_inside_the_context(device_desc) -> None:
    ir, w = _counter()
    session = popxl.Session(ir, device_desc)
    assert (session.is_attached, session.device.isAttached) == (False, False)
    with session:
        assert (session.is_attached, session.device.isAttached) == (True, True)
        with session:  # nested: keeps the attachment
            session.run()
        assert session.device.isAttached
    assert (session.is_attached, session.device.isAttached) == (False, False)
    np.testing.assert_array_equal(session.get_tensor_data(w), [1, 1])


def test_a_given_device_is_detached_when_the_session_leaves_it() -> None:
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": 1})
    ir, w = _counter()
    session = popxl.Session(ir, device)
    assert session.device is device and not session.is_attached
    with session:
        session.run()
        assert device.isAttached
    assert not device.isAttached and not session.is_attached
    with session:  # attaches it again
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(w), [2, 2])


def test_detaching_the_device_detaches_the_session() -> None:
    """``session.device.detach()`` (what PopXL's ``_detach`` and GPT-J's pipeline call):
    the session is no longer attached, runs are refused, and entering attaches again
    (weights from the host copies)."""
    ir, w = _counter()
    session = popxl.Session(ir, "ipu_model")
    with session:
        session.run()
        session.weights_to_host()
        session.device.detach()
        assert not session.is_attached
        with pytest.raises(ValueError, match="not attached"):
            session.run()
        with session:  # finds it detached: attaches and writes the host copy [1, 1]
            assert session._was_attached_stack == [False, False]
            session.run()
        assert not session.is_attached
    assert not session.is_attached
    np.testing.assert_array_equal(session.get_tensor_data(w), [2, 2])


# ---- an offline device (confidence: moderate, ~60%) ----


def test_an_offline_device_is_swapped_for_an_ipu_of_its_target_while_entered() -> None:
    offline = popart.DeviceManager().createOfflineIPUDevice({"numIPUs": 1, "tilesPerIPU": 4})
    ir, w = _counter()
    session = popxl.Session(ir, offline)  # compiles for it
    assert session.device is offline and not session.is_attached
    with session:
        assert session._was_attached_stack == [offline]
        running = session.device
        assert running is not offline and running.type == popart.DeviceType.Ipu
        assert running.tilesPerIPU == 4 and running.isAttached
        session.run()
    assert session.device is offline and not running.isAttached
    np.testing.assert_array_equal(session.get_tensor_data(w), [1, 1])
    with session:  # again, on another IPU device
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(w), [2, 2])
    with pytest.raises(popart.popart_exception, match="cannot attach"):
        offline.attach()  # (the device itself still cannot attach)


# ---- run_with_outputs (confidence: fair, ~70%) ----


def test_run_with_outputs_takes_no_outputs_for_a_program_that_writes_no_stream() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((2,), popxl.float32, "x")
        w = popxl.variable(np.zeros(2, np.float32), name="w")
        ops.var_updates.copy_var_update_(w, ops.host_load(x_s))
    session = popxl.Session(ir, "ipu_model")
    with session:
        session.run_with_outputs({x_s: np.array([3, 4], np.float32)})
        np.testing.assert_array_equal(session.get_tensor_data(w), [3, 4])
        session.run_with_outputs({x_s: np.array([5, 6], np.float32)}, None)
    np.testing.assert_array_equal(session.get_tensor_data(w), [5, 6])


def test_run_with_outputs_without_outputs_is_refused_where_the_program_writes_one() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        y_s = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(y_s, popxl.constant(np.ones(2, np.float32)))
    session = popxl.Session(ir, "ipu_model")
    with session:
        with pytest.raises(ValueError, match="missing \\['y'\\]"):
            session.run_with_outputs()
        outputs = session.create_host_outputs()
        session.run_with_outputs(outputs=outputs)
    np.testing.assert_array_equal(outputs[y_s], [1, 1])


# ---- get_tensors_data of constants (confidence: moderate, ~65%) ----


def test_reading_constants_after_a_run_does_not_read_the_weights_back(monkeypatch) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros(2, np.float32), name="w")
        c = popxl.constant(np.array([1, 2], np.float32), name="c")
        ops.var_updates.accumulate_(w, c)
    session = popxl.Session(ir, "ipu_model")
    reads: list[int] = []
    to_host = session.weights_to_host

    def counted() -> None:
        reads.append(1)
        to_host()

    monkeypatch.setattr(session, "weights_to_host", counted)
    with session:
        session.run()
        np.testing.assert_array_equal(session.get_tensors_data([c])[c], [1, 2])
        assert reads == []
        values = session.get_tensors_data([c, w])  # a variable: read back once
        assert reads == [1]
        np.testing.assert_array_equal(values[w], [1, 2])
        np.testing.assert_array_equal(values[c], [1, 2])


# ---- RemoteBuffer.set_remote_buffer_info (confidence: fair, ~75%) ----


def test_set_remote_buffer_info_defaults_to_one_entry() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.RemoteBuffer((2, 3), popxl.float32, 4)
        buffer.set_remote_buffer_info(popxl.float16, (5,))
        assert (buffer.tensor_dtype, buffer.tensor_shape, buffer.entries) == (
            popxl.float16,
            (5,),
            1,
        )
        with pytest.raises(ValueError, match="Entries must be a non-zero, positive integer"):
            buffer.set_remote_buffer_info(popxl.float32, (2,), 0)
        # refused: the buffer is as it was
        assert (buffer.tensor_dtype, buffer.tensor_shape, buffer.entries) == (
            popxl.float16,
            (5,),
            1,
        )


# ---- probed and found as PopXL's: pinned (confidence: high on the values) ----


def test_two_sharded_variables_in_two_entries_of_one_buffer_stay_apart() -> None:
    """PopXL's remote RTS pattern with a buffer of two entries: each entry holds its own
    variable's shards; an all-gather gives the whole value back on every replica."""
    R = 4
    ir = popxl.Ir(replication=R)
    a_np = np.arange(6, dtype=np.float32).reshape(3, 2)
    values = (a_np, 10 + a_np)
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.replica_sharded_buffer((3, 2), popxl.float32, entries=2)
        assert (buffer.tensor_shape, buffer.meta_shape) == ((2,), (3, 2))
        a = popxl.remote_replica_sharded_variable(values[0], buffer, 0, name="a")
        b = popxl.remote_replica_sharded_variable(values[1], buffer, 1, name="b")
        streams = []
        for entry in (0, 1):
            shard = ops.remote_load(buffer, entry)
            full = ops.collectives.replicated_all_gather(shard)
            assert full.shape == (3, 2)
            streams.append(popxl.d2h_stream(full.shape, popxl.float32, f"full{entry}"))
            ops.host_store(streams[-1], full)
            ops.remote_store(buffer, entry, shard + 1)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    for entry, s in enumerate(streams):
        np.testing.assert_array_equal(out[s], np.broadcast_to(values[entry], (R, 3, 2)))
    np.testing.assert_array_equal(session.get_tensor_data(a), values[0] + 1)
    np.testing.assert_array_equal(session.get_tensor_data(b), values[1] + 1)
