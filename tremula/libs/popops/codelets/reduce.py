"""Reduce codelets: the stage-1 block reduction and the later-stage partials reduction,
each with an ``...Update`` variant (``out += scale * r``) for ``reduce_with_output``.

``popops::ReduceBlock<OP,TIN,TOUT>`` (supervisor): field ``partials`` is a
``[groups, outer, N, inner]`` block (``N = len(out) / groups``); ``out[g * N + k]`` is
``scale * OP`` over ``a, c`` of ``partials[g, a, k, c]``. The batched compute takes the
fastest path that fits every vertex of the compute set: one reshape and reduction when all
have the same ``(outer, N, inner)``; one ``reduceat`` over runs of ``inner`` when all have
``outer == 1`` (a full or innermost reduction); a reduction over whole rows of a 2-D
view when all have the same ``N`` and ``inner`` (strided reductions: one reshape per distinct
row count); otherwise runs, then a permutation and a second ``reduceat``.

``popops::ReducePartials<OP,TIN,TOUT>`` (supervisor): ``out`` is a vector list of output
regions; region ``g`` is the element-wise reduction of the next ``counts[g]`` sub-vectors
(pieces) of ``partials``, the identity if there are none. One ``reduceat`` (scalar regions),
one reshape (regions of one length and count), or one gather-and-combine pass per piece
rank (at most the fan-in).

The index arrays of each path are built once per compiled compute set and cached on the
batch. Half and float data accumulate in float, other types in their own type. Estimators
follow PopLibs' ``popops/reduction/CycleEstimationFunctions.cpp``
(``estimators.reduce_block_cycles`` and ``reduce_partials_cycles``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E
from tremula.libs.popops import reduce_inplace as inplace
from tremula.libs.popops.reduce_chain import fuse_carried
from tremula.libs.popops.reduce_ops import (
    SPECS,
    Operation,
    fold_pieces,
    identity,
    reduce_axes,
    reduce_runs,
)
from tremula.libs.popops.reduce_ops import prepare as prepare_input

_MAX_CLASSES = 8  # distinct row counts the strided path handles one reshape each


def accumulator(dtype: np.dtype) -> np.dtype:
    """The type a vertex accumulates ``dtype`` in."""
    return np.dtype(np.float32) if np.dtype(dtype).kind == "f" else np.dtype(dtype)


def _scale(v: poplar.Batch) -> np.ndarray | None:
    """The vertices' scales expanded over ``out`` (None when all are 1); derived once."""
    return v.cached("scale", lambda: None if np.all(v.scale == 1) else v.expand(v.scale, "out"))


def _finished(
    r: np.ndarray, scale: np.ndarray | None, current: np.ndarray | None, out_t: np.dtype
) -> np.ndarray:
    """``r`` scaled, added to ``current`` (an Update vertex's output) and cast to ``out_t``."""
    if scale is not None:
        r = r.astype(np.float64) * scale if out_t.kind in "iu" else r * scale.astype(r.dtype)
    if current is not None:
        r = current.astype(np.float32) + r if out_t.kind == "f" else current + r.astype(out_t)
    return r.astype(out_t, copy=False)


def _finish(v: poplar.Batch, r: np.ndarray) -> None:
    """Scale, cast and store (or accumulate into) ``out``."""
    update = v.fields["out"].direction == "inout"
    v.out = _finished(r, _scale(v), v.out if update else None, v.dtype("out").numpy)


