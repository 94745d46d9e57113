"""Reading buckets back (PopLibs' ``bucketsToCOOMatrix``): walk each bucket's forward
meta-info until the 0 terminator, rebuild the absolute coordinates of every block and find
its values.

Only the meta-info is read (no state of the partitioner), so this also decodes GradW
results, which share the nz layout. Every structural check failing raises
:class:`MetaInfoError` ("Invalid meta-info: ...") naming the bucket and word.
"""

from __future__ import annotations

import numpy as np

from tremula.libs.popsparse import dense
from tremula.libs.popsparse.errors import MetaInfoError
from tremula.libs.popsparse.layout import lex_order
from tremula.libs.popsparse.plan import Plan


def _check_lengths(plan: Plan, meta_info: np.ndarray, nz: np.ndarray | None) -> None:
    if meta_info.ndim != 1 or meta_info.size != plan.meta_info_elems:
        raise MetaInfoError(
            f"Invalid meta-info: {meta_info.size} words (shape {meta_info.shape}); this plan's "
            f"meta-info has {plan.meta_info_elems}"
        )
    if nz is not None and (nz.ndim != 1 or nz.size != plan.nz_elems):
        raise MetaInfoError(
            f"Invalid nz values: {nz.size} values (shape {nz.shape}); this plan's buckets hold "
            f"{plan.nz_elems}"
        )


