"""The exchange planner works on the set of moves, not on how they are cut into runs (what
lets a field's remote pieces come row by row, ``computeset._row_pieces``): its figures
for runs are those of the same moves cut into one-element runs in any order, its code
regions those of an element walk over tile memory; tile memory positions of runs
(``TileLayout.local_runs``, split where a run's tile changes) against an element walk;
and the variables owning runs of addresses (``Space.variables_in``) against the variable
of each address."""

from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace

import numpy as np
import pytest

from tremula.engine import exchange as X
from tremula.engine import tilelayout
from tremula.engine.tilelayout import TileLayout
from tremula.poplar.graph_state import Space
from tremula.poplar.intervals import distinct
from tremula.poplar.types import FLOAT

TILES = 6


def _space_tiles(rng: np.random.Generator, size: int) -> np.ndarray:
    """A space's tile of every address: runs of 1 to 12 addresses, tiles repeating."""
    tiles = np.repeat(rng.integers(0, TILES, size), rng.integers(1, 12, size))[:size]
    return tiles.astype(np.int32)


def _moves(rng: np.random.Generator, tiles_by_space: list[np.ndarray], n: int) -> X.Transfers:
    """Runs of up to 5 addresses, each within one tile's stretch of one space, sent from
    the elements' tile (or, for a quarter of them, received there), overlapping and
    touching (short spaces)."""
    src, dst, start, length, space = [], [], [], [], []
    while len(src) < n:
        sid = int(rng.integers(0, len(tiles_by_space)))
        tiles = tiles_by_space[sid]
        a = int(rng.integers(0, tiles.size))
        b = a + 1
        while b < tiles.size and b - a < 5 and tiles[b] == tiles[a] and rng.random() < 0.7:
            b += 1
        other = int(rng.integers(0, TILES))
        if other == tiles[a]:
            continue
        home = int(tiles[a])
        src.append(home if rng.random() < 0.75 else other)
        dst.append(other if src[-1] == home else home)
        start.append(a)
        length.append(b - a)
        space.append(sid)
    sp = np.array(space, dtype=np.int64)
    return X.Transfers(
        np.array(src, np.int64),
        np.array(dst, np.int64),
        np.array(start, np.int64),
        np.array(length, np.int64),
        sp,
        np.array([4, 2])[sp],
    )


def _elements(t: X.Transfers, order: np.ndarray) -> X.Transfers:
    """The same moves as one-element runs, in the order ``order`` shuffles them into."""
    run = np.repeat(np.arange(len(t)), t.length)
    offset = np.arange(run.size) - np.repeat(np.cumsum(t.length) - t.length, t.length)
    run, offset = run[order[: run.size]], offset[order[: run.size]]
    ones = np.ones(run.size, np.int64)
    return X.Transfers(
        t.src[run], t.dst[run], t.start[run] + offset, ones, t.space[run], t.itemsize[run]
    )


def _local_positions(tiles: np.ndarray) -> np.ndarray:
    """Each address's position among the addresses of its tile (in address order)."""
    out = np.empty(tiles.size, np.int64)
    for tile in np.unique(tiles):
        where = np.flatnonzero(tiles == tile)
        out[where] = np.arange(where.size)
    return out


def _regions_reference(t: X.Transfers, tiles_by_space: list[np.ndarray]) -> list[int]:
    """Per destination: maximal runs of tile memory positions of each (source, space)."""
    local = [_local_positions(tiles) for tiles in tiles_by_space]
    covered: dict[tuple[int, int, int], set[int]] = {}
    for i in range(len(t)):
        key = (int(t.dst[i]), int(t.src[i]), int(t.space[i]))
        addrs = range(int(t.start[i]), int(t.start[i] + t.length[i]))
        covered.setdefault(key, set()).update(int(local[key[2]][a]) for a in addrs)
    regions = [0] * TILES
    for (d, _, _), positions in covered.items():
        ordered = sorted(positions)
        regions[d] += 1 + sum(b != a + 1 for a, b in pairwise(ordered))
    return regions


@pytest.mark.parametrize("tables", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_plan_is_that_of_the_moves_cut_into_elements_in_any_order(
    monkeypatch, seed: int, tables: bool
) -> None:
    if not tables:  # tile memory positions searched, not looked up
        monkeypatch.setattr(tilelayout, "LOOKUP_TABLE_MAX", 0)
    rng = np.random.default_rng(seed)
    tiles_by_space = [_space_tiles(rng, 80), _space_tiles(rng, 50)]
    layout = TileLayout.build(tiles_by_space)
    assert (layout.table[0] is not None) == tables
    t = _moves(rng, tiles_by_space, 300)
    elements = _elements(t, rng.permutation(int(t.length.sum())))
    target = SimpleNamespace(
        num_tiles=TILES,
        tiles_per_super_tile=2,
        supports_super_tile_send_receive=True,
        exchange_fixed_cycles=20,
        exchange_bytes_per_cycle=4,
        memcpy_bytes_per_cycle=8,
        exchange_code_bytes_per_region=12,
    )
    plans = [X.plan_exchange(target, m, layout=layout) for m in (t, elements)]  # type: ignore[arg-type]
    for field in ("bytes_sent", "bytes_received", "cycles_by_tile", "code_bytes"):
        a, b = (getattr(p, field).tolist() for p in plans)
        assert a == b, field
    regions = np.array(_regions_reference(t, tiles_by_space))
    sent = plans[0].bytes_sent > 0
    assert plans[0].code_bytes.tolist() == (12 * (regions + sent)).tolist()


@pytest.mark.parametrize("tables", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_local_runs_split_where_the_tile_changes(monkeypatch, seed: int, tables: bool) -> None:
    if not tables:
        monkeypatch.setattr(tilelayout, "LOOKUP_TABLE_MAX", 0)
    rng = np.random.default_rng(40 + seed)
    tiles = _space_tiles(rng, 120)
    layout = TileLayout.build([tiles])
    start = rng.integers(0, 100, 50)
    length = rng.integers(1, 21, 50)
    local, lengths, run = layout.local_runs(0, start, length)
    run = np.arange(start.size) if run is None else run
    positions = _local_positions(tiles)
    want = []  # (run, tile position, length) of each piece, element by element
    for i, (a, n) in enumerate(zip(start.tolist(), length.tolist())):
        for addr in range(a, a + n):
            if addr > a and tiles[addr] == tiles[addr - 1]:
                want[-1][2] += 1
            else:
                want.append([i, int(positions[addr]), 1])
    assert [list(p) for p in zip(run.tolist(), local.tolist(), lengths.tolist())] == want


@pytest.mark.parametrize("seed", range(4))
def test_variables_in_runs_are_those_of_their_addresses(seed: int) -> None:
    rng = np.random.default_rng(60 + seed)
    space = Space(FLOAT)
    for var_id, size in enumerate(rng.integers(0, 6, 30).tolist()):  # empty ones too
        space.allocate(size, 3 * var_id)
    start = rng.integers(0, space.size, 8)
    length = np.minimum(rng.integers(1, 15, 8), space.size - start)
    addrs = np.concatenate([np.arange(a, a + n) for a, n in zip(start, length)])
    want = distinct(space.variable_at(addrs))
    assert space.variables_in(start, length).tolist() == want.tolist()
