"""The vertices of the ring collectives.

Every collective keeps a *work* buffer of ``G`` chunks of ``C`` columns (``ring.Layout``: a
block of ``L`` columns of every chunk on one tile); the vertices' ``work`` fields see it in
blocks ``[C / L, G, L]`` (in memory it is chunk-major, ``[G, C / L, L]``), and
moves one chunk ``[C]`` per ring step. Which chunk a replica touches in a step
depends on its index in its group: ``k = (index + shift) mod G``, with ``index = (replica //
stride) mod G`` for a constant grouping. The vertices read the replica index from the
replica they run on (Poplar's replication index constant): a vertex field is
``[replica, element]`` whose rows are the replicas ``replica_ids`` (all of them, or an
instance's block in a PopRun job); they refuse to run on a subset of the
replicas (a collective inside control flow on which the replicas disagree).

* ``gcl::SelectChunk<OP,T>``: ``out = pre(work[:, k])`` (OP's pre-map, e.g. the square of
  SQUARE_ADD; identity otherwise).
* ``gcl::CombineChunk<OP,T>``: ``acc = combine(acc, pre(work[:, k])) * scale`` in place
  (scale is ``1 / G`` in MEAN's last step, else 1).
* ``gcl::PlaceChunk<T>``: ``work[:, k] = chunk``.

Their cycle estimators are ``estimators.py``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import EngineError
from tremula.libs.gcl import estimators as E
from tremula.libs.gcl.operators import COLLECTIVE_RULES, CollectiveOperator, element_kind
from tremula.libs.gcl.views import Addressed, Pieces, read, row_addresses, row_pieces


class _RingVertex(poplar.Codelet):
    """State shared by the ring vertices: the grouping and the chunk shift of the step."""

    num_replicas = poplar.State(poplar.INT)
    stride = poplar.State(poplar.INT)
    group_size = poplar.State(poplar.INT)
    block = poplar.State(poplar.INT)
    shift = poplar.State(poplar.INT)


def chunk_index(v: poplar.Batch) -> tuple[np.ndarray, int]:
    """``([replica] chunk index, G)`` for the vertices of ``v`` (one step: same state)."""
    if not v.all_replicas:
        R = int(v.num_replicas[0])
        raise EngineError(
            f"{v.vertex_type.name}: a collective ran on {v.replicas} of the {R} replicas; "
            f"every replica must execute a collective (do not place it under control flow "
            f"on which the replicas disagree)"
        )
    S, G, shift = int(v.stride[0]), int(v.group_size[0]), int(v.shift[0])
    return ((np.asarray(v.replica_ids) // S) % G + shift) % G, G


def _blocks(v: poplar.Batch) -> tuple[np.ndarray, np.ndarray]:
    """``([replica] chunk index, [replica, chunk, block, L] view of the work field)``."""
    k, G = chunk_index(v)
    L = int(v.block[0])
    return k, v.work.reshape(v.replicas, -1, G, L).transpose(0, 2, 1, 3)


def _own(v: poplar.Batch, n: int) -> np.ndarray:
    """Chunk ``k`` of the work field for the ``n`` columns of the vertices:
    ``[replica, n]``."""
    k, blocks = _blocks(v)
    return blocks[np.arange(v.replicas), k].reshape(v.replicas, -1)[:, :n]


def _op(v: poplar.Batch | poplar.VertexInfo) -> CollectiveOperator:
    return CollectiveOperator[v.params["OP"]]


def _row_pieces(v: poplar.Batch, names: tuple[str, ...]) -> tuple[Pieces, Pieces] | None:
    """For ``prepare``: per replica row, strided views of device memory for the step's own
    chunk and the chunk fields ``names``, and the partial block's unused end
    (``views.row_pieces``); None when there are no vertices or the fields need gathers."""
    if v.n == 0:
        return None
    k, G = chunk_index(v)
    return row_pieces(v, k, G, int(v.block[0]), names)


def _row_addresses(v: poplar.Batch, names: tuple[str, ...]) -> Addressed | None:
    """For ``prepare`` when :func:`_row_pieces` finds no views: per replica row the device
    addresses of the step's own chunk and of the chunk fields (``views.row_addresses``)."""
    if v.n == 0:
        return None
    k, G = chunk_index(v)
    return row_addresses(v, k, G, int(v.block[0]), names)


