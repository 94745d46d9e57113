"""A Copy that broadcasts one source region to several tiles: the source tile sends each
element once, every destination tile receives it, and the two tiles of a super-tile share
the receive (spec section 4.1), as the exchanges of compute sets do. Hand-computed."""

from __future__ import annotations

import numpy as np

from tremula import poplar


def _broadcast(dst_tiles: list[int]) -> tuple[dict, np.ndarray, poplar.Target]:
    """Copy 400 floats on tile 3 to one row per entry of ``dst_tiles``: the exchange's
    profile, the copied rows and the target."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    x = g.add_variable(poplar.FLOAT, (400,), "x")
    g.set_tile_mapping(x, 3)
    d = g.add_variable(poplar.FLOAT, (len(dst_tiles), 400), "d")
    g.set_tile_mapping(d, np.repeat(dst_tiles, 400).reshape(len(dst_tiles), 400))
    g.create_host_write("x", x)
    g.create_host_read("d", d)
    copy = poplar.Copy(x.expand([0]).broadcast(len(dst_tiles), 0), d)
    engine = poplar.Engine(g, copy)
    engine.load(device)
    engine.write_tensor("x", np.arange(400.0, dtype=np.float32))
    engine.run(0)
    return engine.get_graph_profile()["exchanges"], engine.read_tensor("d"), device.target


def test_a_broadcast_copy_is_sent_once_and_shared_by_a_super_tile_pair():
    ex, d, target = _broadcast([0, 1, 2])
    np.testing.assert_array_equal(d, np.tile(np.arange(400.0, dtype=np.float32), (3, 1)))
    fixed, bpc = target.exchange_fixed_cycles, target.exchange_bytes_per_cycle
    assert ex["bytesSentByTile"][0] == [0, 0, 0, 1600]  # once, not once per receiver
    assert ex["bytesReceivedByTile"][0] == [1600, 1600, 1600, 0]
    # tiles 0 and 1 (one super-tile) both take the same 1600 bytes: at twice the rate;
    # tile 2 alone and the sender at the plain rate
    pair, alone = fixed + -(-800 // bpc), fixed + -(-1600 // bpc)
    assert ex["cyclesByTile"][0] == [pair, pair, alone, alone]


def test_a_tile_receives_every_address_a_broadcast_copy_writes_on_it():
    ex, d, target = _broadcast([0, 0, 2])
    np.testing.assert_array_equal(d, np.tile(np.arange(400.0, dtype=np.float32), (3, 1)))
    fixed, bpc = target.exchange_fixed_cycles, target.exchange_bytes_per_cycle
    assert ex["bytesSentByTile"][0] == [0, 0, 0, 1600]
    assert ex["bytesReceivedByTile"][0] == [3200, 0, 1600, 0]
    assert ex["cyclesByTile"][0] == [fixed + -(-3200 // bpc), 0] + [fixed + -(-1600 // bpc)] * 2
