"""Replayed timelines: repeated runs of a program without data-dependent control flow give
the same profile bytes as simulating every run in full."""

from __future__ import annotations

import json

import numpy as np

from tremula import poplar
from tremula.demo import SquarePlusOne, Sum


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
    prog = poplar.Sequence([poplar.Execute(cs), poplar.Execute(red), poplar.Execute(fin),
                            poplar.Sync("external"), poplar.Copy(total, x[0, :1])])
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
        full.get_execution_profile(), sort_keys=True)


def test_programs_that_branch_on_data_are_simulated_in_full():
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    flag = g.add_variable(poplar.INT, (1,), "flag", mapping="linear")
    engine = poplar.Engine(g, poplar.If(flag, poplar.Sync("internal")))
    engine.load(device)
    assert engine._replay.static == [False]
