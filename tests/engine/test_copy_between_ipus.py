"""A Copy whose moves all go between IPUs is one GlobalExchange after a global (External)
sync (spec 4.3: "GlobalExchange. Sync(global), then ..."): no empty on-IPU exchange, and no
internal sync before it, as for a compute set's exchange from another IPU. A Copy that also
moves data within an IPU keeps its DoExchange (after an internal sync) before the global one.
Cycles hand-computed on 2 IPUs x 4 tiles without relative sync delays."""

from __future__ import annotations

import math

import numpy as np

from tremula import poplar
from tremula.profile import validate

GLOBAL_SYNC = 50  # the target's global sync, fixed for the test
MIN_SYNC = 30  # internal sync: every tile released MIN_SYNC after the last arrives


def _engine(rows_on: list[int]) -> tuple[poplar.Engine, poplar.Target]:
    """Copy 100 floats on tile 0 (IPU 0) to one row of ``d`` per tile of ``rows_on``."""
    device = poplar.IPUModel(
        tiles_per_ipu=4,
        num_ipus=2,
        relative_sync_delay_type="NO_DELAY",
        min_sync_delay=MIN_SYNC,
        global_sync_cycles=GLOBAL_SYNC,
    ).create_device()
    g = poplar.Graph(device.target)
    x = g.add_variable(poplar.FLOAT, (100,), "x")
    g.set_tile_mapping(x, 0)
    d = g.add_variable(poplar.FLOAT, (len(rows_on), 100), "d")
    g.set_tile_mapping(d, np.repeat(rows_on, 100).reshape(len(rows_on), 100))
    g.create_host_write("x", x)
    g.create_host_read("d", d)
    engine = poplar.Engine(g, poplar.Copy(x.expand([0]).broadcast(len(rows_on), 0), d))
    engine.load(device)
    engine.write_tensor("x", np.arange(100.0, dtype=np.float32))
    engine.run(0)
    data = np.tile(np.arange(100.0, dtype=np.float32), (len(rows_on), 1))
    np.testing.assert_array_equal(engine.read_tensor("d"), data)
    validate(engine.get_graph_profile(), engine.get_execution_profile())
    return engine, device.target


def _exchange_cycles(target: poplar.Target) -> int:
    """400 bytes sent by tile 0 and received by one tile: the tiles' ports bound the step
    (the IPU-Links carry the 400 bytes faster)."""
    tile = target.exchange_fixed_cycles + 400 // target.exchange_bytes_per_cycle  # 120
    link = target.exchange_fixed_cycles + math.ceil(400 / target.ipu_link_bytes_per_cycle)
    assert tile > link
    return tile


def _steps(engine: poplar.Engine) -> list[tuple[str, str, int, int]]:
    steps = engine.get_execution_profile()["simulation"]["steps"]
    return [(s["type"], s.get("syncType", ""), s["cyclesFrom"], s["cyclesTo"]) for s in steps]


def test_a_copy_only_between_ipus_is_a_global_sync_then_a_global_exchange():
    engine, target = _engine([5])  # tile 5 is on IPU 1
    ex = _exchange_cycles(target)
    assert _steps(engine) == [
        ("Sync", "External", 0, GLOBAL_SYNC),  # all 8 tiles wait GLOBAL_SYNC from 0
        ("GlobalExchange", "", GLOBAL_SYNC, GLOBAL_SYNC + ex),  # tiles 0 and 5
    ]
    execution, graph = engine.get_execution_profile(), engine.get_graph_profile()
    assert execution["simulation"]["cycles"] == GLOBAL_SYNC + ex  # 170; was 200
    tile_cycles = execution["simulation"]["tileCycles"]
    assert tile_cycles["sync"] == 8 * GLOBAL_SYNC
    assert tile_cycles["globalExchange"] == 2 * ex
    assert tile_cycles["doExchange"] == 0
    programs = graph["programs"]
    assert [programs[p]["type"] for p in execution["programTrace"]] == ["GlobalExchange"]
    assert graph["externalExchanges"]["bytesReceivedByTile"] == [[0] * 5 + [400, 0, 0]]


def test_a_copy_within_and_between_ipus_keeps_its_internal_exchange_first():
    engine, target = _engine([1, 5])  # row 0 on tile 1 (IPU 0), row 1 on tile 5 (IPU 1)
    ex = _exchange_cycles(target)  # tile 0 -> tile 1 is the same 400 bytes at 4 B/cycle
    internal_end = MIN_SYNC + ex  # 150
    global_start = internal_end + GLOBAL_SYNC  # 200
    assert _steps(engine) == [
        ("Sync", "Internal", 0, MIN_SYNC),
        ("DoExchange", "", MIN_SYNC, internal_end),
        ("Sync", "External", MIN_SYNC, global_start),
        ("GlobalExchange", "", global_start, global_start + ex),
    ]
    assert engine.get_execution_profile()["simulation"]["cycles"] == global_start + ex
