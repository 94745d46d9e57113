"""popops dynamic slices and updates at a runtime offset (re-exported by
:mod:`tremula.libs.popops.slicing`).

``dynamic_slice`` / ``dynamic_update`` take an offset tensor (``unsigned int`` or ``int``, one
element per sliced dimension). As in PopLibs, an offset is taken modulo the dimension and the
slice wraps around it: element ``s`` of the slice is element ``(offset + s) mod size`` (a
negative ``int`` offset too). Several dimensions are sliced one after another. Vertices sit on
the tile of each output column (``DynamicSlice``) or base column (``DynamicUpdate``), reading
the whole column; the output is mapped like the first ``size`` elements of the input along the
dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs import util
from tremula.libs.popops.codelets.slicing import CODELETS
from tremula.libs.popops.reduce import check_mapped, check_tensor, type_arg
from tremula.libs.util import ensure_codelets

__all__ = ["dynamic_slice", "dynamic_update"]

_OFFSET_TYPES = (poplar.UNSIGNED_INT, poplar.INT)


def _check_offset(graph: poplar.Graph, offset: Any, count: int, where: str) -> poplar.Tensor:
    offset = check_tensor(graph, offset, "offset", where)
    if offset.dtype not in _OFFSET_TYPES:
        raise GraphError(f"{where}: offset must be of type unsigned int or int, got {offset.dtype}")
    if offset.num_elements != count:
        raise GraphError(
            f"{where}: offset has {offset.num_elements} element(s) (shape {offset.shape}), "
            f"expected one per sliced dimension ({count})"
        )
    check_mapped(graph, offset, "offset", where)
    return offset.flatten()


def _check_dims_sizes(
    t: poplar.Tensor, dims: Sequence[int], sizes: Sequence[int], where: str
) -> tuple[list[int], list[int]]:
    dims, sizes = [int(d) for d in dims], [int(s) for s in sizes]
    if len(dims) != len(sizes):
        raise GraphError(f"{where}: dims {dims} and sizes {sizes} differ in length")
    if len(set(dims)) != len(dims):
        raise GraphError(f"{where}: dims {dims} repeat a dimension")
    for d, s in zip(dims, sizes):
        if not 0 <= d < t.rank:
            raise GraphError(
                f"{where}: dimension {d} in dims {dims} is out of range for a tensor of "
                f"rank {t.rank}"
            )
        if not 0 < s <= t.shape[d]:
            raise GraphError(
                f"{where}: size {s} for dimension {d} must be in 1..{t.shape[d]} (the "
                f"dimension's size)"
            )
    return dims, sizes


def dynamic_slice(
    graph: poplar.Graph,
    t: poplar.Tensor,
    offset: poplar.Tensor,
    dims: Sequence[int],
    sizes: Sequence[int],
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """Slice ``t`` at a runtime ``offset`` (PopLibs' ``popops::dynamicSlice``).

    Args:
        graph: the graph.
        t: the tensor to slice, mapped.
        offset: ``unsigned int`` or ``int`` tensor with one element per entry of ``dims``;
            each offset is taken modulo its dimension and the slice wraps around it.
        dims: the dimensions to slice.
        sizes: the size of the slice in each of ``dims`` (1 .. the dimension's size).
        prog: the sequence the slicing is appended to.
        name: debug prefix.

    Returns:
        A new tensor: ``t``'s shape with ``dims`` resized to ``sizes``.

    Raises:
        GraphError: bad dims, sizes or offset (type, element count), unmapped operands.
    """
    where = f"dynamic_slice{f' {name!r}' if name else ''}"
    t = check_tensor(graph, t, "t", where)
    dims, sizes = _check_dims_sizes(t, dims, sizes, where)
    offset = _check_offset(graph, offset, len(dims), where)
    check_mapped(graph, t, "t", where)
    ensure_codelets(graph, CODELETS)
    out = t
    for i, (d, s) in enumerate(zip(dims, sizes)):
        out = _slice_dim(graph, out, offset[i], d, s, prog, f"{name or 'dynamicSlice'}/d{d}")
    return out


def dynamic_update(
    graph: poplar.Graph,
    t: poplar.Tensor,
    s: poplar.Tensor,
    offset: poplar.Tensor,
    dims: Sequence[int],
    sizes: Sequence[int],
    prog: poplar.Sequence,
    name: str = "",
) -> None:
    """Write ``s`` into ``t`` at a runtime ``offset`` (PopLibs' ``popops::dynamicUpdate``);
    offsets wrap around as in :func:`dynamic_slice`. ``s`` and ``offset`` are read as they
    were before the write: when they share elements with ``t`` they are copied first.

    Raises:
        GraphError: bad dims, sizes or offset; ``s`` not shaped like the slice or of
            another type; unmapped operands.
        TensorError: ``t`` has aliased elements.
    """
    where = f"dynamic_update{f' {name!r}' if name else ''}"
    t = check_tensor(graph, t, "t", where)
    s = check_tensor(graph, s, "s", where)
    dims, sizes = _check_dims_sizes(t, dims, sizes, where)
    offset = _check_offset(graph, offset, len(dims), where)
    want = list(t.shape)
    for d, size in zip(dims, sizes):
        want[d] = size
    if s.shape != tuple(want) or s.dtype is not t.dtype:
        raise GraphError(
            f"{where}: s is {s.dtype} {s.shape}, expected {t.dtype} {tuple(want)} (t "
            f"{t.shape} sliced to sizes {sizes} in dims {dims})"
        )
    check_mapped(graph, t, "t", where)
    check_mapped(graph, s, "s", where)
    util.refuse_aliased(t, where, role="t")
    ensure_codelets(graph, CODELETS)
    name = name or "dynamicUpdate"
    s = util.unaliased(graph, s, t, prog, f"{name}/update")
    offset = util.unaliased(graph, offset, t, prog, f"{name}/offset")
    _update(graph, t, s, offset, dims, sizes, prog, name)


def _update(
    graph: poplar.Graph,
    t: poplar.Tensor,
    s: poplar.Tensor,
    offset: poplar.Tensor,
    dims: list[int],
    sizes: list[int],
    prog: poplar.Sequence,
    name: str,
) -> None:
    if len(dims) > 1:  # slice the outer dimension, update the slice, write it back
        inner = _slice_dim(graph, t, offset[0], dims[0], sizes[0], prog, f"{name}/d{dims[0]}")
        _update(graph, inner, s, offset[1:], dims[1:], sizes[1:], prog, name)
        s = inner
    _update_dim(graph, t, s, offset[0], dims[0], sizes[0], prog, f"{name}/d{dims[0]}")


def _columns(graph: poplar.Graph, col_tiles: np.ndarray) -> tuple[np.ndarray, ...]:
    """Regions (a, b0, length, tile) of runs of columns ``[a, b]`` on one tile, sorted by
    tile."""
    B = col_tiles.shape[1]
    flat = col_tiles.reshape(-1)
    cut = np.ones(flat.size, dtype=bool)
    cut[1:] = (flat[1:] != flat[:-1]) | (np.arange(1, flat.size) % B == 0)
    starts = np.flatnonzero(cut)
    lengths = np.diff(np.r_[starts, flat.size])
    order = np.argsort(flat[starts], kind="stable")
    starts, lengths = starts[order], lengths[order]
    return starts // B, starts % B, lengths, flat[starts]


def _region_positions(
    a: np.ndarray, b0: np.ndarray, lengths: np.ndarray, rows: int, D: int, B: int
) -> np.ndarray:
    """Flat positions in a ``[A, D, B]`` view of rows ``0..rows-1`` of every region, in
    (region, row, element) order."""
    per_row = np.repeat(lengths, rows)
    reg = np.repeat(np.arange(a.size), rows)
    row = np.arange(reg.size) - np.repeat(np.arange(a.size) * rows, rows)
    first = (a[reg] * D + row) * B + b0[reg]
    within = np.arange(int(per_row.sum())) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    return np.repeat(first, per_row) + within


def _dynamic_vertices(
    graph: poplar.Graph,
    base: poplar.Tensor,
    sub: poplar.Tensor,
    col_tiles: np.ndarray,
    offset: poplar.Tensor,
    kind: str,
    prog: poplar.Sequence,
    name: str,
) -> None:
    _, D, B = base.shape
    S = sub.shape[1]
    a, b0, lengths, tiles = _columns(graph, col_tiles)
    vtiles, per_tile = np.unique(tiles, return_counts=True)
    signed = "Int" if offset.dtype is poplar.INT else ""
    cs = graph.add_compute_set(name)
    fields = {
        "offset": [offset] * vtiles.size,
        "base": poplar.Segments(
            base.flatten()[_region_positions(a, b0, lengths, D, D, B)],
            np.repeat(lengths, D),
            per_tile * D,
        ),
        "sub": poplar.Segments(
            sub.flatten()[_region_positions(a, b0, lengths, S, S, B)],
            np.repeat(lengths, S),
            per_tile * S,
        ),
        "numBase": D,
        "numSub": S,
    }
    graph.add_vertices(cs, f"popops::{kind}{signed}<{type_arg(base.dtype)}>", fields, vtiles)
    prog.add(poplar.Execute(cs))


def _as3(t: poplar.Tensor, dim: int) -> poplar.Tensor:
    A = int(np.prod(t.shape[:dim], dtype=np.int64))
    B = int(np.prod(t.shape[dim + 1 :], dtype=np.int64))
    return t.reshape((A, t.shape[dim], B))


def _slice_dim(
    graph: poplar.Graph,
    t: poplar.Tensor,
    offset: poplar.Tensor,
    dim: int,
    size: int,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    shape = list(t.shape)
    shape[dim] = size
    out = graph.add_variable(t.dtype, tuple(shape), f"{name}/out")
    base3 = _as3(t, dim)
    out3 = _as3(out, dim)
    if out.num_elements == 0:
        return out
    graph.set_tile_mapping(out3, graph.tiles_of(base3[:, :size, :]))
    _dynamic_vertices(
        graph, base3, out3, graph.tiles_of(out3[:, 0, :]), offset, "DynamicSlice", prog, name
    )
    return out


def _update_dim(
    graph: poplar.Graph,
    t: poplar.Tensor,
    s: poplar.Tensor,
    offset: poplar.Tensor,
    dim: int,
    size: int,
    prog: poplar.Sequence,
    name: str,
) -> None:
    if t.num_elements == 0:
        return
    base3 = _as3(t, dim)
    _dynamic_vertices(
        graph,
        base3,
        _as3(s, dim),
        graph.tiles_of(base3[:, 0, :]),
        offset,
        "DynamicUpdate",
        prog,
        name,
    )
