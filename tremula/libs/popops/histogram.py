"""popops ``histogram``: count the elements of a tensor between sorted levels.

With levels ``l[0] <= ... <= l[L-1]`` there are ``L + 1`` bins (PopLibs' semantics): bin 0
counts ``x < l[0]``, bin ``i`` counts ``l[i-1] <= x < l[i]`` and bin ``L`` counts
``x >= l[L-1]``; NaN counts in bin ``L``. With ``absolute_of_data`` the bins count
``|x|``. The counts are ``float`` (as in PopLibs).

Stage 1: the data's elements on each tile are split into worker vertices
(``popops::Histogram<T>``, one binary search per element: ``20 + n x (8 + 4 x
ceil(log2(L + 1)))`` context cycles), each writing a partial histogram on its tile; the
batched compute is one ``searchsorted`` and one ``bincount`` for every vertex. The partial
histograms are then added by :func:`tremula.libs.popops.reduce.reduce` (a multi-stage
reduction to the output, mapped linearly).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popops.codelets.histogram import Histogram
from tremula.libs.popops.reduce import check_mapped, check_tensor, reduce, type_arg
from tremula.libs.util import ensure_codelets, partition

__all__ = ["histogram"]


def histogram(
    graph: poplar.Graph,
    data: poplar.Tensor,
    levels: poplar.Tensor | Sequence[float],
    prog: poplar.Sequence,
    absolute_of_data: bool = False,
    name: str = "",
) -> poplar.Tensor:
    """Histogram of ``data`` (PopLibs' ``popops::histogram``); see the module docstring.

    Args:
        graph: the graph.
        data: any shape, float, half or integer, mapped.
        levels: a rank-1 tensor of ``data``'s type (ascending at run time), or a sequence
            of numbers (checked to ascend; becomes a constant).
        prog: the sequence the histogram is appended to.
        absolute_of_data: count ``|x|`` instead of ``x``.
        name: debug prefix.

    Returns:
        A ``float`` tensor of ``len(levels) + 1`` counts, mapped linearly.

    Raises:
        GraphError: bad types or ranks, levels not ascending, unmapped operands.
    """
    where = f"histogram{f' {name!r}' if name else ''}"
    data = check_tensor(graph, data, "data", where)
    if data.dtype.numpy.kind not in "fiu":
        raise GraphError(f"{where}: data must be float, half or integer, got {data.dtype}")
    levels_t = _levels(graph, data, levels, where)
    tiles = check_mapped(graph, data, "data", where)
    name = name or "histogram"
    ensure_codelets(graph, [Histogram])
    if levels_t is None:
        levels_t = graph.add_constant(
            data.dtype, (len(levels),), np.asarray(levels), f"{name}/levels"
        )
        graph.set_tile_mapping(levels_t, int(tiles[0]) if tiles.size else 0)
    partials = _partial_histograms(graph, data, levels_t, absolute_of_data, prog, name)
    return reduce(graph, partials, [0], "ADD", prog, name=f"{name}/sum")


def _partial_histograms(
    graph: poplar.Graph,
    data: poplar.Tensor,
    levels: poplar.Tensor,
    absolute: bool,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """Stage 1: ``[vertices, bins]`` histograms of each worker vertex's elements."""
    bins = levels.num_elements + 1
    if data.num_elements:
        part = partition(graph, data.flatten(), grain=graph.target.vector_width(data.dtype.size))
        segments, vtiles = part.segments(data.flatten()), part.tiles
    else:  # one vertex over nothing, so that the counts are zeros
        segments, vtiles = poplar.Segments(data.flatten(), [0]), np.zeros(1, dtype=np.int64)
    V = vtiles.size
    partials = graph.add_variable(poplar.FLOAT, (V, bins), f"{name}/partials")
    graph.set_tile_mapping(partials, np.repeat(vtiles, bins).reshape(V, bins))
    fields = {"data": segments, "levels": [levels] * V, "counts": partials, "absolute": absolute}
    cs = graph.add_compute_set(f"{name}/Histogram")
    graph.add_vertices(cs, f"popops::Histogram<{type_arg(data.dtype)}>", fields, vtiles)
    prog.add(poplar.Execute(cs))
    return partials


def _levels(
    graph: poplar.Graph, data: poplar.Tensor, levels: Any, where: str
) -> poplar.Tensor | None:
    """The levels tensor (checked), or None when they are numbers (checked to ascend)."""
    if isinstance(levels, poplar.Tensor):
        check_tensor(graph, levels, "levels", where)
        if levels.rank != 1 or levels.dtype is not data.dtype:
            raise GraphError(
                f"{where}: levels must be a rank-1 tensor of type {data.dtype}, got "
                f"{levels.dtype} {levels.shape}"
            )
        check_mapped(graph, levels, "levels", where)
        return levels
    values = np.asarray(levels, dtype=np.float64)
    if values.ndim != 1:
        raise GraphError(f"{where}: levels must be one-dimensional, got shape {values.shape}")
    if np.any(np.isnan(values)) or np.any(np.diff(values) < 0):
        raise GraphError(f"{where}: levels must ascend and not be NaN, got {values.tolist()}")
    return None
