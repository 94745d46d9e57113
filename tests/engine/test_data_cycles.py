"""``Codelet.run_cycles``: vertices whose cycles depend on the data they read (PopSparse's
product vertices walk meta-info written at run time). The compute set's step takes the
schedule of the counts of each run; the graph profile keeps the static estimates; a
program running such a vertex is not replayed."""

from __future__ import annotations

import numpy as np
from tremula_tests_engine_codelets import CODELETS, make_engine, var

from tremula import poplar


class Walk(poplar.Codelet):
    """y = x; costs 10 cycles plus the first element of x (as a supervisor vertex)."""

    x = poplar.Input(poplar.FLOAT)
    y = poplar.Output(poplar.FLOAT)
    supervisor = True

    @staticmethod
    def compute(v):
        v.y = v.x

    @staticmethod
    def cycles(v):
        return np.full(v.n, 10)

    @staticmethod
    def run_cycles(v):
        first = v.view("x", (v.n, 2))[0, :, 0]  # replica 0
        return 10 + first


def _engine():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets([*CODELETS, Walk])
    x = var(g, (4, 2), tile=None, write="x")
    y = var(g, (4, 2), tile=None)
    cs = g.add_compute_set("walk")
    g.add_vertices(cs, "Walk", {"x": x, "y": y}, tiles=range(4))
    return make_engine(g, poplar.Execute(cs), None, device)


def _step(engine):
    steps = engine.get_execution_profile()["simulation"]["steps"]
    return next(s for s in steps if s["type"] == "OnTileExecute")


def test_each_run_is_charged_the_cycles_of_its_data():
    e = _engine()
    launch = e.target.compute_set_launch_cycles
    for firsts in ([5, 7, 40, 1], [3, 3, 3, 3], [100, 0, 0, 0]):
        x = np.zeros((4, 2), np.float32)
        x[:, 0] = firsts
        e.write_tensor("x", x)
        e.reset_execution_profile()
        e.run()
        assert _step(e)["cycles"] == 10 + max(firsts) + launch
        assert e.run_cycles(0) == e.get_execution_profile()["simulation"]["cycles"]
    # the graph profile keeps the static estimate
    graph = e.get_graph_profile()
    active = graph["computeSets"]["cycleEstimates"]["activeCyclesByTile"]
    assert active[0] == [10, 10, 10, 10]


def test_a_second_run_is_not_a_replay_of_the_first():
    e = _engine()
    x = np.zeros((4, 2), np.float32)
    e.write_tensor("x", x)
    e.run()
    x[2, 0] = 77
    e.write_tensor("x", x)
    e.run()
    steps = [s for s in e.get_execution_profile()["simulation"]["steps"]]
    computes = [s["cycles"] for s in steps if s["type"] == "OnTileExecute"]
    launch = e.target.compute_set_launch_cycles
    assert computes == [10 + launch, 87 + launch]


class CachedWalk(Walk):
    """:class:`Walk` returning the same array for the same data, as PopSparse's product
    vertices do (their cycles are cached by the meta-info's content)."""

    seen: dict[bytes, np.ndarray] = {}

    @staticmethod
    def run_cycles(v):
        first = v.view("x", (v.n, 2))[0, :, 0]
        return CachedWalk.seen.setdefault(first.tobytes(), 10 + first)


def test_steps_of_data_seen_before_are_the_steps_of_that_data():
    """Runs alternating between contents (a propagation step's buckets, seen again on the
    next run) are each charged their own data's cycles, whichever the engine kept."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    g.add_codelets([*CODELETS, CachedWalk])
    x = var(g, (4, 2), tile=None, write="x")
    y = var(g, (4, 2), tile=None)
    cs = g.add_compute_set("walk")
    g.add_vertices(cs, "CachedWalk", {"x": x, "y": y}, tiles=range(4))
    e = make_engine(g, poplar.Execute(cs), None, device)
    launch = e.target.compute_set_launch_cycles
    contents = ([5, 7, 40, 1], [3, 3, 3, 3], [5, 7, 40, 1], [0, 90, 0, 0], [3, 3, 3, 3])
    for firsts in contents * 2:
        x = np.zeros((4, 2), np.float32)
        x[:, 0] = firsts
        e.write_tensor("x", x)
        e.reset_execution_profile()
        e.run()
        step = _step(e)
        assert step["cycles"] == 10 + max(firsts) + launch
        assert step["activeTiles"] == 4
    assert len(CachedWalk.seen) == 3
