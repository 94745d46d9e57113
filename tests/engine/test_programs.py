"""Every program type, run on a small IPU Model and checked against NumPy."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tremula_tests_engine_codelets import const, execute, increment, make_engine, new_graph, var

from tremula import poplar

HYP = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def trace_types(engine: poplar.Engine) -> list[str]:
    programs = engine.get_graph_profile()["programs"]
    return [programs[p]["type"] for p in engine.get_execution_profile()["programTrace"]]


# ---- Sequence and Execute ----
def test_sequence_of_executes_chains_codelets():
    g, dev = new_graph()
    x = var(g, 8, tile=None, write="x")
    y, z = var(g, 8, tile=None), var(g, 8, tile=None, read="z")
    s = var(g, (), tile=2, read="s")
    cs1 = g.add_compute_set("scale")
    g.add_vertices(
        cs1,
        "Scale<float>",
        {"x": x.reshape((4, 2)), "y": y.reshape((4, 2)), "a": [1.0, 2.0, 3.0, 4.0]},
        tiles=range(4),
    )
    prog = poplar.Sequence(
        [
            poplar.Execute(cs1),
            execute(g, "Add<float>", {"a": x, "b": y, "out": z}, tile=1),
            execute(g, "Sum<float>", {"x": z, "out": s}, tile=2),
        ]
    )
    e = make_engine(g, prog, device=dev)
    xs = np.arange(8, dtype=np.float32)
    e.write_tensor("x", xs)
    e.run(0)
    want = xs + np.repeat([1.0, 2.0, 3.0, 4.0], 2) * xs
    np.testing.assert_array_equal(e.read_tensor("z"), want)
    assert e.read_tensor("s") == pytest.approx(want.sum())
    assert trace_types(e).count("OnTileExecute") == 3


# ---- Repeat ----
@pytest.mark.parametrize("count", [0, 1, 5])
def test_repeat_runs_its_body_count_times(count):
    g, dev = new_graph()
    x = var(g, 4, write="x", read="x_out")
    e = make_engine(g, poplar.Repeat(count, increment(g, x, by=3)), device=dev)
    e.write_tensor("x", [1, 2, 3, 4])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x_out"), np.array([1, 2, 3, 4]) + 3 * count)
    assert trace_types(e).count("OnTileExecute") == count


# ---- RepeatWhileTrue / RepeatWhileFalse ----
def _counter_loop(start, limit):
    g, dev = new_graph()
    i = var(g, (), dtype=poplar.INT, write="i", read="i_out")
    total = var(g, (), tile=1, dtype=poplar.INT, read="total")
    g.set_initial_value(total, 0)
    pred = var(g, (), dtype=poplar.BOOL, read="pred")
    cond = execute(g, "LessThan", {"x": i, "out": pred, "limit": limit})
    body = poplar.Sequence([increment(g, i), increment(g, total, by=10, tile=1)])
    e = make_engine(g, poplar.RepeatWhileTrue(cond, pred, body), device=dev)
    e.write_tensor("i", start)
    e.run()
    return e


@pytest.mark.parametrize("start, limit", [(0, 7), (3, 4), (10, 7)])
def test_repeat_while_true_counts_up_to_the_limit(start, limit):
    e = _counter_loop(start, limit)
    iterations = max(0, limit - start)
    assert e.read_tensor("i_out") == max(start, limit)
    assert e.read_tensor("total") == 10 * iterations
    assert not e.read_tensor("pred")
    assert trace_types(e).count("OnTileExecute") == (iterations + 1) + 2 * iterations


@pytest.mark.parametrize("start, limit", [(0, 7), (10, 7)])
def test_repeat_while_false_runs_while_the_predicate_is_false(start, limit):
    # pred = i < limit: RepeatWhileFalse decrements i while i >= limit
    g, dev = new_graph()
    i = var(g, (), dtype=poplar.INT, write="i", read="i_out")
    pred = var(g, (), dtype=poplar.BOOL, read="pred")
    cond = execute(g, "LessThan", {"x": i, "out": pred, "limit": limit})
    body = increment(g, i, by=-1)
    e = make_engine(g, poplar.RepeatWhileFalse(cond, pred, body), device=dev)
    e.write_tensor("i", start)
    e.run()
    assert e.read_tensor("i_out") == min(start, limit - 1)
    assert e.read_tensor("pred")


# ---- If and Switch ----
@pytest.mark.parametrize("flag", [0, 1, 5])
def test_if_takes_the_branch_of_the_predicate(flag):
    g, dev = new_graph()
    p = var(g, (), dtype=poplar.INT, write="p")
    x = var(g, 4, write="x")
    y = var(g, 4, read="y")
    then = execute(g, "Scale<float>", {"x": x, "y": y, "a": 2.0})
    else_ = execute(g, "Scale<float>", {"x": x, "y": y, "a": 3.0})
    e = make_engine(g, poplar.If(p, then, else_), device=dev)
    e.write_tensor("p", flag)
    e.write_tensor("x", [1, 2, 3, 4])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("y"), (2.0 if flag else 3.0) * np.arange(1, 5))


@pytest.mark.parametrize("flag", [False, True])
def test_if_without_else(flag):
    g, dev = new_graph()
    p = var(g, (), dtype=poplar.BOOL, write="p")
    x = var(g, 4, write="x", read="x_out")
    e = make_engine(g, poplar.If(p, increment(g, x, by=5)), device=dev)
    e.write_tensor("p", flag)
    e.write_tensor("x", [1, 2, 3, 4])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x_out"), np.arange(1, 5) + (5 if flag else 0))


@pytest.mark.parametrize("control, want", [(0, 10), (5, 20), (-3, 30), (1, 99), (7, 99)])
def test_switch_runs_the_matching_case_or_the_default(control, want):
    g, dev = new_graph()
    c = var(g, (), dtype=poplar.INT, write="c")
    x = var(g, 3, tile=1, read="x")
    cases = [
        (v, poplar.Copy(const(g, np.full(3, w, np.float32), tile=v % 4), x))
        for v, w in ((0, 10), (5, 20), (-3, 30))
    ]
    default = poplar.Copy(const(g, np.full(3, 99, np.float32)), x)
    e = make_engine(g, poplar.Switch(c, cases, default), device=dev)
    e.write_tensor("c", control)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), np.full(3, want))


def test_switch_without_default_does_nothing_when_no_case_matches():
    g, dev = new_graph()
    c = var(g, (), dtype=poplar.INT, write="c")
    x = var(g, 2, write="x", read="x_out")
    sw = poplar.Switch(c, [(1, increment(g, x))]).add(2, increment(g, x, by=2))
    e = make_engine(g, sw, device=dev)
    e.write_tensor("x", [0, 0])
    for control in (1, 2, 3):
        e.write_tensor("c", control)
        e.run()
    np.testing.assert_array_equal(e.read_tensor("x_out"), [3, 3])


# ---- tensor-to-tensor copies ----
@pytest.mark.parametrize("src_tile, dst_tile", [(0, 0), (0, 3), (None, 1)])
def test_copy_between_tiles(src_tile, dst_tile):
    g, dev = new_graph()
    a = var(g, (4, 6), tile=src_tile, write="a")
    b = var(g, (4, 6), tile=dst_tile, read="b")
    e = make_engine(g, poplar.Copy(a, b), device=dev)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    e.write_tensor("a", data)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), data)


def test_copy_between_ipus_is_a_global_exchange():
    g, dev = new_graph(tiles=4, num_ipus=2)
    a = var(g, 6, tile=None, write="a")  # tiles 0..5: both IPUs
    b = var(g, 6, tile=7, read="b")
    e = make_engine(g, poplar.Copy(a[::-1], b), device=dev)
    e.write_tensor("a", np.arange(6))
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), np.arange(6)[::-1])
    assert {"DoExchange", "GlobalExchange"} <= set(trace_types(e))


def test_copy_through_transposes_slices_and_reshapes():
    g, dev = new_graph()
    a = var(g, (3, 4), tile=None, write="a")
    b = var(g, (4, 3), tile=2, write="b", read="b_out")
    c = var(g, (2, 6), tile=3, read="c")
    prog = poplar.Sequence(
        [
            poplar.Copy(a.transpose(), b),
            poplar.Copy(a[1:3, ::2], b[0:2, 1:3].transpose()),
            poplar.Copy(a.reverse(1).reshape((2, 6)), c),
        ]
    )
    e = make_engine(g, prog, device=dev)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    e.write_tensor("a", data)
    e.write_tensor("b", np.zeros((4, 3)))
    e.run()
    want = data.T.copy()
    want[0:2, 1:3].T[...] = data[1:3, ::2]
    np.testing.assert_array_equal(e.read_tensor("b_out"), want)
    np.testing.assert_array_equal(e.read_tensor("c"), data[:, ::-1].reshape(2, 6))


@pytest.mark.parametrize("shift", [2, -2])
def test_overlapping_copy_reads_the_source_before_writing(shift):
    g, dev = new_graph()
    x = var(g, 10, tile=None, write="x", read="x_out")
    src, dst = (x[0:8], x[2:10]) if shift > 0 else (x[2:10], x[0:8])
    e = make_engine(g, poplar.Copy(src, dst), device=dev)
    data = np.arange(10, dtype=np.float32)
    e.write_tensor("x", data)
    e.run()
    want = data.copy()
    if shift > 0:
        want[2:10] = data[0:8]
    else:
        want[0:8] = data[2:10]
    np.testing.assert_array_equal(e.read_tensor("x_out"), want)


def test_copy_from_a_broadcast_view_repeats_elements():
    g, dev = new_graph()
    a = var(g, (1, 3), tile=0, write="a")
    b = var(g, (4, 3), tile=None, read="b")
    e = make_engine(g, poplar.Copy(a.broadcast(4, 0), b), device=dev)
    e.write_tensor("a", [[1, 2, 3]])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("b"), np.tile([1, 2, 3], (4, 1)))


@HYP
@given(
    rows=st.integers(1, 5),
    cols=st.integers(1, 5),
    transpose=st.booleans(),
    reverse=st.booleans(),
    data=st.data(),
)
def test_copy_of_any_view_matches_numpy(rows, cols, transpose, reverse, data):
    g, dev = new_graph()
    a = var(g, (rows, cols), tile=None, write="a")
    r0 = data.draw(st.integers(0, rows - 1))
    r1 = data.draw(st.integers(r0 + 1, rows))
    view, ref = a[r0:r1], (lambda m: m[r0:r1])
    if transpose:
        view, ref = view.transpose(), (lambda m, f=ref: f(m).T)
    if reverse:
        view, ref = view.reverse(0), (lambda m, f=ref: f(m)[::-1])
    dst = var(g, view.shape, tile=data.draw(st.integers(0, 3)), read="d")
    e = make_engine(g, poplar.Copy(view, dst), device=dev)
    m = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) * 1.5
    e.write_tensor("a", m)
    e.run()
    np.testing.assert_array_equal(e.read_tensor("d"), ref(m))


# ---- Sync, Call, WriteUndef, PrintTensor ----
@pytest.mark.parametrize("kind", [poplar.SyncType.INTERNAL, poplar.SyncType.EXTERNAL, "global"])
def test_sync_is_a_barrier_that_keeps_values(kind):
    g, dev = new_graph()
    x = var(g, 4, write="x", read="x_out")
    e = make_engine(
        g, poplar.Sequence([increment(g, x), poplar.Sync(kind), increment(g, x)]), device=dev
    )
    e.write_tensor("x", [1, 2, 3, 4])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x_out"), [3, 4, 5, 6])
    syncs = [s for s in e.get_execution_profile()["simulation"]["steps"] if s["type"] == "Sync"]
    want = "Internal" if kind == "internal" else "External"
    assert [s["syncType"] for s in syncs] == [want]
    assert syncs[0]["cyclesTo"] > syncs[0]["cyclesFrom"]


def test_call_of_a_graph_function_twice():
    g, dev = new_graph()
    x = var(g, 3, tile=1, write="x", read="x_out")
    y = var(g, 3, tile=2, read="y")
    fn = g.add_function(poplar.Sequence([increment(g, x, by=2, tile=1)]), "bump")
    prog = poplar.Sequence([poplar.Call(fn), poplar.Copy(x, y), poplar.Call(fn)])
    e = make_engine(g, prog, device=dev)
    e.write_tensor("x", [0, 1, 2])
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x_out"), [4, 5, 6])
    np.testing.assert_array_equal(e.read_tensor("y"), [2, 3, 4])
    gp = e.get_graph_profile()
    assert len(gp["functionPrograms"]) == 1
    calls = [p for p in gp["programs"] if p["type"] == "Call"]
    assert len(calls) == 2 and all(c["target"] == 0 for c in calls)


def test_write_undef_keeps_the_program_running():
    g, dev = new_graph()
    x = var(g, 4, tile=None)
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 4)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 4)
    prog = poplar.Sequence(
        [poplar.WriteUndef(x), poplar.Copy(h2d, x), increment(g, x), poplar.Copy(x, d2h)]
    )
    e = make_engine(g, prog, device=dev)
    out = np.zeros(4, np.float32)
    e.connect_stream("in", np.arange(4, dtype=np.float32))
    e.connect_stream("out", out)
    e.run()
    np.testing.assert_array_equal(out, np.arange(1, 5))
    assert "WriteUndef" in trace_types(e)


def test_print_tensor_prints_title_and_value():
    g, dev = new_graph()
    x = var(g, (2, 3), tile=None, write="x")
    prog = poplar.Sequence(
        [poplar.PrintTensor("x", x), increment(g, x[1], tile=1), poplar.PrintTensor(x.transpose())]
    )
    e = make_engine(g, prog, device=dev)
    e.runtime.out = io.StringIO()
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    e.write_tensor("x", data)
    e.run()
    after = data.copy()
    after[1] += 1
    want = (
        f"x: {np.array2string(data, separator=', ')}\n"
        f": {np.array2string(after.T, separator=', ')}\n"
    )
    assert e.runtime.out.getvalue() == want


def test_cross_replica_copy_rotates_values_between_replicas():
    from tremula.profile import validate

    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target, replication_factor=4)
    x = g.add_variable(poplar.FLOAT, (6,), "x", mapping="linear")
    y = g.add_variable(poplar.FLOAT, (6,), "y", mapping="linear")
    g.create_host_write("x", x)
    g.create_host_write("y", y)
    g.create_host_read("y_out", y)
    engine = poplar.Engine(g, poplar.CrossReplicaCopy(x, y, {0: 1, 1: 2, 2: 0}))
    engine.load(device)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    engine.write_tensor("x", data)
    engine.write_tensor("y", np.full(6, -1.0))
    engine.run(0)
    expected = np.stack([data[2], data[0], data[1], np.full(6, -1.0)])
    np.testing.assert_array_equal(engine.read_tensor("y_out"), expected)
    execution = engine.get_execution_profile()
    validate(engine.get_graph_profile(), execution)
    assert [s["type"] for s in execution["simulation"]["steps"]] == ["Sync", "GlobalExchange"]
    assert engine.get_graph_profile()["externalExchanges"]["bytesSentByTile"][0] == [8, 8, 8, 0]
