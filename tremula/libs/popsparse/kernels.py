"""The numbers of PopSparse's device vertices, vectorised over every bucket and
every vertex of a compute set: the meta-info read as the vertices read it, and the sparse
products they compute.

* :func:`decode` reads many buckets at once. The sub-groups of a bucket and the rows of a
  sub-group are chains (each entry gives the offset of the next), so they are walked in
  lockstep: one NumPy step per sub-group position (the most sub-groups a bucket holds) and
  one per row position (the most rows a sub-group holds), over all buckets together; the
  blocks of the rows are then read in one step. Corrupt meta-info raises
  :class:`MetaInfoError` (the device would read garbage; the model says where).
* :func:`select` keeps, for each vertex, the blocks of the sub-groups whose id it
  processes (``subGroupIdToProcess``), from the buckets it reads.
* :class:`Product` is the element-wise ``OUT^T += W IN^T`` in the transposed frame the
  fields are held in (rows of ``OUT^T`` / ``IN^T`` are tile rows, columns the batch): a
  CSR product (``scipy.sparse``'s kernel when it is installed, adding straight into the
  partials in device memory; else an ELL sweep in NumPy).
* :class:`BlockGroups` and :func:`block_product` are the block products: blocks grouped
  by the output block row they add to, rows of equal block counts batched, each row's
  blocks side by side so that one batched matmul also sums them. With the ``fast`` extra
  (numba, :mod:`tremula.libs.jit`) :func:`block_rows_product` computes them instead: one
  compiled loop over the output block rows that reads each block and its dense slab where
  they lie (widening half through a table of every bit pattern) and writes each row once,
  without the gathered copies; the same numbers up to float32 rounding (a row's sum runs
  block by block instead of in BLAS's order).
* :func:`sampled_products` is GradW's ``sum_z OUT[x, z] IN[y, z]`` at the selected blocks.

Products are computed in float32 (the partials; half operands are widened first), so half
element-wise products are more exact than the IPU's half multiplies.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from tremula.libs import jit
from tremula.libs.popsparse.errors import MetaInfoError

try:  # an optional accelerator: the CSR product of scipy.sparse (a test dependency)
    import scipy.sparse as _sparse
except ImportError:  # pragma: no cover - NumPy only
    _sparse = None
try:  # its kernel, which adds into a given output (device memory, without a temporary)
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - another scipy layout: the public product
    _csr_matvecs = None

#: Most elements a gathered temporary may hold before a product is split into chunks.
CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class BucketFormat:
    """How to read one bucket of a field.

    ``words``: meta-info words of one bucket in the field (the part the vertex reads: the
    forward meta-info, or the element-wise GradA meta-info when ``grad_a``); ``nz``: values
    of one bucket; ``block``: the grain block (``(1, 1)`` element-wise); ``type_factor`` and
    ``num_z``: element-wise Y offsets are ``column x type_factor x num_z``."""

    block: tuple[int, int]
    words: int
    nz: int
    type_factor: int
    num_z: int
    grad_a: bool = False

    @property
    def is_block(self) -> bool:
        return self.block != (1, 1)

    @property
    def area(self) -> int:
        return self.block[0] * self.block[1]


@dataclass(frozen=True)
class Entries:
    """Blocks read from buckets, in forward terms: for each, the row of the decoded words it
    came from, the id of its sub-group, its element row ``x`` and column ``y`` in the tile,
    and ``slot``, the offset of its first value in that row's nz values."""

    row: np.ndarray
    sid: np.ndarray
    x: np.ndarray
    y: np.ndarray
    slot: np.ndarray

    @property
    def size(self) -> int:
        return int(self.row.size)


def _bad(why: str, bucket: np.ndarray | int, fmt: BucketFormat) -> MetaInfoError:
    b = int(np.asarray(bucket).reshape(-1)[0])
    return MetaInfoError(
        f"Invalid meta-info read on the device: bucket {b} of the field "
        f"({fmt.words} words, {fmt.nz} nz values per bucket): {why} (possibly corrupt or "
        f"invalid metaInfo, or meta-info of another plan)"
    )


