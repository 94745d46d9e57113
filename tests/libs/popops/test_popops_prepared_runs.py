"""Later runs of a loaded engine take the codelets' prepared paths (``Codelet.prepare``:
closures over views of device memory). They must read what the host wrote since the last
run, not what the first run saw: scaled adds with number and tensor scales (subtracted or
not), reductions over one and several stages, casts; each run checked against NumPy."""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops.scaled_add import a_x_plus_b_y, scaled_add_to, scaled_subtract_from
from tremula.profile import validate

F32 = np.float32


def _input(graph, name, dtype, shape):
    t = graph.add_variable(dtype, shape, name)
    poplar.map_tensor_linearly(graph, t)
    graph.create_host_write(name, t)
    return t


def _output(graph, name, t):
    graph.create_host_read(name, t)


def test_later_runs_read_new_host_data_through_prepared_paths():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    prog = poplar.Sequence()
    a = _input(g, "a", poplar.FLOAT, (6, 40))
    b = _input(g, "b", poplar.FLOAT, (6, 40))
    c = _input(g, "c", poplar.FLOAT, (6, 40))
    h = _input(g, "h", poplar.HALF, (6, 40))
    s = _input(g, "s", poplar.FLOAT, (1,))
    x = _input(g, "x", poplar.FLOAT, (64, 30))
    scaled_add_to(g, a, b, 0.5, prog)  # number scale
    scaled_subtract_from(g, c, b, s.reshape(()), prog)  # tensor scale, subtracted
    b_half = popops.cast(g, b, poplar.HALF, prog)
    a_x_plus_b_y(g, h, s.reshape(()), b_half, s.reshape(()), prog)  # two tensor scales
    total = popops.reduce(g, x, [0], "ADD", prog)
    biggest = popops.reduce(g, x, [1], "MAX", prog)
    halves = popops.cast(g, x, poplar.HALF, prog)
    outputs = {"ra": a, "rc": c, "rh": h, "sum": total, "max": biggest, "half": halves}
    for name, t in outputs.items():
        _output(g, name, t)
    engine = poplar.Engine(g, prog, {"autoReport.executionProfileProgramRunCount": "3"})
    engine.load(device)
    rng = np.random.default_rng(11)
    profiles = []
    for _ in range(3):
        feeds = {
            "a": rng.standard_normal((6, 40)).astype(F32),
            "b": rng.standard_normal((6, 40)).astype(F32),
            "c": rng.standard_normal((6, 40)).astype(F32),
            "h": rng.standard_normal((6, 40)).astype(np.float16),
            "s": np.array([rng.uniform(0.5, 2.0)], F32),
            "x": rng.standard_normal((64, 30)).astype(F32),
        }
        for name, data in feeds.items():
            engine.write_tensor(name, data)
        engine.run()
        sc = feeds["s"][0]
        np.testing.assert_array_equal(engine.read_tensor("ra"), feeds["a"] + F32(0.5) * feeds["b"])
        np.testing.assert_array_equal(engine.read_tensor("rc"), feeds["c"] - sc * feeds["b"])
        bh = feeds["b"].astype(np.float16).astype(F32)
        want_h = (sc * feeds["h"].astype(F32) + sc * bh).astype(np.float16)
        np.testing.assert_array_equal(engine.read_tensor("rh"), want_h)
        np.testing.assert_allclose(engine.read_tensor("sum"), feeds["x"].sum(0), rtol=1e-5)
        np.testing.assert_array_equal(engine.read_tensor("max"), feeds["x"].max(1))
        np.testing.assert_array_equal(engine.read_tensor("half"), feeds["x"].astype(np.float16))
        profile = engine.get_execution_profile()
        validate(engine.get_graph_profile(), profile)
        profiles.append(profile["simulation"]["steps"])
    # the replayed runs record the same steps as the first, shifted by its length
    first, later = profiles[0], profiles[2][len(profiles[1]) :]
    assert len(later) == len(first)
    shift = later[0]["cyclesFrom"] - first[0]["cyclesFrom"]
    assert shift > 0
    assert all(
        b["cyclesFrom"] - a["cyclesFrom"] == shift and b["type"] == a["type"]
        for a, b in zip(first, later)
    )


