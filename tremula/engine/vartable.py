"""The graph profile's ``variables`` table (a Tremula extension, FORMAT.md): every variable's
name, bytes, liveness and the runs of tiles that hold it.
"""

from __future__ import annotations

import numpy as np

from tremula.engine.liveness import Intervals
from tremula.profile.schema import VARIABLE_TABLE_KEYS


def var_tile_counts(
    space, T: int, segments: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(variable, tile, element count) for every variable's part on every tile, computed on
    runs of equal tile inside each variable. ``segments``: the sorted addresses where the
    space's runs of equal tile start (0 first), when known (``TileLayout.seg_start``)."""
    tiles = space.tiles()
    if segments is None:
        segments = np.r_[0, np.flatnonzero(tiles[1:] != tiles[:-1]) + 1]
    starts = np.asarray(space.var_starts, dtype=np.int64)
    inner = starts[(starts > 0) & (starts < tiles.size)]  # empty variables start at the end
    # two sorted lists: a merge sort merges them in one pass
    run_start = np.sort(np.concatenate((segments, inner)).astype(np.int64), kind="stable")
    if run_start.size > 1:
        run_start = run_start[np.r_[True, run_start[1:] != run_start[:-1]]]
    run_len = np.diff(np.r_[run_start, tiles.size])
    owner = np.asarray(space.var_ids, dtype=np.int64)[
        np.searchsorted(starts, run_start, side="right") - 1
    ]
    key = owner * T + tiles[run_start].astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    counts = np.bincount(inv, weights=run_len).astype(np.int64)
    return uniq // T, uniq % T, counts


def variable_table(
    state, iv: Intervals, T: int, tile_counts: dict | None = None
) -> dict[str, list]:
    """Every variable's name, bytes, liveness and placement: the profile's ``variables``
    (FORMAT.md, Tremula extensions). ``tileRuns[v]`` lists ``first tile, tile count, bytes
    per tile`` for each run of consecutive tiles holding equal bytes of variable ``v``.
    ``tile_counts``: :func:`var_tile_counts` of each space, when already computed."""
    nv = len(state.variables)
    runs: list[list[int]] = [[] for _ in range(nv)]
    total = np.zeros(nv, np.int64)
    for dtype, space in state.spaces.items():
        if space.size == 0:
            continue
        found = (tile_counts or {}).get(dtype)
        var, tile, counts = found or var_tile_counts(space, T)  # by variable, then tile
        amount = counts * dtype.size
        np.add.at(total, var, amount)
        cut = (var[1:] != var[:-1]) | (tile[1:] != tile[:-1] + 1) | (amount[1:] != amount[:-1])
        starts = np.flatnonzero(np.r_[True, cut])
        lengths = np.diff(np.r_[starts, var.size])
        for v, t, n, b in zip(
            var[starts].tolist(), tile[starts].tolist(), lengths.tolist(), amount[starts].tolist()
        ):
            runs[v] += [t, n, b]
    always = iv.always_live
    columns = (
        [v.name for v in state.variables],
        total.tolist(),
        always.astype(np.int64).tolist(),
        np.where(always, -1, iv.start).tolist(),
        np.where(always, -1, iv.end).tolist(),
        runs,
    )
    return dict(zip(VARIABLE_TABLE_KEYS, columns, strict=True))
