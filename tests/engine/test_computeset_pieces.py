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
    gather = SimpleNamespace(runs=lambda: (starts, lengths), dtype="float")
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