def _prepare(
    reduce: Any, layout_key: str, layout: Any, first_stage: bool, strided: Any = None
) -> Any:
    """``Codelet.prepare`` for the reduce vertices: a closure over direct views of
    ``partials`` and ``out`` (None when ``out`` needs a scatter), the layout and scales
    derived once; ``partials`` with no view is gathered into a kept buffer at the start of
    each run and reduced as ``compute`` reduces it."""

    def prepare(v: poplar.Batch) -> Any:
        partials, out = v.stable_view("partials"), v.stable_view("out")
        if out is None:
            return None
        lay = v.cached(layout_key, lambda: layout(v))
        if partials is None and strided is not None:
            # pieces of one length and count may still be a strided view of one variable
            partials, lay = strided(v, lay)
        runs = inplace.as_runs(lay, int(v.lengths("partials").sum()))
        if partials is None and runs is not None:
            partials, lay = inplace.covered_runs(v, runs)
        refresh = None
        if partials is None and not first_stage:  # scattered pieces, read rank by rank
            spec = SPECS[Operation[v.params["OP"]]]
            pieces = v.cached(layout_key, lambda: layout(v))
            found = inplace.ranked(v, spec, out, pieces, _scale(v))
            if found is not None:
                return found
        if partials is None:  # the gathered field in a kept buffer, the compute's layout
            found = v.stable_gather("partials")
            if found is None:
                return None
            (partials, refresh), lay = found, v.cached(layout_key, lambda: layout(v))
        op = Operation[v.params["OP"]]
        spec, acc = SPECS[op], accumulator(partials.dtype)
        scale, out_t = _scale(v), v.dtype("out").numpy
        update = v.fields["out"].direction == "inout"
        plain = not update and not (first_stage and spec.square) and out_t.kind == "f"
        same = partials.dtype == acc == out.dtype
        if refresh is None and plain and spec.ufunc is not None and same:
            direct = inplace.direct(spec.ufunc, partials, out, lay, scale)
            if direct is not None:
                return direct
        if lay["path"] in inplace.IN_PLACE_ONLY:
            return None  # views only the direct paths read (the compute gathers)

        def run() -> None:
            if refresh is not None:
                refresh()
            x = prepare_input(spec, partials, acc, first_stage=first_stage)
            r = reduce(op, x, lay)
            out[...] = _finished(r, scale, out if update else None, out_t)

        return run

    return prepare


