"""popnn's codelets: non-linearities and their gradients (one class each, the type a
template argument dispatched through ``nonlinearity_table``), and the fused loss vertices
(one-hot encoding, the loss transform, its row sum and the deltas in one pass).

Their cycle estimators are ``estimators.py``'s.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from tremula import numerics, poplar
from tremula.errors import CodeletError
from tremula.libs import jit
from tremula.libs.popnn import estimators as E
from tremula.libs.popnn import nll_kernel
from tremula.libs.popnn.nonlinearity_table import TABLE, NonLinearity, NonLinearityType
from tremula.poplar.intervals import distinct

#: A floor added inside the cross-entropy log (PopLibs adds an epsilon to the probability).
LOG_EPSILON = np.float32(1e-7)


def _nl(v: poplar.VertexInfo | poplar.Batch) -> NonLinearity:
    return TABLE[NonLinearityType[v.params["NL"]]]


def _half(v: poplar.VertexInfo | poplar.Batch) -> bool:
    return v.params["T"] == "half"


class NonLinearity1D(poplar.Codelet):
    """``data = f(data)`` in place for the non-linearity ``NL`` (PopLibs'
    ``popnn::NonLinearity1D``)."""

    name = "popnn::NonLinearity1D"
    templates = ("T", "NL")
    data = poplar.InOut("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        rec = _nl(v)
        with np.errstate(all="ignore"):
            v.data = rec.forward(np.asarray(v.data, dtype=np.float32))

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        cpv = _nl(v).cycles_per_vector(_half(v), grad=False)
        return E.nonlinearity(v.lengths("data"), v.vector_width("data"), cpv)

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return v.lengths("data") * float(_nl(v).fwd_flops)


class NonLinearityGrad1D(poplar.Codelet):
    """``inGrad = outGrad * f'(...)`` from the forward output or input ``act`` (PopLibs'
    ``popnn::NonLinearityGrad1D``; which one: ``nonlinearity_table``)."""

    name = "popnn::NonLinearityGrad1D"
    templates = ("T", "NL")
    outGrad = poplar.Input("T")
    act = poplar.Input("T")
    inGrad = poplar.Output("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        rec = _nl(v)
        with np.errstate(all="ignore"):
            d = rec.derivative(np.asarray(v.act, dtype=np.float32))
            v.inGrad = np.asarray(v.outGrad, dtype=np.float32) * d

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        cpv = _nl(v).cycles_per_vector(_half(v), grad=True)
        return E.nonlinearity_grad(v.lengths("inGrad"), v.vector_width("inGrad"), cpv)

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return v.lengths("inGrad") * float(_nl(v).grad_flops)


# ---- losses ----


def _rows(v: poplar.Batch) -> tuple[int, int]:
    """(rows, classes) of a loss vertex batch: every vertex holds whole rows of one width."""
    return int(v.labels.shape[-1]), _classes(v)


def _classes(v: poplar.Batch) -> int:
    classes = distinct(v.numClasses)
    if classes.size > 1:
        raise CodeletError(
            f"{v.vertex_type.name}: vertices of one compute set differ in classes {classes}"
        )
    return int(classes[0]) if classes.size else 1


def _loss_compute(kind: str, v: poplar.Batch) -> None:
    rows, c = _rows(v)
    ds = np.asarray(v.expand(v.deltasScale, "labels"), dtype=np.float32)
    mos = np.asarray(v.expand(v.modelOutputScaling, "labels"), dtype=np.float32)
    d, loss = _loss_values(kind, v.probs, v.labels, ds, mos, (v.replicas, rows, c))
    v.deltas = d
    v.loss = loss


def _loss_prepare(kind: str, v: poplar.Batch) -> Any:
    """``Codelet.prepare``: direct views of every field when the scales are one scalar each
    (the usual case: one loss over a batch), else None."""
    views: list[Any] = [v.stable_view(name) for name in ("probs", "labels", "deltas", "loss")]
    ds, mos = v.stable_scalar("deltasScale"), v.stable_scalar("modelOutputScaling")
    if any(x is None for x in views) or ds is None or mos is None:
        return None
    probs, labels, deltas, loss = views
    shape = (v.replicas, int(v.lengths("labels").sum()), int(_classes(v)))
    if kind in ("NllLog", "Nll") and probs.dtype == deltas.dtype == loss.dtype == np.float32:
        return _nll_run(kind == "NllLog", probs, labels, ds, deltas, loss, shape)

    def run() -> None:
        d, l_ = _loss_values(kind, probs, labels, ds, mos, shape)
        deltas[...] = d
        loss[...] = l_

    return run


def _scaled_probabilities(
    log_input: bool, probs: np.ndarray, ds: np.ndarray, deltas: np.ndarray
) -> None:
    """``deltas = y * ds`` with ``y = exp(probs)`` (log-probabilities) or ``probs``."""
    if log_input:
        np.exp(probs, out=deltas)
        np.multiply(deltas, ds, out=deltas)
    else:
        np.multiply(probs, ds, out=deltas)


def _nll_run(
    log_input: bool,
    probs: np.ndarray,
    labels: np.ndarray,
    ds: np.ndarray,
    deltas: np.ndarray,
    loss: np.ndarray,
    shape: tuple[int, int, int],
) -> Any:
    """:func:`_loss_values`' NllLog / Nll numbers on float32 views, with the row offsets
    fixed once: ``deltas = y * ds`` less ``ds`` at each valid label, with ``y = exp(p)``
    (log-probabilities) or ``p``, and ``loss = -p[label]`` or ``-log(p[label])``."""
    R, rows, c = shape
    offsets = np.arange(rows, dtype=np.int64)[None, :] * c
    replica = np.arange(R)[:, None]
    zero = np.float32(0)

    def general() -> None:
        lab = labels.astype(np.int64)
        valid = (lab >= 0) & (lab < c)
        at = (replica, np.where(valid, lab, 0) + offsets)
        picked = probs[at]  # before deltas is written (it may share memory with probs)
        with np.errstate(all="ignore"):
            _scaled_probabilities(log_input, probs, ds, deltas)
            if not log_input:
                picked = np.log(picked)
            deltas[at] -= np.where(valid, ds, zero)
            if log_input:  # -0.0 for a masked row, as compute's ``-picked``
                np.negative(np.where(valid, picked, zero), out=loss)
            else:  # +0.0 for a masked row, as compute's ``where(valid, -log, 0)``
                np.copyto(loss, np.where(valid, -picked, zero))

    fast = _nll_flat(log_input, probs, labels, ds, deltas, loss, shape, general)
    return fast if fast is not None else general


def _nll_flat(
    log_input: bool,
    probs: np.ndarray,
    labels: np.ndarray,
    ds: np.ndarray,
    deltas: np.ndarray,
    loss: np.ndarray,
    shape: tuple[int, int, int],
    general: Any,
) -> Any:
    """:func:`_nll_run`'s numbers for contiguous ``probs`` and ``deltas`` (one replica's
    row of device memory each), through flat element indices and buffers made once: when
    every label of a run is a valid class, the label elements are gathered and corrected
    with ``np.take`` and one scatter (the same float32 operations, so the same bits);
    a run with a masked or out-of-range label goes through ``general``. Runs under the
    engine's error state (``numerics.quiet``), not an ``np.errstate`` of its own. None
    when the views do not allow it."""
    R, rows, c = shape
    if not (probs.flags.c_contiguous and deltas.flags.c_contiguous):
        return None
    if probs.shape != (R, rows * c) or deltas.shape != probs.shape or labels.shape != (R, rows):
        return None
    flat_p, flat_d = probs.reshape(-1), deltas.reshape(-1)
    base = np.arange(R, dtype=np.int64)[:, None] * (rows * c)
    base = base + np.arange(rows, dtype=np.int64)[None, :] * c
    lab = np.empty((R, rows), np.int64)
    valid = np.empty((R, rows), bool)
    idx = np.empty((R, rows), np.int64)
    picked = np.empty((R, rows), np.float32)
    corrected = np.empty((R, rows), np.float32)
    limit = np.uint64(c)

    def run() -> None:
        np.copyto(lab, labels, casting="unsafe")
        np.less(lab.view(np.uint64), limit, out=valid)  # a negative label wraps past c
        if not valid.all():
            general()
            return
        np.add(lab, base, out=idx)
        np.take(flat_p, idx, out=picked)  # before deltas is written (it may be probs)
        _scaled_probabilities(log_input, probs, ds, deltas)
        if not log_input:
            np.log(picked, out=picked)
        np.take(flat_d, idx, out=corrected)
        np.subtract(corrected, ds, out=corrected)
        flat_d[idx] = corrected
        np.negative(picked, out=loss)

    if log_input:
        return numerics.quiet(run)
    # from the second run on, the gathers and the gradient in one compiled loop
    compiled = partial(nll_kernel.compiled, probs, labels, ds, deltas, loss, run)
    return numerics.quiet(jit.deferred(run, compiled))


def _loss_values(
    kind: str,
    probs: np.ndarray,
    labels: np.ndarray,
    ds: np.ndarray,
    mos: np.ndarray,
    shape: tuple[int, int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Deltas ``[R, rows * classes]`` and loss ``[R, rows]`` per row without materialising
    the one-hot rows: the label's element is gathered and corrected by fancy indexing.
    ``ds`` and ``mos`` (deltas scale, model output scaling) broadcast to ``[R, rows]``."""
    R, rows, c = shape
    p = np.asarray(probs, dtype=np.float32).reshape(R, rows, c)
    lab = np.asarray(labels).astype(np.int64)
    valid = (lab >= 0) & (lab < c)
    at = (np.arange(R)[:, None], np.arange(rows)[None, :], np.where(valid, lab, 0))
    ds = np.broadcast_to(np.asarray(ds, dtype=np.float32), (R, rows))
    mos = np.broadcast_to(np.asarray(mos, dtype=np.float32), (R, rows))
    picked = np.where(valid, p[at], np.float32(0))
    with np.errstate(all="ignore"):
        y = np.exp(p) if kind == "NllLog" else p if kind == "Nll" else p / mos[..., None]
        d = y * ds[..., None]
        d[at] -= np.where(valid, ds, np.float32(0))
        if kind == "NllLog":
            loss = -picked
        elif kind == "Nll":
            loss = np.where(valid, -np.log(np.where(valid, picked, np.float32(1))), 0)
        elif kind == "SumSquared":
            y_label = picked / mos
            loss = 0.5 * (np.sum(y * y, axis=-1) - 2 * y_label + valid)
        else:
            loss = np.where(valid, -(np.log(picked + LOG_EPSILON) - np.log(mos)), 0)
    return d.reshape(R, -1), loss


