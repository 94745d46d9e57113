"""Reductions and scans: ``sum``, ``mean``, ``max``, ``min``, ``prod``, ``median``, ``l1``,
``l2``, ``logsum``, ``logsumexp``, ``sumsquare`` (one table: ``(t, axis=None,
keepdims=False)``), ``argmax`` / ``argmin``, ``topk``, ``cumsum``, ``histogram`` and
``lamb_square``.

References compute in float64 (integers exactly) and round to the input's dtype, as the
lowering accumulates half and float in float32.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula.errors import OpSetupError
from tremula.popxl import dtypes
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import (
    check_tensor,
    norm_axes,
    norm_axis,
    require_numeric,
)
from tremula.popxl.tensor import Tensor, TensorSpec, constant


def median_rows(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``x`` with its kept axes first and its ``axes`` flattened last, in order: one row per
    median, its elements numbered as the median's index output numbers them."""
    rest = [d for d in range(x.ndim) if d not in axes]
    return np.transpose(x, [*rest, *axes]).reshape(*[x.shape[d] for d in rest], -1)


def _median_index(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Per row of :func:`median_rows`, the index of the element a stable sort puts at
    position ``(n - 1) // 2``: the lower median, and among equal values the one that
    position holds (``[1, 2, 2, 1]`` gives 3, ``[5, 5, 5]`` gives 1)."""
    rows = median_rows(x, axes)
    order = np.argsort(rows, axis=-1, kind="stable")
    return order[..., (rows.shape[-1] - 1) // 2]


def _lower_median(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    rows = median_rows(x, axes)
    return np.take_along_axis(rows, _median_index(x, axes)[..., None], axis=-1)[..., 0]


def _red(fn: Callable[..., np.ndarray]) -> Callable[[np.ndarray, tuple[int, ...]], np.ndarray]:
    def ref(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        wide = x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)
        return fn(wide, axis=axes)

    return ref


def _mean(x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod([x.shape[a] for a in axis]))
    s = np.sum(x, axis=axis)
    return s / n if x.dtype.kind == "f" else np.trunc(s / n)


def _logsumexp(x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    return np.squeeze(m, axis=axis) + np.log(np.sum(np.exp(x - m), axis=axis))


@dataclass(frozen=True)
class Reduction:
    """One reduction: the PopXL function, the IR op type, its NumPy reference (float64
    input, axes), whether it only takes floating-point input, and ``index``: the reference
    of a second output, the int32 index of the element each result was taken from, in the
    flattened reduced axes (PopART's ``ReduceMedianOp`` has one; its gradient goes to that
    element alone), or None."""

    name: str
    op: str
    reference: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]
    float_only: bool = False
    index: Callable[[np.ndarray, tuple[int, ...]], np.ndarray] | None = None


TABLE: tuple[Reduction, ...] = (
    Reduction("sum", "ReduceSum", _red(np.sum)),
    Reduction("mean", "ReduceMean", _red(_mean)),
    Reduction("max", "ReduceMax", _red(np.max)),
    Reduction("min", "ReduceMin", _red(np.min)),
    Reduction("prod", "ReduceProd", _red(np.prod)),
    Reduction("median", "ReduceMedian", _lower_median, index=_median_index),
    Reduction("l1", "ReduceL1", _red(lambda x, axis: np.sum(np.abs(x), axis=axis))),
    Reduction("l2", "ReduceL2", _red(lambda x, axis: np.sqrt(np.sum(x * x, axis=axis))), True),
    Reduction("logsum", "ReduceLogSum", _red(lambda x, axis: np.log(np.sum(x, axis=axis))), True),
    Reduction(
        "logsumexp",
        "ReduceLogSumExp",
        _red(_logsumexp),
        True,
    ),
    Reduction("sumsquare", "ReduceSumSquare", _red(lambda x, axis: np.sum(x * x, axis=axis))),
)
BY_OP = {r.op: r for r in TABLE}


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keep: bool) -> tuple[int, ...]:
    return tuple(1 if d in axes else s for d, s in enumerate(shape) if keep or d not in axes)


def _register(r: Reduction) -> None:
    def infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
        shape = _reduced_shape(specs[0].shape, a["axes"], a["keepdims"])
        index = [TensorSpec(shape, dtypes.int32)] if r.index is not None else []
        return [TensorSpec(shape, specs[0].dtype), *index]

    def reference(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
        out = np.asarray(r.reference(np.asarray(x[0]), a["axes"]))
        shape = _reduced_shape(x[0].shape, a["axes"], a["keepdims"])
        outs = [out.reshape(shape).astype(x[0].dtype)]
        if r.index is not None:
            outs.append(r.index(np.asarray(x[0]), a["axes"]).reshape(shape).astype(np.int32))
        return outs

    float_inputs = (0,) if r.float_only else ()
    defop(r.op, infer, reference, float_inputs=float_inputs, out=f"{r.name}_out")


for _r in TABLE:
    _register(_r)


def _reduce(op_type: str, t: Tensor, axis: int | Sequence[int] | None, keepdims: bool) -> Tensor:
    """Add the reduction ``op_type`` (a type of :data:`TABLE`) of ``t`` and return it."""
    r = BY_OP[op_type]
    check_tensor(t, r.name)
    require_numeric(t, r.name)
    axes = norm_axes(axis, t.rank, r.name, repr(t.id))
    if r.op == "ReduceMedian" and any(t.shape[a] == 0 for a in axes):
        raise ValueError(f"median: {t.id!r} of shape {t.shape} has an empty reduced axis")
    names = (f"{r.name}_out", f"{r.name}_indices") if r.index is not None else None
    outs = create_op(r.op, [t], {"axes": axes, "keepdims": builtins.bool(keepdims)}, names)
    return outs[0]


# The reductions (one signature): ``axis`` None reduces every axis; an int or a list of axes
# (negative ones count from the end) reduces those; ``keepdims`` keeps them as size 1.
# Each raises ValueError for an axis out of range or repeated, TypeError for a dtype the
# reduction does not take.


def sum(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The sum of ``t``'s elements over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceSum", t, axis, keepdims)


def mean(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The mean of ``t``'s elements (integers: truncated) over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceMean", t, axis, keepdims)


def max(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The largest of ``t``'s elements over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceMax", t, axis, keepdims)


def min(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The smallest of ``t``'s elements over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceMin", t, axis, keepdims)


def prod(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The product of ``t``'s elements over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceProd", t, axis, keepdims)


def median(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The median of ``t``'s elements (the lower one of an even count) over ``axis``.

    As PopART's ReduceMedianOp, the op has a second output, ``median_indices`` (int32): the
    index, in the flattened reduced axes, of the element each median is, which gets all
    of its gradient. Among equal values that is the one a stable sort puts in the middle
    (``[5, 5, 5]``: index 1; ``[1, 2, 2, 1]``: index 3).

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceMedian", t, axis, keepdims)


def l1(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The L1 norm (sum of absolute values) of ``t``'s elements over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceL1", t, axis, keepdims)


def l2(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The L2 norm of ``t``'s elements (floating point only) over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceL2", t, axis, keepdims)


def logsum(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The log of the sum of ``t``'s elements (floating point only) over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceLogSum", t, axis, keepdims)


def logsumexp(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The log of the sum of the exponentials of ``t``'s elements (floating point only), computed
    stably over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceLogSumExp", t, axis, keepdims)


def sumsquare(t: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The sum of the squares of ``t``'s elements over ``axis``.

    Args:
        t: The input tensor.
        axis: The axes to reduce (None: all).
        keepdims: Keep the reduced axes as size 1.

    Returns:
        A tensor of ``t``'s dtype.
    """
    return _reduce("ReduceSumSquare", t, axis, keepdims)


# ---- argmax / argmin / topk ----


def _arg_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec(_reduced_shape(specs[0].shape, (a["dim"],), a["keepdim"]), dtypes.int32)]