class SelectChunk(_RingVertex):
    """``out = pre(work[:, k])``."""

    name = "gcl::SelectChunk"
    templates = ("OP", "T")
    work = poplar.Input("T")
    out = poplar.Output("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        if v.n == 0:
            return
        own = _own(v, v.out.shape[1])
        pre = COLLECTIVE_RULES[_op(v)].pre
        v.out = own if pre is None else pre(own)

    @staticmethod
    def prepare(v: poplar.Batch) -> Any:
        """Later runs: one copy (or pre-map) per row from its chunk's strided view."""
        views = _row_pieces(v, ("out",))
        pre = COLLECTIVE_RULES[_op(v)].pre
        if views is None:
            return _select_by_address(_row_addresses(v, ("out",)), pre)
        pieces = views[0]

        def run() -> None:
            for own, out in pieces:
                if pre is None:
                    np.copyto(out, own)
                else:
                    out[...] = pre(own)

        return run

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        pre_map = COLLECTIVE_RULES[_op(v)].pre is not None
        return E.select_chunk(v.lengths("out"), v.vector_width("out"), pre_map)


class CombineChunk(_RingVertex):
    """``acc = combine(acc, pre(work[:, k])) * scale``, in place: the chunk just received is
    reduced where it landed (and sent on from there)."""

    name = "gcl::CombineChunk"
    templates = ("OP", "T")
    work = poplar.Input("T")
    acc = poplar.InOut("T")
    scale = poplar.State(poplar.FLOAT, default=1.0)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        if v.n == 0:
            return
        rule = COLLECTIVE_RULES[_op(v)]
        assert rule.combine is not None  # LOCAL never combines
        own = _own(v, v.acc.shape[1])
        if rule.pre is not None:
            own = rule.pre(own)
        res = rule.combine(v.acc, own)
        scale = float(v.scale[0])
        if scale != 1.0:
            res = res * np.asarray(scale, dtype=res.dtype)
        v.acc = res

    @staticmethod
    def prepare(v: poplar.Batch) -> Any:
        """Later runs: per row, the combine straight from its chunk's strided view into
        ``acc`` in device memory (and the scale in place): no gathered or temporary
        buffers."""
        views = _row_pieces(v, ("acc",))
        rule = COLLECTIVE_RULES[_op(v)]
        combine, pre = rule.combine, rule.pre
        assert combine is not None  # LOCAL never combines
        scale = float(v.scale[0])
        if views is None:
            return _combine_by_address(_row_addresses(v, ("acc",)), combine, pre, scale)
        pieces = views[0]
        factor = None if scale == 1.0 else np.asarray(scale, dtype=pieces[0][1].dtype)

        def run() -> None:
            for own, acc in pieces:
                combine(acc, own if pre is None else pre(own), out=acc)
                if factor is not None:
                    np.multiply(acc, factor, out=acc)

        return run

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        rule = COLLECTIVE_RULES[_op(v)]
        integer = element_kind(v.dtype("acc")) == "i"
        return E.combine_chunk(
            v.lengths("acc"),
            v.vector_width("acc"),
            integer,
            rule.cycles_per_vector,
            rule.int_cycles,
        )

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        if element_kind(v.dtype("acc")) != "f":
            return np.zeros(v.n)
        per = 2 if COLLECTIVE_RULES[_op(v)].pre is not None else 1
        return per * v.lengths("acc").astype(np.float64)


class PlaceChunk(_RingVertex):
    """``work[:, k] = chunk``."""

    name = "gcl::PlaceChunk"
    templates = ("T",)
    work = poplar.InOut("T")
    chunk = poplar.Input("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        if v.n == 0:
            return
        k, blocks = _blocks(v)
        R, n = v.chunk.shape
        values = v.chunk
        padded = blocks.shape[2] * blocks.shape[3]
        if padded != n:  # the last block is partial: its tail is never read
            values = np.zeros((R, padded), dtype=values.dtype)
            values[:, :n] = v.chunk
        blocks[np.arange(R), k] = values.reshape(R, *blocks.shape[2:])
        if not np.may_share_memory(blocks, v.work):
            v.work = blocks.transpose(0, 2, 1, 3).reshape(R, -1)

    @staticmethod
    def prepare(v: poplar.Batch) -> Any:
        """Later runs: per row, one copy of the chunk into its strided place in the work
        buffer (the partial block's tail zeroed, as ``compute`` does)."""
        views = _row_pieces(v, ("chunk",))
        if views is None:
            return _place_by_address(_row_addresses(v, ("chunk",)))
        pieces, pads = views

        def run() -> None:
            for own, chunk in pieces:
                np.copyto(own, chunk)
            for (pad,) in pads:
                pad[...] = 0

        return run

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.place_chunk(v.lengths("chunk"), v.vector_width("chunk"))


CODELETS = (SelectChunk, CombineChunk, PlaceChunk)


# ---- prepared runs by address (the fields are not a few strided views) ----


def _select_by_address(found: Addressed | None, pre: Any) -> Any:
    """``out = pre(own chunk)`` per row: a take of the chunk, a put into ``out``."""
    if found is None:
        return None
    work, rows, ((out, at),) = found

    def run() -> None:
        for row, (own, _) in enumerate(rows):
            values = work[row].take(own)
            out[row, at] = values if pre is None else pre(values)  # at: a slice or addresses

    return run


def _combine_by_address(found: Addressed | None, combine: Any, pre: Any, scale: float) -> Any:
    """``acc = combine(acc, pre(own chunk)) * scale`` per row, as ``compute`` does it."""
    if found is None:
        return None
    work, rows, ((acc, at),) = found

    def run() -> None:
        for row, (own, _) in enumerate(rows):
            values = work[row].take(own)
            res = combine(read(acc, row, at), values if pre is None else pre(values))
            if scale != 1.0:
                res = res * np.asarray(scale, dtype=res.dtype)
            acc[row, at] = res

    return run


def _place_by_address(found: Addressed | None) -> Any:
    """``own chunk = chunk`` per row, the partial block's unused end zeroed."""
    if found is None:
        return None
    work, rows, ((chunk, at),) = found
    # a chunk read as a view that the work addresses overlap is copied before the put
    held = isinstance(at, slice) and any(
        bool(np.any((own >= at.start) & (own < at.stop))) for own, _ in rows
    )

    def run() -> None:
        for row, (own, pad) in enumerate(rows):
            values = read(chunk, row, at)
            work[row, own] = values.copy() if held else values
            if pad.size:
                work[row, pad] = 0

    return run


def type_arg(dtype: poplar.Type) -> str:
    """A template argument naming ``dtype`` (NumPy's name for multi-word Poplar names,
    which the template parser cannot split yet)."""
    return dtype.name if " " not in dtype.name else dtype.numpy.name
