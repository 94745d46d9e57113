"""``decompose_sum``: split many-input sums into a tree of additions.

``autodiff`` already accumulates gradients as two-input additions, and no op type here
takes a variable number of summands, so there is nothing to split: the graph is checked
and returned unchanged (numerically transparent, as in PopXL).
"""

from __future__ import annotations

from tremula.popxl.graph import Graph


def decompose_sum(graph: Graph) -> Graph:
    """Decompose the many-input sums of ``graph``; returns ``graph``.

    Raises:
        TypeError: ``graph`` is not a Graph.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"decompose_sum: expected a Graph, got {type(graph).__name__}")
    return graph
