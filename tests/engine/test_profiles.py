"""Profiles: valid, deterministic, written by autoReport, shaped by the profiler mode, and
holding hand-checked cycles, traces and memory figures."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tremula_tests_engine_codelets import (
    CODELETS,
    const,
    execute,
    increment,
    make_engine,
    new_graph,
    var,
)

from tremula import poplar
from tremula.profile import read_profile, validate

MODES = [
    "ipu_model",
    "compute_sets",
    "single_tile_compute_sets",
    "vertices",
    "external_exchanges",
    "host_exchanges",
    "none",
]
LAUNCH = 12  # Target.compute_set_launch_cycles
W = 6  # Target.num_worker_contexts


def kitchen_sink(options=None, num_ipus=2):
    """An engine using every program type whose profile is known to be valid, on 2 IPUs
    (so that copies between IPUs are global exchanges), run once."""
    g, dev = new_graph(tiles=4, num_ipus=num_ipus)
    n = g.num_tiles
    x = var(g, 2 * n, tile=None)
    y = var(g, 2 * n, tile=None, read="y")
    i = var(g, (), dtype=poplar.INT, write="i")
    pred = var(g, (), dtype=poplar.BOOL)
    row = const(g, [1], tile=n - 1, dtype=poplar.INT)
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 2 * n)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 2 * n)
    rb = g.add_remote_buffer("rb", poplar.FLOAT, 2 * n, repeats=2)
    hf = g.add_host_function("hf", [(poplar.FLOAT, 2)], [(poplar.FLOAT, 2)])
    cs = g.add_compute_set("scale")
    g.add_vertices(
        cs,
        "Scale<float>",
        {"x": x.reshape((n, 2)), "y": y.reshape((n, 2)), "a": 2.0},
        tiles=range(n),
    )
    fn = g.add_function(poplar.Sequence([poplar.Execute(cs), poplar.Copy(y[::-1], x)]))
    loop = poplar.RepeatWhileTrue(
        execute(g, "LessThan", {"x": i, "out": pred, "limit": 3}), pred, increment(g, i, tile=0)
    )
    sw = poplar.Switch(i, [(3, poplar.Call(fn))], poplar.Sync("internal"))
    prog = poplar.Sequence(
        [
            poplar.Copy(h2d, x),
            poplar.Repeat(2, poplar.Call(fn)),
            loop,
            sw,
            poplar.Copy(x, rb, offset=1),
            poplar.Copy(rb, y, offset=row),
            poplar.PrintTensor("x", x),
            poplar.Call(hf, [x[:2]], [x[2:4]]),
            poplar.WriteUndef(y),
            poplar.Copy(x, y),
            poplar.Sync("external"),
            poplar.Copy(y, d2h),
        ],
        name="main",
    )
    e = make_engine(g, prog, options, dev)
    e.connect_stream("in", np.arange(2 * n, dtype=np.float32))
    e.connect_stream("out", np.zeros(2 * n, np.float32))
    e.connect_host_function("hf", lambda ins, outs: [ins[0] * 10])
    e.runtime.out = io.StringIO()
    e.run()
    return e


@pytest.mark.parametrize("mode", MODES)
def test_profiles_of_every_mode_validate(mode):
    e = kitchen_sink({"debug.executionProfile": mode})
    graph, execution = e.get_graph_profile(), e.get_execution_profile()
    validate(graph, execution)
    assert execution["profilerMode"] == mode.upper()
    types = {p["type"] for p in graph["programs"]}
    assert types >= {
        "Sequence",
        "OnTileExecute",
        "DoExchange",
        "GlobalExchange",
        "StreamCopy",
        "Repeat",
        "RepeatWhileTrue",
        "Switch",
        "Sync",
        "Call",
        "WriteUndef",
    }


def test_cpu_target_profiles_validate():
    dev = poplar.Device.create_cpu_device()
    g = poplar.Graph(dev.target)
    g.add_codelets(CODELETS)
    x = var(g, 3, write="x")
    e = make_engine(g, increment(g, x), device=dev)
    e.run()
    graph_id = e.get_graph_profile()["graphId"]
    assert e.get_execution_profile() == {"profilerMode": "CPU", "graphId": graph_id}
    validate(e.get_graph_profile(), e.get_execution_profile())


@pytest.mark.parametrize("with_else", [False, True])
def test_if_profile_validates(with_else):
    g, dev = new_graph()
    p = var(g, (), dtype=poplar.INT, write="p")
    x = var(g, 2, write="x")
    then, else_ = increment(g, x), increment(g, x, by=2)
    prog = poplar.If(p, then, else_) if with_else else poplar.If(p, then)
    e = make_engine(g, prog, device=dev)
    e.run()
    validate(e.get_graph_profile(), e.get_execution_profile())


def test_empty_sequence_profile_validates():
    g, dev = new_graph()
    var(g, 2, write="x")
    e = make_engine(g, poplar.Sequence(), device=dev)
    e.run()
    validate(e.get_graph_profile(), e.get_execution_profile())


def test_identical_engines_give_identical_profiles():
    a, b = kitchen_sink(), kitchen_sink()
    for get in ("get_graph_profile", "get_execution_profile"):
        assert json.dumps(getattr(a, get)(), sort_keys=True) == json.dumps(
            getattr(b, get)(), sort_keys=True
        )


# ---- autoReport ----
def _check_report(directory, e):
    """graph.json is written when compiled, execution.json once, when the engine closes."""
    assert sorted(p.name for p in directory.iterdir()) == ["graph.json"]
    want = json.loads(json.dumps(e.get_profile()))
    e.close()
    assert sorted(p.name for p in directory.iterdir()) == ["execution.json", "graph.json"]
    graph, execution = read_profile(directory)
    assert graph == want["graphProfile"]
    assert execution == want["executionProfile"]
    validate(graph, execution)


def test_auto_report_writes_both_profiles(tmp_path):
    e = kitchen_sink({"autoReport.all": "true", "autoReport.directory": str(tmp_path)})
    _check_report(tmp_path, e)


def test_auto_report_from_the_environment(tmp_path, monkeypatch):
    env_dir = tmp_path / "env"
    monkeypatch.setenv(
        "POPLAR_ENGINE_OPTIONS",
        json.dumps({"autoReport.all": "true", "autoReport.directory": str(env_dir)}),
    )
    e = kitchen_sink({"autoReport.directory": str(tmp_path / "option")})  # env overrides
    _check_report(env_dir, e)
    assert not (tmp_path / "option").exists()


def test_auto_report_of_the_graph_profile_only(tmp_path):
    e = kitchen_sink(
        {"autoReport.outputGraphProfile": "true", "autoReport.directory": str(tmp_path)}
    )
    assert [p.name for p in tmp_path.iterdir()] == ["graph.json"]
    assert json.loads((tmp_path / "graph.json").read_text()) == json.loads(
        json.dumps(e.get_graph_profile())
    )


def test_auto_report_of_the_execution_profile_only(tmp_path):
    e = kitchen_sink(
        {"autoReport.outputExecutionProfile": "true", "autoReport.directory": str(tmp_path)}
    )
    want = json.loads(json.dumps(e.get_execution_profile()))
    with e:
        pass
    assert json.loads((tmp_path / "execution.json").read_text()) == want
    graph_file = tmp_path / "graph.json"
    assert not graph_file.exists() or json.loads(graph_file.read_text()) is not None


# ---- profiler modes ----
def _two_compute_sets(mode):
    g, dev = new_graph()
    x = var(g, 8, tile=None, write="x")
    y = var(g, 8, tile=None)
    cs_a = g.add_compute_set("a")
    g.add_vertices(
        cs_a,
        "Scale<float>",
        {"x": x.reshape((4, 2)), "y": y.reshape((4, 2)), "a": 1.0},
        tiles=range(4),
    )
    cs_b = g.add_compute_set("b")
    g.add_vertex(cs_b, "Sum<float>", {"x": y[2:4], "out": x[0]}, tile=0)
    prog = poplar.Sequence([poplar.Execute(cs_a), poplar.Repeat(2, poplar.Execute(cs_b))])
    e = make_engine(g, prog, {"debug.executionProfile": mode}, dev)
    e.run()
    return e


def test_compute_sets_mode_has_cycles_by_tile_per_compute_set():
    e = _two_compute_sets("compute_sets")
    graph, execution = e.get_graph_profile(), e.get_execution_profile()
    rows = execution["computeSetCyclesByTile"]
    assert len(rows) == graph["graph"]["numComputeSets"] == 2
    assert all(len(r) == graph["target"]["numTiles"] == 4 for r in rows)
    est = np.array(graph["computeSets"]["cycleEstimates"]["cyclesByTile"])
    np.testing.assert_array_equal(rows, est * np.array([[1], [2]]))  # b ran twice


def test_vertices_mode_lists_every_vertex():
    e = _two_compute_sets("vertices")
    graph, execution = e.get_graph_profile(), e.get_execution_profile()
    n = graph["graph"]["numVertices"]
    assert n == 5
    assert execution["vertexComputeSet"] == [0, 0, 0, 0, 1]
    assert len(execution["vertexCycles"]) == len(execution["vertexType"]) == n
    assert execution["vertexCycles"][:4] == [20 + 3 * 1] * 4  # Scale of 2 floats
    assert "computeSetCyclesByTile" not in execution


def test_none_mode_records_nothing():
    e = _two_compute_sets("none")
    assert e.get_execution_profile() == {
        "profilerMode": "NONE",
        "graphId": e.get_graph_profile()["graphId"],
    }


def test_reset_execution_profile_empties_the_steps():
    e = _two_compute_sets("compute_sets")
    first = e.get_execution_profile()
    assert first["simulation"]["steps"] and first["programTrace"]
    e.reset_execution_profile()
    empty = e.get_execution_profile()
    assert empty["simulation"]["steps"] == [] and empty["programTrace"] == []
    assert empty["simulation"]["cycles"] == 0
    assert not np.any(empty["computeSetCyclesByTile"])
    assert set(empty["simulation"]["tileCycles"].values()) == {0}
    e.run()
    assert json.dumps(e.get_execution_profile(), sort_keys=True) == json.dumps(
        first, sort_keys=True
    )


# ---- hand-checked cycles ----
def test_cycles_of_one_compute_set_by_hand():
    g, dev = new_graph()
    x = var(g, 8, tile=2)
    z = var(g, 3, tile=0)
    cs = g.add_compute_set("fixed")
    g.add_vertices(
        cs, "Fixed", {"x": x[:7].reshape((7, 1)), "c": [10, 20, 30, 40, 50, 60, 70]}, tiles=[2] * 7
    )
    g.add_vertices(cs, "Fixed", {"x": z.reshape((3, 1)), "c": 5}, tiles=[0] * 3)
    g.add_vertex(cs, "FixedSup", {"x": x[7:], "c": 50}, tile=2)
    e = make_engine(g, poplar.Execute(cs), device=dev)
    e.run()
    est = e.get_graph_profile()["computeSets"]["cycleEstimates"]
    # tile 2: 70..10 dealt round robin to 6 contexts -> 70 + 10 = 80 on the busiest
    want = [W * 5 + LAUNCH, 0, W * 80 + 50 + LAUNCH, 0]
    assert est["cyclesByTile"] == [want]
    assert est["activeCyclesByTile"] == [[15, 0, 280 + 50, 0]]
    (step,) = e.get_execution_profile()["simulation"]["steps"]
    assert step["type"] == "OnTileExecute"
    assert (step["cyclesFrom"], step["cyclesTo"], step["cycles"]) == (0, want[2], want[2])
    assert step["activeTiles"] == 2
    assert step["threadBalance"] == pytest.approx((15 / (W * 5) + 280 / (W * 80)) / 2)
    tile_cycles = e.get_execution_profile()["simulation"]["tileCycles"]
    assert tile_cycles["compute"] == sum(want)
    assert tile_cycles["activeCompute"] == 15 + 280 + 50


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=W))
def test_up_to_six_workers_take_six_times_the_longest(estimates):
    g, _ = new_graph()
    x = var(g, len(estimates), tile=1)
    cs = g.add_compute_set()
    vs = g.add_vertices(
        cs, "Fixed", {"x": x.reshape((len(estimates), 1)), "c": 1}, tiles=[1] * len(estimates)
    )
    for v, c in zip(vs, estimates):
        g.set_perf_estimate(v, c)
    e = make_engine(g, poplar.Execute(cs))
    est = e.get_graph_profile()["computeSets"]["cycleEstimates"]
    assert est["cyclesByTile"][0][1] == W * max(estimates) + LAUNCH
    assert est["activeCyclesByTile"][0][1] == sum(estimates)


def test_exchange_figures_of_a_copy_between_tiles_by_hand():
    g, dev = new_graph()
    a, b = var(g, 10, tile=0, write="a"), var(g, 10, tile=3)
    e = make_engine(g, poplar.Copy(a, b), device=dev)
    e.run()
    ex = e.get_graph_profile()["exchanges"]
    assert ex["bytesSentByTile"] == [[40, 0, 0, 0]]
    assert ex["bytesReceivedByTile"] == [[0, 0, 0, 40]]
    assert ex["cyclesByTile"] == [[20 + 10, 0, 0, 20 + 10]]  # fixed + 40 B / 4 B per cycle


# ---- program trace ----
def _pid(graph, ptype, **fields):
    found = [
        i
        for i, p in enumerate(graph["programs"])
        if p["type"] == ptype and all(p.get(k) == v for k, v in fields.items())
    ]
    assert len(found) == 1, found
    return found[0]


def test_program_trace_lists_programs_in_executed_order():
    g, dev = new_graph()
    x = var(g, 2)
    cs_a = g.add_compute_set("a")
    g.add_vertex(cs_a, "Increment<float>", {"x": x}, tile=0)
    cs_b = g.add_compute_set("b")
    g.add_vertex(cs_b, "Increment<float>", {"x": x}, tile=0)
    prog = poplar.Sequence([poplar.Execute(cs_a), poplar.Repeat(3, poplar.Execute(cs_b))])
    e = make_engine(g, prog, device=dev)
    e.run()
    graph, execution = e.get_graph_profile(), e.get_execution_profile()
    a, b = _pid(graph, "OnTileExecute", computeSet=0), _pid(graph, "OnTileExecute", computeSet=1)
    seq, rep = _pid(graph, "Sequence"), _pid(graph, "Repeat", count=3)
    assert execution["programTrace"] == [seq, a, rep, b, b, b]
    steps = [s["program"] for s in execution["simulation"]["steps"]]
    assert steps == [a, b, b, b]
    assert graph["controlPrograms"] == [seq]


# ---- memory ----
def test_memory_by_tile_is_variables_plus_code_and_state():
    g, dev = new_graph()
    var(g, 10, tile=1, write="a")  # 40 B
    var(g, 3, tile=1, dtype=poplar.INT, read="b")  # 12 B
    h = var(g, 5, tile=3, dtype=poplar.HALF, write="h")  # 10 B
    c = const(g, [1.0, 2.0], tile=2)  # 8 B
    out = var(g, 2, tile=0, read="out")
    e = make_engine(g, poplar.Sequence([poplar.Copy(c, out), increment(g, h, tile=3)]), device=dev)
    mem = e.get_graph_profile()["memory"]
    cats = {k: np.array(v["total"]) for k, v in mem["byCategory"].items()}
    total = np.array(mem["byTile"]["total"])
    np.testing.assert_array_equal(total, sum(cats.values()))
    np.testing.assert_array_equal(cats["variable"], [8, 52, 0, 10])
    np.testing.assert_array_equal(cats["constant"], [0, 0, 8, 0])
    code_and_state = total - cats["variable"] - cats["constant"]
    assert np.all(code_and_state > 0)  # control code is on every tile
    n_programs = len(e.get_graph_profile()["programs"])
    np.testing.assert_array_equal(cats["controlCode"], [8 * n_programs] * 4)
    assert cats["vertexCode"][3] == 192 and cats["vertexCode"][:3].sum() == 0
    assert cats["stack"][3] == W * 64 + 128 and cats["stack"][:3].sum() == 0


def _streamed_variable(with_handle):
    g, _ = new_graph()
    v = var(g, 16, tile=2)
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 16)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 16)
    if with_handle:
        g.create_host_write("w", v)
    e = make_engine(
        g, poplar.Sequence([poplar.Copy(h2d, v), poplar.Sync("internal"), poplar.Copy(v, d2h)])
    )
    return e.get_graph_profile()


def test_a_host_handle_makes_a_variable_always_live():
    plain, handled = _streamed_variable(False), _streamed_variable(True)
    live_p, live_h = plain["memory"]["liveness"], handled["memory"]["liveness"]
    grow = np.subtract(live_h["alwaysLive"]["bytesByTile"], live_p["alwaysLive"]["bytesByTile"])
    np.testing.assert_array_equal(grow, [0, 0, 64, 0])
    assert live_h["alwaysLive"]["bytes"] - live_p["alwaysLive"]["bytes"] == 64
    assert live_p["notAlwaysLive"]["maxBytesByTile"] == [0, 0, 64, 0]
    assert live_h["notAlwaysLive"]["maxBytesByTile"] == [0, 0, 0, 0]
    assert plain["memory"]["byTile"]["total"] == handled["memory"]["byTile"]["total"]
    assert plain["hostExchanges"]["bytesReceivedByTile"][0] == [0, 0, 64, 0]
    assert plain["hostExchanges"]["bytesSentByTile"][1] == [0, 0, 64, 0]


def _liveness_case(layout):
    g, _ = new_graph()
    v = var(g, 8, tile=1)
    var(g, 10, tile=None, write="spread")  # linear: 3, 3, 3, 1 elements
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 8)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 8)
    w, r = poplar.Copy(h2d, v), poplar.Copy(v, d2h)
    programs = {
        "one program": [poplar.Sequence([w, r])],
        "two programs": [w, r],
        "read first": [poplar.Sequence([r, w])],
    }[layout]
    return make_engine(g, programs).get_graph_profile()["memory"]


@pytest.mark.parametrize(
    "layout, always", [("one program", False), ("two programs", True), ("read first", True)]
)
def test_variables_crossing_programs_or_read_first_are_always_live(layout, always):
    mem = _liveness_case(layout)
    np.testing.assert_array_equal(mem["byCategory"]["variable"]["total"], [12, 12 + 32, 12, 4])
    base = np.array(_liveness_case("one program")["liveness"]["alwaysLive"]["bytesByTile"])
    grow = np.array(mem["liveness"]["alwaysLive"]["bytesByTile"]) - base
    code = np.array(mem["byCategory"]["controlCode"]["total"]) - np.array(
        _liveness_case("one program")["byCategory"]["controlCode"]["total"]
    )
    np.testing.assert_array_equal(grow - code, [0, 32 if always else 0, 0, 0])
    assert mem["liveness"]["notAlwaysLive"]["maxBytesByTile"][1] == (0 if always else 32)


# ---- autoReport in a loop, the run count, bounded profiles (issue 15) ----
def _counter(options=None):
    """x += 1 on every run; x readable through handle "x"."""
    g, dev = new_graph()
    x = var(g, 4, tile=None, dtype=poplar.INT, read="x")
    return make_engine(g, increment(g, x), options, dev)


def test_auto_report_writes_each_file_once_however_many_runs(tmp_path, monkeypatch):
    from tremula.profile import io as profile_io

    writes = []
    real = profile_io.write_atomic
    monkeypatch.setattr(
        profile_io, "write_atomic", lambda path, data: (writes.append(path.name), real(path, data))
    )
    e = _counter({"autoReport.all": "true", "autoReport.directory": str(tmp_path)})
    for _ in range(50):
        e.run()
    assert writes == ["graph.json"]  # when compiled; nothing per run
    e.close()
    assert writes == ["graph.json", "execution.json"]
    e.close()  # nothing new to write
    assert writes == ["graph.json", "execution.json"]
    graph, execution = read_profile(tmp_path)
    validate(graph, execution)
    assert len(execution["programTrace"]) == 2 * len(_counter().get_graph_profile()["programs"])


def test_auto_report_serialises_the_graph_profile_once(tmp_path, monkeypatch):
    """graph.json's text is the one its graphId was hashed from (with the id added): a large
    profile takes seconds to serialise. The file equals the stdlib's JSON of the profile."""
    from tremula.profile import io as profile_io

    serialised = []
    real = profile_io.dumps
    monkeypatch.setattr(
        profile_io, "dumps", lambda p: (serialised.append("simulation" not in p), real(p))[1]
    )
    e = _counter({"autoReport.all": "true", "autoReport.directory": str(tmp_path)})
    assert serialised == [True]  # the graph profile, once, for its id and graph.json
    e.run()
    e.close()
    assert serialised == [True, False]  # and the execution profile
    want = json.dumps(e.get_graph_profile(), sort_keys=True, indent=2) + "\n"
    assert (tmp_path / "graph.json").read_text() == want
    e.write_report(str(tmp_path / "again"))  # an explicit write serialises it again
    assert (tmp_path / "again" / "graph.json").read_text() == want


