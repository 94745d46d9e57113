"""Session inputs and outputs (issue 15): values an integer stream cannot hold are refused
rather than truncated, outputs must be writable arrays of the stream's type, and inputs keyed
wrongly (by name, by another Ir's stream) are explained. Each error names the stream and
leaves the session usable."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops


def _int_program():
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((3,), popxl.int32, "x")
        y_s = popxl.d2h_stream((3,), popxl.int32, "y")
        ops.host_store(y_s, ops.host_load(x_s) + 1)
    return ir, x_s, y_s


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ([2.7, 0, 0], r"stream 'x'.*2.7 at index 0 cannot become int \(not a whole number\)"),
        ([0, np.nan, 0], r"stream 'x'.*nan at index 1 cannot become int \(not a number\)"),
        ([0, 0, 1e10], r"stream 'x'.*10000000000.0 at index 2 .*outside"),
        (np.array([0, 0, 2**40]), r"stream 'x'.*1099511627776 at index 2"),
    ],
)
@pytest.mark.parametrize("downcast", [True, False])
def test_values_an_integer_stream_cannot_hold_are_refused(value, match, downcast):
    ir, x_s, y_s = _int_program()
    with popxl.Session(ir, "ipu_model") as session:
        with pytest.raises(ValueError, match=match):
            session.run({x_s: value}, downcast_inputs=downcast)
        out = session.run({x_s: [1.0, -2.0, 3.0]}, downcast_inputs=downcast)[y_s]  # exact
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [2, -1, 4])


@pytest.mark.parametrize(
    ("output", "error", "match"),
    [
        (np.zeros(3, np.float32), TypeError, r"stream 'y' is float32; the stream is int32"),
        (np.zeros(3, np.int64), TypeError, r"stream 'y' is int64"),
        ([0, 0, 0], TypeError, r"stream 'y' must be a NumPy array, got list"),
        ("readonly", ValueError, r"stream 'y' is read-only"),
    ],
)
def test_an_output_the_run_cannot_fill_exactly_is_refused(output, error, match):
    ir, x_s, y_s = _int_program()
    if isinstance(output, str):
        output = np.zeros(3, np.int32)
        output.flags.writeable = False
    with popxl.Session(ir, "ipu_model") as session:
        with pytest.raises(error, match=match):
            session.run_with_outputs({x_s: np.arange(3, dtype=np.int32)}, {y_s: output})
        good = np.zeros((4, 2), np.int32)[:3, 0]  # a strided array is filled through its view
        session.run_with_outputs({x_s: np.arange(3, dtype=np.int32)}, {y_s: good})
    np.testing.assert_array_equal(good, [1, 2, 3])


def test_inputs_keyed_by_name_or_by_another_irs_stream_are_explained():
    ir = _int_program()[0]
    other_x = _int_program()[1]
    with popxl.Session(ir, "ipu_model") as session:
        with pytest.raises(ValueError) as by_name:
            session.run({"x": np.arange(3, dtype=np.int32)})
        with pytest.raises(ValueError) as by_other:
            session.run({other_x: np.arange(3, dtype=np.int32)})
        with pytest.raises(ValueError) as not_a_stream:
            session.run({3: np.arange(3, dtype=np.int32)})
    assert str(by_name.value) == (
        "Session.run: the input streams given are not the ones the program uses "
        "(expected ['x']; missing ['x']); 'x' is a name: key by the stream 'x' itself, not by "
        "its name"
    )
    assert "stream 'x' belongs to another Ir, not this session's" in str(by_other.value)
    assert "3 (int) is not a stream" in str(not_a_stream.value)


@pytest.mark.parametrize(("transfers", "replicas"), [(1, 1), (3, 1), (1, 2), (3, 2)])
def test_full_input_shape_is_the_shape_a_run_takes(transfers, replicas):
    """``Session._full_input_shape`` (PopXL's helper, which Graphcore's models call to make
    their inputs): ``[transfers if > 1] + [replicas if > 1] + shape``; arrays of that shape
    run, and each transfer of each replica gets its own slice."""
    ir = popxl.Ir()
    ir.replication_factor = replicas
    ir.num_host_transfers = transfers
    with ir.main_graph:
        x_s = popxl.h2d_stream((2,), popxl.float32, "x")
        y_s = popxl.d2h_stream((2,), popxl.float32, "y")
        for _ in range(transfers):
            ops.host_store(y_s, ops.host_load(x_s) * 2)
    with popxl.Session(ir, "ipu_model") as session:
        shape = session._full_input_shape(x_s.shape)
        assert shape == (transfers,) * (transfers > 1) + (replicas,) * (replicas > 1) + (2,)
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        out = session.run({x_s: x})[y_s]
    np.testing.assert_array_equal(out, x * 2)


@pytest.mark.parametrize("replication", [1, 2])
def test_zero_element_streams_move_nothing_beside_others(replication):
    """A stream of a zero-element tensor (shape (2, 0)) loads and stores nothing, and the
    session returns an empty array of its shape, while the other streams of the same run
    carry their values."""
    ir = popxl.Ir(replication=replication)
    with ir.main_graph, popxl.in_sequence():
        empty_in = popxl.h2d_stream((2, 0), popxl.float32, "empty")
        full_in = popxl.h2d_stream((2,), popxl.float32, "full")
        e = ops.host_load(empty_in)
        f = ops.host_load(full_in)
        empty_out = popxl.d2h_stream(e.shape, e.dtype, "empty_out")
        full_out = popxl.d2h_stream(f.shape, f.dtype, "full_out")
        ops.host_store(empty_out, e * 2)
        ops.host_store(full_out, f + 1)
    lead = (replication,) if replication > 1 else ()
    values = np.arange(2 * replication, dtype=np.float32).reshape(*lead, 2)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({empty_in: np.zeros((*lead, 2, 0), np.float32), full_in: values})
    assert out[empty_out].shape == (*lead, 2, 0)
    np.testing.assert_array_equal(out[full_out], values + 1)


class _Sub(np.ndarray):
    """An ndarray subclass (taken through the conversion, not as it is)."""


def test_inputs_taken_as_they_are_give_the_bits_of_converted_ones():
    """An input that is already a C-contiguous array of the stream's type and shape is read
    in place (issue 27); other forms of the same values (a list, float64, a strided view, a
    subclass) go through the conversion: every run gives the same bits, and changing an
    array after its run changes nothing the run returned."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((4, 5), popxl.float32, "x")
        k_s = popxl.h2d_stream((4,), popxl.int32, "k")
        y_s = popxl.d2h_stream((4, 3), popxl.float32, "y")
        j_s = popxl.d2h_stream((4,), popxl.int32, "j")
        y = ops.matmul(ops.host_load(x_s), popxl.constant(w))
        ops.host_store(y_s, ops.relu(y))
        ops.host_store(j_s, ops.host_load(k_s) * 3)
    k = np.array([1, -2, 7, 0], np.int32)
    wide = np.zeros((4, 10), np.float32)
    wide[:, ::2] = x
    forms = [
        (x, k),
        (x.tolist(), k.tolist()),
        (x.astype(np.float64), k.astype(np.int64)),
        (wide[:, ::2], np.repeat(k, 2)[::2]),
        (x.view(_Sub), k.copy()),
    ]
    want_y = np.maximum(x @ w, 0)
    with popxl.Session(ir, "cpu") as session:
        results = [session.run({x_s: a, k_s: b}) for a, b in forms]
        same = x.copy()
        out = session.run({x_s: same, k_s: k})
        same[...] = 0  # after the run: its outputs are already filled
        again = session.run({x_s: x, k_s: k})
        strided = np.repeat(k, 2)[::2]
        taken = session._io.check_inputs({x_s: x, k_s: strided}, True)
    assert taken[x_s] is x  # read in place
    assert taken[k_s].flags.c_contiguous and not np.shares_memory(taken[k_s], strided)
    first = results[0]
    np.testing.assert_allclose(first[y_s], want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(first[j_s], k * 3)
    for r in [*results[1:], out, again]:
        assert r[y_s].tobytes() == first[y_s].tobytes()
        assert r[j_s].tobytes() == first[j_s].tobytes()


def test_inputs_keyed_wrongly_are_still_explained_after_fast_runs():
    ir, x_s, y_s = _int_program()
    with popxl.Session(ir, "ipu_model") as session:
        ok = session.run({x_s: np.arange(3, dtype=np.int32)})[y_s]
        with pytest.raises(ValueError, match=r"'x' is a name: key by the stream 'x' itself"):
            session.run({"x": np.arange(3, dtype=np.int32)})
        with pytest.raises(ValueError, match=r"missing \['x'\]"):
            session.run({})
        with pytest.raises(ValueError, match=r"stream 'x' has shape \(4,\)"):
            session.run({x_s: np.arange(4, dtype=np.int32)})
        np.testing.assert_array_equal(ok, [1, 2, 3])
        np.testing.assert_array_equal(session.run({x_s: np.arange(3, dtype=np.int32)})[y_s], ok)


def _stream_buffer(session, stream) -> np.ndarray:
    return session._engine.runtime.streams[stream.tensor_id].buffer


def test_run_fills_its_new_outputs_in_place_and_earlier_results_keep_their_values():
    """``run`` hands the device its new output arrays as the stream buffers (one replica, no
    other program): the values are run_with_outputs' (which fills through a copy), and the
    arrays of an earlier run keep theirs after later runs."""
    ir, x_s, y_s = _int_program()
    with popxl.Session(ir, "ipu_model") as session:
        first = session.run({x_s: np.array([1, 2, 3], np.int32)})[y_s]
        assert np.shares_memory(first, _stream_buffer(session, y_s))  # the path taken
        second = session.run({x_s: np.array([-5, 0, 2**31 - 2], np.int32)})[y_s]
        given = np.full(3, 7, np.int32)
        session.run_with_outputs({x_s: np.array([-5, 0, 2**31 - 2], np.int32)}, {y_s: given})
        assert not np.shares_memory(given, _stream_buffer(session, y_s))  # through a copy
    np.testing.assert_array_equal(first, [2, 3, 4])
    np.testing.assert_array_equal(second, [-4, 1, 2**31 - 1])
    np.testing.assert_array_equal(given, second)


def test_run_fills_through_a_copy_when_another_program_writes_the_stream():
    """A weights-to-host fragment that stores into the run's output stream runs after the
    run returned: ``run``'s result is filled through a copy, so the fragment's later store
    does not reach it."""
    from popxl.context import _execution_context

    ir, x_s, y_s = _int_program()
    with ir.main_graph:
        w = popxl.variable(np.array([5, 6, 7], np.int32), name="w")
        with _execution_context(popxl.ExecutionContext.WeightsToHostFragment):
            ops.host_store(y_s, w + 100)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({x_s: np.array([1, 2, 3], np.int32)})[y_s]
        assert not np.shares_memory(out, _stream_buffer(session, y_s))
        session.weights_to_host()
        np.testing.assert_array_equal(_stream_buffer(session, y_s).reshape(-1), [105, 106, 107])
    np.testing.assert_array_equal(out, [2, 3, 4])
