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


# ---- scatter_reduce ----

REDUCTIONS = ("sum", "max", "min", "mul", "none")


def start_value(reduction: str, dtype: np.dtype) -> Any:
    """What max / min / mul start from at a position before its first value: the
    reduction's identity in ``dtype``."""
    if reduction == "mul":
        return 1
    if np.dtype(dtype).kind == "f":
        return -np.inf if reduction == "max" else np.inf
    info = np.iinfo(dtype)
    return int(info.min if reduction == "max" else info.max)


def _out_shape(data_shape: tuple[int, ...], a: dict[str, Any]) -> tuple[int, ...]:
    return tuple(a["axis_size"] if d == a["axis"] else s for d, s in enumerate(data_shape))


def scatter_reduce_targets(
    idx: np.ndarray, data_shape: tuple[int, ...], a: dict[str, Any]
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """(output coordinates of the valid data elements, their validity mask over data); a
    1-D ``idx`` is broadcast along the other axes when ``a["broadcast"]``."""
    idx = idx.astype(np.int64)
    if a["broadcast"]:
        shape = [-1 if d == a["axis"] else 1 for d in range(len(data_shape))]
        idx = np.broadcast_to(idx.reshape(shape), data_shape)
    n = a["axis_size"]
    idx = np.where(idx < 0, idx + n, idx)
    ok = (idx >= 0) & (idx < n)
    pos = list(np.indices(data_shape))
    pos[a["axis"]] = idx
    return tuple(p[ok] for p in pos), ok


def _scatter_reduce_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec(_out_shape(specs[0].shape, a), specs[0].dtype)]


def _scatter_reduce_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    data, red = x[0], a["reduction"]
    shape = _out_shape(data.shape, a)
    target, ok = scatter_reduce_targets(x[1], data.shape, a)
    values = data[ok]
    initial = x[2] if len(x) > 2 else None
    out = np.zeros(shape, data.dtype) if initial is None else initial.astype(data.dtype)
    if red == "none":  # the last write to a position wins
        flat = np.ravel_multi_index(target, shape)
        last = np.unique(flat[::-1], return_index=True)[1]
        keep = flat.size - 1 - last
        out[tuple(t[keep] for t in target)] = values[keep]
    elif red == "sum":
        np.add.at(out, target, values)
    else:
        ufunc = {"max": np.maximum, "min": np.minimum, "mul": np.multiply}[red]
        if initial is None:  # only the scattered values; positions none reaches stay 0
            out[...] = start_value(red, data.dtype)
        ufunc.at(out, target, values)
        if initial is None:
            hit = np.zeros(shape, bool)
            hit[target] = True
            out = np.where(hit, out, np.zeros((), data.dtype))
    return [out]


defop("ScatterReduce", _scatter_reduce_spec, _scatter_reduce_ref)


def scatter_reduce(
    data: Tensor,
    indices: Tensor | Any,
    reduction: str = "sum",
    initial_values: Tensor | None = None,
    axis: int = 0,
    axis_size: int | None = None,
    enable_index_broadcast: bool = True,
    available_memory_proportion: float | None = None,
) -> Tensor:
    """Reduce ``data`` into an output by index: ``out[..., indices[p], ...] = reduction(out[...],
    data[p])`` along ``axis`` (torch_scatter's ``scatter``). The output has ``data``'s shape
    with ``axis`` of size ``axis_size`` (or ``initial_values``' shape).

    ``reduction`` is ``"sum"``, ``"max"``, ``"min"``, ``"mul"`` or ``"none"`` (the last
    write wins). With ``initial_values`` the output starts from them and they take part in
    the reduction; without, it starts at 0 and positions no index reaches stay 0 (max, min
    and mul reduce only the values scattered to a position). ``indices`` has ``data``'s
    shape, or is 1-D along ``axis`` when ``enable_index_broadcast``. Negative indices count
    from the end; out-of-range ones are ignored.

    Raises:
        ValueError: an unknown reduction, no ``axis_size`` nor ``initial_values``, or shapes
            that do not fit.
        TypeError: non-integer indices, ``initial_values`` of another dtype than ``data``.
    """
    what = "scatter_reduce"
    check_tensor(data, what, "data")
    if reduction not in REDUCTIONS:
        raise ValueError(f"{what}: reduction {reduction!r} is not one of {list(REDUCTIONS)}")
    if data.rank == 0:
        raise ValueError(f"{what}: cannot scatter the scalar {data.id!r}")
    ax = norm_axis(axis, data.rank, what, repr(data.id))
    if initial_values is not None:
        check_tensor(initial_values, what, "initial_values")
        if initial_values.dtype != data.dtype:
            raise TypeError(
                f"{what}: initial_values {initial_values.id!r} is {initial_values.dtype}, data "
                f"{data.id!r} is {data.dtype}"
            )
        size = initial_values.shape[ax] if initial_values.rank == data.rank else -1
        if axis_size is not None and axis_size != size:
            raise ValueError(
                f"{what}: axis_size {axis_size} differs from initial_values {initial_values.id!r} "
                f"{initial_values.shape} on axis {ax}"
            )
        axis_size = size
    if axis_size is None or axis_size < 0:
        raise ValueError(f"{what}: give axis_size (or initial_values) for the output's axis {ax}")
    idx_shape = indices.shape if isinstance(indices, Tensor) else np.shape(indices)
    broadcast = bool(enable_index_broadcast) and len(idx_shape) == 1 and data.rank > 1
    if (idx_shape[0] != data.shape[ax]) if broadcast else (tuple(idx_shape) != data.shape):
        raise ValueError(
            f"{what}: indices {tuple(idx_shape)} must have data {data.id!r}'s shape {data.shape}"
            + (f" (or be 1-D of length {data.shape[ax]})" if enable_index_broadcast else "")
        )
    out_shape = tuple(axis_size if d == ax else s for d, s in enumerate(data.shape))
    if initial_values is not None and initial_values.shape != out_shape:
        raise ValueError(
            f"{what}: initial_values {initial_values.id!r} {initial_values.shape} must have the "
            f"output's shape {out_shape}"
        )
    idx = as_indices(indices, what)  # last: host indices become a constant only now
    inputs = [data, idx] if initial_values is None else [data, idx, initial_values]
    attrs = {
        "reduction": reduction,
        "axis": ax,
        "axis_size": int(axis_size),
        "broadcast": broadcast,
        "available_memory_proportion": available_memory_proportion,
    }
    (out,) = create_op("ScatterReduce", inputs, attrs)
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
    "scatter_reduce",
    "tied_gather",
]
