"""PopXL's ``popxl.ops.utils``: the input checks op functions (PopXL's own and custom ops
written against it) run before adding an op, and small argument converters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tremula.popxl import dtypes
from tremula.popxl.tensor import Tensor

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph


def cast_if_needed(t: Tensor, data_type: dtypes.dtype) -> Tensor:
    """``t`` itself if it has ``data_type``, else ``ops.cast(t, data_type)``."""
    from tremula.popxl.ops.tensor_ops import cast

    dt = dtypes.dtype.as_dtype(data_type)
    return t if t.dtype is dt else cast(t, dt)


def check_in_graph(graph: Graph, *args: Any, **tensors: Any) -> None:
    """Check that each keyword argument is a tensor of ``graph``.

    Args:
        graph: The graph the op goes into.
        **tensors: The op's inputs by name (the names appear in the messages).

    Raises:
        Exception: tensors passed positionally (PopXL raises a bare ``Exception``).
        TypeError: ``The input `x` is not a Tensor. Type: ... Value: ...``.
        ValueError: ``The input tensor `x` is not in the current Graph ...``.
    """
    if args:
        raise Exception(
            f"check_in_graph: pass the tensors as keyword arguments (name=tensor), got "
            f"{len(args)} positional argument(s)"
        )
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"The input `{name}` is not a Tensor. Type: {type(t)}. Value: {t}.")
        if t not in graph:
            raise ValueError(
                f"The input tensor `{name}` is not in the current Graph {graph.name}: "
                f"{t.id!r} belongs to graph {t.graph.name!r}."
            )


def check_tensor_ipu_and_tile_set(**tensors: Tensor) -> None:
    """Check that the tensors are on one virtual IPU and one tile set. Tensors whose IPU or
    tile set is not defined yet (no op produces or consumes them) are not compared.

    Raises:
        ValueError: two tensors on different IPUs or tile sets.
    """
    ipus: dict[int, str] = {}
    tile_sets: dict[str, str] = {}
    for name, t in tensors.items():
        ipu, tile_set = t._get_ipu_and_tile_set(False, False)
        if ipu != -1:
            ipus.setdefault(ipu, name)
        if tile_set != "undefined":
            tile_sets.setdefault(tile_set, name)
    if len(ipus) > 1:
        (a, na), (b, nb) = list(ipus.items())[:2]
        raise ValueError(
            f"Tensors `{na}` and `{nb}` are located on different IPUs: {a} != {b}. Copy one "
            f"with ops.ipu_copy."
        )
    if len(tile_sets) > 1:
        (a_, na), (b_, nb) = list(tile_sets.items())[:2]
        raise ValueError(
            f"Tensors `{na}` and `{nb}` are located on different tile sets: {a_} != {b_}. "
            f"Copy one with ops.io_tile_copy."
        )


def handle_negative_axis(t: Tensor, axis: int) -> int:
    """``axis`` counted from the front of ``t``'s shape (``-1`` is ``t.rank - 1``)."""
    return int(axis) if axis >= 0 else t.rank + int(axis)


def convert_optional_float(v: float | None) -> float | None:
    """``v`` as a float, or None."""
    return None if v is None else float(v)


def convert_optional_int(v: int | None) -> int | None:
    """``v`` as an int, or None."""
    return None if v is None else int(v)


def convert_optional_dtype(dt: Any) -> dtypes.dtype | None:
    """``dt`` as a PopXL dtype (see ``dtype.as_dtype``), or None."""
    return None if dt is None else dtypes.dtype.as_dtype(dt)


def convert_optional_int64_list(v: Iterable[int] | None) -> list[int] | None:
    """``v`` as a list of ints, or None."""
    return None if v is None else [int(x) for x in v]


__all__ = [
    "cast_if_needed",
    "check_in_graph",
    "check_tensor_ipu_and_tile_set",
    "convert_optional_dtype",
    "convert_optional_float",
    "convert_optional_int",
    "convert_optional_int64_list",
    "handle_negative_axis",
]
