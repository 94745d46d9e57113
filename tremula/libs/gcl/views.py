"""The ring vertices' run path: each replica's chunk of the work field and the chunk fields
as a few strided views of device memory, so that a later run is a few NumPy calls per row
writing into device memory (no gathered copies, no temporaries, no scatter).

A work field is ``[blocks, G, L]`` in field order (``ring.Layout.blocks_view``); chunk ``k``
of it is the ``k``-th ``L`` elements of every block. Each such group of ``L`` is one run of
device memory (a block lies on one tile, consecutive in the tensor or buffer it is a view
of), wherever the block lies: in a chunk-major work buffer (chunk ``k`` is one run) or in the
fragments of the reduced tensor itself (chunk ``k`` is one run per tile, the tiles' runs
evenly spaced where the tensor is mapped linearly). Blocks whose addresses continue one
another in every field become one run, and runs of equal length evenly spaced in every field
one 2-D piece.
"""

from __future__ import annotations

import numpy as np

from tremula import poplar

Pieces = list[tuple[np.ndarray, ...]]

#: ``(count, length, starts, steps)``: ``count`` runs of ``length`` elements, the ``i``-th at
#: ``starts[f] + i steps[f]`` in field ``f``
Piece = tuple[int, int, list[int], list[int]]

#: more runs than this and the compute path (a gather per field) is as quick
MAX_RUNS = 1 << 14


def _block_starts(runs: tuple[np.ndarray, np.ndarray], L: int, blocks: int) -> np.ndarray | None:
    """The address of the first element of each block of ``L`` field positions, or None when
    a run of consecutive addresses starts inside a block."""
    starts, lengths = runs
    offsets = np.cumsum(lengths) - lengths
    if np.any(offsets % L):
        return None
    pos = np.arange(blocks, dtype=np.int64) * L
    j = np.searchsorted(offsets, pos, side="right") - 1
    return starts[j] + (pos - offsets[j])


def _grouped(firsts: list[np.ndarray], L: int) -> list[Piece] | None:
    """Blocks (``firsts[f][b]``: field ``f``'s address of block ``b``) as 2-D pieces."""
    nb = firsts[0].size
    if nb == 0:
        return []
    joined = np.ones(nb, dtype=bool)
    joined[0] = False
    for x in firsts:
        joined[1:] &= np.diff(x) == L
    run_at = np.flatnonzero(~joined)
    if run_at.size > MAX_RUNS:
        return None
    run_len = np.diff(np.r_[run_at, nb]) * L
    heads = [x[run_at].tolist() for x in firsts]
    pieces: list[Piece] = []
    for i, length in enumerate(run_len.tolist()):
        here = [h[i] for h in heads]
        if pieces:
            count, plen, starts, steps = pieces[-1]
            last = [s + (count - 1) * d for s, d in zip(starts, steps)]
            step = [a - b for a, b in zip(here, last)]
            if plen == length and (count == 1 or step == steps) and min(step) >= length:
                pieces[-1] = (count + 1, plen, starts, step)
                continue
        pieces.append((1, length, here, [length] * len(here)))
    return pieces


def _view(arr: np.ndarray, row: int, piece: Piece, f: int) -> np.ndarray:
    count, length, starts, steps = piece
    item = arr.itemsize
    return np.lib.stride_tricks.as_strided(
        arr[row, starts[f] :], shape=(count, length), strides=(steps[f] * item, item)
    )