def walk(plan: Plan, meta_info: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every grain block the forward meta-info describes: element row and column of its
    top-left element, and the index of its first value in the nz tensor."""
    meta_info = np.asarray(meta_info)
    _check_lengths(plan, meta_info, None)
    words = meta_info.astype(np.int64)
    rows, cols, slots = [], [], []
    geometry = {d: (plan.starts(d), plan.sizes(d)) for d in "xy"}
    for b in range(plan.num_buckets):
        reader = _BucketReader(plan, words, b, geometry)
        while reader.next_sub_group():
            r, c, s = reader.blocks()
            rows.append(r)
            cols.append(c)
            slots.append(s)
    return _cat(rows), _cat(cols), _cat(slots)


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


class _BucketReader:
    """Walks the forward meta-info of bucket ``b``, one sub-group at a time."""

    def __init__(
        self,
        plan: Plan,
        words: np.ndarray,
        b: int,
        geometry: dict[str, tuple[np.ndarray, np.ndarray]],
    ) -> None:
        self.plan, self.b, self.geometry = plan, b, geometry
        self.block = plan.method.is_block
        self.size = plan.fwd_meta_info_elems_per_bucket
        base = plan.num_overflow_info_elems + b * plan.meta_info_elems_per_bucket
        self.words = words[base : base + self.size]
        self.wl = self.words.tolist()
        self.pos, self.end, self.nz_off = 0, 0, 0

    def bad(self, why: str) -> MetaInfoError:
        return MetaInfoError(
            f"Invalid meta-info: bucket {self.b}, sub-group at word "
            f"{self.pos}: {why} (possibly corrupt or invalid metaInfo)"
        )

    def next_sub_group(self) -> bool:
        """Read the header at the next position; False at the 0 terminator."""
        self.pos = self.end
        wl, pos, plan = self.wl, self.pos, self.plan
        if pos >= self.size:
            raise self.bad("no 0 terminator before the end of the bucket")
        sid = wl[pos]
        if sid == 0:
            return False
        if pos + (7 if self.block else 9) > self.size:
            raise self.bad("header runs past the end of the bucket")
        px, py, _ = plan.partition.xyz
        self.x, self.y = wl[pos + 1], wl[pos + 2]
        if not (self.x < px and self.y < py and sid == self.x * py + self.y + 1):
            raise self.bad(f"sub-group id {sid} with partition ({self.x}, {self.y}) of {px}x{py}")
        if self.block:
            area = plan.block_dimensions[0] * plan.block_dimensions[1]
            self.count, length = wl[pos + 3] // area, wl[pos + 4]
            self.nrows, self.first = wl[pos + 5] + 1, 7 + 4 * wl[pos + 6]
        else:
            self.count, length, num_z = wl[pos + 3], wl[pos + 4], wl[pos + 5]
            self.nrows, self.first = wl[pos + 6] + 1, wl[pos + 7]
            if num_z != plan.z_tile:
                raise self.bad(f"numZ {num_z}, expected {plan.z_tile}")
        self.end = pos + length
        if length < self.first or self.end > self.size:
            raise self.bad(f"sub-group of {length} words does not fit the bucket")
        return True

    def _row_entries(self) -> np.ndarray:
        """Word positions of the row entries (a pointer chase, one step per row)."""
        wl, extra = self.wl, 1 if self.block else 0
        starts, p = [], self.pos + self.first
        for _ in range(self.nrows):
            if p + 2 > self.end:
                raise self.bad("rows run past the end of the sub-group")
            starts.append(p)
            p += 2 + wl[p + 1] + extra
        if p != self.end:
            raise self.bad(f"rows end at word {p}, the sub-group at word {self.end}")
        return np.array(starts, dtype=np.int64)

    def blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Absolute (row, column, first nz slot) of the sub-group's blocks."""
        plan, words, count = self.plan, self.words, self.count
        bx, by = plan.block_dimensions
        st = self._row_entries()
        n = words[st + 1] + (1 if self.block else 0)
        if int(n.sum()) != count:
            raise self.bad(f"rows hold {int(n.sum())} non-zeros, the header says {count}")
        x_off = np.repeat(words[st], n)
        y_off = words[np.repeat(st + 2 - (np.cumsum(n) - n), n) + np.arange(count)]
        if not self.block:
            unit = plan.type_factor * plan.z_tile
            if np.any(y_off % unit):
                raise self.bad(f"a Y offset is not a multiple of typeFactor x numZ = {unit}")
            y_off = y_off // unit
        (x_starts, x_sizes), (y_starts, y_sizes) = self.geometry["x"], self.geometry["y"]
        if np.any(x_off + bx > x_sizes[self.x]) or np.any(y_off + by > y_sizes[self.y]):
            raise self.bad("a row or column offset lies outside its partition")
        area = bx * by
        slots = self.b * plan.nz_elems_per_bucket + self.nz_off + np.arange(count) * area
        self.nz_off += count * area
        if self.nz_off > plan.nz_elems_per_bucket:
            raise self.bad(f"more than {plan.nz_elems_per_bucket} nz values in the bucket")
        return x_off + x_starts[self.x], y_off + y_starts[self.y], slots


def decode(
    plan: Plan, meta_info: np.ndarray, nz: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Grain blocks sorted row-major: element rows, columns and values ``[n, area]``."""
    nz = np.asarray(nz)
    if plan.use_dense:
        return dense.decode(plan, nz)
    rows, cols, slots = walk(plan, meta_info)
    _check_lengths(plan, np.asarray(meta_info), nz)
    order = lex_order(rows, cols)
    area = plan.block_dimensions[0] * plan.block_dimensions[1]
    values = nz[slots[order][:, None] + np.arange(area)]
    return rows[order], cols[order], values


def slot_coordinates(plan: Plan, meta_info: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Element (row, column) of every nz slot; -1 for padding."""
    row = np.full(plan.nz_elems, -1, dtype=np.int64)
    col = np.full(plan.nz_elems, -1, dtype=np.int64)
    if plan.use_dense:
        x, y, _ = plan.params.shape
        yy, xx = np.divmod(np.arange(x * y), x)
        return xx, yy
    rows, cols, slots = walk(plan, meta_info)
    bx, by = plan.block_dimensions
    i, j = np.divmod(np.arange(bx * by), by)
    pos = slots[:, None] + np.arange(bx * by)
    row[pos] = rows[:, None] + i
    col[pos] = cols[:, None] + j
    return row, col