def test_the_execution_profile_captures_the_run_count_of_each_program():
    one = _counter()
    one.run()
    steps_of_one_run = len(one.get_execution_profile()["simulation"]["steps"])
    cycles_of_one_run = one.get_execution_profile()["simulation"]["cycles"]
    for count, runs in ((None, 2), ("5", 5), ("0", 0)):
        options = None if count is None else {"autoReport.executionProfileProgramRunCount": count}
        e = _counter(options)
        for _ in range(7):
            e.run()
        np.testing.assert_array_equal(e.read_tensor("x"), [7] * 4)  # every run computed
        sim = e.get_execution_profile()["simulation"]
        assert len(sim["steps"]) == runs * steps_of_one_run
        assert sim["cycles"] == runs * cycles_of_one_run
    e.reset_execution_profile()  # the next runs are captured again
    e.run()
    np.testing.assert_array_equal(e.read_tensor("x"), [8] * 4)


def test_the_in_memory_profile_stays_bounded_over_many_runs():
    e = _counter()
    for _ in range(2):
        e.run()
    two = json.dumps(e.get_execution_profile(), sort_keys=True)
    for _ in range(500):
        e.run()
    assert json.dumps(e.get_execution_profile(), sort_keys=True) == two
    np.testing.assert_array_equal(e.read_tensor("x"), [502] * 4)


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_bad_run_count_names_the_option(value):
    from tremula.errors import EngineError

    with pytest.raises(EngineError, match=r"executionProfileProgramRunCount.*non-negative integer"):
        _counter({"autoReport.executionProfileProgramRunCount": value})


def test_an_engine_that_is_collected_or_outlives_the_program_writes_its_report(tmp_path):
    import gc
    import subprocess
    import sys
    from pathlib import Path

    g, dev = new_graph()
    var(g, 4, tile=None, read="x")
    e = poplar.Engine(
        g,
        poplar.Sequence(),
        {"autoReport.all": "true", "autoReport.directory": str(tmp_path / "gc")},
    )
    e.load(dev)
    e.run()
    del e
    gc.collect()
    validate(*read_profile(tmp_path / "gc"))
    script = (
        "import numpy as np\n"
        "from tremula import demo\n"
        f"r = demo.build_and_run(4, options={{'autoReport.all': 'true', "
        f"'autoReport.directory': {str(tmp_path / 'exit')!r}}})\n"
        "raise SystemExit(0)  # the engine is still referenced\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": ""},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    graph, execution = read_profile(tmp_path / "exit")
    validate(graph, execution)
    assert execution["simulation"]["steps"]
