"""Probe round 6, the IR side: facts of PopXL's IR frontend that its unit tests check and
earlier rounds left open, pinned as PopXL has them.

``Graph.id`` is ``str(graph._pb_graph.id)``, PopART's ``GraphId``: ``""`` for the main
graph and the graph's unique name (``<fn>_subgraph(<n>)``) for a subgraph, so it equals
the id string of the binding graph and of the graph ``Ir._pb_ir.getGraph`` returns.
"""

from __future__ import annotations

import numpy as np

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from popxl import transforms


def _inc(x: popxl.Tensor) -> popxl.Tensor:
    return x + 1


def test_graph_ids_are_popart_graph_id_strings() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        sub = ir.create_graph(_inc, x)
    empty = ir.create_empty_graph("body")
    main = ir.main_graph
    assert (main.id, sub.id, empty.id) == ("", "_inc_subgraph(0)", "body_subgraph(1)")
    for g in (main, sub, empty):
        assert isinstance(g.id, str)
        assert g.id == str(g._pb_graph.id) == g._pb_graph.id.str()
        assert ir._pb_ir.getGraph(_ir.GraphId(g.id)) == g._pb_graph
    assert sub.id == sub.name  # a subgraph's id is its name; the main graph's is empty
    assert repr(sub) == "Graph[id=_inc_subgraph(0) name=_inc_subgraph(0)]"


def test_graph_ids_tell_graphs_apart_where_callers_key_on_them() -> None:
    """Called graphs, grad graphs and a second graph of the same function have ids of their
    own (the ``_subgraph(n)`` counter is the Ir's)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        inner = ir.create_graph(_inc, x)
        again = ir.create_graph(_inc, x)
        ops.call(inner, x)
        ops.call(again, x)
        ops.call(inner, x)
    grad = transforms.autodiff(inner).graph
    ids = [g.id for g in (ir.main_graph, inner, again, grad)]
    assert len(set(ids)) == 4
    assert [g.id for g in ir.main_graph.called_graphs] == [inner.id, again.id]
    assert {g.id: g for g in ir.main_graph.called_graphs}[again.id] is again
