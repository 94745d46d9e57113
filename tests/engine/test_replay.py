"""Replayed timelines: repeated runs of a program without data-dependent control flow give
the same profile bytes as simulating every run in full."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tremula import poplar
from tremula.demo import SquarePlusOne, Sum
from tremula.engine import nodes as N
from tremula.engine.flatplan import _device_view
from tremula.errors import StreamError


def _engine():
    device = poplar.IPUModel(tiles_per_ipu=8).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets([SquarePlusOne, Sum])
    x = g.add_variable(poplar.FLOAT, (8, 16), "x", mapping="linear")
    y = g.add_variable(poplar.FLOAT, (8, 16), "y", mapping="linear")
    s = g.add_variable(poplar.FLOAT, (8,), "s", mapping="linear")
    total = g.add_variable(poplar.FLOAT, (1,), "total")
    g.set_tile_mapping(total, 3)
    cs = g.add_compute_set("square")
    g.add_vertices(cs, "demo::SquarePlusOne", {"x": x, "y": y}, range(8))
    red = g.add_compute_set("sums")
    g.add_vertices(red, "demo::Sum", {"x": y, "out": s}, range(8))
    fin = g.add_compute_set("total")
    g.add_vertex(fin, "demo::Sum", {"x": s, "out": total[0]}, tile=3)
    g.create_host_write("x", x)
    g.create_host_read("total", total)
    prog = poplar.Sequence(
        [
            poplar.Execute(cs),
            poplar.Execute(red),
            poplar.Execute(fin),
            poplar.Sync("external"),
            poplar.Copy(total, x[0, :1]),
        ]
    )
    engine = poplar.Engine(g, prog)
    engine.load(device)
    engine.write_tensor("x", np.arange(128, dtype=np.float32) / 100)
    return engine


def test_replayed_runs_match_full_simulation():
    fast, full = _engine(), _engine()
    full._replay.static = [False]  # simulate every run
    assert fast._replay.static == [True]
    for _ in range(4):
        fast.run(0)
        full.run(0)
    np.testing.assert_array_equal(fast.read_tensor("total"), full.read_tensor("total"))
    a = json.dumps(fast.get_execution_profile(), sort_keys=True)
    b = json.dumps(full.get_execution_profile(), sort_keys=True)
    assert a == b
    assert len(fast._replay.cache) >= 1
    fast.reset_execution_profile()
    full.reset_execution_profile()
    fast.run(0)
    full.run(0)
    assert json.dumps(fast.get_execution_profile(), sort_keys=True) == json.dumps(
        full.get_execution_profile(), sort_keys=True
    )


def test_programs_that_branch_on_data_are_simulated_in_full():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    flag = g.add_variable(poplar.INT, (1,), "flag", mapping="linear")
    engine = poplar.Engine(g, poplar.If(flag, poplar.Sync("internal")))
    engine.load(device)
    assert engine._replay.static == [False]


def _loop_engine(device, interpreted: bool, options: dict | None = None):
    """``Repeat(3, [stream in x; Call(f: x = x^2 + 1 ... sum into s); copy s into acc[i]])``
    with a stream out at the end: calls, repeats, stream copies and exchanges in one
    static program."""
    g = poplar.Graph(device.target)
    g.add_codelets([SquarePlusOne, Sum])
    tiles = g.target.num_tiles
    x = g.add_variable(poplar.FLOAT, (4, 8), "x")
    y = g.add_variable(poplar.FLOAT, (4, 8), "y")
    s = g.add_variable(poplar.FLOAT, (4,), "s")
    acc = g.add_variable(poplar.FLOAT, (4,), "acc")
    prev = g.add_variable(poplar.FLOAT, (1,), "prev")
    for row in range(4):
        for t in (x[row], y[row], s[row : row + 1]):
            g.set_tile_mapping(t, row % tiles)
    g.set_tile_mapping(acc, tiles - 1)
    g.set_tile_mapping(prev, tiles - 1)
    cs = g.add_compute_set("square")
    g.add_vertices(cs, "demo::SquarePlusOne", {"x": x, "y": y}, [r % tiles for r in range(4)])
    red = g.add_compute_set("sums")
    for r in range(4):
        g.add_vertex(red, "demo::Sum", {"x": y[r], "out": s[r]}, tile=r % tiles)
    inc = g.add_compute_set("accumulate")
    g.add_vertex(
        inc, "demo::Sum", {"x": poplar.concat([prev, s[:1]]), "out": acc[0]}, tile=tiles - 1
    )
    body = g.add_function(poplar.Sequence([poplar.Execute(cs), poplar.Execute(red)]))
    xs = g.add_host_to_device_fifo("xs", poplar.FLOAT, 32)
    out = g.add_device_to_host_fifo("out", poplar.FLOAT, 4)
    step = poplar.Sequence(
        [poplar.Copy(xs, x), poplar.Call(body), poplar.Copy(acc[:1], prev), poplar.Execute(inc)]
    )
    prog = poplar.Sequence([poplar.Repeat(3, step), poplar.Copy(acc, out)])
    engine = poplar.Engine(g, prog, options=options)
    engine.load(device)
    if interpreted:
        engine._replay.static = [False]
    return engine


def test_flattened_static_programs_compute_what_the_interpreter_does():
    rng = np.random.default_rng(4)
    for device in (
        poplar.Device.create_cpu_device(),
        poplar.IPUModel(tiles_per_ipu=4).create_device(),
    ):
        flat, interpreted = _loop_engine(device, False), _loop_engine(device, True)
        assert flat._replay.static == [True]
        total = 0.0
        for _ in range(3):  # later runs take the flattened plan
            data = rng.standard_normal((3, 32)).astype(np.float32)
            results = []
            for engine in (flat, interpreted):
                got = np.zeros(4, np.float32)
                engine.connect_stream("xs", data.copy())
                engine.connect_stream("out", got)
                engine.run(0)
                results.append(got)
            np.testing.assert_array_equal(results[0], results[1])
            for batch in data:  # acc[0] += sum(x[0]^2 + 1) per repeat
                total += float(np.sum(batch[:8].astype(np.float64) ** 2 + 1))
            np.testing.assert_allclose(results[0][0], total, rtol=1e-5)


def test_replayed_runs_add_the_compute_sets_cycles_the_interpreter_adds():
    """In the compute-set profile mode each run adds every compute set's cycles once per
    execution (a repeat's body once per iteration); the replayed plan adds them once per
    run from its tally. Profiles stay identical to interpreting every run, past the run
    count too (those runs add nothing)."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    options = {
        "debug.executionProfile": "compute_sets",
        "autoReport.executionProfileProgramRunCount": "4",
    }
    flat, interpreted = (_loop_engine(device, i, options) for i in (False, True))
    assert flat.runtime.record_cs
    data = np.random.default_rng(5).standard_normal((3, 32)).astype(np.float32)
    for run in range(6):
        for engine in (flat, interpreted):
            engine.connect_stream("xs", data.copy())
            engine.connect_stream("out", np.zeros(4, np.float32))
            engine.run(0)
        np.testing.assert_array_equal(flat.runtime.cs_cycles, interpreted.runtime.cs_cycles)
        ran = min(run + 1, 4)  # runs past the count add nothing
        square = flat.step_plan.compute_sets[0]
        np.testing.assert_array_equal(
            flat.runtime.cs_cycles[square.id], 3 * ran * square.cycles_by_tile
        )
    a = json.dumps(flat.get_execution_profile(), sort_keys=True)
    assert a == json.dumps(interpreted.get_execution_profile(), sort_keys=True)


