"""Engine misuse raises Tremula's errors, naming what is at fault; a failed call leaves the
engine usable."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_engine_codelets import increment, make_engine, new_graph, var

from tremula import poplar
from tremula.engine.options import parse_options
from tremula.errors import CodeletError, EngineError, OutOfMemoryError, StreamError


def _stream_engine(replicas=1, load=True):
    g, dev = new_graph(replicas=replicas)
    x = var(g, 4, tile=None, write="x", read="x_out")
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 4)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 4)
    e = make_engine(
        g,
        poplar.Sequence([poplar.Copy(h2d, x), increment(g, x), poplar.Copy(x, d2h)]),
        device=dev if load else None,
    )
    return e, dev


# ---- order of use ----
def test_run_and_data_movement_before_load():
    e, dev = _stream_engine(load=False)
    for call in (
        lambda: e.run(0),
        lambda: e.write_tensor("x", np.zeros(4)),
        lambda: e.read_tensor("x_out"),
        lambda: e.connect_stream("in", np.zeros(4)),
    ):
        with pytest.raises(EngineError, match="not loaded"):
            call()
    e.load(dev)
    e.write_tensor("x", np.ones(4))
    np.testing.assert_array_equal(e.read_tensor("x_out"), np.ones(4))


def test_program_index_out_of_range():
    e, _ = _stream_engine()
    for index in (1, -1):
        with pytest.raises(EngineError, match=rf"program index {index} out of range.* 1 "):
            e.run(index)


def test_engine_needs_a_graph_and_programs():
    g, _ = new_graph()
    with pytest.raises(EngineError, match=r"expected a poplar\.Graph"):
        poplar.Engine("graph", poplar.Sequence())
    with pytest.raises(EngineError, match="program 1 is a str"):
        poplar.Engine(g, [poplar.Sequence(), "run"])


def test_load_on_a_device_of_another_shape():
    e, _ = _stream_engine(load=False)
    other = poplar.IPUModel(tiles_per_ipu=8).create_device()
    with pytest.raises(EngineError, match=r"tiles_per_ipu is 8 .* compiled for 4"):
        e.load(other)
    with pytest.raises(EngineError, match="expected a poplar Device"):
        e.load("ipu")


# ---- streams ----
@pytest.mark.parametrize("size", [3, 5, 0])
def test_stream_buffer_of_the_wrong_size(size):
    e, _ = _stream_engine()
    with pytest.raises(
        StreamError,
        match=rf"stream 'in': host buffer has {size} elements; "
        rf"expected a positive multiple of 4",
    ):
        e.connect_stream("in", np.zeros(size, np.float32))


def test_replicated_stream_buffer_without_a_replica_axis():
    e, _ = _stream_engine(replicas=2)
    with pytest.raises(
        StreamError,
        match=r"stream 'out': host buffer of shape \(8,\); "
        r"expected shape \(2, k \* 4\)",
    ):
        e.connect_stream("out", np.zeros(8, np.float32))
    e.connect_stream("out", np.zeros((2, 8), np.float32))


def test_device_to_host_buffer_must_be_writable_in_place():
    e, _ = _stream_engine()
    with pytest.raises(StreamError, match="C-contiguous"):
        e.connect_stream("out", np.zeros((4, 2), np.float32).T)


def test_unconnected_stream_used_by_a_run():
    e, _ = _stream_engine()
    with pytest.raises(StreamError, match=r"stream 'in' is used .* not connected"):
        e.run()
    e.connect_stream("in", np.zeros(4, np.float32))
    with pytest.raises(StreamError, match=r"stream 'out' is used .* not connected"):
        e.run()


def test_unknown_stream_and_handle_names():
    e, _ = _stream_engine()
    with pytest.raises(StreamError, match=r"no stream named 'nope'; streams: \['in', 'out'\]"):
        e.connect_stream("nope", np.zeros(4))
    with pytest.raises(StreamError, match=r"write_tensor: no handle named 'x_out'"):
        e.write_tensor("x_out", np.zeros(4))
    with pytest.raises(StreamError, match=r"read_tensor: no handle named 'x'; handles: "):
        e.read_tensor("x")
    with pytest.raises(EngineError, match="no host function named 'f'"):
        e.connect_host_function("f", print)


def test_host_data_of_the_wrong_size():
    e, _ = _stream_engine()
    with pytest.raises(StreamError, match=r"write_tensor\('x'\): data of shape \(5,\)"):
        e.write_tensor("x", np.zeros(5))
    with pytest.raises(StreamError, match="output buffer has 3 elements, tensor has 4"):
        e.read_tensor("x_out", out=np.zeros(3, np.float32))


# ---- options ----
@pytest.mark.parametrize(
    "options, match",
    [
        ({"debug.colour": "blue"}, r"unknown engine option\(s\) \['debug.colour'\]"),
        (
            {"debug.executionProfile": "everything"},
            r"'debug.executionProfile': 'everything' unknown",
        ),
        ({"autoReport.all": "maybe"}, r"'autoReport.all': expected 'true' or 'false'"),
        ({"debug.allowOutOfMemory": "sometimes"}, r"'debug.allowOutOfMemory'"),
    ],
)
def test_bad_engine_options(options, match):
    g, _ = new_graph()
    var(g, 2)
    with pytest.raises(EngineError, match=match):
        poplar.Engine(g, poplar.Sequence(), options)


@pytest.mark.parametrize(
    "text, match",
    [
        ("{nope", "not valid JSON"),
        ("[1]", "JSON object"),
        ('{"debug.colour": "blue"}', "debug.colour"),
    ],
)
def test_bad_engine_options_from_the_environment(monkeypatch, text, match):
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", text)
    g, _ = new_graph()
    with pytest.raises(EngineError, match=match):
        poplar.Engine(g, poplar.Sequence())


# ---- remote buffers and host functions at run time ----
def test_remote_offset_out_of_range_at_run_time():
    g, dev = new_graph()
    rb = g.add_remote_buffer("rb", poplar.FLOAT, 2, repeats=3)
    off = var(g, 2, dtype=poplar.INT, write="off")
    x = var(g, (2, 2), tile=None, read="x")
    e = make_engine(g, poplar.Copy(rb, x, offset=off), device=dev)
    e.copy_to_remote_buffer("rb", [1, 2], 2)
    for bad, shown in (([0, 3], 3), ([-1, 0], -1)):
        e.write_tensor("off", bad)
        with pytest.raises(
            EngineError,
            match=rf"remote buffer 'rb': row offset {shown} out "
            rf"of range \[0, 3\)",
        ):
            e.run()
    e.write_tensor("off", [2, 2])  # the engine is still usable
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), [[1, 2], [1, 2]])


def test_remote_buffer_host_access_errors():
    g, dev = new_graph()
    g.add_remote_buffer("rb", poplar.FLOAT, 2, repeats=3)
    e = make_engine(g, poplar.Sequence(), device=dev)
    with pytest.raises(StreamError, match=r"repeat index 3 out of range \[0, 3\)"):
        e.copy_to_remote_buffer("rb", [1, 2], 3)
    with pytest.raises(StreamError, match="3 elements, rows have 2"):
        e.copy_to_remote_buffer("rb", [1, 2, 3], 0)
    with pytest.raises(StreamError, match="no remote buffer named 'rc'"):
        e.copy_from_remote_buffer("rc")
    e.copy_to_remote_buffer("rb", [1, 2], 0)
    np.testing.assert_array_equal(e.copy_from_remote_buffer("rb"), [1, 2])


def test_remote_buffer_replica_out_of_range():
    g, dev = new_graph(replicas=2)
    g.add_remote_buffer("rb", poplar.FLOAT, 2)
    e = make_engine(g, poplar.Sequence(), device=dev)
    with pytest.raises(StreamError, match="rb"):
        e.copy_from_remote_buffer("rb", 0, replica=2)
    with pytest.raises(StreamError, match="rb"):
        e.copy_to_remote_buffer("rb", [1, 2], 0, replica=2)


def test_host_function_not_connected_or_returning_too_few_arrays():
    g, dev = new_graph()
    a, b = var(g, 2, write="a"), var(g, 2, tile=1, read="b")
    hf = g.add_host_function("f", [(poplar.FLOAT, 2)], [(poplar.FLOAT, 2)])
    e = make_engine(g, poplar.Call(hf, [a], [b]), device=dev)
    with pytest.raises(EngineError, match=r"host function 'f' .* not connected"):
        e.run()
    e.connect_host_function("f", lambda ins, outs: [ins[0], ins[0]])
    with pytest.raises(EngineError, match="returned 2 arrays, declared 1 outputs"):
        e.run()
    with pytest.raises(EngineError, match="is not callable"):
        e.connect_host_function("f", 3)
    e.connect_host_function("f", lambda ins, outs: ins[0] + 1)  # one array for one output
    e.write_tensor("a", [1, 2])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), [2, 3])


# ---- memory ----
TINY = {
    "memory_bytes_per_tile": 4096,
    "memory_element_bytes": 1024,
    "interleaved_memory_element_index": 2,
}


def _huge_variable_graph():
    g, dev = new_graph(tiles=4, **TINY)
    big = var(g, 2000, tile=1, name="big", write="big")  # 8000 bytes on a 4096-byte tile
    small = var(g, 8, tile=None, read="small")
    return g, dev, big, small


def test_a_tile_that_overflows_raises_out_of_memory_naming_it():
    g, _, big, small = _huge_variable_graph()
    with pytest.raises(OutOfMemoryError, match=r"1 tile\(s\) exceed 4,096 bytes") as err:
        poplar.Engine(g, poplar.Copy(big[:8], small))
    message = str(err.value)
    assert "tile 1: " in message and "variable" in message
    assert "tile 0:" not in message and "tile 2:" not in message
    assert "debug.allowOutOfMemory" in message
    assert "variables: 'big' 8,000 B" in message  # the variable filling the tile, by name


def test_allow_out_of_memory_builds_the_engine_anyway():
    g, dev, big, small = _huge_variable_graph()
    e = make_engine(g, poplar.Copy(big[:8], small), {"debug.allowOutOfMemory": "true"}, dev)
    e.write_tensor("big", np.arange(2000))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("small"), np.arange(8))
    by_tile = e.get_graph_profile()["memory"]["byTile"]
    assert by_tile["totalIncludingGaps"][1] > 4096
    assert by_tile["overflowed"][1] > 0
    assert by_tile["overflowed"][0] == 0


# ---- recovery ----
def test_a_failed_call_leaves_the_engine_usable():
    e, _ = _stream_engine()
    with pytest.raises(StreamError):
        e.write_tensor("x", np.zeros((2, 3)))
    e.write_tensor("x", np.arange(4))
    np.testing.assert_array_equal(e.read_tensor("x_out"), np.arange(4))
    with pytest.raises(StreamError):
        e.connect_stream("in", np.zeros(3, np.float32))
    out = np.zeros(4, np.float32)
    e.connect_stream("in", np.full(4, 2, np.float32))
    e.connect_stream("out", out)
    e.run()
    np.testing.assert_array_equal(out, np.full(4, 3))


# ---- messages (issue 15) ----
@pytest.mark.parametrize("index", ["0", None, True, 1.0])
def test_a_program_index_that_is_not_an_int_is_named(index):
    g, dev = new_graph()
    var(g, 4, write="x")
    e = make_engine(g, poplar.Sequence(), device=dev)
    with pytest.raises(
        EngineError, match=r"run: the program index must be an int, got " + type(index).__name__
    ):
        e.run(index)
    e.run(0)


def test_a_codelet_writing_a_field_of_the_wrong_shape_is_named():
    class WrongShape(poplar.Codelet):
        name = "WrongShape"
        x = poplar.Input(poplar.FLOAT)
        y = poplar.Output(poplar.FLOAT)

        @staticmethod
        def compute(v):
            v.y = v.x[:, :3]

    g, dev = new_graph()
    g.add_codelets(WrongShape)
    x, y = var(g, (4, 8), tile=None), var(g, (4, 8), tile=None, read="y")
    cs = g.add_compute_set("wrong")
    g.add_vertices(cs, "WrongShape", {"x": x, "y": y}, tiles=range(4))
    e = make_engine(g, poplar.Execute(cs), device=dev)
    with pytest.raises(
        CodeletError,
        match=r"codelet WrongShape: compute wrote field 'y' with a "
        r"value of shape \(1, 3\); the field is \(1, 32\)",
    ):
        e.run()
    np.testing.assert_array_equal(e.read_tensor("y"), np.zeros((4, 8)))  # nothing written


def test_engine_options_from_the_environment_that_clients_set_are_accepted():
    """BERT's benchmark configs set ``target.extendedMemory`` through
    ``POPLAR_ENGINE_OPTIONS``; Poplar takes it, so the model does too (it charges nothing)."""
    text = '{"target.extendedMemory":"true","autoReport.all":"false"}'
    options = parse_options({}, env={"POPLAR_ENGINE_OPTIONS": text})
    assert options == parse_options({}, env={})
    with pytest.raises(EngineError, match=r"unknown engine option\(s\) \['target.colour'\]"):
        parse_options({}, env={"POPLAR_ENGINE_OPTIONS": '{"target.colour": "1"}'})
