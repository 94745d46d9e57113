"""Where elements sit in tile memory, for counting exchange code regions: a tile stores the
elements of a space that it holds in address order, one after another (Poplar lays each
tile's share out contiguously).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.poplar.intervals import split_runs

#: Spaces up to this many elements get lookup tables while compiling (4 bytes an element,
#: as the space's own tile table) instead of binary searches over their runs of tiles.
LOOKUP_TABLE_MAX = 1 << 26


@dataclass(frozen=True, eq=False)
class TileLayout:
    """Per space id: the starts of the runs of equal tile (*segments*), and each segment's
    offset on its tile; for spaces of at most :data:`LOOKUP_TABLE_MAX` elements, every
    address's segment."""

    seg_start: tuple[np.ndarray, ...]
    seg_local: tuple[np.ndarray, ...]
    table: tuple[np.ndarray | None, ...]

    @staticmethod
    def build(tiles_by_space: list[np.ndarray]) -> TileLayout:
        starts, locals_, tables = [], [], []
        for tiles in tiles_by_space:
            cut = np.flatnonzero(tiles[1:] != tiles[:-1]) + 1
            seg = np.r_[0, cut].astype(np.int64) if tiles.size else np.zeros(0, np.int64)
            length = np.diff(np.r_[seg, tiles.size])
            owner = tiles[seg] if tiles.size else seg
            # (tiles in 16 bits where they fit: a stable sort of them is a radix sort)
            small_ids = owner.astype(np.uint16) if tiles.size and owner.max() < 1 << 16 else owner
            order = np.argsort(small_ids, kind="stable")
            before = np.cumsum(length[order]) - length[order]  # elements earlier in order
            head = np.r_[True, owner[order][1:] != owner[order][:-1]] if seg.size else seg
            base = np.maximum.accumulate(np.where(head, before, 0)) if seg.size else seg
            local = np.empty_like(seg)
            local[order] = before - base  # offset within the tile's own share
            starts.append(seg)
            locals_.append(local)
            small = tiles.size <= LOOKUP_TABLE_MAX
            tables.append(_segment_table(length) if small else None)
        return TileLayout(tuple(starts), tuple(locals_), tuple(tables))

    def without_tables(self) -> TileLayout:
        """The layout without its lookup tables (it then searches): what a compiled engine
        keeps, the tables being as large as the graph's tile tables."""
        return TileLayout(self.seg_start, self.seg_local, (None,) * len(self.table))

    def cuts(self, sid: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The addresses of space ``sid`` where the tile changes, and their rank table
        (:func:`~tremula.poplar.intervals.cut_rank`: every address's segment) if built."""
        return self.seg_start[sid][1:], self.table[sid]

    def _segment(self, sid: int, addr: np.ndarray) -> np.ndarray:
        """The segment of each address of space ``sid``."""
        table = self.table[sid]
        if table is not None:
            return table[addr]
        return np.searchsorted(self.seg_start[sid], addr, side="right") - 1

    def local_runs(
        self, sid: int, start: np.ndarray, length: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Runs ``[start, start + length)`` of space ``sid`` (``length >= 1``) as runs of
        tile memory: each run split where its tile changes, the pieces' positions in their
        tile's memory, their lengths, and the run each comes from."""
        seg_start = self.seg_start[sid]
        seg = self._segment(sid, start)
        run = None
        if not np.array_equal(seg, self._segment(sid, start + length - 1)):
            # (a segment table is the cuts' rank table: the cuts below or at an address)
            start, length, run = split_runs(start, length, seg_start[1:], self.table[sid])
            seg = self._segment(sid, start)
        local = self.seg_local[sid][seg] + (start - seg_start[seg])
        return local, length, np.arange(local.size) if run is None else run


def _segment_table(length: np.ndarray) -> np.ndarray:
    """Every address's segment, from the segments' lengths."""
    dtype = np.int32 if length.size < 2**31 else np.int64
    return np.repeat(np.arange(length.size, dtype=dtype), length)