def _arg_ref(fn: Callable[..., np.ndarray]) -> Callable[..., list[np.ndarray]]:
    def ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
        return [fn(x[0], axis=a["dim"], keepdims=a["keepdim"]).astype(np.int32)]

    return ref


defop("ArgMax", _arg_spec, _arg_ref(np.argmax), differentiable=False, out="argmax_out")
defop("ArgMin", _arg_spec, _arg_ref(np.argmin), differentiable=False, out="argmin_out")


def _arg(op: str, what: str, t: Tensor, dim: int, keepdim: bool) -> Tensor:
    check_tensor(t, what)
    require_numeric(t, what)
    if t.rank == 0:
        raise ValueError(f"{what}: {t.id!r} is a scalar; it needs an axis to search")
    d = norm_axis(dim, t.rank, what, repr(t.id))
    if t.shape[d] == 0:
        raise ValueError(f"{what}: axis {d} of {t.id!r} is empty")
    (out,) = create_op(op, [t], {"dim": d, "keepdim": builtins.bool(keepdim)})
    return out


def argmax(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """The int32 index of the largest element along ``dim`` (the first among ties)."""
    return _arg("ArgMax", "argmax", t, dim, keepdim)


def argmin(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """The int32 index of the smallest element along ``dim`` (the first among ties)."""
    return _arg("ArgMin", "argmin", t, dim, keepdim)


def _topk_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    shape = list(specs[0].shape)
    shape[a["axis"]] = a["k"]
    return [TensorSpec(tuple(shape), specs[0].dtype), TensorSpec(tuple(shape), dtypes.int32)]


def _topk_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    v = np.moveaxis(x[0], a["axis"], -1)
    key = -v.astype(np.float64) if a["largest"] else v
    idx = np.argsort(key, axis=-1, kind="stable")[..., : a["k"]]
    vals = np.take_along_axis(v, idx, axis=-1)
    return [np.moveaxis(vals, -1, a["axis"]), np.moveaxis(idx, -1, a["axis"]).astype(np.int32)]


defop("TopK", _topk_spec, _topk_ref, out="topk_out")


def topk(
    t: Tensor, k: int, axis: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (``largest``) or smallest elements along ``axis`` and their int32
    indices, in order (largest first / smallest first; the lower index first among ties).

    Raises:
        ValueError: ``k`` outside ``[1, size of axis]`` or an axis out of range.
    """
    check_tensor(t, "topk")
    require_numeric(t, "topk")
    if t.rank == 0:
        raise ValueError(f"topk: {t.id!r} is a scalar; it needs an axis to search")
    ax = norm_axis(axis, t.rank, "topk", repr(t.id))
    if int(k) != k or not 1 <= k <= t.shape[ax]:
        raise OpSetupError(  # PopART's TopKOp::setup
            f"topk: k={k!r} must lie in [1, {t.shape[ax]}] (axis {ax} of {t.id!r})"
        )
    attrs = {"k": int(k), "axis": ax, "largest": builtins.bool(largest), "sorted": sorted}
    values, indices = create_op("TopK", [t], attrs)
    return values, indices


# ---- cumsum / histogram / lamb_square ----


def _same(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [specs[0]]


# input 1 is the axis, a constant (ONNX CumSum and PopART's CumSumOp take the axis as an
# input tensor, which PopXL's cumsum makes); ``attrs["dim"]`` holds its value, non-negative
defop(
    "CumSum",
    _same,
    lambda x, a: [np.cumsum(x[0], axis=a["dim"], dtype=x[0].dtype)],
    out="cumsum_out",
)


def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    """Inclusive running sum of ``t`` along ``dim`` (given to the op as a constant tensor,
    as PopXL does: the graph gains it)."""
    check_tensor(t, "cumsum")
    require_numeric(t, "cumsum")
    if t.rank == 0:
        raise ValueError(f"cumsum: {t.id!r} is a scalar; it needs an axis to sum along")
    axis = norm_axis(dim, t.rank, "cumsum", repr(t.id))
    dim_tensor = constant(np.array(int(dim), np.int32), dtypes.int32, "dim")
    (out,) = create_op("CumSum", [t, dim_tensor], {"dim": axis})
    return out


def _histogram_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    data = np.abs(x[0]) if a["absolute_of_input"] else x[0]
    levels = np.asarray(a["levels"], dtype=np.float64)
    bins = np.searchsorted(levels, data.astype(np.float64).ravel(), side="right")
    bins[np.isnan(data.ravel())] = levels.size
    return [np.bincount(bins, minlength=levels.size + 1).astype(np.uint32)]


defop(
    "Histogram",
    lambda specs, a: [TensorSpec((len(a["levels"]) + 1,), dtypes.uint32)],
    _histogram_ref,
    differentiable=False,
)


def histogram(t: Tensor, levels: Sequence[float], absolute_of_input: bool = False) -> Tensor:
    """uint32 counts of ``t``'s elements in the ``len(levels) + 1`` bins cut at the
    ``levels``, sorted first (PopART's HistogramOp sorts them): ``x < levels[0]``,
    ``levels[i-1] <= x < levels[i]``, ``x >= levels[-1]`` (of ``|x|`` with
    ``absolute_of_input``).

    Raises:
        ValueError: no levels.
    """
    check_tensor(t, "histogram")
    require_numeric(t, "histogram")
    lv = sorted(float(v) for v in levels)
    if not lv:
        raise ValueError(f"histogram: levels {lv} must be a non-empty list")
    attrs = {"levels": tuple(lv), "absolute_of_input": builtins.bool(absolute_of_input)}
    (out,) = create_op("Histogram", [t], attrs)
    return out


defop(
    "LambSquare",
    lambda specs, a: [TensorSpec((), dtypes.float32)],
    lambda x, a: [np.asarray(np.sum(x[0].astype(np.float64) ** 2), dtype=np.float32)],
)


def lamb_square(t: Tensor) -> Tensor:
    """The float32 sum of the squares of ``t``'s elements (LAMB's norms)."""
    check_tensor(t, "lamb_square")
    require_numeric(t, "lamb_square")
    (out,) = create_op("LambSquare", [t])
    return out


__all__ = [
    "argmax",
    "argmin",
    "cumsum",
    "histogram",
    "l1",
    "l2",
    "lamb_square",
    "logsum",
    "logsumexp",
    "max",
    "mean",
    "median",
    "min",
    "prod",
    "sum",
    "sumsquare",
    "topk",
]
