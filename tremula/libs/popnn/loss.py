"""Losses: ``calc_loss`` (PopLibs' ``popnn::calcLoss``) with CROSS_ENTROPY_LOSS and
SUM_SQUARED_LOSS, and ``nll_loss`` on log-probabilities.

Model outputs are ``[batch, classes]``; the expected values are class indices ``[batch]``
(``unsigned int`` or ``int``), one-hot encoded inside the loss vertex. One fused vertex type
per loss (``popnn::Loss<KIND>Rows<T,L>``) computes, for whole rows, the deltas and the loss
of each row, so a call is one compute set (PopLibs runs one-hot encoding, a transform vertex
and a reduction; the numbers are the same). Rows are grouped by the tile holding their
middle element and split into at most six vertices per tile; the loss of a row is mapped
to its vertex's tile, the deltas like the model outputs.

Semantics, with ``y = model_outputs / model_output_scaling``, ``h`` the one-hot label and
``s = deltas_scale``:

* CROSS_ENTROPY_LOSS (``model_outputs`` are probabilities, e.g. a softmax output):
  ``loss = -(log(model_outputs[label] + 1e-7) - log(model_output_scaling))``,
  ``deltas = s * (y - h)``: the gradient with respect to the softmax's *input*.
* SUM_SQUARED_LOSS: ``loss = 0.5 * sum((y - h)^2)``, ``deltas = s * (y - h)``.
* ``nll_loss`` (inputs are log-probabilities ``l``, e.g. a log-softmax output):
  ``loss = -l[label]``, ``deltas = s * (exp(l) - h)``: the gradient with respect to the
  log-softmax's input.
* ``nll_loss_from_probs`` (inputs are probabilities ``p``, e.g. a softmax output):
  ``loss = -log(p[label])`` (no epsilon), ``deltas = s * (p - h)``: the gradient with
  respect to the softmax's input, without taking the log of every probability.

A label outside ``[0, classes)`` (PopLibs' ``MASKED_LABEL_CODE`` ``0xFFFFFFFF`` among them)
encodes as an all-zero row: its loss is 0 (cross entropy, NLL) and its deltas ``s * y``.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs import util
from tremula.libs.popnn.codelets import CODELETS, LOSS_CODELETS
from tremula.libs.popnn.common import (
    LABEL_TYPES,
    PopnnError,
    check_float,
    check_tensor,
    constant_scalar,
    scalar_operand,
)
from tremula.libs.popops.reduce import type_arg

#: PopLibs' label value that masks a sample out of the loss.
MASKED_LABEL_CODE = 0xFFFFFFFF


class LossType(enum.Enum):
    """PopLibs' ``popnn::LossType``."""

    SUM_SQUARED_LOSS = "SUM_SQUARED_LOSS"
    CROSS_ENTROPY_LOSS = "CROSS_ENTROPY_LOSS"


_KIND = {LossType.SUM_SQUARED_LOSS: "SumSquared", LossType.CROSS_ENTROPY_LOSS: "CrossEntropy"}


def _loss_type(value: Any, where: str) -> LossType:
    if isinstance(value, LossType):
        return value
    if isinstance(value, str) and value.upper() in LossType.__members__:
        return LossType[value.upper()]
    raise PopnnError(f"{where}: loss_type {value!r} unknown; known: {[t.name for t in LossType]}")


