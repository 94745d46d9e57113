"""Replicated host I/O (spec/popxl.md 1.7, 1.10, 1.15.5): input arrays of shape
[num_host_transfers if > 1] + [replicas if > 1] + stream.shape, a replica axis on outputs,
loops consuming one slice per executed host_load, and the Session's shape checks."""

from __future__ import annotations

import re

import numpy as np
import pytest

import popxl
import popxl.ops as ops

CASES = [(R, nht) for R in (1, 2, 4, 8) for nht in (1, 3)] + [(3, 2)]  # 3: not a power of 2


def lead(nht: int, R: int) -> tuple[int, ...]:
    return tuple(d for d in (nht, R) if d > 1)


@pytest.mark.parametrize("R,nht", CASES, ids=[f"R{R}-nht{n}" for R, n in CASES])
def test_per_replica_streams_in_a_loop(R, nht):
    """Each iteration of a repeat body loads the next slice of each replica's rows and
    stores one; variables differ per replica (one group each)."""
    ir = popxl.Ir(replication=R)
    ir.num_host_transfers = nht
    with ir.main_graph:
        x_s = popxl.h2d_stream((2, 3), popxl.float32, name="x")
        y_s = popxl.d2h_stream((2, 3), popxl.float32, name="y")
        ids = np.arange(R, dtype=np.float32).reshape(R, 1, 1) * np.ones((1, 2, 3), np.float32)
        rg = ir.replica_grouping(group_size=1)
        v = popxl.variable(ids if R > 1 else ids[0], replica_grouping=rg, name="v")

        def body(v: popxl.Tensor):
            ops.host_store(y_s, ops.host_load(x_s) * 2 + v)

        ops.repeat(ir.create_graph(body, v), nht, v)
    data = np.arange(nht * R * 6, dtype=np.float32).reshape((*lead(nht, R), 2, 3))
    with popxl.Session(ir, "ipu_model") as session:
        assert session.create_host_outputs()[y_s].shape == (*lead(nht, R), 2, 3)
        out = session.run({x_s: data})
    full = data.reshape(nht, R, 2, 3)
    want = full * 2 + np.arange(R, dtype=np.float32).reshape(1, R, 1, 1)
    np.testing.assert_array_equal(out[y_s], want.reshape(data.shape))


def test_uneven_host_loads_advance_by_two_per_iteration():
    """test_io_sizes.py::test_uneven_host_loads: the same stream loaded twice per
    iteration advances by 2; a store once per iteration fills half the slices."""
    R, nht = 2, 4
    ir = popxl.Ir(replication=R)
    ir.num_host_transfers = nht
    g = ir.create_empty_graph("body")
    with ir.main_graph:
        x_s = popxl.h2d_stream((3,), popxl.int32, name="x")
        y_s = popxl.d2h_stream((3,), popxl.int32, name="y")
    with g:
        a = ops.host_load(x_s, "a")
        b = ops.host_load(x_s, "b")
        ops.host_store(y_s, a * 10 + b)
    with ir.main_graph:
        ops.repeat(g, 2)
    data = np.arange(nht * R * 3, dtype=np.int32).reshape(nht, R, 3)
    with popxl.Session(ir, "ipu_model") as session:
        outputs = {y_s: np.full((nht, R, 3), -1, np.int32)}
        session.run_with_outputs({x_s: data}, outputs)
    y = outputs[y_s]
    np.testing.assert_array_equal(y[0], data[0] * 10 + data[1])
    np.testing.assert_array_equal(y[1], data[2] * 10 + data[3])
    np.testing.assert_array_equal(y[2:], -1)  # slices never stored keep their values


def test_all_ones_shapes_are_interchangeable():
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((1,), popxl.float32, name="x")
        y_s = popxl.d2h_stream((), popxl.float32, name="y")
        ops.host_store(y_s, ops.host_load(x_s).reshape(()) + 1)
    with popxl.Session(ir, "ipu_model") as session:
        for value in (4.0, np.float32(4), np.array([4.0]), np.array([[4.0]], np.float32)):
            assert session.run({x_s: value})[y_s] == 5
        out = {y_s: np.zeros((1, 1), np.float32)}
        session.run_with_outputs({x_s: 2.0}, out)
        assert out[y_s][0, 0] == 3


def test_input_and_output_errors_name_the_stream_and_leave_the_session_usable():
    R, nht = 2, 2
    ir = popxl.Ir(replication=R)
    ir.num_host_transfers = nht
    with ir.main_graph:
        x_s = popxl.h2d_stream((3,), popxl.float32, name="xs")
        y_s = popxl.d2h_stream((3,), popxl.float32, name="ys")
        other = popxl.h2d_stream((3,), popxl.float32, name="unused")
        x = ops.host_load(x_s)
        ops.host_store(y_s, x + 1)
        ops.host_store(y_s, x + 2)
    good = np.zeros((nht, R, 3), np.float32)
    session = popxl.Session(ir, "ipu_model")
    with pytest.raises(ValueError, match="not attached"):
        session.run({x_s: good})
    with session:
        assert session.expected_inputs() == {x_s}
        with pytest.raises(ValueError, match=r"missing \['xs'\]"):
            session.run({})
        with pytest.raises(ValueError, match=r"stream 'unused' is not an input stream this"):
            session.run({x_s: good, other: good})
        for bad in (np.zeros((R, 3)), np.zeros((nht, R, 1, 3)), np.zeros((R, nht, 3 + 1))):
            with pytest.raises(ValueError, match=r"'xs' has shape .*expected \(2, 2, 3\)"):
                session.run({x_s: bad})
        with pytest.raises(ValueError, match=r"output streams given .*missing \['ys'\]"):
            session.run_with_outputs({x_s: good}, {})
        with pytest.raises(ValueError, match=r"'ys' has shape \(2, 3\)"):
            session.run_with_outputs({x_s: good}, {y_s: np.zeros((R, 3), np.float32)})
        data = np.arange(nht * R * 3, dtype=np.float64).reshape(nht, R, 3)  # downcast
        out = session.run({x_s: data})[y_s]
    np.testing.assert_array_equal(out[0], data[0] + 1)
    np.testing.assert_array_equal(out[1], data[0] + 2)


@pytest.mark.parametrize("local, lead_shape", [(2, (2,)), (1, ())])
def test_shape_error_in_a_poprun_job_says_the_replicas_are_the_instances(local, lead_shape):
    """An instance of a job of 4 replicas feeds its own ``local``: an array of every
    replica's data is refused, the message naming this instance's count and the job's."""
    from tremula.popxl.session_io import HostStreams

    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        x_s = popxl.h2d_stream((3,), popxl.float32, name="x")
    io = HostStreams(ir, local, [x_s], [])
    expected = re.escape(
        f"'x' has shape (4, 3); expected {(*lead_shape, 3)} "
        f"([num_host_transfers=1 if > 1] + [replicas={local}, this instance's of the job's 4 "
        f"if > 1] + stream shape (3,))"
    )
    with pytest.raises(ValueError, match=expected):
        io.check_inputs({x_s: np.zeros((4, 3), np.float32)}, downcast=False)
    good = io.check_inputs({x_s: np.zeros((*lead_shape, 3), np.float32)}, downcast=False)
    assert good[x_s].shape == (*lead_shape, 3)
