"""gcl all-reduce on the reduced tensor's fragments where they lie (GCL's layout): each
tile's elements split into one run of whole blocks per chunk, only the remainder through a
work buffer; results against NumPy, and the run path's strided views in use."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import gcl
from tremula.libs.gcl import views
from tremula.libs.gcl.ring import Fragments

Op = gcl.CollectiveOperator


def _copies(prog: poplar.Sequence) -> dict[str, int]:
    """Name -> elements of every on-chip Copy the collective added."""
    return {p.name: p.src.num_elements for p in prog.programs if isinstance(p, poplar.Copy)}


def _variables(graph: poplar.Graph) -> set[str]:
    return {v.name for v in graph.state.variables}


def test_fragments_split_each_tile_in_place():
    """Tile by tile: ``G`` runs of whole blocks in flattened order, the rest remainder."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    graph = poplar.Graph(device.target, replication_factor=4)
    t = graph.add_variable(poplar.FLOAT, (4 * 130,), "t")
    poplar.map_tensor_linearly(graph, t)  # 130 per tile: 2 blocks per chunk and 2 left
    frag = Fragments.of(graph, t, 4, 16)
    assert frag.main.shape == (4, 8, 16)
    np.testing.assert_array_equal(frag.tiles, np.repeat(np.arange(4), 2))
    tile0 = frag.main[:, :2].reshape(4, 32)  # chunk k on tile 0: elements [32 k, 32 k + 32)
    np.testing.assert_array_equal(tile0, np.arange(128).reshape(4, 32))
    np.testing.assert_array_equal(frag.rest, (np.arange(4)[:, None] * 130 + [128, 129]).ravel())
    tiles = graph.tiles_of(t)
    assert np.all(tiles[frag.main] == frag.tiles[None, :, None])  # no block moves tile


@pytest.mark.parametrize("per_tile", [128, 130, 7], ids=["whole-blocks", "remainder", "small"])
@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "out"])
def test_all_reduce_moves_only_the_remainder(per_tile, in_place, harness, monkeypatch):
    """Whole blocks are reduced and gathered in the tensor itself: the only on-chip copies
    are the remainder's, into and out of a work buffer that holds only it."""
    taken = []

    def spy(*args, **kwargs):
        got = views.row_pieces(*args, **kwargs)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(gcl.codelets, "row_pieces", spy)
    R, n = 4, 4 * per_tile
    h = harness(R, tiles=4)
    x = h.input("x", poplar.FLOAT, (n,))
    if in_place:
        gcl.all_reduce_in_place(h.graph, x, Op.ADD, h.prog, name="ar")
        h.output("y", x)
    else:
        h.output("y", gcl.all_reduce(h.graph, x, Op.ADD, h.prog, name="ar"))
    rest = 4 * (per_tile % 64) if per_tile >= 64 else n
    copies = _copies(h.prog)
    if rest:
        assert copies == {"ar/toWork": -(-rest // 4) * 4, "ar/fromWork": rest}
        assert "ar/work" in _variables(h.graph)
    else:
        assert copies == {} and "ar/work" not in _variables(h.graph)
    data = np.random.default_rng(per_tile).integers(-50, 50, (R, n)).astype(np.float32)
    out = h.run({"x": data})
    np.testing.assert_array_equal(out["y"], np.broadcast_to(data.sum(0), (R, n)))
    assert taken and all(taken)  # the vertices ran from strided views of device memory


def test_scattered_mapping_reduces_in_place(harness):
    """A tensor whose tiles' elements are not runs: fragments follow the mapping."""
    R, n = 2, 600
    h = harness(R, tiles=4)
    x = h.input("x", poplar.FLOAT, (n,), tiles=np.arange(n) % 4)
    h.output("y", gcl.all_reduce(h.graph, x, Op.MAX, h.prog))
    data = np.random.default_rng(0).normal(size=(R, n)).astype(np.float32)
    out = h.run({"x": data})
    np.testing.assert_array_equal(out["y"], np.broadcast_to(data.max(0), (R, n)))
    np.testing.assert_array_equal(h.graph.tiles_of(h.outputs["y"]), np.arange(n) % 4)
