"""The remote pieces of a vertex field (``computeset._remote_pieces``: runs of consecutive
addresses within one vertex and one tile whose tile is not the vertex's), the exchanges a
compute set needs: the three ways of finding them (runs of one element, element by element,
splitting the runs at vertices and tile changes) give the pieces an element-by-element
walk gives, in field order."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tremula.engine import computeset, tilelayout
from tremula.engine.tilelayout import TileLayout


def _field(rng, single: bool):
    """A random field: its runs, vertices (``offsets``) and their tiles, and the tile of
    every address of a space."""
    size = 300
    tile_of = np.repeat(rng.integers(0, 4, 40), rng.integers(1, 16, 40))[:size]
    tile_of = np.resize(tile_of, size).astype(np.int32)
    n = int(rng.integers(1, 30))
    lengths = np.ones(n, np.int64) if single else rng.integers(1, 12, n).astype(np.int64)
    starts = rng.integers(0, size - 12, n).astype(np.int64)
    total = int(lengths.sum())
    cuts = np.sort(rng.integers(0, total + 1, int(rng.integers(0, 8))))
    offsets = np.r_[0, cuts, total, total].astype(np.int64)  # empty vertices too
    vertex_tiles = rng.integers(0, 4, offsets.size - 1).astype(np.int32)
    return starts, lengths, offsets, vertex_tiles, tile_of


def _walk(starts, lengths, offsets, vertex_tiles, tile_of):
    """The pieces element by element: a piece ends where the next element is not the next
    address, belongs to another vertex or lies on another tile."""
    addr = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
    vertex = np.searchsorted(offsets, np.arange(addr.size), side="right") - 1
    run = np.repeat(np.arange(starts.size), lengths)
    pieces: list[list[int]] = []
    for i, a in enumerate(addr):
        same = (
            pieces
            and run[i] == run[i - 1]
            and vertex[i] == vertex[i - 1]
            and tile_of[a] == tile_of[addr[i - 1]]
        )
        if same:
            pieces[-1][1] += 1
        else:
            pieces.append([int(a), 1, int(tile_of[a]), int(vertex_tiles[vertex[i]])])
    remote = [p for p in pieces if p[2] != p[3]]
    return [np.array(column, dtype=np.int64) for column in zip(*remote)] if remote else None


def _pieces(starts, lengths, offsets, vertex_tiles, tile_of):
    space = SimpleNamespace(tile_of=tile_of, tiles=lambda: tile_of)
    state = SimpleNamespace(space=lambda dtype: space)
    g = SimpleNamespace(batch=SimpleNamespace(offsets=lambda name: offsets), tiles=vertex_tiles)
    gather = SimpleNamespace(
        runs=lambda: (starts, lengths),
        dtype="float",
        size=int(lengths.sum()),
        addrs=SimpleNamespace(layout=None),  # (no layout: the pieces in field order)
    )
    layout = TileLayout.build([tile_of])
    return computeset._remote_pieces(state, g, "x", gather, layout.cuts(0))


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("by", ["element", "runs", "runs, no table"])
def test_remote_pieces_are_those_of_an_element_walk(monkeypatch, seed, by):
    if by != "element":
        monkeypatch.setattr(computeset, "PER_ELEMENT_MAX", 0)
    if by == "runs, no table":  # the tile changes searched, not looked up
        monkeypatch.setattr(tilelayout, "LOOKUP_TABLE_MAX", 0)
    rng = np.random.default_rng(seed)
    for single in (False, True):
        field = _field(rng, single)
        want, got = _walk(*field), _pieces(*field)
        assert (got is None) == (want is None)
        if want is not None:
            assert len(got) == 4
            for g, w in zip(got, want):
                assert np.array_equal(g, w)


def _element_set(pieces) -> set[tuple[int, int, int]]:
    """(address, element tile, vertex tile) of every element of the pieces."""
    if pieces is None:
        return set()
    out = set()
    for a, n, e, v in zip(*(p.tolist() for p in pieces)):
        out.update((addr, e, v) for addr in range(a, a + n))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_row_pieces_are_the_moves_of_an_element_walk(seed):
    """A field connected to a view (transposed, broadcast: a weight matrix read by many
    vertices) whose vertices take whole rows gives its pieces row by row, each address
    of a row once: the same moves as the element walk's pieces."""
    from tremula import poplar
    from tremula.engine.plan import Gather
    from tremula.poplar.addresses import AddressList

    rng = np.random.default_rng(100 + seed)
    graph = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)
    w = graph.add_variable(poplar.FLOAT, (4, 6, 8), "w")
    tile_of = _field(rng, False)[4][: w.num_elements]
    graph.set_tile_mapping(w, tile_of.reshape(w.shape))
    copies = int(rng.integers(1, 4))
    view = w.dim_shuffle(rng.permutation(3).tolist()).expand([0]).broadcast(copies, 0)
    addrs = AddressList(view.addresses, graph.state.address_roots)
    assert addrs.layout is not None
    total = view.num_elements
    row = int(np.prod(view.shape[int(rng.integers(1, 4)) :]))  # vertices take whole rows
    cuts = np.sort(rng.choice(np.arange(1, total // row), int(rng.integers(0, 4)), False))
    offsets = np.r_[0, cuts * row, total].astype(np.int64)
    vertex_tiles = rng.integers(0, 4, offsets.size - 1).astype(np.int32)
    space = graph.state.space(poplar.FLOAT)
    state = SimpleNamespace(space=lambda dtype: space)
    g = SimpleNamespace(batch=SimpleNamespace(offsets=lambda name: offsets), tiles=vertex_tiles)
    gather = Gather(poplar.FLOAT, addrs)
    layout = TileLayout.build([space.tiles()])
    got = computeset._remote_pieces(state, g, "x", gather, layout.cuts(0))
    want = _walk(*gather.runs(), offsets, vertex_tiles, space.tiles())
    assert _element_set(got) == _element_set(want)
    assert got is None or all(n >= 1 for n in got[1].tolist())
