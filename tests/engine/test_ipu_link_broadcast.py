"""Data that several tiles of another IPU take crosses the IPU-Links once: the sending tile
sends each element once (as on the chip, test_copy_broadcast.py) and each (source IPU,
destination IPU) flow carries it once (spec section 4.1: the link cost is the bytes of each
flow over the links' bandwidth), for a Copy and for a compute set's exchange alike. Every
receiving tile still receives all it takes. Hand-computed from the target's parameters."""

from __future__ import annotations

import math

import numpy as np

from tremula import poplar
from tremula.demo import SquarePlusOne
from tremula.profile import validate

TILES = 16  # per IPU; 8 source tiles on IPU 0, 16 destination tiles on IPU 1


def _target_and_rows() -> tuple[poplar.Device, poplar.Graph, poplar.Tensor, np.ndarray]:
    """Rows of 100 floats, row i on tile i of IPU 0, and each row's data."""
    device = poplar.IPUModel(tiles_per_ipu=TILES, num_ipus=2).create_device()
    g = poplar.Graph(device.target)
    x = g.add_variable(poplar.FLOAT, (8, 100), "x")
    g.set_tile_mapping(x, np.repeat(np.arange(8), 100).reshape(8, 100))
    g.create_host_write("x", x)
    return device, g, x, np.arange(800.0, dtype=np.float32).reshape(8, 100)


def _expected(target: poplar.Target, link_bytes: int) -> list[int]:
    """Each active tile's cycles: its own 400 bytes over its exchange port, or the flow's
    ``link_bytes`` over the IPU-Links, whichever is longer."""
    fixed, bpc = target.exchange_fixed_cycles, target.exchange_bytes_per_cycle
    tile = fixed + -(-400 // bpc)
    link = fixed + math.ceil(link_bytes / target.ipu_link_bytes_per_cycle)
    busy = max(tile, link)
    return [busy] * 8 + [0] * (TILES - 8) + [busy] * TILES


def test_a_copy_to_another_ipu_sends_a_row_once_for_the_two_tiles_taking_it():
    device, g, x, data = _target_and_rows()
    d = g.add_variable(poplar.FLOAT, (16, 100), "d")
    g.set_tile_mapping(d, np.repeat(TILES + np.arange(16), 100).reshape(16, 100))
    g.create_host_read("d", d)
    pairs = x.expand([1]).broadcast(2, 1).reshape((16, 100))  # row j of d <- row j // 2
    engine = poplar.Engine(g, poplar.Copy(pairs, d))
    engine.load(device)
    engine.write_tensor("x", data)
    engine.run(0)
    np.testing.assert_array_equal(engine.read_tensor("d"), np.repeat(data, 2, axis=0))
    graph, execution = engine.get_graph_profile(), engine.get_execution_profile()
    validate(graph, execution)
    ex = graph["externalExchanges"]
    assert ex["bytesSentByTile"] == [[400] * 8 + [0] * (2 * TILES - 8)]  # once, not twice
    assert ex["bytesReceivedByTile"] == [[0] * TILES + [400] * TILES]
    # 3200 distinct bytes cross from IPU 0 to IPU 1 (not 6400): the link bounds the step
    target = device.target
    assert _expected(target, 3200)[0] > target.exchange_fixed_cycles + 100  # link-bound
    assert ex["estimatedCyclesByTile"] == [_expected(target, 3200)]
    # the timeline spends them: 24 active tiles
    assert execution["simulation"]["tileCycles"]["globalExchange"] == sum(_expected(target, 3200))


def test_vertices_on_another_ipu_reading_one_row_load_the_link_once():
    device, g, x, data = _target_and_rows()
    g.add_codelets(SquarePlusOne)
    y = g.add_variable(poplar.FLOAT, (16, 100), "y")
    g.set_tile_mapping(y, np.repeat(TILES + np.arange(16), 100).reshape(16, 100))
    g.create_host_read("y", y)
    cs = g.add_compute_set("square")
    for j in range(16):  # vertices j = 2i, 2i + 1 both read row i
        g.add_vertex(cs, "demo::SquarePlusOne", {"x": x[j // 2], "y": y[j]}, tile=TILES + j)
    engine = poplar.Engine(g, poplar.Execute(cs))
    engine.load(device)
    engine.write_tensor("x", data)
    engine.run(0)
    np.testing.assert_allclose(engine.read_tensor("y"), np.repeat(data, 2, axis=0) ** 2 + 1)
    graph = engine.get_graph_profile()
    validate(graph, engine.get_execution_profile())
    ex = graph["externalExchanges"]
    assert ex["bytesSentByTile"] == [[400] * 8 + [0] * (2 * TILES - 8)]
    assert ex["bytesReceivedByTile"] == [[0] * TILES + [400] * TILES]
    assert ex["estimatedCyclesByTile"] == [_expected(device.target, 3200)]


def test_a_row_taken_on_two_other_ipus_is_sent_once_and_crosses_each_flow():
    device = poplar.IPUModel(tiles_per_ipu=4, num_ipus=3).create_device()
    g = poplar.Graph(device.target)
    x = g.add_variable(poplar.FLOAT, (400,), "x")
    g.set_tile_mapping(x, 0)
    d = g.add_variable(poplar.FLOAT, (3, 400), "d")
    g.set_tile_mapping(d, np.repeat([4, 5, 8], 400).reshape(3, 400))  # IPU 1, IPU 1, IPU 2
    g.create_host_write("x", x)
    g.create_host_read("d", d)
    engine = poplar.Engine(g, poplar.Copy(x.expand([0]).broadcast(3, 0), d))
    engine.load(device)
    engine.write_tensor("x", np.arange(400.0, dtype=np.float32))
    engine.run(0)
    np.testing.assert_array_equal(engine.read_tensor("d"), np.tile(np.arange(400.0), (3, 1)))
    ex = engine.get_graph_profile()["externalExchanges"]
    assert ex["bytesSentByTile"] == [[1600] + [0] * 11]
    assert ex["bytesReceivedByTile"] == [[0] * 4 + [1600, 1600, 0, 0, 1600, 0, 0, 0]]
    target = device.target
    fixed, bpc = target.exchange_fixed_cycles, target.exchange_bytes_per_cycle
    # each flow (0 -> 1, 0 -> 2) carries 1600 bytes: the tiles' 1600 bytes bound the step
    busy = max(fixed + 1600 // bpc, fixed + math.ceil(1600 / target.ipu_link_bytes_per_cycle))
    assert ex["estimatedCyclesByTile"] == [[busy, 0, 0, 0, busy, busy, 0, 0, busy, 0, 0, 0]]
