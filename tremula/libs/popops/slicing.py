"""popops slicing: dynamic slices and updates at a runtime offset, and gather / scatter /
scatter-add of table rows by index (the kernels embeddings need).

* ``dynamic_slice`` / ``dynamic_update`` take an offset tensor (``unsigned int`` or ``int``,
  one element per sliced dimension). As in PopLibs, an offset is taken modulo the
  dimension and the slice wraps around it: element ``s`` of the slice is element
  ``(offset + s) mod size`` (a negative ``int`` offset too). Several dimensions are sliced
  one after another. Vertices sit on the tile of each output column (``DynamicSlice``) or
  base column (``DynamicUpdate``), reading the whole column; the output is mapped like the
  first ``size`` elements of the input along the dimension.
* ``multi_slice`` / ``multi_update`` / ``multi_update_add`` split the table over tiles by
  rows (:mod:`slicing_plan`); each partition's vertex handles the indices that fall in its
  rows. An index outside ``[0, num_rows)`` gives a row of zeros in ``multi_slice`` and is
  ignored by the updates (PopLibs' behaviour); of duplicate indices the last one wins in
  ``multi_update`` and all add up in ``multi_update_add``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs import util
from tremula.libs.popops.codelets.slicing import CODELETS, UPDATE_OPS
from tremula.libs.popops.reduce import check_mapped, check_tensor, reduce_with_output, type_arg
from tremula.libs.popops.slicing_dynamic import dynamic_slice, dynamic_update
from tremula.libs.popops.slicing_plan import MultiPlan, plan_multi
from tremula.libs.util import ensure_codelets

__all__ = [
    "create_sliceable_tensor",
    "dynamic_slice",
    "dynamic_update",
    "multi_slice",
    "multi_update",
    "multi_update_add",
]

# ---- multi slice / update ----


def create_sliceable_tensor(
    graph: poplar.Graph, dtype: poplar.Type | str, shape: Sequence[int], name: str = ""
) -> poplar.Tensor:
    """A table ``[num_rows, ...]`` mapped for :func:`multi_slice` and the updates: whole
    rows per tile, spread linearly over the tiles (PopLibs' ``createSliceableTensor``)."""
    t = graph.add_variable(dtype, tuple(shape), name or "sliceable")
    row = int(np.prod(t.shape[1:], dtype=np.int64)) if t.rank > 1 else 1
    poplar.map_tensor_linearly(graph, t, grain_size=max(1, row))
    return t


def _check_table_indices(
    graph: poplar.Graph, table: Any, indices: Any, where: str
) -> tuple[poplar.Tensor, poplar.Tensor]:
    table = check_tensor(graph, table, "table", where)
    indices = check_tensor(graph, indices, "indices", where)
    if table.rank < 1:
        raise GraphError(f"{where}: table must have rank >= 1 (rows first), got a scalar")
    if not indices.dtype.is_integral or indices.dtype is poplar.BOOL:
        raise GraphError(
            f"{where}: indices must be of an integer type (unsigned int or int), got "
            f"{indices.dtype}"
        )
    if not (indices.rank == 1 or (indices.rank == 2 and indices.shape[1] == 1)):
        raise GraphError(f"{where}: indices must have shape [n] or [n, 1], got {indices.shape}")
    check_mapped(graph, table, "table", where)
    check_mapped(graph, indices, "indices", where)
    return table, indices.flatten()


def _plan(graph: poplar.Graph, table: poplar.Tensor, n: int, kind: str) -> MultiPlan:
    rows = _table2d(table)
    if rows.shape[1]:
        row_tiles = graph.tiles_of(rows[:, 0])
    else:
        row_tiles = np.zeros(table.shape[0], dtype=np.int64)
    return plan_multi(row_tiles, rows.shape[1], table.dtype.size, n, kind, graph.target)


def _table2d(table: poplar.Tensor) -> poplar.Tensor:
    return table.reshape((table.shape[0], int(np.prod(table.shape[1:], dtype=np.int64))))


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + l))`` over the ranges."""
    lengths = np.asarray(lengths, dtype=np.int64)
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(
        np.cumsum(lengths) - lengths, lengths
    )
    return np.repeat(np.asarray(starts, dtype=np.int64), lengths) + within


def multi_slice(
    graph: poplar.Graph,
    table: poplar.Tensor,
    indices: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """Gather rows of ``table`` (PopLibs' ``popops::multiSlice`` on dimension 0 with
    slices of size 1): ``out[i] = table[indices[i]]``, zeros where ``indices[i]`` is not in
    ``[0, num_rows)``.

    Args:
        graph: the graph.
        table: ``[num_rows, ...]``, mapped (see :func:`create_sliceable_tensor`).
        indices: ``[n]`` or ``[n, 1]`` of an integer type.
        prog: the sequence the gather is appended to.
        name: debug prefix.
        options: accepted for PopLibs compatibility; none changes the plan.

    Returns:
        ``[n, ...]`` (``table``'s row shape), mapped where the plan writes it.

    Raises:
        GraphError: ``indices`` of a non-integer type or a bad shape, unmapped operands.

    With several row partitions each writes its result (-0.0 where an index is elsewhere,
    +0.0 for the first partition) and the results are added: exact, except that a -0.0
    stored in the table may come out as +0.0.
    """
    where = f"multi_slice{f' {name!r}' if name else ''}"
    table, idx = _check_table_indices(graph, table, indices, where)
    name = name or "multiSlice"
    n = idx.num_elements
    out = graph.add_variable(table.dtype, (n, *table.shape[1:]), f"{name}/out")
    if out.num_elements == 0:
        return out
    ensure_codelets(graph, CODELETS)
    plan = _plan(graph, table, n, "slice")
    P, E = plan.partitions, _table2d(table).shape[1]
    results = (
        out
        if P == 1
        else graph.add_variable(table.dtype, (P, n, *table.shape[1:]), f"{name}/partitions")
    )
    dest = results.reshape((P * n, E))
    graph.set_tile_mapping(
        dest, np.repeat(np.repeat(plan.vertex_tiles, np.diff(plan.index_starts), axis=1), E)
    )
    fields = _slice_fields(table, idx, plan, dest)
    cs = graph.add_compute_set(f"{name}/MultiSlice")
    vtype = f"popops::MultiSlice<{type_arg(table.dtype)},{type_arg(idx.dtype)}>"
    graph.add_vertices(cs, vtype, fields, plan.vertex_tiles.reshape(-1))
    prog.add(poplar.Execute(cs))
    if P > 1:
        grain = graph.target.vector_width(table.dtype.size)
        poplar.map_tensor_linearly(graph, out, grain_size=grain)
        op = "LOGICAL_OR" if table.dtype is poplar.BOOL else "ADD"
        reduce_with_output(graph, results, out, [0], op, prog, name=f"{name}/combine")
    return out


def _slice_fields(
    table: poplar.Tensor, idx: poplar.Tensor, plan: MultiPlan, dest: poplar.Tensor
) -> dict[str, Any]:
    """Fields of the MultiSlice vertices: vertex ``(p, j)`` reads partition ``p``'s rows and
    index group ``j`` and writes rows ``[p * n + group j]`` of ``dest``."""
    P, J, n = plan.partitions, plan.groups, idx.num_elements
    E = dest.shape[1]
    per_group = np.diff(plan.index_starts)
    part_elems = np.repeat(np.diff(plan.row_starts) * E, J)
    rows = _ranges(np.repeat(plan.row_starts[:-1] * E, J), part_elems)
    negative = P > 1 and table.dtype.numpy.kind == "f"
    return {
        "indices": poplar.Segments(idx[np.tile(np.arange(n), P)], np.tile(per_group, P)),
        "base": poplar.Segments(_table2d(table).flatten()[rows], part_elems),
        "out": poplar.Segments(dest.flatten(), np.tile(per_group, P) * E),
        "baseRow": np.repeat(plan.row_starts[:-1], J),
        "rowElems": E,
        "fill": np.where(np.repeat(np.arange(P), J) > 0, -0.0, 0.0) if negative else 0,
    }


def _check_rows(
    graph: poplar.Graph, table: poplar.Tensor, rows: Any, n: int, where: str
) -> poplar.Tensor:
    rows = check_tensor(graph, rows, "rows", where)
    want = (n, *table.shape[1:])
    if rows.shape != want or rows.dtype is not table.dtype:
        raise GraphError(
            f"{where}: rows is {rows.dtype} {rows.shape}, expected {table.dtype} {want} "
            f"(one row of table {table.shape} per index)"
        )
    check_mapped(graph, rows, "rows", where)
    util.refuse_aliased(table, where, role="table")  # the updates write it
    return rows


def _check_scale(graph: poplar.Graph, table: poplar.Tensor, scale: Any, where: str) -> None:
    allowed = (table.dtype, poplar.FLOAT) if table.dtype.numpy.kind == "f" else (table.dtype,)
    if isinstance(scale, poplar.Tensor):
        check_tensor(graph, scale, "scale", where)
        if scale.num_elements != 1 or scale.dtype not in allowed:
            raise GraphError(
                f"{where}: scale must be a number or a one-element tensor of type "
                f"{' or '.join(str(t) for t in allowed)}, got {scale.dtype} {scale.shape}"
            )
        check_mapped(graph, scale, "scale", where)
        return
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.number)):
        raise GraphError(f"{where}: scale must be a number or a tensor, got {scale!r}")
    if not np.isfinite(scale):
        raise GraphError(f"{where}: scale must be finite, got {scale}")


def _scale_element(graph: poplar.Graph, table: poplar.Tensor, scale: Any, tile: int) -> Any:
    """The scale as a one-element tensor (a constant on ``tile`` for a number)."""
    if isinstance(scale, poplar.Tensor):
        return scale.flatten()[0]
    dtype = poplar.FLOAT if table.dtype.numpy.kind == "f" else table.dtype
    const = graph.add_constant(dtype, (1,), scale, "multiUpdateAdd/scale")
    graph.set_tile_mapping(const, tile)
    return const[0]


def multi_update(
    graph: poplar.Graph,
    table: poplar.Tensor,
    indices: poplar.Tensor,
    rows: poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """Scatter rows into ``table`` (PopLibs' ``popops::multiUpdate``):
    ``table[indices[i]] = rows[i]``; an index outside ``[0, num_rows)`` is ignored and of
    duplicate indices the last one wins.

    Returns:
        ``table``.

    Raises:
        GraphError: bad ``indices`` (type, shape), ``rows`` not ``[n, *row shape]`` of the
            table's type, unmapped operands.
        TensorError: ``table`` has aliased elements.
    """
    where = f"multi_update{f' {name!r}' if name else ''}"
    table, idx = _check_table_indices(graph, table, indices, where)
    rows = _check_rows(graph, table, rows, idx.num_elements, where)
    _updates(graph, table, idx, rows, None, prog, name or "multiUpdate")
    return table


def multi_update_add(
    graph: poplar.Graph,
    table: poplar.Tensor,
    indices: poplar.Tensor,
    rows: poplar.Tensor,
    scale: float | poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """Scatter-add rows into ``table`` (PopLibs' ``popops::multiUpdateAdd``):
    ``table[indices[i]] += scale * rows[i]``; duplicate indices accumulate and an index
    outside ``[0, num_rows)`` is ignored.

    Args:
        graph, table, indices, rows, prog, name, options: as for :func:`multi_update`.
        scale: a number, or a one-element tensor of the table's type (or float for a half
            table).

    Returns:
        ``table``.

    Raises:
        GraphError, TensorError: as for :func:`multi_update`; GraphError for a bad
            ``scale``.
    """
    where = f"multi_update_add{f' {name!r}' if name else ''}"
    table, idx = _check_table_indices(graph, table, indices, where)
    rows = _check_rows(graph, table, rows, idx.num_elements, where)
    if table.dtype is poplar.BOOL:
        raise GraphError(f"{where}: a bool table cannot be added to")
    _check_scale(graph, table, scale, where)
    _updates(graph, table, idx, rows, scale, prog, name or "multiUpdateAdd")
    return table


def multi_update_op(
    graph: poplar.Graph,
    table: poplar.Tensor,
    indices: poplar.Tensor,
    rows: poplar.Tensor,
    op: str,
    prog: poplar.Sequence,
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> poplar.Tensor:
    """Combine rows into ``table`` with ``op`` (PopLibs' ``multiUpdateMax``, and MIN and MUL
    alike): ``table[indices[i]] = op(table[indices[i]], rows[i])``; duplicate indices
    combine in turn and an index outside ``[0, num_rows)`` is ignored.

    Raises:
        GraphError, TensorError: as for :func:`multi_update`; GraphError for an unknown
            ``op`` or a bool table.
    """
    where = f"multi_update_op{f' {name!r}' if name else ''}"
    op = str(op).upper()
    if op not in UPDATE_OPS:
        raise GraphError(f"{where}: op {op!r} is not one of {sorted(UPDATE_OPS)}")
    table, idx = _check_table_indices(graph, table, indices, where)
    rows = _check_rows(graph, table, rows, idx.num_elements, where)
    if table.dtype is poplar.BOOL:
        raise GraphError(f"{where}: a bool table cannot be combined with {op}")
    _updates(graph, table, idx, rows, None, prog, name or f"multiUpdate{op.title()}", op)
    return table


def _updates(
    graph: poplar.Graph,
    table: poplar.Tensor,
    idx: poplar.Tensor,
    rows: poplar.Tensor,
    scale: Any,
    prog: poplar.Sequence,
    name: str,
    op: str | None = None,
) -> None:
    n = idx.num_elements
    base = _table2d(table)
    E = base.shape[1]
    if n == 0 or base.num_elements == 0:
        return
    ensure_codelets(graph, CODELETS)
    # read as they were before the update: copies of what shares elements with the table
    rows = util.unaliased(graph, rows, table, prog, f"{name}/rows")
    idx = util.unaliased(graph, idx, table, prog, f"{name}/indices")
    if isinstance(scale, poplar.Tensor):
        scale = util.unaliased(graph, scale, table, prog, f"{name}/scale")
    plan = _plan(graph, table, n, "update")
    P, S = plan.partitions, plan.groups
    part_rows = np.diff(plan.row_starts)
    rows2d = rows.reshape((n, E))
    add = scale is not None
    kind = "MultiUpdateAdd" if add else "MultiUpdate" if op is None else "MultiUpdateOp"
    types = [type_arg(table.dtype), type_arg(idx.dtype)] + ([op] if op is not None else [])
    if add:
        s_elem = _scale_element(graph, table, scale, int(plan.vertex_tiles[0, 0]))
        types.append(type_arg(s_elem.dtype))
    for step in range(S):  # serial steps over groups of indices (a few)
        b0, b1 = int(plan.index_starts[step]), int(plan.index_starts[step + 1])
        fields = {  # every partition reads the step's indices and rows (a broadcast)
            "indices": idx[b0:b1].expand([0]).broadcast(P, 0),
            "rows": rows2d[b0:b1].expand([0]).broadcast(P, 0),
            "base": poplar.Segments(base.flatten(), part_rows * E),
            "baseRow": plan.row_starts[:-1],
            "rowElems": E,
        }
        if add:
            fields["scale"] = [s_elem] * P
        cs = graph.add_compute_set(f"{name}/{kind}{step if S > 1 else ''}")
        graph.add_vertices(
            cs, f"popops::{kind}<{','.join(types)}>", fields, plan.vertex_tiles[:, step]
        )
        prog.add(poplar.Execute(cs))