def _stream_engine(static: bool, strided: bool = False):
    """in (float, 6) -> x -> x^2 + 1 -> y -> out, twice a run (two transfers each way);
    ``strided``: the transfers go to and from x and y transposed (addresses that are not
    consecutive: gathered rather than views of device memory)."""
    device = poplar.IPUModel(tiles_per_ipu=2).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets([SquarePlusOne])
    x = g.add_variable(poplar.FLOAT, (2, 3), "x", mapping="linear")
    y = g.add_variable(poplar.FLOAT, (2, 3), "y", mapping="linear")
    cs = g.add_compute_set("square")
    g.add_vertices(cs, "demo::SquarePlusOne", {"x": x, "y": y}, range(2))
    h2d = g.add_host_to_device_fifo("in", poplar.FLOAT, 6)
    d2h = g.add_device_to_host_fifo("out", poplar.FLOAT, 6)
    x, y = (x.transpose(), y.transpose()) if strided else (x, y)
    step = [poplar.Copy(h2d, x.flatten()), poplar.Execute(cs), poplar.Copy(y.flatten(), d2h)]
    engine = poplar.Engine(g, poplar.Sequence(step + step))
    engine.load(device)
    if not static:
        engine._replay.static = [False]  # every run through the interpreter
    return engine


def _feed(a: np.ndarray) -> None:
    """An input callback: the same values for both engines (a counter in the array)."""
    a[...] = np.arange(a.size) + np.float32(_feed.calls)  # type: ignore[attr-defined]
    _feed.calls += 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("strided", [False, True], ids=["views", "gathered"])