def row_pieces(
    v: poplar.Batch, k: np.ndarray, G: int, L: int, names: tuple[str, ...]
) -> tuple[Pieces, Pieces] | None:
    """For ``prepare``: per replica row, views of device memory covering the step: ``(own
    chunk, *fields)`` pieces, the own chunk being the row's chunk ``k[row]`` of the work
    field and each chunk field the same columns; and per row the unused end of its chunk's
    partial last block. None when the fields do not form few strided runs (``compute``
    then gathers them)."""
    work = v.stable_runs("work")
    runs = [v.stable_runs(name) for name in names]
    fields = [f for f in runs if f is not None]
    if work is None or len(fields) != len(names):
        return None
    C = int(v.lengths(names[0]).sum())
    blocks = -(-C // L)
    full, tail = divmod(C, L)
    all_firsts = _block_starts(work[1:], L, blocks * G)
    found = [_block_starts(f[1:], L, blocks) for f in fields]
    field_firsts = [f for f in found if f is not None]
    if all_firsts is None or len(field_firsts) != len(fields):
        return None
    by_chunk = all_firsts.reshape(blocks, G)
    arrays = [work[0], *(f[0] for f in fields)]
    plans: dict[int, list[Piece] | None] = {}
    pieces: Pieces = []
    pads: Pieces = []
    for row, chunk in enumerate(k.tolist()):
        if chunk not in plans:
            plans[chunk] = _grouped([by_chunk[:full, chunk], *(f[:full] for f in field_firsts)], L)
        plan = plans[chunk]
        if plan is None:
            return None
        for piece in plan:
            pieces.append(tuple(_view(a, row, piece, i) for i, a in enumerate(arrays)))
        if tail:
            at = [int(by_chunk[full, chunk]), *(int(f[full]) for f in field_firsts)]
            pieces.append(tuple(a[row, s : s + tail] for a, s in zip(arrays, at)))
            pads.append((arrays[0][row, at[0] + tail : at[0] + L],))
    return pieces, pads


#: ``(work storage, fields)``, per row ``(own addresses, unused-end addresses)`` and per
#: chunk field ``(storage, addresses or the slice of them)`` (see :func:`row_addresses`)
Addressed = tuple[
    np.ndarray,
    list[tuple[np.ndarray, np.ndarray]],
    list[tuple[np.ndarray, slice | np.ndarray]],
]


def row_addresses(
    v: poplar.Batch, k: np.ndarray, G: int, L: int, names: tuple[str, ...]
) -> Addressed | None:
    """For ``prepare`` when the fields do not form few strided runs (:func:`row_pieces` is
    None): the device addresses of each replica row's own chunk (its first ``C`` columns,
    ``C`` the chunk fields' length, and the rest of its partial last block) and of the chunk
    fields, so that a run is a take or a put per row of just the chunk instead of a gather
    and scatter of the whole work field; None when the work field is not ``[blocks, G, L]``
    or on a subset of the replicas."""
    work = v.stable_runs("work")
    fields = [v.stable_runs(name) for name in names]
    if work is None or any(f is None for f in fields):
        return None
    C = int(v.lengths(names[0]).sum())
    if any(int(v.lengths(name).sum()) != C for name in names):
        return None
    blocks = -(-C // L)
    if int(v.lengths("work").sum()) != blocks * G * L:
        return None
    within = np.arange(blocks, dtype=np.int64)[:, None] * G * L + np.arange(L, dtype=np.int64)
    rows = []
    for chunk in k.tolist():
        positions = (within + chunk * L).reshape(-1)
        rows.append((v.addresses("work", positions[:C]), v.addresses("work", positions[C:])))
    everything = np.arange(C, dtype=np.int64)
    chunks = [
        (f[0], as_index(v.addresses(name, everything))) for f, name in zip(fields, names) if f
    ]
    return work[0], rows, chunks


def as_index(addresses: np.ndarray) -> slice | np.ndarray:
    """``addresses`` as a slice when they are consecutive (a chunk field that is one run of
    device memory: read and written as a view, not gathered and scattered), else as they
    are."""
    n = addresses.size
    if n and int(addresses[-1]) - int(addresses[0]) == n - 1 and np.all(np.diff(addresses) == 1):
        return slice(int(addresses[0]), int(addresses[0]) + n)
    return addresses


def read(arr: np.ndarray, row: int, index: slice | np.ndarray) -> np.ndarray:
    """Elements ``index`` (:func:`as_index`) of row ``row`` of ``arr``: a view for a slice,
    a gathered copy for addresses."""
    return arr[row, index] if isinstance(index, slice) else arr[row].take(index)
