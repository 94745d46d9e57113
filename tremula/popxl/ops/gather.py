"""Indexing ops: ``gather`` / ``tied_gather`` (ONNX Gather), ``groupedgather`` (a gather in
each group of a leading group dimension), ``dynamic_slice`` / ``dynamic_update`` /
``dynamic_update_`` (slices at a runtime offset) and ``onehot``; the scatters are in
``scatter.py``.

Out-of-range gather indices give zeros (what ``zero_OOR=True`` asks for; PopXL leaves the
other case undefined); dynamic offsets are taken modulo the axis (popops' rule; PopXL asks
for offsets that fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError
from tremula.popxl import dtypes
from tremula.popxl.ops.base import check_in_current_graph, create_op, definplace, defop
from tremula.popxl.ops.shape import check_tensor, norm_axis
from tremula.popxl.ops.utils import check_tensor_ipu_and_tile_set
from tremula.popxl.tensor import Tensor, TensorSpec, constant

INDEX_TYPES = (dtypes.int32, dtypes.uint32)


def as_indices(indices: Any, what: str) -> Tensor:
    """``indices`` as an int32 / uint32 tensor (host ints become an int32 constant)."""
    if not isinstance(indices, Tensor):
        arr = np.asarray(indices)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{what}: indices must be integers, got {arr.dtype}")
        return constant(arr.astype(np.int32), name="indices")
    check_in_current_graph(what, indices=indices)
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
    ax = norm_axis(axis, t.rank, what, repr(t.id))
    idx = as_indices(indices, what)  # (a constant made here is placed nowhere)
    check_tensor_ipu_and_tile_set(t=t, indices=idx)
    attrs = {
        "axis": ax,
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


# ---- grouped gather ----


def grouped_layout(shape: tuple[int, ...], axis: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """For a ``[G, ...]`` tensor gathered on ``axis``: (the permutation that moves ``axis`` to
    position 1, so each group is a table of rows ``[G, n, rest...]``, and that ``rest``'s
    shape). The lowering uses the same layout."""
    perm = (0, axis, *(d for d in range(1, len(shape)) if d != axis))
    return perm, tuple(shape[d] for d in perm[2:])


def grouped_out_perm(k: int, axis: int, rank: int) -> tuple[int, ...]:
    """``[G, idx (k axes), before (axis - 1), after]`` to ``[G, before, idx, after]``."""
    return (0, *range(1 + k, k + axis), *range(1, 1 + k), *range(k + axis, rank))


def _grouped_gather_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    t, idx = specs
    ax = a["axis"]
    return [TensorSpec((*t.shape[:ax], *idx.shape[1:], *t.shape[ax + 1 :]), t.dtype)]


def _grouped_gather_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, idx = x[0], x[1].astype(np.int64)
    ax, groups = a["axis"], t.shape[0]
    perm, rest = grouped_layout(t.shape, ax)
    table = t.transpose(perm)  # [G, n, rest...]
    flat = idx.reshape(groups, -1)
    ok = (flat >= 0) & (flat < t.shape[ax])
    rows = table[np.arange(groups)[:, None], np.where(ok, flat, 0)]  # [G, P, rest...]
    rows = np.where(ok.reshape(*ok.shape, *(1,) * len(rest)), rows, np.zeros((), t.dtype))
    out = rows.reshape(groups, *idx.shape[1:], *rest)
    return [out.transpose(grouped_out_perm(idx.ndim - 1, ax, out.ndim))]


def _grouped_gather_grad_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec(a["data_shape"], specs[0].dtype)]


def _grouped_gather_grad_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    g, idx = x[0], x[1].astype(np.int64)
    ax, shape = a["axis"], a["data_shape"]
    perm, rest = grouped_layout(shape, ax)
    k = idx.ndim - 1
    # the gradient in the gathered layout [G, idx..., rest...]
    rows = g.transpose(np.argsort(grouped_out_perm(k, ax, g.ndim)))
    flat = idx.reshape(shape[0], -1)
    rows = rows.reshape(*flat.shape, *rest)
    table = np.zeros((shape[0], shape[ax], *rest), g.dtype)
    ok = (flat >= 0) & (flat < shape[ax])
    group = np.broadcast_to(np.arange(shape[0])[:, None], flat.shape)
    np.add.at(table, (group[ok], flat[ok]), rows[ok])
    return [table.transpose(np.argsort(perm))]


defop("GroupedGather", _grouped_gather_spec, _grouped_gather_ref)
#: the transpose of GroupedGather in its data (the gradient rule's op): each group's rows
#: added into zeros of ``attrs["data_shape"]`` at its indices
defop("GroupedGatherGrad", _grouped_gather_grad_spec, _grouped_gather_grad_ref)


def _check_grouped(t: Tensor, indices: Any, axis: Any, group_size: Any, what: str) -> int:
    """The checks of :func:`groupedgather`, before anything is added to the graph: the
    gathered axis of ``t``, non-negative."""
    check_tensor(t, what)
    if (
        isinstance(group_size, bool)
        or not isinstance(group_size, (int, np.integer))
        or group_size < 1
    ):
        raise ValueError(f"{what}: group_size must be a positive integer, got {group_size!r}")
    if t.rank < 2:
        raise ValueError(
            f"{what}: t {t.id!r} must be [group_size, ...] of rank >= 2 (a group dimension "
            f"and one to gather on), got shape {t.shape}"
        )
    if t.shape[0] != group_size:
        raise ValueError(
            f"{what}: t {t.id!r} has {t.shape[0]} group(s) in dimension 0 (shape {t.shape}), "
            f"group_size is {group_size}"
        )
    ax = norm_axis(axis, t.rank, what, repr(t.id))
    if ax == 0:
        raise ValueError(
            f"{what}: axis {axis} is the group dimension of {t.id!r}; the axis counts the "
            f"group dimension, so gather inside the groups with an axis in 1..{t.rank - 1}"
        )
    if isinstance(indices, Tensor) and indices.dtype not in INDEX_TYPES:
        raise TypeError(
            f"{what}: indices {indices.id!r} must be int32 or uint32, got {indices.dtype}"
        )
    idx_shape = indices.shape if isinstance(indices, Tensor) else np.shape(indices)
    if len(idx_shape) == 0 or idx_shape[0] != group_size:
        name = repr(indices.id) if isinstance(indices, Tensor) else "(host array)"
        raise ValueError(
            f"{what}: indices {name} must be [group_size={group_size}, ...], got shape "
            f"{tuple(idx_shape)}"
        )
    return ax


def groupedgather(
    t: Tensor,
    indices: Tensor | Any,
    axis: int = 0,
    group_size: int = 1,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """A gather per group (PopART's GroupedGather). ``t`` is ``[G, ...]`` and ``indices`` is
    ``[G, ...]``, with ``G == group_size``. Group ``g`` of the output is ONNX Gather of
    ``t[g]`` by ``indices[g]``.

    Convention (PopART's GroupedGatherOp, as we read it): ``axis`` counts ``t``'s
    dimensions *including* the group dimension, so ``axis=1`` gathers along the first
    dimension inside a group. It must name a dimension other than the group dimension:
    ``1 <= axis < t.rank``, or a negative axis counted from the end. The default
    ``axis=0`` is the group dimension, so it is refused; it remains the default only for
    PopXL's signature. The output has shape ``t.shape[:axis] + indices.shape[1:] +
    t.shape[axis + 1:]``.

    As with :func:`gather`, out-of-range indices (negative ones included) give zeros. This
    is what ``zero_OOR=True`` asks for; PopXL leaves the other case undefined.

    Args:
        t: ``[group_size, ...]`` data, of rank 2 or more.
        indices: ``[group_size, ...]`` int32 / uint32 (host integers become a constant).
        axis: the gathered dimension of ``t``, counting the group dimension.
        group_size: the number of groups: ``t.shape[0]`` and ``indices.shape[0]``.
        available_memory_proportion: accepted for PopXL compatibility.
        zero_OOR: accepted; out-of-range indices give zeros either way.

    Returns:
        The gathered tensor, of ``t``'s dtype. Its gradient is a grouped scatter-add into
        ``t``. The indices get no gradient.

    Raises:
        TypeError: ``t`` that is not a Tensor, or indices that are not integers.
        ValueError: a ``group_size`` that is not a positive integer, ``t`` or ``indices``
            whose first dimension is not ``group_size``, ``t`` of rank below 2, or an
            ``axis`` out of range or on the group dimension.
    """
    what = "groupedgather"
    ax = _check_grouped(t, indices, axis, group_size, what)
    idx = as_indices(indices, what)  # last: host indices become a constant only now
    attrs = {
        "axis": ax,
        "group_size": int(group_size),
        "available_memory_proportion": available_memory_proportion,
        "zero_OOR": bool(zero_OOR),
    }
    (out,) = create_op("GroupedGather", [t, idx], attrs)
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
definplace("DynamicUpdateInplace", "DynamicUpdate", modifies=(0,))


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
            raise OpSetupError(
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
    check_tensor_ipu_and_tile_set(t=t, index=index)
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
    check_tensor_ipu_and_tile_set(t=t, index=index, t_update=t_update)
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
    return [TensorSpec(tuple(shape), specs[2].dtype)]


def _onehot_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    idx, values = x[0].astype(np.int64), x[2].reshape(-1)
    n = a["num_classes"]
    idx = np.where(idx < 0, idx + n, idx)
    hot = np.expand_dims(idx, a["axis"]) == np.arange(n).reshape(
        [-1 if d == a["axis"] else 1 for d in range(idx.ndim + 1)]
    )
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


# PopART's OnehotOp: input 0 the indices, 1 the depth (a one-element constant, as the
# output shape needs its value: ``attrs["num_classes"]``), 2 the values ``[off, on]``
defop("OneHot", _onehot_spec, _onehot_ref, out="onehot_out")


def onehot(t: Tensor, num_classes: Tensor | int, values: Tensor, axis: int = -1) -> Tensor:
    """ONNX OneHot: ``values[1]`` where the new ``axis`` (of size ``num_classes``) equals
    ``t``'s index (negative indices count from the end), ``values[0]`` elsewhere. The op
    takes PopART's three inputs (indices, depth, values); an int ``num_classes`` becomes
    the depth constant (PopXL takes a tensor).

    Raises:
        TypeError: ``t`` not of an integer dtype.
        ValueError: ``num_classes`` not a constant positive integer, ``values`` without two
            elements, an axis out of range.
    """
    check_tensor(t, "onehot")
    check_tensor(values, "onehot", "values")
    if t.dtype not in INDEX_TYPES:
        raise TypeError(f"onehot: {t.id!r} must be int32 or uint32, got {t.dtype}")
    depth: Tensor | None = None
    if isinstance(num_classes, Tensor):
        check_tensor(num_classes, "onehot", "num_classes")
        depth = num_classes
        data = getattr(num_classes, "_data", None)
        if data is None or data.size != 1:
            raise ValueError(
                f"onehot: num_classes {num_classes.id!r} must be a one-element constant "
                f"(the output shape depends on it)"
            )
        num_classes = data.reshape(()).item()
    n: Any = num_classes
    if int(n) != n or n < 1:
        raise ValueError(f"onehot: num_classes must be a positive integer, got {n!r}")
    if values.nelms != 2:
        raise ValueError(f"onehot: values {values.id!r} must hold [off, on], got {values.shape}")
    ax = norm_axis(axis, t.rank, "onehot", repr(t.id), extra=1)
    attrs = {"num_classes": int(n), "axis": ax}
    if depth is None:
        depth = constant(np.array(int(n), np.int32), dtypes.int32, "num_classes")
    (out,) = create_op("OneHot", [t, depth, values], attrs)
    return out


__all__ = [
    "dynamic_slice",
    "dynamic_update",
    "dynamic_update_",
    "gather",
    "groupedgather",
    "onehot",
    "tied_gather",
]