def test_replayed_stream_copies_follow_each_runs_connections(strided):
    """The replayed stream transfers of a one-replica device (``replayed_take`` /
    ``replayed_give``) read and fill the buffers connected for each run, advancing
    through them circularly, as the interpreter does: the same buffer kept, another of
    the same layout (rebound), one of another depth, host data of another type
    (converted at each transfer), callbacks both ways, and a missing connection's error;
    device memory as a view made once (consecutive addresses) or gathered."""
    fast, full = _stream_engine(True, strided), _stream_engine(False, strided)
    transfers = [n.action for n in N.reachable(fast.roots[0]) if isinstance(n, N.HostNode)]
    views = [_device_view(fast.runtime, getattr(a, "dst", None) or a.src) for a in transfers]
    assert len(views) == 4 and all((v is None) == strided for v in views)
    rng = np.random.default_rng(4)
    kept_in = rng.standard_normal(18).astype(np.float32)  # three transfers: circular
    runs: list[tuple[object, object]] = [
        (kept_in, 0),
        (kept_in, 0),  # the same buffers again: positions restart
        (rng.standard_normal(18).astype(np.float32), 1),
        (rng.standard_normal(12).astype(np.float32), 2),
        (rng.standard_normal(12).astype(np.float64), "callback"),
        ("callback", 1),
    ]
    got: list[list[bytes]] = [[], []]
    for i, engine in enumerate((fast, full)):
        outs = [np.zeros(12, np.float32), np.zeros(12, np.float32), np.zeros(18, np.float32)]
        _feed.calls = 0  # type: ignore[attr-defined]
        for src, dst in runs:
            engine.connect_stream("in", _feed if isinstance(src, str) else src)
            if isinstance(dst, str):
                engine.connect_stream("out", lambda a, i=i: got[i].append(a.tobytes()))
            else:
                engine.connect_stream("out", outs[dst])
            engine.run(0)
            if not isinstance(dst, str):
                got[i].append(outs[dst].tobytes())
    assert fast._replay.static == [True] and full._replay.static == [False]
    assert len(got[0]) == len(runs) + 1
    assert got[0] == got[1]
    # the values themselves: run 3 reads its 3-transfer buffer's first two transfers
    x = runs[2][0][:12]  # type: ignore[index]
    np.testing.assert_array_equal(np.frombuffer(got[0][2], np.float32), x * x + np.float32(1))
    del fast.runtime.streams["in"]
    with pytest.raises(StreamError, match=r"stream 'in' is used by program .* not connected"):
        fast.run(0)