def _loss_class(kind: str) -> type[poplar.Codelet]:
    def compute(v: poplar.Batch) -> None:
        _loss_compute(kind, v)

    def prepare(v: poplar.Batch) -> Any:
        return _loss_prepare(kind, v)

    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        classes = np.asarray(v.numClasses, dtype=np.int64)
        return E.loss_rows(kind, v.lengths("labels"), classes, v.vector_width("probs"))

    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return 3.0 * v.lengths("probs")

    attrs = {
        "name": f"popnn::Loss{kind}Rows",
        "__doc__": f"Fused {kind} loss over whole rows: deltas and the loss per row.",
        "templates": ("T", "L"),
        "probs": poplar.Input("T"),
        "labels": poplar.Input("L"),
        "deltasScale": poplar.Input("T", kind="scalar"),
        "modelOutputScaling": poplar.Input("T", kind="scalar"),
        "deltas": poplar.Output("T"),
        "loss": poplar.Output("T"),
        "numClasses": poplar.State(poplar.UNSIGNED_INT),
        "compute": staticmethod(compute),
        "prepare": staticmethod(prepare),
        "cycles": staticmethod(cycles),
        "flops": staticmethod(flops),
    }
    return type(f"Loss{kind}Rows", (poplar.Codelet,), attrs)


LOSS_CODELETS = {kind: _loss_class(kind) for kind in E.LOSS_CYCLES}

CODELETS: list[type[poplar.Codelet]] = [NonLinearity1D, NonLinearityGrad1D, *LOSS_CODELETS.values()]
