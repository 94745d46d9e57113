"""Host buffers are exact (issue 15): a device-to-host stream fills only a writable,
contiguous NumPy array of its type; host data of another type are converted only when every
value is kept; every refusal names the stream or handle and leaves the engine as it was."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_engine_codelets import make_engine, new_graph, var

from tremula import poplar
from tremula.errors import StreamError
from tremula.poplar.types import exact_cast


def _int_copy_engine():
    """in (int, 4) -> x -> out (int, 4), plus handles on x and a remote buffer of ints."""
    g, dev = new_graph()
    x = var(g, 4, dtype=poplar.INT, write="x", read="x_out")
    h2d = g.add_host_to_device_fifo("in", poplar.INT, 4)
    d2h = g.add_device_to_host_fifo("out", poplar.INT, 4)
    g.add_remote_buffer("table", poplar.INT, 4, 2)
    e = make_engine(g, poplar.Sequence([poplar.Copy(h2d, x), poplar.Copy(x, d2h)]), device=dev)
    return e


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@pytest.mark.parametrize(
    ("buffer", "match"),
    [
        ([0, 0, 0, 0], r"stream 'out'.*a NumPy array.*got list"),
        (_readonly(np.zeros(4, np.int32)), r"stream 'out'.*read-only"),
        (np.zeros(4, np.float64), r"stream 'out' is int.*float64.*int32"),
        (np.zeros(4, np.int64), r"stream 'out' is int.*int64"),
        (np.zeros((4, 2), np.int32)[:, 0], r"stream 'out'.*C-contiguous"),
    ],
    ids=["list", "read-only", "float64", "int64", "strided"],
)
def test_an_output_buffer_the_device_cannot_fill_in_place_is_refused(buffer, match):
    e = _int_copy_engine()
    good = np.zeros(4, np.int32)
    e.connect_stream("out", good)
    with pytest.raises(StreamError, match=match):
        e.connect_stream("out", buffer)
    e.connect_stream("in", np.arange(4, dtype=np.int32))
    e.run()  # the earlier connection still holds
    np.testing.assert_array_equal(good, np.arange(4))


def test_a_read_only_buffer_like_the_connected_one_is_refused_too():
    e = _int_copy_engine()
    e.connect_stream("out", np.zeros(4, np.int32))
    with pytest.raises(StreamError, match=r"stream 'out'.*read-only"):
        e.connect_stream("out", _readonly(np.zeros(4, np.int32)))  # the same layout


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([2.7, 0, 0, 0], r"stream 'in': 2.7 at index 0 cannot become int \(not a whole number\)"),
        ([0, np.nan, 0, 0], r"stream 'in': nan at index 1 cannot become int \(not a number\)"),
        ([0, 0, 1e10, 0], r"10000000000.0 at index 2 cannot become int \(outside \[-2147483648, "),
        (np.array([0, 0, 0, 2**40]), r"stream 'in': 1099511627776 at index 3"),
        (["a", "b", "c", "d"], r"stream 'in': <U1 data cannot become int"),
    ],
)
def test_input_values_an_integer_stream_cannot_hold_are_refused(data, match):
    e = _int_copy_engine()
    with pytest.raises(StreamError, match=match):
        e.connect_stream("in", data)
    data = np.asarray(data)
    if data.dtype.kind not in "iuf":
        return
    buffer = np.zeros(4, data.dtype)
    e.connect_stream("in", buffer)  # fine when connected; read again at each transfer
    e.connect_stream("out", np.zeros(4, np.int32))
    buffer[:] = data
    with pytest.raises(StreamError, match=match):
        e.run()


def test_exact_values_of_another_type_are_converted():
    e = _int_copy_engine()
    out = np.zeros(4, np.int32)
    e.connect_stream("in", np.array([1.0, -2.0, 3.0, 2.0**31 - 1]))
    e.connect_stream("out", out)
    e.run()
    np.testing.assert_array_equal(out, [1, -2, 3, 2**31 - 1])
    e.connect_stream("in", [True, False, True, True])
    e.run()
    np.testing.assert_array_equal(out, [1, 0, 1, 1])


def test_a_callback_returning_values_the_stream_cannot_hold_is_refused():
    e = _int_copy_engine()
    e.connect_stream("in", lambda buf: [0.5, 0, 0, 0])
    e.connect_stream("out", np.zeros(4, np.int32))
    with pytest.raises(StreamError, match=r"stream 'in': 0.5 at index 0"):
        e.run()


def test_handles_and_remote_buffers_refuse_lossy_values_and_name_themselves():
    e = _int_copy_engine()
    e.write_tensor("x", [1, 2, 3, 4])
    with pytest.raises(StreamError, match=r"write_tensor\('x'\): 2.5 at index 1"):
        e.write_tensor("x", [1, 2.5, 3, 4])
    np.testing.assert_array_equal(e.read_tensor("x_out"), [1, 2, 3, 4])  # unchanged
    with pytest.raises(StreamError, match=r"copy_to_remote_buffer\('table'\): inf at index 0"):
        e.copy_to_remote_buffer("table", [np.inf, 0, 0, 0], 1)
    np.testing.assert_array_equal(e.copy_from_remote_buffer("table", 1), [0, 0, 0, 0])
    for out, match in (
        (np.zeros(4, np.float32), r"read_tensor\('x_out'\): the output buffer is float32"),
        (_readonly(np.zeros(4, np.int32)), r"read_tensor\('x_out'\): .*read-only"),
        (np.zeros((4, 2), np.int32)[:, 0], r"read_tensor\('x_out'\): .*C-contiguous"),
        ([0, 0, 0, 0], r"read_tensor\('x_out'\): .*NumPy array, got list"),
    ):
        with pytest.raises(StreamError, match=match):
            e.read_tensor("x_out", out=out)


@pytest.mark.parametrize(
    ("data", "dtype", "expected"),
    [
        ([1.5, -2.25], poplar.HALF, [1.5, -2.25]),
        ([0.1], poplar.FLOAT, [np.float32(0.1)]),  # rounded to the nearest float
        ([np.nan, np.inf], poplar.FLOAT, [np.nan, np.inf]),  # kept as they are
        ([255, 0], poplar.UNSIGNED_CHAR, [255, 0]),
        ([1, 0], poplar.BOOL, [True, False]),
    ],
)
def test_exact_cast_keeps_what_the_type_holds(data, dtype, expected):
    got = exact_cast(data, dtype, "x")
    assert got.dtype == dtype.numpy
    np.testing.assert_array_equal(got, np.asarray(expected, dtype=dtype.numpy))


@pytest.mark.parametrize(
    ("data", "dtype", "why"),
    [
        (np.array([-1]), poplar.UNSIGNED_INT, r"outside \[0, 4294967295\]"),
        (np.array([2**63], np.uint64), poplar.LONGLONG, "outside"),
        ([256], poplar.UNSIGNED_CHAR, r"outside \[0, 255\]"),
        ([70000.0], poplar.HALF, "overflows float16 to infinity"),
        ([1e40], poplar.FLOAT, "overflows float32 to infinity"),
        ([2], poplar.BOOL, "a bool holds 0 or 1"),
        ([-np.inf], poplar.INT, "infinite"),
        ([1.5], poplar.QUARTER_F143, "uint8 codes"),
        ([1 + 2j], poplar.FLOAT, "complex128 data cannot become float"),
    ],
)
def test_exact_cast_refuses_what_the_type_cannot_hold(data, dtype, why):
    with pytest.raises(StreamError, match=why):
        exact_cast(data, dtype, "x")


@pytest.mark.parametrize(
    ("data", "dtype", "rule"),
    [
        # issue 30: the message said values must be held exactly, but a float type rounds
        # (0.1 is taken as the nearest float); only what would overflow is refused
        ([0.1, 70000.0], poplar.HALF, "finite values within +-65504"),
        ([0.1, 1e40], poplar.FLOAT, "finite values within +-3.40282e+38"),
        ([2.5], poplar.INT, "whole numbers in [-2147483648, 2147483647]"),
        ([256], poplar.UNSIGNED_CHAR, "whole numbers in [0, 255]"),
        ([2], poplar.BOOL, "0 and 1 (or False and True)"),
    ],
)
def test_a_refused_value_s_message_states_the_rule_the_conversion_applies(data, dtype, rule):
    with pytest.raises(StreamError) as info:
        exact_cast(np.asarray(data), dtype, "x")
    message = str(info.value)
    assert f"Pass {dtype.numpy} data, or {rule}" in message
    if dtype.numpy.kind == "f":  # what the message promises: an inexact value is taken
        assert message.endswith(
            f"(values {dtype} cannot hold exactly are accepted, rounded to the nearest {dtype})"
        )
        np.testing.assert_array_equal(exact_cast([0.1], dtype, "x"), dtype.numpy.type(0.1))
    else:
        assert "exactly" not in message


def test_connect_streams_connects_each_as_connect_stream_does():
    """``connect_streams`` (a session's streams in one call) connects, rebinds and refuses
    as ``connect_stream`` does for each buffer in turn."""
    e = _int_copy_engine()
    out = np.zeros(4, np.int32)
    e.connect_streams({"in": np.array([1, 2, 3, 4], np.int32), "out": out})  # new connections
    e.run()
    np.testing.assert_array_equal(out, [1, 2, 3, 4])
    out2 = np.zeros(4, np.int32)
    e.connect_streams({"in": np.array([4.0, 3.0, -2.0, 1.0]), "out": out2})  # converted input
    e.run()
    np.testing.assert_array_equal(out2, [4, 3, -2, 1])
    e.connect_streams({"in": np.array([9, 8, 7, 6], np.int32)})  # a rebind of the same layout
    e.run()
    np.testing.assert_array_equal(out2, [9, 8, 7, 6])
    with pytest.raises(StreamError, match=r"stream 'out'.*read-only"):
        e.connect_streams({"out": _readonly(np.zeros(4, np.int32))})
    with pytest.raises(StreamError, match=r"no stream named 'nope'"):
        e.connect_streams({"nope": np.zeros(4, np.int32)})
    e.run()  # the earlier connections hold
    np.testing.assert_array_equal(out2, [9, 8, 7, 6])
