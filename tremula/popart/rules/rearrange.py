"""ONNX ops that rearrange or mask a tensor: DepthToSpace, SpaceToDepth, Trilu, Hardmax,
and Einsum as transposes, reshapes and one batched matmul. Host values are folded with
NumPy; device values go through PopXL ops."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from tremula.popxl import ops


def _permute(
    node: Any, x: Any, split: tuple[int, ...], perm: tuple[int, ...], out: tuple[int, ...]
) -> Any:
    """``x`` reshaped to ``split``, transposed by ``perm`` and reshaped to ``out``."""
    if isinstance(x, np.ndarray):
        return x.reshape(split).transpose(perm).reshape(out)
    return ops.reshape(ops.transpose(ops.reshape(x, split), perm), out)


def _depth_to_space(node: Any) -> list[Any]:
    n, c, h, w = node.shape(0)
    b = int(node.attr("blocksize"))
    if c % (b * b):
        raise node.error(f"{c} channels are not a multiple of blocksize^2 = {b * b}")
    out = (n, c // (b * b), h * b, w * b)
    if str(node.attr("mode", "DCR")) == "CRD":
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    else:
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    return [_permute(node, node.value(0), split, perm, out)]


def _space_to_depth(node: Any) -> list[Any]:
    n, c, h, w = node.shape(0)
    b = int(node.attr("blocksize"))
    if h % b or w % b:
        raise node.error(f"height {h} and width {w} must be multiples of blocksize {b}")
    split, perm = (n, c, h // b, b, w // b, b), (0, 3, 5, 1, 2, 4)
    return [_permute(node, node.value(0), split, perm, (n, c * b * b, h // b, w // b))]


def _trilu(node: Any) -> list[Any]:
    """ONNX Trilu: keep the upper (``upper=1``) or lower triangle of the last two axes from
    diagonal ``k``; the rest is zero."""
    k = node.ints(1, "k")[0] if node.has(1) else 0
    upper = bool(node.attr("upper", 1))
    x = node.value(0)
    rows, cols = node.shape(0)[-2:]
    keep = (np.triu if upper else np.tril)(np.ones((rows, cols), np.bool_), k)
    if isinstance(x, np.ndarray):
        return [np.where(keep, x, np.zeros((), x.dtype))]
    return [ops.where(node.cx.constant(f"{node.proto.output[0]}/mask", keep), x, 0)]


def _hardmax(node: Any) -> list[Any]:
    """ONNX Hardmax: 1 at the first largest element along ``axis`` (before opset 13: of
    the input seen as 2-D ``[prod(shape[:axis]), prod(shape[axis:])]``), 0 elsewhere."""
    shape = node.shape(0)
    axis = int(node.attr("axis", -1 if node.version >= 13 else 1))
    axis = axis + len(shape) if axis < 0 else axis
    x = node.tensor(0)
    if node.version < 13:
        x = ops.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
        axis = 1
    values = node.cx.constant(
        f"{node.proto.output[0]}/values", np.array([0, 1], x.dtype.as_numpy())
    )
    out = ops.onehot(ops.argmax(x, axis, False), x.shape[axis], values, axis)
    return [ops.reshape(out, shape)]


#: the labels an ellipsis stands for (ONNX labels are letters)
_ELLIPSIS = "0123456789"


def _einsum_terms(node: Any) -> tuple[list[str], str]:
    """The operands' and the output's labels, each ``...`` spelled out as digits (aligned
    to the right, as broadcasting aligns axes)."""
    equation = str(node.attr("equation")).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != node.n_inputs:
        raise node.error(
            f"equation {equation!r} has {len(terms)} operands, the node {node.n_inputs}"
        )
    spans = [len(node.shape(i)) - (len(t) - 3) if "..." in t else 0 for i, t in enumerate(terms)]
    width = max(spans)
    spelled = [t.replace("...", _ELLIPSIS[width - n : width]) for t, n in zip(terms, spans)]
    if not arrow:  # implicit output: the ellipsis, then the labels seen once, sorted
        counts = Counter("".join(spelled))
        rhs = "..." + "".join(sorted(c for c, k in counts.items() if k == 1 and c.isalpha()))
    rhs = rhs.replace("...", _ELLIPSIS[:width])
    for term in spelled:
        if len(set(term)) != len(term):
            raise node.error(
                f"a label repeated within an operand ({term!r}, a diagonal) is not supported"
            )
    return spelled, rhs


def _einsum(node: Any) -> list[Any]:
    """ONNX Einsum of one or two operands: labels only in one operand and not in the output
    are summed first; the shared labels of the output are the batch, the other shared
    labels are contracted by one batched matmul ``[B, M, K] @ [B, K, N]``."""
    terms, out = _einsum_terms(node)
    ops_in = [node.tensor(i) for i in range(node.n_inputs)]
    dims: dict[str, int] = {}
    for term, t in zip(terms, ops_in):
        for c, d in zip(term, t.shape):
            if dims.setdefault(c, d) != d:
                raise node.error(
                    f"label {c!r} has sizes {dims[c]} and {d} (broadcasting is not supported)"
                )
    if len(ops_in) == 1:
        (term,), (t,) = terms, ops_in
        gone = [term.index(c) for c in term if c not in out]
        if gone:
            t = ops.sum(t, gone)
            term = "".join(c for c in term if c in out)
        return [ops.transpose(t, tuple(term.index(c) for c in out)) if term != out else t]
    if len(ops_in) != 2:
        raise node.error(f"Einsum of {len(ops_in)} operands is not supported (one or two)")
    for i in range(2):  # labels of one operand only, not in the output: summed first
        other = terms[1 - i]
        gone = [k for k, c in enumerate(terms[i]) if c not in out and c not in other]
        if gone:
            ops_in[i] = ops.sum(ops_in[i], gone)
            terms[i] = "".join(c for k, c in enumerate(terms[i]) if k not in gone)
    (ta, tb), (a, b) = terms, ops_in
    batch = [c for c in out if c in ta and c in tb]
    contract = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]

    def size(labels: list[str]) -> int:
        return math.prod(dims[c] for c in labels)

    a = ops.transpose(a, tuple(ta.index(c) for c in batch + free_a + contract))
    b = ops.transpose(b, tuple(tb.index(c) for c in batch + contract + free_b))
    a = ops.reshape(a, (size(batch), size(free_a), size(contract)))
    b = ops.reshape(b, (size(batch), size(contract), size(free_b)))
    y = ops.reshape(ops.matmul(a, b), tuple(dims[c] for c in batch + free_a + free_b))
    order = batch + free_a + free_b
    return [ops.transpose(y, tuple(order.index(c) for c in out)) if order != list(out) else y]


REARRANGE: dict[str, Callable[[Any], list]] = {
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "Trilu": _trilu,
    "Hardmax": _hardmax,
    "Einsum": _einsum,
}