def row_partition(graph: poplar.Graph, t: poplar.Tensor) -> tuple[np.ndarray, ...]:
    """Whole rows of a 2-D tensor per vertex: ``(row_order, vertex_tiles, rows_per_vertex,
    row_tiles)``. A row belongs to the tile of its middle element; each tile's rows (in
    order) are split into at most one vertex per worker context."""
    c = t.shape[1]
    row_tiles = graph.tiles_of(t[:, c // 2]).reshape(-1).astype(np.int64)
    order = np.argsort(row_tiles, kind="stable")
    counts = np.bincount(row_tiles, minlength=graph.num_tiles)
    used = np.flatnonzero(counts)
    owner, sizes = util.split_counts(counts[used], graph.target.num_worker_contexts)
    return order, used[owner], sizes, row_tiles


def _check_labels(graph: poplar.Graph, labels: Any, rows: int, what: str, where: str):
    labels = check_tensor(graph, labels, what, where)
    if labels.dtype not in LABEL_TYPES:
        raise PopnnError(
            f"{where}: {what} must be class indices of type unsigned int or int, got "
            f"{labels.dtype} {labels.shape}"
        )
    if labels.shape != (rows,):
        raise PopnnError(
            f"{where}: {what} has shape {labels.shape}, expected ({rows},) (one label per "
            f"row of the model outputs)"
        )
    return labels


def _check_outputs(graph: poplar.Graph, t: Any, what: str, where: str) -> poplar.Tensor:
    t = check_float(graph, t, what, where)
    if t.rank != 2 or t.num_elements == 0:
        raise PopnnError(
            f"{where}: {what} must be [batch, classes] with both non-zero, got shape {t.shape}"
        )
    return t


def _fused_loss(
    graph: poplar.Graph,
    kind: str,
    outputs: poplar.Tensor,
    labels: poplar.Tensor,
    scales: list[poplar.Tensor | float],
    prog: poplar.Sequence,
    name: str,
) -> tuple[poplar.Tensor, poplar.Tensor]:
    order, tiles, sizes, row_tiles = row_partition(graph, outputs)
    n, c = outputs.shape
    util.ensure_codelets(graph, CODELETS)
    deltas = graph.clone(outputs, f"{name}/deltas")
    loss = graph.add_variable(outputs.dtype, (n,), f"{name}/loss")
    graph.set_tile_mapping(loss, row_tiles)
    nv = tiles.size
    scalar = []
    for i, s in enumerate(scales):
        if not isinstance(s, poplar.Tensor):
            s = constant_scalar(graph, s, outputs.dtype, int(tiles[0]), f"{name}/scale{i}")
        scalar.append(s.broadcast(nv, 0))
    cls = LOSS_CODELETS[kind]
    vtype = f"{cls.name}<{type_arg(outputs.dtype)},{type_arg(labels.dtype)}>"
    cs = graph.add_compute_set(f"{name}/{kind}")
    fields = {
        "probs": poplar.Segments(outputs[order].flatten(), sizes * c),
        "labels": poplar.Segments(labels[order], sizes),
        "deltas": poplar.Segments(deltas[order].flatten(), sizes * c),
        "loss": poplar.Segments(loss[order], sizes),
        "deltasScale": scalar[0],
        "modelOutputScaling": scalar[1],
        "numClasses": c,
    }
    graph.add_vertices(cs, vtype, fields, tiles)
    prog.add(poplar.Execute(cs))
    return loss, deltas


def calc_loss(
    graph: poplar.Graph,
    model_outputs: poplar.Tensor,
    expected: poplar.Tensor,
    loss_type: LossType | str,
    prog: poplar.Sequence,
    deltas_scale: poplar.Tensor | float = 1.0,
    model_output_scaling: poplar.Tensor | float = 1.0,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """The loss per sample and the deltas (PopLibs' ``calcLoss``; semantics in the module
    docstring).

    Args:
        graph: the graph.
        model_outputs: ``[batch, classes]`` float or half: probabilities for cross entropy.
        expected: ``[batch]`` class indices, ``unsigned int`` or ``int``.
        loss_type: a :class:`LossType` or its name.
        prog: the sequence the compute set is appended to.
        deltas_scale: multiplies the deltas: a number or a one-element tensor of the model
            outputs' type.
        model_output_scaling: the factor the model outputs carry (PopLibs' scaled
            softmax): a positive number or a one-element tensor of their type.
        name: debug prefix.

    Returns:
        ``(loss [batch], deltas [batch, classes])``, both of the model outputs' type.

    Raises:
        PopnnError: an unknown loss type, model outputs not a mapped float/half matrix,
            labels of another type or length, a bad scale.
    """
    where = f"popnn.calc_loss{f' {name!r}' if name else ''}"
    kind = _KIND[_loss_type(loss_type, where)]
    outputs = _check_outputs(graph, model_outputs, "model_outputs", where)
    labels = _check_labels(graph, expected, outputs.shape[0], "expected", where)
    ds = scalar_operand(graph, deltas_scale, outputs.dtype, "deltas_scale", where)
    mos = scalar_operand(graph, model_output_scaling, outputs.dtype, "model_output_scaling", where)
    if not isinstance(mos, poplar.Tensor) and mos <= 0:
        raise PopnnError(f"{where}: model_output_scaling must be > 0, got {mos}")
    return _fused_loss(graph, kind, outputs, labels, [ds, mos], prog, name or f"{kind}Loss")


def nll_loss(
    graph: poplar.Graph,
    log_probs: poplar.Tensor,
    labels: poplar.Tensor,
    prog: poplar.Sequence,
    deltas_scale: poplar.Tensor | float = 1.0,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """Negative log-likelihood of ``labels`` under ``log_probs`` (a log-softmax output):
    cross entropy with log-softmax inputs.

    Args:
        graph: the graph.
        log_probs: ``[batch, classes]`` float or half log-probabilities.
        labels: ``[batch]`` class indices, ``unsigned int`` or ``int``.
        prog: the sequence the compute set is appended to.
        deltas_scale: multiplies the deltas (a number or a one-element tensor).
        name: debug prefix.

    Returns:
        ``(loss [batch], deltas [batch, classes])``: ``-log_probs[label]`` and
        ``deltas_scale * (exp(log_probs) - one_hot)``, the gradient with respect to the
        log-softmax's input; a label out of range gives loss 0.

    Raises:
        PopnnError: as :func:`calc_loss`.
    """
    where = f"popnn.nll_loss{f' {name!r}' if name else ''}"
    outputs = _check_outputs(graph, log_probs, "log_probs", where)
    labels = _check_labels(graph, labels, outputs.shape[0], "labels", where)
    ds = scalar_operand(graph, deltas_scale, outputs.dtype, "deltas_scale", where)
    return _fused_loss(graph, "NllLog", outputs, labels, [ds, 1.0], prog, name or "NllLoss")


def nll_loss_from_probs(
    graph: poplar.Graph,
    probs: poplar.Tensor,
    labels: poplar.Tensor,
    prog: poplar.Sequence,
    deltas_scale: poplar.Tensor | float = 1.0,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """:func:`nll_loss` of probabilities (a softmax output): ``(loss, deltas)`` with
    ``loss = -log(probs[label])`` and ``deltas = deltas_scale * (probs - one_hot)``, the
    gradient with respect to the softmax's input; a label out of range gives loss 0.

    Raises:
        PopnnError: as :func:`calc_loss`.
    """
    where = f"popnn.nll_loss_from_probs{f' {name!r}' if name else ''}"
    outputs = _check_outputs(graph, probs, "probs", where)
    labels = _check_labels(graph, labels, outputs.shape[0], "labels", where)
    ds = scalar_operand(graph, deltas_scale, outputs.dtype, "deltas_scale", where)
    return _fused_loss(graph, "Nll", outputs, labels, [ds, 1.0], prog, name or "NllLoss")