def test_transposed_operands_run_as_strided_views(monkeypatch):
    """A scaled add of a transposed matrix and a column sum (pieces strided through the
    rows) are served as strided views: later runs never fall back to ``compute``, and read
    the new host data."""
    from tremula.libs.popops.codelets import reduce as reduce_codelets
    from tremula.libs.popops.codelets import scaled_add

    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    prog = poplar.Sequence()
    w = _input(g, "w", poplar.FLOAT, (24, 40))
    gt = _input(g, "gt", poplar.FLOAT, (40, 24))
    x = _input(g, "x", poplar.FLOAT, (32, 64))
    v = _input(g, "v", poplar.FLOAT, (24, 40))
    scaled_add_to(g, w, gt.transpose(), -0.25, prog)
    scaled_subtract_from(g, v, gt.transpose(), 0.75, prog)  # a number scale, subtracted
    col = popops.reduce(g, x, [0], "ADD", prog)
    _output(g, "rw", w)
    _output(g, "rv", v)
    _output(g, "col", col)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    rng = np.random.default_rng(5)

    def run_and_check() -> None:
        feeds = {
            n: rng.standard_normal(s).astype(F32)
            for n, s in (("w", (24, 40)), ("gt", (40, 24)), ("x", (32, 64)), ("v", (24, 40)))
        }
        for name, data in feeds.items():
            engine.write_tensor(name, data)
        engine.run()
        want_w = feeds["w"] + F32(-0.25) * feeds["gt"].T
        np.testing.assert_array_equal(engine.read_tensor("rw"), want_w)
        want_v = feeds["v"] - F32(0.75) * feeds["gt"].T
        np.testing.assert_array_equal(engine.read_tensor("rv"), want_v)
        np.testing.assert_allclose(
            engine.read_tensor("col"), feeds["x"].sum(0), rtol=1e-5, atol=1e-5
        )

    run_and_check()

    def refuse(v):
        raise AssertionError(f"{v.vertex_type.name}: gathered compute after the first run")

    monkeypatch.setattr(scaled_add.ScaledAdd1D, "compute", classmethod(lambda cls, v: refuse(v)))
    monkeypatch.setattr(reduce_codelets.ReducePartials, "compute", staticmethod(refuse))
    for _ in range(2):
        run_and_check()


def test_runs_compute_quietly_and_host_callbacks_keep_the_callers_error_state():
    """A run sets NumPy's "ignore" error state once for the device's computations (the
    IEEE rules: ``1 / 0`` is inf, no error), interpreted and replayed alike; host
    functions and stream callbacks called from inside it see the error state of the code
    that called ``run``."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    prog = poplar.Sequence()
    a = _input(g, "a", poplar.FLOAT, (8,))
    b = _input(g, "b", poplar.FLOAT, (8,))
    q = popops.div(g, a, b, prog)
    _output(g, "q", q)
    hf = g.add_host_function("seen", [(poplar.FLOAT, 8)], [(poplar.FLOAT, 8)])
    back = g.add_variable(poplar.FLOAT, (8,), "back")
    poplar.map_tensor_linearly(g, back)
    _output(g, "back", back)
    prog.add(poplar.Call(hf, [q], [back]))
    prog.add(poplar.Copy(q, g.add_device_to_host_fifo("q_out", poplar.FLOAT, 8)))
    engine = poplar.Engine(g, prog)
    engine.load(device)
    states, streamed = [], []
    engine.connect_stream("q_out", lambda data: streamed.append(np.geterr()["divide"]))

    def seen(inputs, outputs):
        states.append(np.geterr()["divide"])
        outputs[0][...] = np.float32(1) / inputs[0]  # raises under the caller's "raise"

    engine.connect_host_function("seen", seen)
    x = np.array([1, -2, 0, 3, 4, 5, -1, 2], F32)
    y = np.array([0, 0, 0, 1, 2, 4, 8, 0], F32)
    engine.write_tensor("a", x)
    engine.write_tensor("b", y)
    with np.errstate(divide="warn", invalid="ignore"):
        for _ in range(3):  # interpreted, then replayed
            engine.run(0)
    with np.errstate(all="ignore"):
        want = x / y
        np.testing.assert_array_equal(engine.read_tensor("q"), want)
        np.testing.assert_array_equal(engine.read_tensor("back"), F32(1) / want)
    assert states == streamed == ["warn"] * 3
    with np.errstate(all="raise"):
        engine.write_tensor("a", np.ones(8, F32))
        engine.write_tensor("b", np.ones(8, F32))
        engine.run(0)  # the division runs quietly; the callback's 1 / 1 does not raise
        engine.write_tensor("b", np.zeros(8, F32))
        try:
            engine.run(0)  # the device's 1 / 0 is inf; the callback's 1 / inf is 0
        except FloatingPointError:
            raise AssertionError("the device's division raised the caller's error") from None
    np.testing.assert_array_equal(engine.read_tensor("q"), np.full(8, np.inf, F32))
    np.testing.assert_array_equal(engine.read_tensor("back"), np.zeros(8, F32))
    assert states[3:] == streamed[3:] == ["raise", "raise"]