def _block_layout(v: poplar.Batch) -> dict[str, Any]:
    """Index structure of a batch of ReduceBlock vertices (built once): the fastest path
    that fits every vertex, and its arrays."""
    G = v.groups.astype(np.int64)
    O = v.outer.astype(np.int64)
    I = v.inner.astype(np.int64)
    N = v.lengths("out") // np.maximum(G, 1)
    if np.all(O[0] == O) and np.all(N[0] == N) and np.all(I[0] == I):
        return {"path": "uniform", "shape": (int(O[0]), int(N[0]), int(I[0]))}
    if np.all(O == 1):
        run_len = np.repeat(I, G * N)
        return {"path": "runs", "lengths": run_len, "starts": _starts(run_len)}
    unit_rows = np.repeat(O, G)
    values = np.unique(unit_rows)
    if np.all(N[0] == N) and np.all(I[0] == I) and values.size <= _MAX_CLASSES:
        first_row = _starts(unit_rows)
        classes = []
        for o in values.tolist():  # a few distinct row counts, not one per vertex
            units = np.flatnonzero(unit_rows == o)
            rows = (first_row[units][:, None] + np.arange(o)).reshape(-1)
            classes.append((o, units, rows))
        return {
            "path": "rows",
            "row": (int(N[0]), int(I[0])),
            "classes": classes,
            "units": unit_rows.size,
            "first": first_row,
            "count": unit_rows,
        }
    # general: reduce runs of ``inner``, then regroup runs (v, g, a, k) as (v, g, k, a)
    runs_per = G * O * N
    run_len = np.repeat(I, runs_per)
    vid = np.repeat(np.arange(v.n), runs_per)
    first = np.repeat(_starts(runs_per), runs_per)
    j = np.arange(vid.size, dtype=np.int64) - first
    On, Nn = O[vid], N[vid]
    dest = first + (j // (On * Nn)) * On * Nn + (j % Nn) * On + (j // Nn) % On
    perm = np.empty_like(dest)
    perm[dest] = np.arange(dest.size, dtype=np.int64)
    outer_runs = np.repeat(O, G * N)
    return {
        "path": "general",
        "runs": None if np.all(I == 1) else (run_len, _starts(run_len)),
        "perm": perm,
        "outer": (outer_runs, _starts(outer_runs)),
    }


def _starts(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size, dtype=np.int64)
    if lengths.size > 1:
        np.cumsum(lengths[:-1], out=out[1:])
    return out


def _block_compute(v: poplar.Batch) -> None:
    op = Operation[v.params["OP"]]
    x = prepare_input(SPECS[op], v.partials, accumulator(v.partials.dtype), first_stage=True)
    _finish(v, _block_reduce(op, x, v.cached("block", lambda: _block_layout(v))))


def _block_reduce(op: Operation, x: np.ndarray, lay: dict[str, Any]) -> np.ndarray:
    R, later = x.shape[0], SPECS[op].then
    if lay["path"] == "uniform":
        O, N, I = lay["shape"]
        return reduce_axes(op, x.reshape(R, -1, O, N, I), (2, 4)).reshape(R, -1)
    if lay["path"] == "runs":
        return reduce_runs(op, x, lay["lengths"], lay["starts"])
    if lay["path"] == "rows":
        N, I = lay["row"]
        rows = x.reshape(R, -1, N * I)
        r = np.empty((R, lay["units"], N * I), dtype=x.dtype)
        for o, units, idx in lay["classes"]:
            r[:, units] = fold_pieces(op, rows[:, idx].reshape(R, -1, o, N * I), 2)
        if I > 1:
            r = reduce_axes(later, r.reshape(R, -1, N, I), (3,))
        return r.reshape(R, -1)
    r = x
    if lay["runs"] is not None:
        r = reduce_runs(op, r, *lay["runs"])
        op = later
    return reduce_runs(op, r[:, lay["perm"]], *lay["outer"])


def _partials_layout(v: poplar.Batch) -> dict[str, Any]:
    """Index structure of a batch of ReducePartials vertices (built once)."""
    L = v.sub_lengths("out").astype(np.int64)
    C = np.concatenate([np.asarray(c, dtype=np.int64) for c in v.counts]) if v.n else L
    if np.all(L == 1):
        return {"path": "runs", "lengths": C, "starts": _starts(C)}
    if C.size and np.all(L[0] == L) and np.all(C[0] == C) and C[0] > 0:
        return {"path": "uniform", "shape": (int(C[0]), int(L[0]))}
    # general: one pass per piece rank (at most the fan-in): piece p of every group with
    # more than p pieces is combined into that group's outputs
    out_start = _starts(L)
    piece_start = _starts(C * L)
    passes = []
    for p in range(int(C.max(initial=0))):
        groups = np.flatnonzero(p < C)
        n = L[groups]
        within = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(_starts(n), n)
        src = np.repeat(piece_start[groups] + p * n, n) + within
        full = groups.size == C.size  # every output takes part: no scatter needed
        passes.append((src, None if full else np.repeat(out_start[groups], n) + within))
    return {"path": "passes", "passes": passes, "size": int(L.sum())}


def _partials_compute(v: poplar.Batch) -> None:
    op = Operation[v.params["OP"]]
    x = prepare_input(SPECS[op], v.partials, accumulator(v.partials.dtype), first_stage=False)
    _finish(v, _partials_reduce(op, x, v.cached("partials", lambda: _partials_layout(v))))


def _partials_reduce(op: Operation, x: np.ndarray, lay: dict[str, Any]) -> np.ndarray:
    if lay["path"] == "pieces":  # [R, outputs, pieces, length] (see _strided_partials)
        return _fold(op, x).reshape(x.shape[0], -1)
    if lay["path"] == "runs":
        return reduce_runs(op, x, lay["lengths"], lay["starts"])
    if lay["path"] == "uniform":
        C, L = lay["shape"]
        return _fold(op, x.reshape(x.shape[0], -1, C, L)).reshape(x.shape[0], -1)
    r = np.full((x.shape[0], lay["size"]), identity(op, x.dtype), dtype=x.dtype)
    for src, dst in lay["passes"]:  # from the identity, as the uniform path
        piece = np.take(x, src, axis=1)
        if dst is None:
            r = _combine(op, r, piece)
        else:
            r[:, dst] = _combine(op, r[:, dst], piece)
    return r


def _fold(op: Operation, x: np.ndarray) -> np.ndarray:
    """``[R, outputs, pieces, length]`` reduced over the pieces in piece order from the
    identity (:func:`fold_pieces`); regions of one element keep NumPy's ``reduce``, as
    the ``runs`` path (``reduceat``) and the prepared paths reduce those."""
    return fold_pieces(op, x, 2) if x.shape[-1] > 1 else reduce_axes(op, x, (2,))


def _combine(op: Operation, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``op`` applied element-wise to two partial values."""
    ufunc = SPECS[op].ufunc
    return np.logaddexp(a, b) if ufunc is None else ufunc(a, b)


def _flops(v: poplar.VertexInfo) -> np.ndarray:
    op = Operation[v.params["OP"]]
    return v.lengths("partials") * (2.0 if SPECS[op].square else 1.0)


class ReduceBlock(poplar.Codelet):
    """Stage 1: reduce a ``[groups, outer, N, inner]`` block into ``groups * N`` values."""

    name = "popops::ReduceBlock"
    templates = ("OP", "TIN", "TOUT")
    supervisor = True
    code_bytes = 640
    partials = poplar.Input("TIN")
    out = poplar.Output("TOUT")
    groups = poplar.State(poplar.UNSIGNED_INT)
    outer = poplar.State(poplar.UNSIGNED_INT)
    inner = poplar.State(poplar.UNSIGNED_INT)
    scale = poplar.State(poplar.FLOAT)

    compute = staticmethod(_block_compute)
    prepare = staticmethod(_prepare(_block_reduce, "block", _block_layout, first_stage=True))
    cycles = staticmethod(E.reduce_block_cycles)
    flops = staticmethod(_flops)


class ReduceBlockUpdate(ReduceBlock):
    """``ReduceBlock`` accumulating into its output: ``out += scale * r``."""

    name = "popops::ReduceBlockUpdate"
    out = poplar.InOut("TOUT")


class ReducePartials(poplar.Codelet):
    """Later stages: output region ``g`` (sub-vector ``g`` of ``out``) is the element-wise
    reduction of the next ``counts[g]`` sub-vectors of ``partials`` (the identity if none)."""

    name = "popops::ReducePartials"
    templates = ("OP", "TIN", "TOUT")
    supervisor = True
    code_bytes = 512
    partials = poplar.Input("TIN", kind="vector_list")
    out = poplar.Output("TOUT", kind="vector_list")
    counts = poplar.State(poplar.UNSIGNED_INT, kind="vector")
    scale = poplar.State(poplar.FLOAT)

    compute = staticmethod(_partials_compute)
    prepare = staticmethod(
        _prepare(
            _partials_reduce, "partials", _partials_layout, False, strided=inplace.strided_partials
        )
    )
    #: replayed runs after a strided stage 1 whose partials nothing else reads: both
    #: stages in one pass that does not store them (``reduce_chain.fuse_carried``)
    fuse = staticmethod(fuse_carried)
    cycles = staticmethod(E.reduce_partials_cycles)
    flops = staticmethod(_flops)


class ReducePartialsUpdate(ReducePartials):
    """``ReducePartials`` accumulating into its output: ``out += scale * r``."""

    name = "popops::ReducePartialsUpdate"
    out = poplar.InOut("TOUT", kind="vector_list")


CODELETS = (ReduceBlock, ReduceBlockUpdate, ReducePartials, ReducePartialsUpdate)
