"""popops ``iota``: fill a 1-D integer tensor with ``start, start + 1, ...``.

The tensor's tile runs (flat intervals on one tile) are split into at most one piece per
worker context; each piece is a ``popops::Iota<T>`` worker vertex on its tile writing
``first, first + 1, ...`` (one ``arange`` for all vertices at run time, the pieces
concatenated being the tensor itself). Estimator: ``12 + ceil(n / vw) x 2`` context cycles.
"""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popops.codelets.iota import Iota
from tremula.libs.popops.reduce import check_mapped, check_tensor, type_arg
from tremula.libs.popops.reduce_plan import TileRuns
from tremula.libs.util import ensure_codelets, split_counts

__all__ = ["iota"]


_TYPES = (poplar.INT, poplar.UNSIGNED_INT)


def iota(
    graph: poplar.Graph, t: poplar.Tensor, start: int, prog: poplar.Sequence, name: str = ""
) -> poplar.Tensor:
    """Fill ``t`` with ``start + i`` at position ``i`` (PopLibs' ``popops::iota``).

    Args:
        graph: the graph.
        t: a rank-1 ``int`` or ``unsigned int`` tensor, mapped.
        start: the first value; every value must fit ``t``'s type.
        prog: the sequence the fill is appended to.
        name: debug prefix.

    Returns:
        ``t``.

    Raises:
        GraphError: ``t`` not rank 1, not of an integer type, unmapped, or values that do
            not fit its type.
    """
    where = f"iota{f' {name!r}' if name else ''}"
    t = check_tensor(graph, t, "t", where)
    if t.rank != 1 or t.dtype not in _TYPES:
        raise GraphError(
            f"{where}: t must be a rank-1 int or unsigned int tensor, got {t.dtype} {t.shape}"
        )
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
        raise GraphError(f"{where}: start must be an integer, got {start!r}")
    info = np.iinfo(t.dtype.numpy)
    last = int(start) + max(t.num_elements - 1, 0)
    if int(start) < info.min or last > info.max:
        raise GraphError(
            f"{where}: values {start}..{last} do not fit type {t.dtype} ({info.min}..{info.max})"
        )
    tiles = check_mapped(graph, t, "t", where)
    if t.num_elements == 0:
        return t
    ensure_codelets(graph, [Iota])
    runs = TileRuns.of(tiles)
    lengths = np.diff(np.r_[runs.starts, runs.size])
    owner, sizes = split_counts(lengths, graph.target.num_worker_contexts)
    first = np.cumsum(sizes) - sizes  # pieces cover the tensor in flat order
    cs = graph.add_compute_set(f"{name or 'iota'}/Iota")
    fields = {"out": poplar.Segments(t, sizes), "first": int(start) + first}
    graph.add_vertices(cs, f"popops::Iota<{type_arg(t.dtype)}>", fields, runs.tiles[owner])
    prog.add(poplar.Execute(cs))
    return t
