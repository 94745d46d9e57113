"""popnn's shared pieces: its error class and the argument checks every function runs
before it adds anything to the graph."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError

FLOAT_TYPES = (poplar.FLOAT, poplar.HALF)
LABEL_TYPES = (poplar.UNSIGNED_INT, poplar.INT)


class PopnnError(GraphError):
    """A popnn function got arguments it cannot honour (shapes, types, parameters)."""


def check_tensor(graph: poplar.Graph, t: Any, what: str, where: str) -> poplar.Tensor:
    """``t`` as a mapped tensor of ``graph``; a PopnnError naming ``what`` otherwise."""
    if not isinstance(t, poplar.Tensor):
        raise PopnnError(f"{where}: {what} must be a Tensor, got {type(t).__name__}")
    if t.graph is not graph.state:
        raise PopnnError(f"{where}: {what} {t!r} belongs to another graph")
    tiles = graph.tiles_of(t).reshape(-1)
    if tiles.size and tiles.min() < 0:
        first = int(np.flatnonzero(tiles < 0)[0])
        raise PopnnError(
            f"{where}: {what} {t!r} is not completely mapped to tiles (flat element {first} "
            f"is not); map it first, e.g. with poplar.map_tensor_linearly"
        )
    return t


def check_float(
    graph: poplar.Graph, t: Any, what: str, where: str, min_rank: int = 1
) -> poplar.Tensor:
    """A mapped ``float`` or ``half`` tensor of rank ``min_rank`` or more."""
    t = check_tensor(graph, t, what, where)
    if t.dtype not in FLOAT_TYPES:
        raise PopnnError(f"{where}: {what} must be float or half, got {t.dtype} {t.shape}")
    if t.rank < min_rank:
        raise PopnnError(f"{where}: {what} must have rank >= {min_rank}, got shape {t.shape}")
    return t


def check_like(
    t: poplar.Tensor, like: poplar.Tensor, what: str, like_what: str, where: str
) -> None:
    """``t`` has ``like``'s shape and type."""
    if t.shape != like.shape or t.dtype is not like.dtype:
        raise PopnnError(
            f"{where}: {what} is {t.dtype} {t.shape}, expected {like.dtype} {like.shape} "
            f"(the shape and type of {like_what})"
        )


def check_shape(
    t: poplar.Tensor, shape: Sequence[int], dtype: poplar.Type, what: str, where: str
) -> None:
    """``t`` has exactly ``shape`` and ``dtype``."""
    if t.shape != tuple(shape) or t.dtype is not dtype:
        raise PopnnError(f"{where}: {what} is {t.dtype} {t.shape}, expected {dtype} {tuple(shape)}")


def check_positive_int(value: Any, what: str, where: str) -> int:
    """``value`` as a positive integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise PopnnError(f"{where}: {what} must be a positive integer, got {value!r}")
    return int(value)


def check_number(value: Any, what: str, where: str, positive: bool = False) -> float:
    """``value`` as a finite float (``> 0`` when ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise PopnnError(f"{where}: {what} must be a number, got {type(value).__name__}")
    if not np.isfinite(value) or (positive and value <= 0):
        cond = "finite and > 0" if positive else "finite"
        raise PopnnError(f"{where}: {what} must be {cond}, got {value}")
    return float(value)


def scalar_operand(
    graph: poplar.Graph,
    value: Any,
    dtype: poplar.Type,
    what: str,
    where: str,
) -> poplar.Tensor | float:
    """A scale given as a number (returned as a float) or as a one-element tensor of
    ``dtype`` (returned flattened to shape ``[1]``)."""
    if isinstance(value, poplar.Tensor):
        t = check_tensor(graph, value, what, where)
        if t.num_elements != 1 or t.dtype is not dtype:
            raise PopnnError(
                f"{where}: {what} must be a one-element {dtype} tensor, got {t.dtype} {t.shape}"
            )
        return t.reshape([1])
    return check_number(value, what, where)


def constant_scalar(graph: poplar.Graph, value: float, dtype: poplar.Type, tile: int, name: str):
    """A one-element constant holding ``value``, on ``tile``."""
    c = graph.add_constant(dtype, (1,), value, name)
    graph.set_tile_mapping(c, tile)
    return c
