"""Scatter ops: ``scatter`` (ONNX ScatterElements: out-of-range indices are ignored, the last
of repeated targets wins) and ``scatter_reduce`` (values reduced into their targets with
``sum`` / ``max`` / ``min`` / ``mul``, or ``none``). Indices are taken as
:func:`~tremula.popxl.ops.gather.as_indices` takes them; lowered in
``tremula/lowering/scatter.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.gather import as_indices
from tremula.popxl.ops.shape import check_tensor, norm_axis
from tremula.popxl.ops.utils import check_tensor_ipu_and_tile_set
from tremula.popxl.tensor import Tensor, TensorSpec

# ---- scatter ----


def _scatter_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, idx, values = x[0].copy(), x[1].astype(np.int64), x[2]
    ax, n = a["axis"], x[0].shape[a["axis"]]
    idx = np.where(idx < 0, idx + n, idx)
    pos: list[np.ndarray] = list(np.indices(idx.shape))
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
        TypeError: ``values`` of another dtype than ``t`` (a ``popart.popart_exception``
            too, as PopART's op setup raises it); non-integer indices.
    """
    check_tensor(t, "scatter")
    check_tensor(values, "scatter", "values")
    if values.dtype != t.dtype:
        raise OpSetupTypeError(
            f"scatter: values {values.id!r} is {values.dtype}, t {t.id!r} is {t.dtype}"
        )
    ax = norm_axis(axis, t.rank, "scatter", repr(t.id))
    idx = as_indices(indices, "scatter")  # (a constant made here is placed nowhere)
    check_tensor_ipu_and_tile_set(t=t, indices=idx, values=values)
    if idx.shape != values.shape or idx.rank != t.rank:  # PopART's ScatterOp::setup
        raise OpSetupError(
            f"scatter: indices {idx.shape} and values {values.shape} must have one shape, of "
            f"the rank of {t.id!r} {t.shape}"
        )
    bad = [d for d in range(t.rank) if d != ax and idx.shape[d] > t.shape[d]]
    if bad:
        raise OpSetupError(
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


__all__ = ["scatter", "scatter_reduce"]
