"""popops sorting: ``sort`` along a dimension, ``sort_key_value`` (values permuted by the
order of their keys) and ``top_k`` over the innermost dimension.

Each *column* along the sorted dimension is sorted by one vertex, on the tile of the
column's first element, which reads the whole column (other tiles' elements are exchanged
in); the results are mapped like the input. Sorting is stable (ties keep their order; in
``top_k`` the lower index comes first among equal values) and NaN sorts after every number.
Codelets: ``popops::Sort<T>``, ``popops::SortKeyValue<TK,TV>``, ``popops::TopK<T>``
(supervisor vertices; the batched compute is one NumPy sort of a ``[columns, length]``
view); their estimators charge ``length x ceil(log2 length)`` compare-and-swaps per column
(``length x ceil(log2(k + 1))`` for ``top_k``'s heap) shared by the workers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popops.codelets.sort import CODELETS
from tremula.libs.popops.reduce import check_mapped, check_tensor, type_arg
from tremula.libs.util import ensure_codelets

__all__ = ["sort", "sort_key_value", "top_k"]


def _check_top_k(graph: poplar.Graph, t: Any, k: Any, where: str) -> poplar.Tensor:
    t = check_tensor(graph, t, "t", where)
    if t.rank < 1 or t.dtype is poplar.BOOL:
        raise GraphError(f"{where}: t must be a non-bool tensor of rank >= 1, got {t!r}")
    n = t.shape[-1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise GraphError(f"{where}: k={k!r} must be an integer in 1..{n} (t's last dimension)")
    check_mapped(graph, t, "t", where)
    return t


def _column_positions(graph: poplar.Graph, t: poplar.Tensor, dim: int) -> tuple[np.ndarray, ...]:
    """Flat positions of ``t``'s columns along ``dim`` (``[columns, length]``, columns
    grouped by the tile of their first element) and the tile of each column."""
    A = int(np.prod(t.shape[:dim], dtype=np.int64))
    D = t.shape[dim]
    B = int(np.prod(t.shape[dim + 1 :], dtype=np.int64))
    col = np.arange(A * B, dtype=np.int64)
    first = (col // B) * D * B + col % B
    tiles = graph.tiles_of(t).reshape(-1)[first]
    order = np.argsort(tiles, kind="stable")
    positions = first[order][:, None] + np.arange(D, dtype=np.int64)[None, :] * B
    return positions, tiles[order]


def _per_tile(tiles: np.ndarray, D: int) -> tuple[np.ndarray, np.ndarray]:
    vt, counts = np.unique(tiles, return_counts=True)
    return vt, counts * D


def _check_dim(t: poplar.Tensor, dim: int, where: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not 0 <= dim < t.rank:
        raise GraphError(
            f"{where}: dim {dim!r} is out of range for a tensor of rank {t.rank} (shape {t.shape})"
        )
    return int(dim)


def sort(
    graph: poplar.Graph, t: poplar.Tensor, dim: int, prog: poplar.Sequence, name: str = ""
) -> poplar.Tensor:
    """Sort ``t`` along ``dim`` in ascending order (PopLibs' ``popops::sort``).

    Returns:
        A new tensor mapped like ``t``.

    Raises:
        GraphError: ``dim`` out of range, ``t`` not mapped or of type bool.
    """
    where = f"sort{f' {name!r}' if name else ''}"
    t = check_tensor(graph, t, "t", where)
    dim = _check_dim(t, dim, where)
    if t.dtype is poplar.BOOL:
        raise GraphError(f"{where}: cannot sort a bool tensor")
    check_mapped(graph, t, "t", where)
    out = graph.clone(t, f"{name or 'sort'}/out")
    if t.num_elements == 0:
        return out
    ensure_codelets(graph, CODELETS)
    pos, tiles = _column_positions(graph, t, dim)
    vt, sizes = _per_tile(tiles, t.shape[dim])
    cs = graph.add_compute_set(f"{name or 'sort'}/Sort")
    fields = {
        "data": poplar.Segments(t.flatten()[pos.reshape(-1)], sizes),
        "out": poplar.Segments(out.flatten()[pos.reshape(-1)], sizes),
        "length": t.shape[dim],
    }
    graph.add_vertices(cs, f"popops::Sort<{type_arg(t.dtype)}>", fields, vt)
    prog.add(poplar.Execute(cs))
    return out


def sort_key_value(
    graph: poplar.Graph,
    keys: poplar.Tensor,
    values: poplar.Tensor,
    dim: int,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """Sort ``values`` by ``keys`` along ``dim`` (PopLibs' ``popops::sortKeyValue``): the
    result is the permutation of ``values`` that puts ``keys`` in ascending order (stable).

    Returns:
        A new tensor like ``values`` (mapped like it).

    Raises:
        GraphError: shapes that differ, ``dim`` out of range, bool keys, unmapped operands.
    """
    where = f"sort_key_value{f' {name!r}' if name else ''}"
    keys = check_tensor(graph, keys, "keys", where)
    values = check_tensor(graph, values, "values", where)
    if keys.shape != values.shape:
        raise GraphError(f"{where}: keys {keys.shape} and values {values.shape} differ in shape")
    dim = _check_dim(keys, dim, where)
    if keys.dtype is poplar.BOOL:
        raise GraphError(f"{where}: keys cannot be bool")
    check_mapped(graph, keys, "keys", where)
    check_mapped(graph, values, "values", where)
    out = graph.clone(values, f"{name or 'sortKeyValue'}/out")
    if keys.num_elements == 0:
        return out
    ensure_codelets(graph, CODELETS)
    pos, tiles = _column_positions(graph, keys, dim)
    vt, sizes = _per_tile(tiles, keys.shape[dim])
    flat = pos.reshape(-1)
    cs = graph.add_compute_set(f"{name or 'sortKeyValue'}/SortKeyValue")
    fields = {
        "keys": poplar.Segments(keys.flatten()[flat], sizes),
        "values": poplar.Segments(values.flatten()[flat], sizes),
        "out": poplar.Segments(out.flatten()[flat], sizes),
        "length": keys.shape[dim],
    }
    vtype = f"popops::SortKeyValue<{type_arg(keys.dtype)},{type_arg(values.dtype)}>"
    graph.add_vertices(cs, vtype, fields, vt)
    prog.add(poplar.Execute(cs))
    return out


def top_k(
    graph: poplar.Graph,
    t: poplar.Tensor,
    k: int,
    prog: poplar.Sequence,
    largest: bool = True,
    sorted: bool = True,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """The ``k`` largest (or smallest) elements of each innermost row of ``t`` and their
    positions (PopLibs' ``popops::topKWithPermutation``).

    Args:
        graph: the graph.
        t: ``[..., n]``, mapped.
        k: ``1 <= k <= n``.
        prog: the sequence the search is appended to.
        largest: the largest (else the smallest) elements.
        sorted: accepted for PopLibs compatibility; the results are always in order
            (largest first, or smallest first), the lower index first among ties.
        name: debug prefix.

    Returns:
        ``(values, indices)``, both ``[..., k]`` (indices ``unsigned int``), mapped like
        ``t[..., :k]``.

    Raises:
        GraphError: ``k`` out of range, a scalar or bool ``t``, ``t`` not mapped.
    """
    where = f"top_k{f' {name!r}' if name else ''}"
    t = _check_top_k(graph, t, k, where)
    n = t.shape[-1]
    name = name or "topK"
    shape = (*t.shape[:-1], int(k))
    values = graph.add_variable(t.dtype, shape, f"{name}/values")
    indices = graph.add_variable(poplar.UNSIGNED_INT, shape, f"{name}/indices")
    if values.num_elements == 0:
        return values, indices
    m = t.num_elements // n if n else 0
    rows = t.reshape((m, n))
    row_tiles = graph.tiles_of(rows[:, 0])
    like = graph.tiles_of(rows[:, :k])
    graph.set_tile_mapping(values, like.reshape(shape))
    graph.set_tile_mapping(indices, like.reshape(shape))
    ensure_codelets(graph, CODELETS)
    order = np.argsort(row_tiles, kind="stable")
    vt, counts = np.unique(row_tiles, return_counts=True)
    cs = graph.add_compute_set(f"{name}/TopK")
    fields = {
        "data": poplar.Segments(rows[order].flatten(), counts * n),
        "values": poplar.Segments(values.reshape((m, int(k)))[order].flatten(), counts * k),
        "indices": poplar.Segments(indices.reshape((m, int(k)))[order].flatten(), counts * k),
        "length": n,
        "k": int(k),
        "largest": bool(largest),
    }
    graph.add_vertices(cs, f"popops::TopK<{type_arg(t.dtype)}>", fields, vt)
    prog.add(poplar.Execute(cs))
    return values, indices
