"""Host data: handles, persistence, constants and initial values, several programs, and
replication (per-replica streams, tensors, control flow and remote buffers)."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_engine_codelets import const, execute, increment, make_engine, new_graph, var

from tremula import poplar

R = 4  # replicas


# ---- handles and persistence ----
def test_write_then_read_through_handles_of_views():
    g, dev = new_graph()
    x = var(g, (3, 4), tile=None, dtype=poplar.INT)
    g.create_host_write("col", x[:, 1])
    g.create_host_write("all", x)
    g.create_host_read("row", x[2])
    g.create_host_read("xT", x.transpose())
    e = make_engine(g, poplar.Sequence(), device=dev)
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    e.write_tensor("all", data)
    e.write_tensor("col", [-1, -2, -3])
    data[:, 1] = [-1, -2, -3]
    np.testing.assert_array_equal(e.read_tensor("xT"), data.T)
    out = np.zeros(4, np.int32)
    assert e.read_tensor("row", out=out) is out
    np.testing.assert_array_equal(out, data[2])


def test_values_written_by_the_host_are_converted_to_the_tensor_type():
    g, dev = new_graph()
    var(g, 3, dtype=poplar.HALF, write="h", read="h_out")
    e = make_engine(g, poplar.Sequence(), device=dev)
    e.write_tensor("h", [0.5, 1.25, 3.0])
    got = e.read_tensor("h_out")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, [0.5, 1.25, 3.0])


def test_variables_persist_across_runs():
    g, dev = new_graph()
    x = var(g, 5, tile=None, write="x", read="x_out")
    e = make_engine(g, increment(g, x, by=2), device=dev)
    e.write_tensor("x", np.arange(5))
    for _ in range(3):
        e.run()
    np.testing.assert_array_equal(e.read_tensor("x_out"), np.arange(5) + 6)


def test_variables_start_at_zero():
    g, dev = new_graph()
    var(g, 6, tile=None, dtype=poplar.INT, read="x")
    e = make_engine(g, poplar.Sequence(), device=dev)
    np.testing.assert_array_equal(e.read_tensor("x"), np.zeros(6))


# ---- constants and initial values ----
def test_constants_and_initial_values():
    g, dev = new_graph()
    c = const(g, [[1.5, 2.5], [3.5, 4.5]], tile=3)
    x = var(g, (2, 2), tile=1, read="x")
    y = var(g, 3, tile=2, dtype=poplar.INT, read="y")
    g.set_initial_value(y, 7)  # broadcast
    z = var(g, (2, 2), tile=0, read="z")
    cs = g.add_compute_set("scale")
    v = g.add_vertex(cs, "Scale<float>", {"x": c.flatten(), "y": z.flatten()}, tile=0)
    g.set_initial_value(v["a"], -1.0)  # vertex state
    e = make_engine(
        g,
        poplar.Sequence([poplar.Copy(c, x), poplar.Execute(cs), increment(g, y, by=1, tile=2)]),
        device=dev,
    )
    np.testing.assert_array_equal(e.read_tensor("y"), [7, 7, 7])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), [[1.5, 2.5], [3.5, 4.5]])
    np.testing.assert_array_equal(e.read_tensor("z"), [[-1.5, -2.5], [-3.5, -4.5]])
    np.testing.assert_array_equal(e.read_tensor("y"), [8, 8, 8])
    e.load(dev)  # loading again restores the initial values
    np.testing.assert_array_equal(e.read_tensor("y"), [7, 7, 7])
    np.testing.assert_array_equal(e.read_tensor("x"), np.zeros((2, 2)))


# ---- several programs in one engine ----
def test_programs_of_one_engine_share_variables():
    g, dev = new_graph()
    x = var(g, 4, tile=None)
    y = var(g, 4, tile=None, read="y")
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 4)
    load = poplar.Copy(h2d, x)
    scale = execute(g, "Scale<float>", {"x": x, "y": y, "a": 10.0}, tile=1)
    bump = increment(g, x, by=1)
    e = make_engine(g, [load, scale, bump], device=dev)
    e.connect_stream("in", np.arange(4, dtype=np.float32))
    e.run(0)
    e.run(1)
    np.testing.assert_array_equal(e.read_tensor("y"), 10 * np.arange(4))
    e.run(2)
    e.run(2)
    e.run(1)
    np.testing.assert_array_equal(e.read_tensor("y"), 10 * (np.arange(4) + 2))
    assert len(e.get_graph_profile()["controlPrograms"]) == 3


# ---- replication ----
def _replicated():
    return new_graph(tiles=4, replicas=R)


def test_replicated_streams_have_one_buffer_per_replica():
    g, dev = _replicated()
    x = var(g, 3, tile=None)
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 3)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 3)
    body = poplar.Sequence([poplar.Copy(h2d, x), increment(g, x, by=1), poplar.Copy(x, d2h)])
    e = make_engine(g, poplar.Repeat(2, body), device=dev)
    src = np.arange(R * 6, dtype=np.float32).reshape(R, 6)  # two transfers per replica
    dst = np.zeros((R, 6), np.float32)
    e.connect_stream("in", src)
    e.connect_stream("out", dst)
    e.run()
    np.testing.assert_array_equal(dst, src + 1)


def test_broadcast_stream_feeds_every_replica_from_one_buffer():
    g, dev = _replicated()
    x = var(g, 2, tile=1, dtype=poplar.INT, read="x")
    h2d = g.add_host_to_device_fifo("in", poplar.INT, 2, replication_mode="broadcast")
    e = make_engine(g, poplar.Copy(h2d, x), device=dev)
    e.connect_stream("in", np.array([5, 6, 7, 8], np.int32))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), np.tile([5, 6], (R, 1)))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), np.tile([7, 8], (R, 1)))


def test_replicated_stream_callbacks_see_every_replica():
    g, dev = _replicated()
    x = var(g, 2, tile=None)
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 2)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 2)
    e = make_engine(
        g,
        poplar.Sequence([poplar.Copy(h2d, x), increment(g, x, by=1), poplar.Copy(x, d2h)]),
        device=dev,
    )
    got = []
    e.connect_stream("in", lambda buf: np.arange(buf.size).reshape(buf.shape))
    e.connect_stream("out", got.append)
    e.run()
    assert got[0].shape == (R, 2)
    np.testing.assert_array_equal(got[0], np.arange(2 * R).reshape(R, 2) + 1)


def test_write_and_read_tensors_with_a_replica_axis():
    g, dev = _replicated()
    var(g, (2, 3), tile=None, write="x", read="x_out")
    e = make_engine(g, poplar.Sequence(), device=dev)
    e.write_tensor("x", np.ones((2, 3)))  # one value for every replica
    np.testing.assert_array_equal(e.read_tensor("x_out"), np.ones((R, 2, 3)))
    per = np.arange(R * 6, dtype=np.float32).reshape(R, 2, 3)
    e.write_tensor("x", per)
    np.testing.assert_array_equal(e.read_tensor("x_out"), per)


def test_if_takes_different_branches_on_different_replicas():
    g, dev = _replicated()
    p = var(g, (), dtype=poplar.INT, write="p")
    x = var(g, 3, tile=None, write="x")
    y = var(g, 3, tile=2, read="y")
    d2h = g.add_device_to_host_fifo("then", poplar.FLOAT, 3)
    then = poplar.Sequence(
        [execute(g, "Scale<float>", {"x": x, "y": y, "a": 2.0}), poplar.Copy(y, d2h)]
    )
    else_ = execute(g, "Scale<float>", {"x": x, "y": y, "a": -1.0})
    e = make_engine(g, poplar.If(p, then, else_), device=dev)
    out = np.zeros((R, 3), np.float32)
    e.connect_stream("then", out)
    flags = np.array([1, 0, 1, 0])
    e.write_tensor("p", flags)
    data = np.arange(R * 3, dtype=np.float32).reshape(R, 3) + 1
    e.write_tensor("x", data)
    e.run()
    scale = np.where(flags, 2.0, -1.0)[:, None]
    np.testing.assert_array_equal(e.read_tensor("y"), scale * data)
    np.testing.assert_array_equal(out, np.where(flags[:, None] == 1, 2 * data, 0))


@pytest.mark.parametrize("flags", [[0, 1], [1, 0]])
def test_the_program_trace_follows_replica_zero(flags):
    g, dev = new_graph(replicas=2)
    p = var(g, (), dtype=poplar.INT, write="p")
    x = var(g, 2, write="x")
    then = poplar.Sequence([increment(g, x), increment(g, x)], name="then")
    else_ = poplar.Sequence([increment(g, x, by=3)], name="else")
    e = make_engine(g, poplar.If(p, then, else_), device=dev)
    e.write_tensor("p", flags)
    e.run()
    programs = e.get_graph_profile()["programs"]
    trace = [programs[i] for i in e.get_execution_profile()["programTrace"]]
    names = [p.get("name") for p in trace if p["type"] == "Sequence"]
    assert names == ["then" if flags[0] else "else"]
    assert [p["type"] for p in trace].count("OnTileExecute") == (2 if flags[0] else 1)


def test_host_functions_are_called_once_per_replica():
    g, dev = new_graph(replicas=3)
    a = var(g, 2, tile=None, dtype=poplar.INT, write="a")
    b = var(g, 2, tile=None, dtype=poplar.INT, read="b")
    hf = g.add_host_function("f", [(poplar.INT, 2)], [(poplar.INT, 2)])
    e = make_engine(g, poplar.Call(hf, [a], [b]), device=dev)
    calls = []

    def f(ins, outs):
        calls.append(ins[0].tolist())
        outs[0][...] = ins[0][::-1] * 10

    e.connect_host_function("f", f)
    data = np.arange(6).reshape(3, 2)
    e.write_tensor("a", data)
    e.run()
    assert calls == data.tolist()
    np.testing.assert_array_equal(e.read_tensor("b"), data[:, ::-1] * 10)


def test_repeat_while_and_switch_per_replica():
    g, dev = _replicated()
    i = var(g, (), dtype=poplar.INT, write="i", read="i_out")
    pred = var(g, (), dtype=poplar.BOOL)
    cond = execute(g, "LessThan", {"x": i, "out": pred, "limit": 5})
    loop = poplar.RepeatWhileTrue(cond, pred, increment(g, i))
    y = var(g, (), dtype=poplar.INT, tile=3, read="y")
    sw = poplar.Switch(
        i,
        [(5, increment(g, y, by=1, tile=3)), (6, increment(g, y, by=2, tile=3))],
        increment(g, y, by=3, tile=3),
    )
    e = make_engine(g, poplar.Sequence([loop, sw]), device=dev)
    start = np.array([0, 5, 6, 9])
    e.write_tensor("i", start.reshape(R, 1))
    e.run()
    final = np.maximum(start, 5)
    np.testing.assert_array_equal(e.read_tensor("i_out"), final)
    np.testing.assert_array_equal(e.read_tensor("y"), [1, 1, 2, 3])


def test_remote_buffers_hold_one_copy_per_replica():
    g, dev = _replicated()
    rb = g.add_remote_buffer("rb", poplar.FLOAT, 2, repeats=2)
    off = var(g, (), dtype=poplar.INT, write="off")
    x = var(g, 2, tile=None, read="x")
    prog = poplar.Sequence(
        [poplar.Copy(rb, x, offset=off), increment(g, x, by=1), poplar.Copy(x, rb, offset=1)]
    )
    e = make_engine(g, prog, device=dev)
    for r in range(R):
        e.copy_to_remote_buffer("rb", [10 * r, 10 * r + 1], 0, replica=r)
    e.copy_to_remote_buffer("rb", [-1, -1], 1)  # every replica
    e.write_tensor("off", np.array([0, 1, 0, 1]))
    e.run()
    for r in range(R):
        row = [10 * r, 10 * r + 1] if r % 2 == 0 else [-1, -1]
        np.testing.assert_array_equal(e.read_tensor("x")[r], np.add(row, 1))
        np.testing.assert_array_equal(e.copy_from_remote_buffer("rb", 1, replica=r), np.add(row, 1))
        np.testing.assert_array_equal(
            e.copy_from_remote_buffer("rb", 0, replica=r), [10 * r, 10 * r + 1]
        )


@pytest.mark.parametrize("replicas", [1, 2])
def test_print_tensor_names_the_replica(replicas, capsys):
    g, dev = new_graph(replicas=replicas)
    x = var(g, 2, tile=None, dtype=poplar.INT, write="x")
    e = make_engine(g, poplar.PrintTensor("v", x), device=dev)
    e.write_tensor("x", np.arange(2 * replicas).reshape(replicas, 2))
    e.run()
    lines = capsys.readouterr().out.splitlines()
    if replicas == 1:
        assert lines == ["v: [0, 1]"]
    else:
        assert lines == ["v (replica 0): [0, 1]", "v (replica 1): [2, 3]"]
