"""Indexing ops: ``gather`` / ``tied_gather`` (ONNX Gather), ``scatter`` (ONNX
ScatterElements), ``dynamic_slice`` / ``dynamic_update`` / ``dynamic_update_`` (slices at a
runtime offset) and ``onehot``.

Out-of-range gather indices give zeros (what ``zero_OOR=True`` asks for; PopXL leaves the
other case undefined); out-of-range scatter indices are ignored; dynamic offsets are taken
modulo the axis (popops' rule; PopXL asks for offsets that fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.popxl import dtypes
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor, norm_axis
from tremula.popxl.tensor import Tensor, TensorSpec, constant

INDEX_TYPES = (dtypes.int32, dtypes.uint32)


def as_indices(indices: Any, what: str) -> Tensor:
    """``indices`` as an int32 / uint32 tensor (host ints become an int32 constant)."""
    if not isinstance(indices, Tensor):
        arr = np.asarray(indices)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{what}: indices must be integers, got {arr.dtype}")
        return constant(arr.astype(np.int32), name="indices")
    if indices.dtype not in INDEX_TYPES:
        raise TypeError(
            f"{what}: indices {indices.id!r} must be int32 or uint32, got {indices.dtype}"
        )
    return indices


# ---- gather ----


def _gather_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    t, idx = specs
    ax = a["axis"]
    return [TensorSpec((*t.shape[:ax], *idx.shape, *t.shape[ax + 1 :]), t.dtype)]


def _gather_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, idx = x[0], x[1].astype(np.int64)
    n = t.shape[a["axis"]]
    ok = (idx >= 0) & (idx < n)
    out = np.take(t, np.where(ok, idx, 0), axis=a["axis"])
    mask = ok.reshape((1,) * a["axis"] + idx.shape + (1,) * (t.ndim - a["axis"] - 1))
    return [np.where(mask, out, np.zeros((), t.dtype))]


defop("Gather", _gather_spec, _gather_ref)
defop("TiedGather", _gather_spec, _gather_ref)


def _gather(op_type: str, what: str, t: Tensor, indices: Any, axis: int, amp: Any, oor: bool):
    check_tensor(t, what)
    if t.rank == 0:
        raise ValueError(f"{what}: cannot gather from the scalar {t.id!r}")
    idx = as_indices(indices, what)
    attrs = {
        "axis": norm_axis(axis, t.rank, what, repr(t.id)),
        "available_memory_proportion": amp,
        "zero_OOR": bool(oor),
    }
    (out,) = create_op(op_type, [t, idx], attrs)
    return out


def gather(
    t: Tensor,
    indices: Tensor | Any,
    axis: int = 0,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """ONNX Gather: ``t`` indexed by ``indices`` along ``axis``; the result has shape
    ``t.shape[:axis] + indices.shape + t.shape[axis + 1:]``. Out-of-range indices give
    zeros.

    Raises:
        TypeError: indices that are not int32 / uint32.
        ValueError: a scalar ``t`` or an axis out of range.
    """
    return _gather("Gather", "gather", t, indices, axis, available_memory_proportion, zero_OOR)


def tied_gather(
    t: Tensor,
    indices: Tensor | Any,
    axis: int = 0,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """:func:`gather` for a weight shared with a matmul (its gradient goes to the matmul's
    weight gradient); the same values."""
    return _gather(
        "TiedGather", "tied_gather", t, indices, axis, available_memory_proportion, zero_OOR
    )


# ---- scatter ----


def _scatter_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, idx, values = x[0].copy(), x[1].astype(np.int64), x[2]
    ax, n = a["axis"], x[0].shape[a["axis"]]
    idx = np.where(idx < 0, idx + n, idx)
    pos = list(np.indices(idx.shape))
    ok = (idx >= 0) & (idx < n)
    pos[ax] = idx
    t[tuple(p[ok] for p in pos)] = values[ok]
    return [t]


defop("Scatter", lambda specs, a: [specs[0]], _scatter_ref)


def scatter(
    t: Tensor,
    indices: Tensor | Any,
    values: Tensor,
    axis: int = 0,
    available_memory_proportion: float | None = None,
) -> Tensor:
    """ONNX ScatterElements: a copy of ``t`` with ``out[..., indices[p], ...] = values[p]``
    (the index replacing position ``p``'s coordinate on ``axis``); negative indices count
    from the end, out-of-range ones are ignored, and of repeated targets the last wins.

    Raises:
        ValueError: ``indices`` and ``values`` of different shapes, or not of ``t``'s rank.
        TypeError: ``values`` of another dtype than ``t``; non-integer indices.
    """
    check_tensor(t, "scatter")
    check_tensor(values, "scatter", "values")
    idx = as_indices(indices, "scatter")
    if values.dtype != t.dtype:
        raise TypeError(f"scatter: values {values.id!r} is {values.dtype}, t {t.id!r} is {t.dtype}")
    ax = norm_axis(axis, t.rank, "scatter", repr(t.id))
    if idx.shape != values.shape or idx.rank != t.rank:
        raise ValueError(
            f"scatter: indices {idx.shape} and values {values.shape} must have one shape, of "
            f"the rank of {t.id!r} {t.shape}"
        )
    bad = [d for d in range(t.rank) if d != ax and idx.shape[d] > t.shape[d]]
    if bad:
        raise ValueError(
            f"scatter: indices {idx.shape} exceed {t.id!r} {t.shape} on axes {bad} (only axis "
            f"{ax} is indexed)"
        )
    attrs = {"axis": ax, "available_memory_proportion": available_memory_proportion}
    (out,) = create_op("Scatter", [t, idx, values], attrs)
    return out


# ---- dynamic slice / update ----


def _dyn_positions(shape: tuple[int, ...], start: np.ndarray, a: dict[str, Any]) -> tuple:
    key: list[Any] = [slice(None)] * len(shape)
    for k, (ax, size) in enumerate(zip(a["axes"], a["sizes"])):
        sel = (int(start[k]) + np.arange(size)) % shape[ax]
        key[ax] = sel.reshape([-1 if d == ax else 1 for d in range(len(shape))])
    for d in range(len(shape)):
        if d not in a["axes"]:
            key[d] = np.arange(shape[d]).reshape([-1 if e == d else 1 for e in range(len(shape))])
    return tuple(key)


def _dyn_slice_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    shape = list(specs[0].shape)
    for ax, size in zip(a["axes"], a["sizes"]):
        shape[ax] = size
    return [TensorSpec(tuple(shape), specs[0].dtype)]


def _dyn_slice_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    return [x[0][_dyn_positions(x[0].shape, x[1].reshape(-1), a)]]


def _dyn_update_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    out = x[0].copy()
    out[_dyn_positions(out.shape, x[1].reshape(-1), a)] = x[2]
    return [out]


defop("DynamicSlice", _dyn_slice_spec, _dyn_slice_ref)
defop("DynamicUpdate", lambda specs, a: [specs[0]], _dyn_update_ref)
defop("DynamicUpdateInplace", lambda specs, a: [specs[0]], _dyn_update_ref, modifies=(0,))


def _dyn_args(
    t: Tensor, index: Tensor, axes: Sequence[int], sizes: Sequence[int], what: str
) -> dict[str, Any]:
    check_tensor(t, what)
    check_tensor(index, what, "index")
    axes = [norm_axis(a, t.rank, what, repr(t.id)) for a in axes]
    sizes = [int(s) for s in sizes]
    if len(axes) != len(sizes) or len(set(axes)) != len(axes):
        raise ValueError(f"{what}: axes {axes} and sizes {sizes} must pair up, axes once each")
    for ax, s in zip(axes, sizes):
        if not 1 <= s <= t.shape[ax]:
            raise ValueError(
                f"{what}: size {s} for axis {ax} of {t.id!r} must lie in 1..{t.shape[ax]}"
            )
    if index.dtype not in INDEX_TYPES:
        raise TypeError(f"{what}: index {index.id!r} must be uint32 (or int32), got {index.dtype}")
    if index.nelms != len(axes):
        raise ValueError(
            f"{what}: index {index.id!r} has {index.nelms} element(s); it needs one per axis "
            f"in {axes}"
        )
    return {"axes": tuple(axes), "sizes": tuple(sizes)}


def dynamic_slice(
    t: Tensor, index: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool = False
) -> Tensor:
    """A copy of ``t[index[k] : index[k] + sizes[k]]`` on each of ``axes``, the offsets
    read at run time from the uint32 tensor ``index``.

    Raises:
        ValueError: axes and sizes that do not pair up, sizes out of range, an index
            without one element per axis.
        TypeError: a non-integer index.
    """
    attrs = {**_dyn_args(t, index, axes, sizes, "dynamic_slice"), "no_overlap": bool(no_overlap)}
    (out,) = create_op("DynamicSlice", [t, index], attrs)
    return out


def _dyn_update(op_type: str, what: str, t, index, t_update, axes, sizes, no_overlap) -> Tensor:
    attrs = {**_dyn_args(t, index, axes, sizes, what), "no_overlap": bool(no_overlap)}
    check_tensor(t_update, what, "t_update")
    want = _dyn_slice_spec([t.spec], attrs)[0]
    if t_update.shape != want.shape or t_update.dtype != t.dtype:
        raise ValueError(
            f"{what}: t_update {t_update.id!r} ({t_update.dtype} {t_update.shape}) must be "
            f"{t.dtype} {want.shape}, the slice of {t.id!r}"
        )
    (out,) = create_op(op_type, [t, index, t_update], attrs)
    return out


def dynamic_update(
    t: Tensor,
    index: Tensor,
    t_update: Tensor,
    axes: Sequence[int],
    sizes: Sequence[int],
    no_overlap: bool = False,
) -> Tensor:
    """A copy of ``t`` with the slice of :func:`dynamic_slice` replaced by ``t_update``."""
    return _dyn_update(
        "DynamicUpdate", "dynamic_update", t, index, t_update, axes, sizes, no_overlap
    )


def dynamic_update_(
    t: Tensor,
    index: Tensor,
    t_update: Tensor,
    axes: Sequence[int],
    sizes: Sequence[int],
    no_overlap: bool = False,
) -> Tensor:
    """As :func:`dynamic_update`, writing into ``t`` in place."""
    return _dyn_update(
        "DynamicUpdateInplace", "dynamic_update_", t, index, t_update, axes, sizes, no_overlap
    )


# ---- onehot ----


def _onehot_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    shape = list(specs[0].shape)
    shape.insert(a["axis"], a["num_classes"])
    return [TensorSpec(tuple(shape), specs[1].dtype)]


def _onehot_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    idx, values = x[0].astype(np.int64), x[1].reshape(-1)
    n = a["num_classes"]
    idx = np.where(idx < 0, idx + n, idx)
    hot = np.expand_dims(idx, a["axis"]) == np.arange(n).reshape(
        [-1 if d == a["axis"] else 1 for d in range(idx.ndim + 1)]
    )
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


defop("OneHot", _onehot_spec, _onehot_ref, differentiable=False)


def onehot(t: Tensor, num_classes: Tensor | int, values: Tensor, axis: int = -1) -> Tensor:
    """ONNX OneHot: ``values[1]`` where the new ``axis`` (of size ``num_classes``) equals
    ``t``'s index (negative indices count from the end), ``values[0]`` elsewhere.

    Raises:
        TypeError: ``t`` not of an integer dtype.
        ValueError: ``num_classes`` not a constant positive integer, ``values`` without two
            elements, an axis out of range.
    """
    check_tensor(t, "onehot")
    check_tensor(values, "onehot", "values")
    if t.dtype not in INDEX_TYPES:
        raise TypeError(f"onehot: {t.id!r} must be int32 or uint32, got {t.dtype}")
    if isinstance(num_classes, Tensor):
        data = getattr(num_classes, "_data", None)
        if data is None or data.size != 1:
            raise ValueError(
                f"onehot: num_classes {num_classes.id!r} must be a one-element constant "
                f"(the output shape depends on it)"
            )
        num_classes = data.reshape(()).item()
    if int(num_classes) != num_classes or num_classes < 1:
        raise ValueError(f"onehot: num_classes must be a positive integer, got {num_classes!r}")
    if values.nelms != 2:
        raise ValueError(f"onehot: values {values.id!r} must hold [off, on], got {values.shape}")
    ax = norm_axis(axis, t.rank, "onehot", repr(t.id), extra=1)
    attrs = {"num_classes": int(num_classes), "axis": ax}
    (out,) = create_op("OneHot", [t, values], attrs)
    return out


__all__ = [
    "dynamic_slice",
    "dynamic_update",
    "dynamic_update_",
    "gather",
    "onehot",
    "scatter",
    "tied_gather",
]
