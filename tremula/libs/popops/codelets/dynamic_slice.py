"""Dynamic slice / update codelets (a runtime offset; see ``slicing.py`` for the others).

``popops::DynamicSlice<T>`` / ``popops::DynamicUpdate<T>`` (supervisor): ``base`` is a
vector list of ``numRegions * numBase`` regions (region ``r``'s rows ``0..numBase-1``),
``sub`` one of ``numRegions * numSub`` regions; row ``s`` of region ``r`` of ``sub`` is row
``(offset + s) mod numBase`` of ``base`` (PopLibs wraps the offset around the dimension).

A prepared run (one offset tensor, the usual case) copies between the kept addresses of
the offset it reads in ``base`` and ``sub``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E
from tremula.poplar import blocks


def _starts(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size, dtype=np.int64)
    if lengths.size > 1:
        np.cumsum(lengths[:-1], out=out[1:])
    return out


def _dynamic_layout(v: Any) -> tuple[np.ndarray, ...]:
    """For every element of ``sub`` (flat): its vertex, the position in ``base`` of the same
    element of its region's row 0, its row ``s``, its region's length and ``numBase``."""
    nb = v.numBase.astype(np.int64)
    ns = v.numSub.astype(np.int64)
    regions = v.sub_counts("sub").astype(np.int64) // np.maximum(ns, 1)
    reg_v = np.repeat(np.arange(v.n), regions)
    local = np.arange(reg_v.size, dtype=np.int64) - np.repeat(_starts(regions), regions)
    sub_first = _starts(v.sub_counts("sub").astype(np.int64))[reg_v] + local * ns[reg_v]
    reg_len = v.sub_lengths("sub").astype(np.int64)[sub_first]
    base_first = _starts(v.sub_counts("base").astype(np.int64))[reg_v] + local * nb[reg_v]
    reg_base = _starts(v.sub_lengths("base").astype(np.int64))[base_first]
    rows = ns[reg_v]
    row_reg = np.repeat(np.arange(reg_v.size), rows)
    s = np.arange(row_reg.size, dtype=np.int64) - np.repeat(_starts(rows), rows)
    n = reg_len[row_reg]
    el_row = np.repeat(np.arange(row_reg.size), n)
    within = np.arange(el_row.size, dtype=np.int64) - np.repeat(_starts(n), n)
    r = row_reg[el_row]
    return reg_v[r], reg_base[r] + within, s[el_row], reg_len[r], nb[reg_v[r]]


#: at most this many addresses are kept per vertex group for offsets seen before
_KEPT_ADDRESSES = 1 << 22
#: and at most this many offsets' indices (:func:`_index_at`)
_KEPT_OFFSETS = 1 << 16


def _dynamic_index(v: poplar.Batch) -> np.ndarray:
    """The positions in ``base`` of every element of ``sub``: ``[replica, sub element]``."""
    vertex, pos0, s, length, nb = v.cached("dyn", lambda: _dynamic_layout(v))
    off = v.offset.astype(np.int64)[:, vertex]  # [replica, sub element]
    return pos0 + np.mod(off + s, nb) * length


def _shared_addresses(v: poplar.Batch) -> np.ndarray | None:
    """When one offset serves every vertex and replica (a loop counter): the addresses in
    device memory of the ``base`` elements of ``sub``, the same for every replica
    (:func:`_addresses_at`); None otherwise."""
    offsets = v.offset
    if offsets.size == 0:
        return None
    first = int(offsets.flat[0])
    if not np.all(offsets == first):
        return None
    return _addresses_at(v, first)


def _base_addresses(v: poplar.Batch, offset: int) -> np.ndarray:
    """The addresses in device memory of the ``base`` elements of ``sub`` when every vertex
    has ``offset`` (computed, not kept)."""
    _, pos0, s, length, nb = v.cached("dyn", lambda: _dynamic_layout(v))
    return v.addresses("base", pos0 + np.mod(offset + s, nb) * length)


def _addresses_at(v: poplar.Batch, offset: int) -> np.ndarray:
    """The addresses in device memory of the ``base`` elements of ``sub`` when every vertex
    has ``offset``. They depend on the offset alone, so those of an offset seen before are
    kept (a loop's body runs them again every run), within a bound on the memory kept."""
    kept = v.cached("dyn-kept", lambda: [{}, 0])
    hit = kept[0].get(offset)
    if hit is not None:
        return hit
    addresses = _base_addresses(v, offset)
    if kept[1] + addresses.size <= _KEPT_ADDRESSES:
        kept[0][offset] = addresses
        kept[1] += addresses.size
    return addresses


def _as_slice(addresses: np.ndarray) -> slice | np.ndarray:
    """``addresses`` as a slice when they are consecutive (a view, not a gather)."""
    n = addresses.size
    if (
        n
        and int(addresses[-1]) - int(addresses[0]) == n - 1
        and bool(np.all(np.diff(addresses) == 1))
    ):
        return slice(int(addresses[0]), int(addresses[0]) + n)
    return addresses


def _index_at(v: poplar.Batch, offset: int) -> slice | np.ndarray:
    """:func:`_addresses_at` as a slice where they are consecutive (kept per offset)."""
    kept = v.cached("dyn-index", dict)
    hit = kept.get(offset)
    if hit is None:
        hit = _as_slice(_addresses_at(v, offset))
        if len(kept) < _KEPT_OFFSETS and (
            isinstance(hit, slice) or offset in v.cached("dyn-kept", lambda: [{}, 0])[0]
        ):
            kept[offset] = hit
    return hit


def _dynamic_slice_compute(v: poplar.Batch) -> None:
    shared = _shared_addresses(v)
    if shared is not None:
        v.sub = v.read_addresses("base", shared)
    else:  # only the rows sliced: O(sub), not O(base)
        v.sub = v.read_at("base", _dynamic_index(v))


def _dynamic_update_compute(v: poplar.Batch) -> None:
    shared = _shared_addresses(v)
    if shared is not None:
        v.write_addresses("base", shared, v.sub)
    else:
        v.write_at("base", _dynamic_index(v), v.sub)


def _prepare_dynamic(update: bool) -> Any:
    """``Codelet.prepare`` of the dynamic slice / update vertices whose ``offset`` fields
    all read one element (one offset tensor, the usual case): each run reads the offset of
    each replica and copies between the addresses of that offset in ``base`` and ``sub``
    without the per-run batch set-up. When all replicas share the offset, the copy is the
    offset's strided block copies (``poplar.blocks``: rows of a matrix, the pieces of a
    concatenation), made once per offset and kept; where blocks do not pay, and per replica
    when the offsets differ, it copies between the kept addresses of the offset in ``base``
    (:func:`_addresses_at`) and ``sub`` (a view of device memory, or its addresses). The
    same copies as the compute. None for offsets that differ between vertices (the compute
    handles them)."""

    def prepare(v: poplar.Batch) -> Any:
        if v.n == 0 or not v.reads_one_address("offset"):
            return None
        offset, found = v.stable_scalar("offset"), v.stable_runs("sub")
        if offset is None or found is None:
            return None
        arr, sub = found[0], v.stable_view("sub")
        size = int(v.lengths("sub").sum())
        sub_addresses = v.addresses("sub", np.arange(size))
        sub_at = None if sub is not None else _as_slice(sub_addresses)
        # offset -> its copy, bound to this storage: kept by this prepared run only (a
        # reload prepares again over new storage; the batch's cache outlives it)
        moves: dict[int, Any] = {}

        def read(rows: Any, index: slice | np.ndarray) -> np.ndarray:
            if isinstance(index, slice):
                return arr[rows, index]
            return arr[rows].take(index, axis=-1)

        def copy(rows: Any, addresses: slice | np.ndarray) -> None:
            if update:
                values = read(rows, sub_at) if sub is None else sub[rows]  # type: ignore[arg-type]
                arr[rows, addresses] = values
            elif sub is not None:
                sub[rows] = read(rows, addresses)
            else:
                arr[rows, sub_at] = read(rows, addresses)

        def move(at: int) -> Any:
            """The copy of every replica at offset ``at`` (made on first use, kept)."""
            hit = moves.get(at)
            if hit is not None:
                return hit
            base = _base_addresses(v, at)
            pair = (sub_addresses, base) if update else (base, sub_addresses)
            hit = blocks.copier(arr, pair[0], arr, pair[1])
            if hit is None:  # blocks do not pay: the addresses (kept within a bound)
                hit = partial(copy, slice(None), _index_at(v, at))
            if len(moves) < _KEPT_OFFSETS:
                moves[at] = hit
            return hit

        move(int(offset[0, 0]))  # the layout, built now rather than in a run
        if offset.shape[0] == 1:  # one replica: its offset as a Python int, its copy
            at_offset = offset.item

            def run_one() -> None:
                at = at_offset()
                (moves.get(at) or move(at))()

            return run_one

        def run() -> None:
            offsets = offset[:, 0]
            first = int(offsets[0])
            if offsets.size == 1 or bool(np.all(offsets == first)):
                (moves.get(first) or move(first))()
                return
            for r, o in enumerate(offsets.tolist()):  # replicas at different offsets
                copy(r, _index_at(v, int(o)))

        return run

    return prepare


class DynamicSlice(poplar.Codelet):
    """``sub`` row ``s`` of each region = ``base`` row ``(offset + s) mod numBase``."""

    name = "popops::DynamicSlice"
    templates = ("T",)
    supervisor = True
    offset = poplar.Input(poplar.UNSIGNED_INT, kind="scalar")
    base = poplar.Input("T", kind="vector_list")
    sub = poplar.Output("T", kind="vector_list")
    numBase = poplar.State(poplar.UNSIGNED_INT)
    numSub = poplar.State(poplar.UNSIGNED_INT)

    compute = staticmethod(_dynamic_slice_compute)
    prepare = staticmethod(_prepare_dynamic(update=False))
    cycles = staticmethod(E.dynamic_slice_cycles)


class DynamicUpdate(DynamicSlice):
    """``base`` row ``(offset + s) mod numBase`` of each region = ``sub`` row ``s``."""

    name = "popops::DynamicUpdate"
    base = poplar.InOut("T", kind="vector_list")
    sub = poplar.Input("T", kind="vector_list")

    compute = staticmethod(_dynamic_update_compute)
    prepare = staticmethod(_prepare_dynamic(update=True))


class DynamicSliceInt(DynamicSlice):
    """``DynamicSlice`` with a signed offset."""

    name = "popops::DynamicSliceInt"
    offset = poplar.Input(poplar.INT, kind="scalar")


class DynamicUpdateInt(DynamicUpdate):
    """``DynamicUpdate`` with a signed offset."""

    name = "popops::DynamicUpdateInt"
    offset = poplar.Input(poplar.INT, kind="scalar")
