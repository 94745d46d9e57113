"""Programs that move data to and from the host: stream copies (buffers and callbacks),
remote-buffer copies, and calls of host functions, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_engine_codelets import increment, make_engine, new_graph, var

from tremula import poplar
from tremula.errors import StreamError


# ---- stream copies ----
def _stream_engine(program_count=1):
    g, dev = new_graph()
    x = var(g, 4, tile=None)
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 4)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 4)
    body = poplar.Sequence([poplar.Copy(h2d, x), increment(g, x, by=100), poplar.Copy(x, d2h)])
    return make_engine(g, poplar.Repeat(program_count, body), device=dev)


def test_stream_buffers_are_consumed_and_filled_circularly():
    e = _stream_engine()
    src = np.arange(12, dtype=np.float32).reshape(3, 4)  # three transfers
    dst = np.zeros((5, 4), np.float32)  # five transfers
    e.connect_stream("in", src)
    e.connect_stream("out", dst)
    for _ in range(7):
        e.run()
    want = np.zeros((5, 4), np.float32)
    for k in range(7):
        want[k % 5] = src[k % 3] + 100
    np.testing.assert_array_equal(dst, want)


def test_connecting_a_stream_again_restarts_at_the_new_buffers_first_transfer():
    e = _stream_engine()
    first = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = np.zeros((2, 4), np.float32)
    e.connect_stream("in", first)
    e.connect_stream("out", out)
    e.run()  # consumes transfer 0 of ``first``
    second = first + 50  # same layout: the connection is reused, from transfer 0
    out2 = np.zeros((2, 4), np.float32)
    e.connect_stream("in", second)
    e.connect_stream("out", out2)
    e.run()
    np.testing.assert_array_equal(out2[0], second[0] + 100)
    np.testing.assert_array_equal(out, [first[0] + 100, np.zeros(4)])  # left alone
    third = np.full((3, 4), 7, np.float32)  # another layout: a new, checked connection
    e.connect_stream("in", third)
    e.run()
    np.testing.assert_array_equal(out2[1], third[0] + 100)


def test_host_buffers_are_read_at_each_transfer_not_when_connected():
    e = _stream_engine()
    src = np.zeros(4, np.float32)
    dst = np.zeros(4, np.float32)
    e.connect_stream("in", src)
    e.connect_stream("out", dst)
    for k in range(3):
        src[...] = k
        e.run()
        np.testing.assert_array_equal(dst, np.full(4, k + 100))


def test_stream_transfers_inside_a_repeat():
    e = _stream_engine(program_count=4)
    src = np.arange(8, dtype=np.float32)  # a flat buffer of two transfers
    dst = np.zeros(16, np.float32)
    e.connect_stream("in", src)
    e.connect_stream("out", dst)
    e.run()
    np.testing.assert_array_equal(dst, np.tile(src, 2) + 100)


def test_stream_callbacks_in_both_directions():
    e = _stream_engine(program_count=3)
    sent, received = [], []

    def fill(buf):  # fills in place, returns nothing
        buf[...] = len(sent) * 10 + np.arange(4)
        sent.append(buf.copy())

    e.connect_stream("in", fill)
    e.connect_stream("out", received.append)
    e.run()
    assert len(received) == 3
    for s, r in zip(sent, received):
        np.testing.assert_array_equal(r, s + 100)

    received.clear()
    e.connect_stream("in", lambda buf: np.full(4, 7.0))  # returns the transfer
    e.connect_stream("out", received.append)
    e.run()
    np.testing.assert_array_equal(np.stack(received), np.full((3, 4), 107.0))


# ---- remote buffers ----
def test_remote_buffer_copies_at_constant_offsets():
    g, dev = new_graph()
    rb = g.add_remote_buffer("rb", poplar.FLOAT, 4, repeats=3)
    x = var(g, 4, tile=None, read="x")
    prog = poplar.Sequence(
        [
            poplar.Copy(rb, x, offset=1),
            increment(g, x, by=1),
            poplar.Copy(x, rb, offset=2),
            poplar.Copy(x, rb),
        ]
    )
    e = make_engine(g, prog, device=dev)
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    for r in range(3):
        e.copy_to_remote_buffer("rb", rows[r], r)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), rows[1] + 1)
    np.testing.assert_array_equal(e.copy_from_remote_buffer("rb", 0), rows[1] + 1)
    np.testing.assert_array_equal(e.copy_from_remote_buffer("rb", 1), rows[1])
    np.testing.assert_array_equal(e.copy_from_remote_buffer("rb", 2), rows[1] + 1)


def test_remote_buffer_copies_at_tensor_offsets_of_several_rows():
    g, dev = new_graph()
    rb = g.add_remote_buffer("rb", poplar.INT, 3, repeats=5)
    off = var(g, 2, dtype=poplar.INT, write="off")
    one = var(g, (), dtype=poplar.INT, tile=1, write="one")
    x = var(g, (2, 3), tile=None, dtype=poplar.INT, read="x")
    y = var(g, 3, tile=3, dtype=poplar.INT, read="y")
    prog = poplar.Sequence(
        [
            poplar.Copy(rb, x, offset=off),  # rows off[0], off[1]
            increment(g, x, by=1000),
            poplar.Copy(x, rb, offset=off[::-1]),  # swapped back
            poplar.Copy(rb, y, offset=one),
        ]
    )
    e = make_engine(g, prog, device=dev)
    rows = np.arange(15, dtype=np.int32).reshape(5, 3)
    for r in range(5):
        e.copy_to_remote_buffer("rb", rows[r], r)
    e.write_tensor("off", [3, 0])
    e.write_tensor("one", 3)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), rows[[3, 0]] + 1000)
    want = rows.copy()
    want[[0, 3]] = rows[[3, 0]] + 1000
    for r in range(5):
        np.testing.assert_array_equal(e.copy_from_remote_buffer("rb", r), want[r])
    np.testing.assert_array_equal(e.read_tensor("y"), want[3])


# ---- host functions ----
def _host_function_engine():
    g, dev = new_graph()
    a = var(g, 4, tile=None, write="a")
    b = var(g, 4, tile=1, read="b")
    n = var(g, (), tile=2, dtype=poplar.INT, read="n")
    hf = g.add_host_function("stats", [(poplar.FLOAT, 4)], [(poplar.FLOAT, 4), (poplar.INT, 1)])
    e = make_engine(g, poplar.Call(hf, [a], [b, n]), device=dev)
    e.write_tensor("a", [1, -2, 3, -4])
    return e


def test_host_function_returning_its_outputs():
    e = _host_function_engine()
    seen = []

    def stats(inputs, outputs):
        seen.append([x.copy() for x in inputs])
        return [np.cumsum(inputs[0]), np.array([np.count_nonzero(inputs[0] > 0)])]

    e.connect_host_function("stats", stats)
    e.run()
    np.testing.assert_array_equal(seen[0][0], [1, -2, 3, -4])
    np.testing.assert_array_equal(e.read_tensor("b"), [1, -1, 2, -2])
    assert e.read_tensor("n") == 2


def test_host_function_filling_its_outputs_in_place():
    e = _host_function_engine()

    def stats(inputs, outputs):
        outputs[0][...] = inputs[0] * 2
        outputs[1][...] = 4

    e.connect_host_function("stats", stats)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), [2, -4, 6, -8])
    assert e.read_tensor("n") == 4


def _replicated_host_function_engine():
    g, dev = new_graph(replicas=2, num_ipus=2)
    a = var(g, 3, tile=None, write="a")
    b = var(g, 3, tile=1, read="b")
    hf = g.add_host_function("f", [(poplar.FLOAT, 3)], [(poplar.FLOAT, 3)])
    e = make_engine(g, poplar.Call(hf, [a], [b]), device=dev)
    e.write_tensor("a", [[1, 2, 3], [10, 20, 30]])
    return e


def test_host_function_called_once_per_replica_or_once_for_all_replicas():
    e = _replicated_host_function_engine()
    calls = []

    def each(inputs, outputs):
        calls.append(inputs[0].shape)
        outputs[0][...] = inputs[0] * 2

    e.connect_host_function("f", each)
    e.run()
    assert calls == [(3,), (3,)]
    np.testing.assert_array_equal(e.read_tensor("b"), [[2, 4, 6], [20, 40, 60]])

    calls.clear()

    def together(inputs, outputs):  # [replica, n]: the replicas' rows summed
        calls.append(inputs[0].shape)
        return [np.broadcast_to(inputs[0].sum(0), inputs[0].shape)]

    e.connect_host_function("f", together, all_replicas=True)
    e.run()
    assert calls == [(2, 3)]
    np.testing.assert_array_equal(e.read_tensor("b"), [[11, 22, 33], [11, 22, 33]])


def test_whole_remote_buffers_are_written_and_read_per_replica():
    g, dev = new_graph(replicas=2, num_ipus=2)
    rb = g.add_remote_buffer("rb", poplar.FLOAT, 2, repeats=3)
    x = var(g, 2, tile=None, read="x")
    e = make_engine(g, poplar.Copy(rb, x, offset=2), device=dev)
    rows = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    e.write_remote_buffer("rb", rows[0])  # every replica
    e.write_remote_buffer("rb", rows[1], replica=1)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), [rows[0, 2], rows[1, 2]])
    np.testing.assert_array_equal(e.read_remote_buffer("rb", 1), rows[1])
    with pytest.raises(StreamError, match="holds 3 repeats of 2"):
        e.write_remote_buffer("rb", np.zeros(5))
    with pytest.raises(StreamError, match="replica 2 out of range"):
        e.read_remote_buffer("rb", 2)