def decode(words: np.ndarray, fmt: BucketFormat) -> Entries:
    """All blocks of the buckets in ``words`` (``[m, buckets x fmt.words]``: each row holds
    whole buckets), with the slot of each block in its row's nz values
    (``[m, buckets x fmt.nz]``)."""
    m = words.shape[0]
    w = np.asarray(words).reshape(-1, fmt.words).astype(np.int64)
    per_row = words.shape[1] // fmt.words if m else 0
    sg = sub_groups(w, fmt)
    rows = row_entries(w, sg, fmt)
    ent = _blocks(w, sg, rows, fmt)
    bucket = sg["bucket"][ent[0]]
    slot = ent[4] + (bucket % max(per_row, 1)) * fmt.nz
    return Entries(bucket // max(per_row, 1), sg["sid"][ent[0]], ent[1], ent[2], slot)


def sub_groups(w: np.ndarray, fmt: BucketFormat) -> dict[str, np.ndarray]:
    """Header fields of every sub-group of the buckets ``w [buckets, words]``, walking all
    buckets in lockstep: ``bucket``, ``sid``, ``pos`` (its first word), ``first`` (word of
    its first row), ``end``, ``rows``, ``nz_base`` and ``values``; every bucket's first
    sub-groups, then their second ones, and so on."""
    n_words = w.shape[1]
    head = 7 if fmt.is_block else 9
    pos = np.zeros(w.shape[0], dtype=np.int64)
    nz = np.zeros(w.shape[0], dtype=np.int64)
    alive = np.arange(w.shape[0])
    parts: list[tuple[np.ndarray, ...]] = []
    while alive.size:
        p = pos[alive]
        over = np.flatnonzero(p >= n_words)
        if over.size:
            raise _bad("no 0 terminator before the end of the bucket", alive[over], fmt)
        keep = w[alive, p] != 0
        alive, p = alive[keep], p[keep]
        if not alive.size:
            break
        over = np.flatnonzero(p + head > n_words)
        if over.size:
            raise _bad(f"a sub-group header at word {p[over[0]]} runs past the end", alive, fmt)
        hdr = w[alive[:, None], p[:, None] + np.arange(head)]
        size = hdr[:, 4]
        values = hdr[:, 3] if fmt.is_block else hdr[:, 3] * fmt.area
        bad = np.flatnonzero((size < head) | (p + size > n_words))
        if bad.size:
            raise _bad(f"a sub-group of {size[bad[0]]} words at word {p[bad[0]]}", alive[bad], fmt)
        if fmt.is_block:
            n_rows, first = hdr[:, 5] + 1, 7 + 4 * hdr[:, 6]
        else:
            n_rows, first = hdr[:, 6] + 1, hdr[:, 7]
            bad = np.flatnonzero(hdr[:, 5] != fmt.num_z)
            if bad.size:
                raise _bad(f"numZ {hdr[bad[0], 5]}, this layer's is {fmt.num_z}", alive[bad], fmt)
        parts.append((alive, hdr[:, 0], p, p + first, p + size, n_rows, nz[alive].copy(), values))
        nz[alive] += values
        pos[alive] = p + size
    over = np.flatnonzero(nz > fmt.nz)
    if over.size:
        raise _bad(f"sub-groups hold {nz[over[0]]} nz values", over, fmt)
    names = ("bucket", "sid", "pos", "first", "end", "rows", "nz_base", "values")
    if not parts:
        return {k: np.zeros(0, dtype=np.int64) for k in names}
    return {k: np.concatenate([p[i] for p in parts]) for i, k in enumerate(names)}


def row_entries(
    w: np.ndarray, sg: dict[str, np.ndarray], fmt: BucketFormat
) -> dict[str, np.ndarray]:
    """Sub-group (``sg``), word position (``pos``) and block count (``n``) of every row,
    sub-group by sub-group, rows in order."""
    per = 2 if fmt.grad_a else 1  # words per block of a row entry
    extra = 1 if fmt.is_block else 0  # block rows store numBlocks - 1
    ptr, left = sg["first"].copy(), sg["rows"].copy()
    active = np.flatnonzero(left > 0)
    parts: list[tuple[np.ndarray, ...]] = []
    while active.size:
        p, end, b = ptr[active], sg["end"][active], sg["bucket"][active]
        bad = np.flatnonzero(p + 2 > end)
        if bad.size:
            raise _bad(f"rows run past the sub-group at word {p[bad[0]]}", b[bad], fmt)
        n = w[b, p + 1] + extra
        parts.append((active, p, n))
        ptr[active] = p + 2 + per * n
        left[active] -= 1
        active = active[left[active] > 0]
    bad = np.flatnonzero(ptr != sg["end"])
    if bad.size:
        raise _bad(
            f"rows end at word {ptr[bad[0]]}, the sub-group at word {sg['end'][bad[0]]}",
            sg["bucket"][bad],
            fmt,
        )
    if not parts:
        return {k: np.zeros(0, dtype=np.int64) for k in ("sg", "pos", "n")}
    cat = [np.concatenate([p[i] for p in parts]) for i in range(3)]
    order = np.argsort(cat[0], kind="stable")  # rows of a sub-group stay in their order
    return {"sg": cat[0][order], "pos": cat[1][order], "n": cat[2][order]}


def _blocks(
    w: np.ndarray, sg: dict[str, np.ndarray], rows: dict[str, np.ndarray], fmt: BucketFormat
) -> tuple[np.ndarray, ...]:
    """``(sub-group, x, y, rank in the sub-group, slot in the bucket)`` of every block."""
    n = rows["n"]
    total = int(n.sum())
    row = np.repeat(np.arange(n.size), n)
    j = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
    g = rows["sg"][row]
    b, p = sg["bucket"][g], rows["pos"][row]
    count = np.bincount(g, minlength=sg["sid"].size)
    if np.any(count * fmt.area != sg["values"]):
        bad = int(np.flatnonzero(count * fmt.area != sg["values"])[0])
        raise _bad(
            f"rows hold {count[bad] * fmt.area} nz values, the header says {sg['values'][bad]}",
            sg["bucket"][bad],
            fmt,
        )
    rank = np.arange(total) - (np.cumsum(count) - count)[g]
    lead = w[b, p]  # offsetXInQ
    if fmt.grad_a:  # pairs (position in the forward sub-group x tf, fwd row x tf x numZ)
        a, c = w[b, p + 2 + 2 * j], w[b, p + 3 + 2 * j]
        unit = fmt.type_factor * fmt.num_z
        if np.any(a % fmt.type_factor) or np.any(c % unit):
            raise _bad("a GradA offset is not a multiple of its unit", b, fmt)
        x, y, pos = c // unit, lead, a // fmt.type_factor
    else:
        y = w[b, p + 2 + j]
        if not fmt.is_block:
            unit = fmt.type_factor * fmt.num_z
            if np.any(y % unit):
                raise _bad(f"a Y offset is not a multiple of typeFactor x numZ = {unit}", b, fmt)
            y = y // unit
        x, pos = lead, rank
    slot = sg["nz_base"][g] + pos * fmt.area
    if np.any(slot + fmt.area > fmt.nz) or np.any(pos >= count[g]):
        raise _bad("a block lies past the nz values of its sub-group", b, fmt)
    return g, x, y, rank, slot


# ---- which blocks each vertex processes ----


def select(
    entries: Entries, vertex_row: np.ndarray, vertex_sid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The blocks of each vertex: those of its row of buckets whose sub-group id is the one
    it processes. Returns ``(vertex, entry index)`` pairs, grouped by vertex."""
    key = entries.row * 65536 + entries.sid
    order = np.argsort(key, kind="stable")
    keys = key[order]
    want = np.asarray(vertex_row, dtype=np.int64) * 65536 + np.asarray(vertex_sid, np.int64)
    lo = np.searchsorted(keys, want, side="left")
    cnt = np.searchsorted(keys, want, side="right") - lo
    vertex = np.repeat(np.arange(want.size), cnt)
    idx = order[np.repeat(lo, cnt) + np.arange(vertex.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)]
    return vertex, idx


# ---- products ----


def writes_in_place() -> bool:
    """Can :meth:`Product.add_into` add into device memory without a temporary (the CSR
    kernel of scipy.sparse, or the NumPy ELL sweep)?"""
    return _sparse is None or _csr_matvecs is not None


class Product:
    """Element-wise ``OUT^T += W IN^T`` over row stacks: ``out_row`` / ``in_row`` are the
    element rows of each non-zero in ``OUT^T [out_rows, Z]`` and ``IN^T [in_rows, Z]``.
    Built once per structure; :meth:`apply` takes the run's values in the product's
    :attr:`order` (flat), so that the caller gathers them once, in the order the product
    reads them. A CSR product (``scipy.sparse``) when it is installed, else an ELL sweep."""

    def __init__(
        self, out_rows: int, in_rows: int, out_row: np.ndarray, in_row: np.ndarray
    ) -> None:
        self.shape = (out_rows, in_rows)
        self.size = int(out_row.size)
        self.steps: list[tuple[np.ndarray, ...]] = []
        if _sparse is not None:
            self.order = np.argsort(out_row, kind="stable")
            indptr = np.zeros(out_rows + 1, dtype=np.int64)
            np.cumsum(np.bincount(out_row, minlength=out_rows), out=indptr[1:])
            self.matrix = _sparse.csr_matrix(
                (np.zeros(self.size, np.float32), in_row[self.order], indptr), shape=self.shape
            )
            return
        self.matrix = None
        self.order = np.lexsort((in_row, out_row))
        ob, ib = out_row[self.order], in_row[self.order]
        rank = np.arange(ob.size) - np.searchsorted(ob, ob, side="left")
        by_rank = np.argsort(rank, kind="stable")
        bounds = np.searchsorted(rank[by_rank], np.arange(int(rank.max(initial=-1)) + 2))
        self.steps = [  # ELL: the k-th non-zero of every row at once (rows are distinct)
            (ob[by_rank[a:e]], ib[by_rank[a:e]], by_rank[a:e])
            for a, e in itertools.pairwise(bounds)
        ]

    def apply(self, values: np.ndarray, in_t: np.ndarray) -> np.ndarray:
        """``W in_t``: float32 ``[out_rows, Z]`` from ``in_t [in_rows, Z]`` (float32) and
        the values in :attr:`order`."""
        values = values.astype(np.float32, copy=False)
        if self.matrix is not None:
            self.matrix.data = values
            return np.asarray(self.matrix @ in_t, dtype=np.float32)
        out = np.zeros((self.shape[0], in_t.shape[1]), dtype=np.float32)
        self.add_into(values, in_t, out)
        return out

    def add_into(self, values: np.ndarray, in_t: np.ndarray, out: np.ndarray) -> None:
        """``out += W in_t`` for a float32 ``out [out_rows, Z]`` (C-contiguous: it may be
        device memory, written in place)."""
        if not out.flags.c_contiguous:
            raise ValueError("Product.add_into writes into a C-contiguous output only")
        values = values.astype(np.float32, copy=False)
        if self.matrix is None:
            for ob, ib, k in self.steps:
                out[ob] += values[k, None] * in_t[ib]
            return
        m = self.matrix
        if _csr_matvecs is None:  # pragma: no cover - depends on scipy's layout
            m.data = values
            out += m @ in_t
            return
        in_t = np.ascontiguousarray(in_t, dtype=np.float32)
        z = in_t.shape[1]
        _csr_matvecs(*self.shape, z, m.indptr, m.indices, values, in_t.reshape(-1), out.reshape(-1))


@dataclass(frozen=True)
class BlockGroups:
    """Blocks grouped by the output block row they add to, the rows holding the same number
    of blocks ``k`` together, so that each group is one batched product whose inner
    dimension runs over the row's blocks side by side (the sum over a row's blocks happens
    inside the matmul). ``groups``: ``(k, first block of each row, [m, k] block ids)``,
    each row's blocks ordered by their input row."""

    groups: list[tuple[int, np.ndarray, np.ndarray]]

    @staticmethod
    def of(out_key: np.ndarray, in_key: np.ndarray) -> BlockGroups:
        """Groups of blocks ``i`` adding to output row ``out_key[i]`` from input row
        ``in_key[i]`` (block ids are positions in these arrays)."""
        order = np.lexsort((in_key, out_key))
        keys = out_key[order]
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else keys
        count = np.diff(np.r_[first, keys.size])
        groups = []
        for k in np.unique(count):
            starts = first[count == k]
            groups.append((int(k), order[starts], order[starts[:, None] + np.arange(k)]))
        return BlockGroups(groups)


def block_product(s: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``[m, Z, bo]`` float32: for each of ``m`` output block rows, ``sum_j S_j W_j^T``
    over its ``k`` blocks, from the dense slabs ``s [m, k, Z, bi]`` and the blocks ``w [m,
    k, bo, bi]`` (any float types). Both are widened and laid out in one pass each so that
    the row's blocks sit side by side, and the sum over them happens inside one batched
    matmul of ``[Z, k bi] x [k bi, bo]`` per row."""
    m, k, bo, bi = w.shape
    z = s.shape[2]
    s_cat = np.empty((m, z, k, bi), dtype=np.float32)
    np.copyto(s_cat, s.transpose(0, 2, 1, 3), casting="unsafe")
    w_cat = np.empty((m, k, bi, bo), dtype=np.float32)
    np.copyto(w_cat, w.transpose(0, 1, 3, 2), casting="unsafe")
    return np.matmul(s_cat.reshape(m, z, k * bi), w_cat.reshape(m, k * bi, bo))


def sampled_products(
    a_t: np.ndarray, b_t: np.ndarray, a_row: np.ndarray, b_row: np.ndarray, block: tuple[int, int]
) -> np.ndarray:
    """``[n, bx x by]``: for each block, ``A[a_row : a_row + bx] B[b_row : b_row + by]^T``
    over the columns (the batch) of ``a_t [rows, Z]`` and ``b_t [rows, Z]``, block
    row-major (GradW's ``sum_z Qgrad[x, z] S[y, z]``)."""
    bx, by = block
    z = a_t.shape[1]
    n = a_row.size
    out = np.empty((n, bx * by), dtype=np.float32)
    a_b, b_b = a_t.reshape(-1, bx, z), b_t.reshape(-1, by, z)
    step = max(1, CHUNK_ELEMENTS // max(1, (bx + by) * z))
    if bx * by == 1:
        for s in range(0, n, step):
            ai, bi = a_row[s : s + step], b_row[s : s + step]
            out[s : s + step, 0] = np.einsum("ij,ij->i", a_t[ai], b_t[bi])
        return out
    for s in range(0, n, step):
        ai, bi = a_row[s : s + step] // bx, b_row[s : s + step] // by
        prod = np.matmul(a_b[ai], b_b[bi].transpose(0, 2, 1))
        out[s : s + step] = prod.reshape(-1, bx * by)
    return out


@dataclass(frozen=True)
class BlockRows:
    """Block products row by row, for :func:`block_rows_product`: the blocks of output block
    row ``i`` are ``start[i] : start[i + 1]`` (by input row, the order of
    :class:`BlockGroups`); per block ``w`` (grid coordinates, bucket, first value) places its
    values in the nz view ``[*grid, buckets, values]`` and ``s`` (grid coordinates, first
    column) its dense slab in ``[*grid, Z, columns]``; per row ``q`` (grid coordinates, first
    row) places it in the partials ``[*grid, rows, Z]``."""

    start: np.ndarray
    w: np.ndarray
    s: np.ndarray
    q: np.ndarray

    @staticmethod
    def of(out_key: np.ndarray, in_key: np.ndarray, w: tuple, s: tuple, q: tuple) -> BlockRows:
        """Blocks ``i`` adding to output row ``out_key[i]`` from input row ``in_key[i]``, at
        the places ``w``, ``s`` and ``q`` (tuples of per-block coordinate arrays)."""
        order = np.lexsort((in_key, out_key))
        keys = out_key[order]
        heads = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else keys

        def table(cols: tuple, pick: np.ndarray) -> np.ndarray:
            return np.stack([np.broadcast_to(c, out_key.shape)[pick] for c in cols], axis=1)

        return BlockRows(
            np.r_[heads, keys.size].astype(np.int64),
            table(w, order).astype(np.int64),
            table(s, order).astype(np.int64),
            table(q, order[heads]).astype(np.int64),
        )


@functools.cache
def _half_table() -> np.ndarray:
    """float32 of every half bit pattern (exact: half widens without rounding)."""
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


def block_rows_product(
    rows: BlockRows,
    nz: np.ndarray,
    s: np.ndarray,
    q: np.ndarray,
    block: tuple[int, int],
    accumulate: bool,
) -> bool:
    """The block products of ``rows`` (``[bo, bi]`` blocks) with the compiled kernel: each
    row's sum written to (or, with ``accumulate``, added to) its ``bo`` partial rows. Returns
    False, doing nothing, when the kernel cannot run (no ``fast`` extra, or types it does not
    take: half or float operands into float partials)."""
    if not jit.available() or q.dtype != np.float32 or nz.dtype != s.dtype:
        return False
    if nz.dtype == np.float16:
        table = _half_table()
        nz, s = nz.view(np.uint16), s.view(np.uint16)
    elif nz.dtype == np.float32:
        table = None
    else:
        return False
    _block_rows(nz, s, q, table, rows.start, rows.w, rows.s, rows.q, *block, accumulate)
    return True


@jit.kernel
def _block_rows(
    w: np.ndarray,
    s: np.ndarray,
    q: np.ndarray,
    table: np.ndarray | None,
    start: np.ndarray,
    wi: np.ndarray,
    si: np.ndarray,
    qi: np.ndarray,
    bo: int,
    bi: int,
    accumulate: bool,
) -> None:
    """:func:`block_rows_product`'s loop: per output block row, its blocks side by side in
    ``wb [bo, n bi]`` and their dense slabs, transposed, in ``sb [n bi, Z]`` (both widened to
    float32), one ``wb sb`` product (BLAS), then the row stored."""
    zn = q.shape[-1]
    for r in range(start.size - 1):
        n = start[r + 1] - start[r]
        wb = np.empty((bo, n * bi), dtype=np.float32)
        sb = np.empty((n * bi, zn), dtype=np.float32)
        for j in range(n):
            k = start[r] + j
            wv = w[wi[k, 0], wi[k, 1], wi[k, 2], wi[k, 3]]
            sv = s[si[k, 0], si[k, 1], si[k, 2]]
            v0, c0 = wi[k, 4], si[k, 3]
            for o in range(bo):
                for b in range(bi):
                    x = wv[v0 + o * bi + b]
                    wb[o, j * bi + b] = x if table is None else table[x]
            for b in range(bi):
                dst = sb[j * bi + b]
                for z in range(zn):
                    x = sv[z, c0 + b]
                    dst[z] = x if table is None else table[x]
        acc = np.dot(wb, sb)
        qv = q[qi[r, 0], qi[r, 1], qi[r, 2]]
        r0 = qi[r, 3]
        for o in range(bo):
            out = qv[r0 + o]
            for z in range(zn):
                out[z] = out[z] + acc[o, z] if accumulate else acc[o, z]
