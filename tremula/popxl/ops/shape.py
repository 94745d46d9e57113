"""Shape ops: ``concat`` / ``concat_``, ``split``, ``squeeze``, ``slice`` / ``slice_``,
``subsample``; and the axis helpers the other op families share.

``slice`` creates ``Slice`` ops (a basic-indexing key, the op ``Tensor.__getitem__``
creates); ``subsample`` and ``split`` create PopART's own ``Subsample`` and ``Split`` ops (as
PopXL's IR shows them), a strided key and one key per part; ``squeeze`` a ``Reshape``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError
from tremula.popxl.ops.base import check_in_current_graph, create_op, definplace, defop
from tremula.popxl.ops.utils import check_tensor_ipu_and_tile_set
from tremula.popxl.tensor import Tensor, TensorSpec

# ---- axis helpers (shared by the op families) ----


def check_tensor(t: Any, what: str, arg: str = "t") -> Tensor:
    """``t`` if it is a Tensor, else ``TypeError`` naming the argument, in PopXL's words
    (``check_in_graph``'s) and then the op's."""
    if not isinstance(t, Tensor):
        raise TypeError(
            f"The input `{arg}` is not a Tensor. Type: {type(t)}. Value: {t!r}. ({what}: {arg} "
            f"must be a popxl.Tensor, got {type(t).__name__})"
        )
    check_in_current_graph(what, **{arg: t})
    return t


def norm_axis(axis: Any, rank: int, what: str, name: str, extra: int = 0) -> int:
    """``axis`` in ``[-rank - extra, rank + extra)`` as a non-negative axis. ``extra=1``
    allows a new trailing axis (``onehot``).

    Raises:
        OpSetupError: (``popart.popart_exception`` and ``ValueError``: PopART's op setups
            refuse an axis out of range) naming the tensor.
    """
    n = rank + extra
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -n <= axis < n:
        raise OpSetupError(f"{what}: axis {axis!r} is out of range for {name} of rank {rank}")
    return int(axis) % n if n else 0


def norm_axes(axis: Any, rank: int, what: str, name: str) -> tuple[int, ...]:
    """``None`` (every axis), an int or a list of ints as sorted non-negative axes."""
    if axis is None:
        return tuple(range(rank))
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = [norm_axis(a, rank, what, name) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"Axes contains duplicates: {axes} ({what} of {name})")
    return tuple(sorted(out))


def is_float(t: Tensor | TensorSpec) -> bool:
    """float16 / float32 (/ float64 on the host): not float8, not integers."""
    return t.dtype.as_numpy().kind == "f"


def require_float(t: Tensor, what: str) -> None:
    """``TypeError`` naming ``t`` unless it is float16 or float32."""
    if not is_float(t):
        raise TypeError(f"{what}: {t.id!r} must be float16 or float32, got {t.dtype}")


def require_numeric(t: Tensor, what: str) -> None:
    """``TypeError`` naming ``t`` unless it is a float or integer tensor."""
    if t.dtype.as_numpy().kind not in "fiu":
        raise TypeError(f"{what}: {t.id!r} must be a float or integer tensor, got {t.dtype}")


# ---- concat ----


def _concat_spec(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    axis = attrs["axis"]
    first = specs[0]
    size = 0
    for i, s in enumerate(specs):
        if s.dtype != first.dtype:
            raise TypeError(
                f"All inputs to a concat operation must have the same type: input {i} is "
                f"{s.dtype}, input 0 is {first.dtype}"
            )
        if len(s.shape) != len(first.shape) or any(
            a != b for d, (a, b) in enumerate(zip(s.shape, first.shape)) if d != axis
        ):
            raise OpSetupError(
                f"concat: input {i} of shape {s.shape} does not match input 0 of shape "
                f"{first.shape} outside axis {axis}"
            )
        size += s.shape[axis]
    shape = list(first.shape)
    shape[axis] = size
    return [TensorSpec(tuple(shape), first.dtype)]


def _concat_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    return [np.concatenate(x, axis=a["axis"])]


defop("Concat", _concat_spec, _concat_ref)
definplace("ConcatInplace", "Concat", view=True)


def _concat(ts: Iterable[Tensor], axis: int, op_type: str) -> Tensor:
    what = "concat_" if op_type == "ConcatInplace" else "concat"
    ts = list(ts)
    if not ts:
        raise ValueError(f"{what}: needs at least one tensor")
    for i, t in enumerate(ts):
        check_tensor(t, what, f"ts_{i}")
    check_tensor_ipu_and_tile_set(**{f"ts_{i}": t for i, t in enumerate(ts)})
    if ts[0].rank == 0:
        raise ValueError(f"{what}: cannot concatenate scalars ({ts[0].id!r})")
    ax = norm_axis(axis, ts[0].rank, what, repr(ts[0].id))
    (out,) = create_op(op_type, ts, {"axis": ax})
    return out


def concat(ts: Iterable[Tensor], axis: int = 0) -> Tensor:
    """Concatenate tensors of one dtype along ``axis`` into a new tensor.

    Raises:
        ValueError: shapes differ outside ``axis``, or ``axis`` is out of range.
        TypeError: dtypes differ.
    """
    return _concat(ts, axis, "Concat")


def concat_(ts: Iterable[Tensor], axis: int = 0) -> Tensor:
    """As :func:`concat`, but the result is a view of the inputs (writes reach them)."""
    return _concat(ts, axis, "ConcatInplace")


# ---- slicing (Slice ops with a basic-indexing key) ----
def _split_specs(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    base = np.empty(specs[0].shape, dtype=np.bool_)
    return [TensorSpec(base[key].shape, specs[0].dtype) for key in attrs["keys"]]


def _subsample_spec(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    return _split_specs(specs, {"keys": (attrs["key"],)})


defop("Subsample", _subsample_spec, lambda x, a: [np.array(x[0][a["key"]])])
defop("Split", _split_specs, lambda x, a: [np.array(x[0][key]) for key in a["keys"]])


def _slice_op(t: Tensor, key: tuple[Any, ...], inplace: bool) -> Tensor:
    (out,) = create_op("SliceInplace" if inplace else "Slice", [t], {"key": key})
    return out


def _as_list(v: Any, n: int | None = None) -> list[Any]:
    if v is None:
        return [None] * (n or 0)
    return [v] if isinstance(v, (int, np.integer)) else list(v)


def _slice_key(t: Tensor, start: Any, stop: Any, step: Any, axis: Any, what: str) -> tuple:
    lists = [v for v in (start, stop, step) if v is not None]
    n = max((len(_as_list(v)) for v in lists), default=0)
    starts, stops, steps = (_as_list(v, n) for v in (start, stop, step))
    axes = list(range(n)) if axis is None else _as_list(axis)
    if n == 0:
        n = len(axes)
        starts, stops, steps = [None] * n, [None] * n, [None] * n
    if not len(starts) == len(stops) == len(steps) == len(axes) == n:
        raise ValueError(
            f"{what}: All inputs must have same length: start {start!r}, stop {stop!r}, "
            f"step {step!r} and axis {axis!r} of {t.id!r} need one entry per sliced axis"
        )
    key: list[Any] = [builtins.slice(None)] * t.rank
    for a, s0, s1, st in zip(axes, starts, stops, steps):
        ax = norm_axis(a, t.rank, what, repr(t.id))
        if st not in (None, 1, -1):
            raise ValueError(
                f"{what}: step {st!r} for axis {ax} of {t.id!r} must be 1 or -1 "
                f"(use ops.subsample for larger strides)"
            )
        key[ax] = builtins.slice(s0, s1, st)
    return tuple(key)


def slice(
    t: Tensor,
    start: int | Sequence[int] | None = None,
    stop: int | Sequence[int] | None = None,
    step: int | Sequence[int] | None = None,
    axis: int | Sequence[int] | None = None,
) -> Tensor:
    """Select ``t[start:stop:step]`` along each of ``axis`` (default: axes ``0 .. n-1`` for
    ``n`` slices) into a new tensor; Python slice semantics, step 1 or -1. With no start,
    stop or step, ``t`` itself.

    Raises:
        ValueError: lists of different lengths, an axis out of range, another step.
    """
    check_tensor(t, "slice")
    if start is None and stop is None and step is None:
        return t  # nothing to slice: PopXL returns the tensor itself
    return _slice_op(t, _slice_key(t, start, stop, step, axis, "slice"), False)


def slice_(
    t: Tensor,
    start: int | Sequence[int] | None = None,
    stop: int | Sequence[int] | None = None,
    step: int | Sequence[int] | None = None,
    axis: int | Sequence[int] | None = None,
) -> Tensor:
    """As :func:`slice`, but the result is a view of ``t`` (writes reach ``t``)."""
    check_tensor(t, "slice_")
    return _slice_op(t, _slice_key(t, start, stop, step, axis, "slice_"), True)


def subsample(t: Tensor, strides: int | Sequence[int]) -> Tensor:
    """Every ``strides[d]``-th element along each axis ``d``, starting at 0 (output size
    ``ceil(size / stride)``).

    As in PopXL, an int is a stride for axis 0, and a list shorter than the rank is padded
    with 1s (in place: the caller's list grows); a tuple must then have one stride per
    axis.

    Raises:
        TypeError: a tuple shorter than the rank (PopXL's ``tuple += list``).
        ValueError: more strides than axes.
        popart.popart_exception: a stride below 1 or not an integer.
    """
    check_tensor(t, "subsample")
    given: Any = [int(strides)] if isinstance(strides, (int, np.integer)) else strides
    if len(given) > t.rank:
        raise ValueError(
            f"The length of subsample `strides` must not be greater than the rank of the "
            f"input Tensor {t.id!r}: {len(given)} > {t.rank}"
        )
    if len(given) < t.rank:
        given += [1] * (t.rank - len(given))  # PopXL's: a list grows in place
    if any(isinstance(s, bool) or int(s) != s or s < 1 for s in given):
        raise OpSetupError(
            f"subsample: strides {list(given)} of {t.id!r} {t.shape} must be integers >= 1"
        )
    key = tuple(builtins.slice(None, None, int(s)) for s in given)
    (out,) = create_op("Subsample", [t], {"key": key})
    return out


def split(t: Tensor, splits: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split ``t`` along ``axis`` into ``splits`` equal parts (an int) or parts of the
    given sizes (a list summing to the axis' size).

    Raises:
        ValueError: an int that does not divide the axis, sizes that do not add up.
    """
    check_tensor(t, "split")
    ax = norm_axis(axis, t.rank, "split", repr(t.id))
    dim = t.shape[ax]
    if isinstance(splits, (int, np.integer)):
        if splits < 1 or dim % splits:
            raise ValueError(
                f"split: {splits} does not equally divide axis {ax} of {t.id!r} (size {dim})"
            )
        sizes = [dim // int(splits)] * int(splits)
    else:
        sizes = [int(s) for s in splits]
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise OpSetupError(
                f"splits {sizes} invalid for dimension of size {dim} (axis {ax} of {t.id!r}: "
                f"the sizes must be non-negative and add up to it)"
            )
    keys, begin = [], 0
    for s in sizes:
        key = [builtins.slice(None)] * t.rank
        key[ax] = builtins.slice(begin, begin + s)
        keys.append(tuple(key))
        begin += s
    return list(create_op("Split", [t], {"keys": tuple(keys)}))


def squeeze(t: Tensor, axes: int | Sequence[int] | None = None) -> Tensor:
    """``t`` without the given axes of size 1 (default: every axis of size 1).

    Raises:
        ValueError: an axis out of range or of a size other than 1.
    """
    check_tensor(t, "squeeze")
    if axes is None:
        drop = {d for d, s in enumerate(t.shape) if s == 1}
    else:
        drop = set(norm_axes(axes, t.rank, "squeeze", repr(t.id)))
        bad = [d for d in sorted(drop) if t.shape[d] != 1]
        if bad:
            raise ValueError(
                f"Can't squeeze axis {bad[0]} of {t.id!r} (shape {t.shape}): squeeze axes "
                f"{bad} do not have size 1"
            )
    shape = tuple(s for d, s in enumerate(t.shape) if d not in drop)
    (out,) = create_op("Reshape", [t], {"shape": shape})
    return out


__all__ = ["concat", "concat_", "slice", "slice_", "split", "squeeze", "subsample"]
