"""ONNX control flow: ``If`` as PopXL's ``conditional`` of two subgraphs (or the taken
branch inline when the condition is known on the host), and ``Loop`` with a trip count
known on the host and a condition that stays true as PopXL's ``repeat``.

A branch or body is an ONNX graph that may read tensors of the enclosing scope by name:
those computed on the device become inputs of the PopXL subgraph, host values stay host
values inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tremula import popxl
from tremula.popart import onnxutil
from tremula.popxl import ops


def run_graph(node: Any, graph: Any, bound: dict[str, Any]) -> list[Any]:
    """Convert ``graph``'s nodes in the current PopXL graph, its names bound to ``bound``
    (and its initialisers) over the enclosing scope; its outputs' values."""
    cx = node.cx
    saved = cx.env
    inits = {t.name: onnxutil.to_array(t) for t in graph.initializer}
    cx.env = {**saved, **inits, **bound}
    try:
        cx.run(graph.node)
        return [cx.value(o.name, node) for o in graph.output]
    finally:
        cx.env = saved


def subgraph(
    node: Any, graph: Any, inputs: list[tuple[str, Any]], body: Callable[..., list[Any]]
) -> tuple[popxl.Graph, list[Any]]:
    """A PopXL subgraph running ``body`` over graph inputs named by ``inputs`` (name, parent
    tensor) plus the device tensors of the enclosing scope that ``graph`` reads; the
    parent tensors to call it with. Host results become constants of the subgraph."""
    outer = onnxutil.outer_names(graph, [n for n, _ in inputs])
    device = [n for n in outer if not isinstance(node.cx.value(n, node), np.ndarray)]
    names = [n for n, _ in inputs] + device
    parents = [t for _, t in inputs] + [node.cx.value(n, node) for n in device]

    def fn(*ts: popxl.Tensor) -> list[popxl.Tensor]:
        outs = body(dict(zip(names, ts)))
        return [
            node.cx.constant(f"{node.proto.output[0]}/out{i}", o)
            if isinstance(o, np.ndarray)
            else o
            for i, o in enumerate(outs)
        ]

    return popxl.gir().create_graph(fn, *parents), parents


def _if(node: Any) -> list[Any]:
    branches = node.attr("then_branch"), node.attr("else_branch")
    if node.is_const(0):
        return run_graph(
            node, branches[0 if bool(np.asarray(node.const(0)).reshape(-1)[0]) else 1], {}
        )
    cond = node.tensor(0)
    if cond.shape != ():
        cond = ops.reshape(cond, ())
    made = [subgraph(node, g, [], lambda bound, g=g: run_graph(node, g, bound)) for g in branches]
    (then_g, then_in), (else_g, else_in) = made
    out = ops.conditional(cond, then_g, else_g, then_in, else_in)
    return list(out) if isinstance(out, tuple) else [out]


def _loop(node: Any) -> list[Any]:
    """ONNX Loop as ``repeat``: the trip count ``M`` must be known on the host and the
    condition must stay true (an absent or constant-true input, and a body whose condition
    output is its condition input or a true constant); no scan outputs."""
    body = node.attr("body")
    if not node.has(0):
        raise node.error("a Loop without a trip count (a while loop) is not supported")
    trips = int(np.asarray(node.const(0, "M")).reshape(-1)[0])
    if node.has(1) and not (node.is_const(1) and bool(np.asarray(node.const(1)).reshape(-1)[0])):
        raise node.error("a Loop whose condition is computed on the device is not supported")
    carried = [node.tensor(i) for i in range(2, node.n_inputs)]
    if len(body.output) != 1 + len(carried):
        raise node.error("Loop scan outputs are not supported (only loop-carried values)")
    names = [i.name for i in body.input]
    cond_in, cond_out = names[1], body.output[0].name
    if trips <= 0:
        return carried
    counter = popxl.constant(np.int32(0), popxl.int32, name=f"{node.proto.output[0]}/iteration")

    def step(bound: dict[str, Any]) -> list[Any]:
        i = bound.pop("__iteration__")
        values = run_graph(node, body, {names[0]: i, cond_in: np.array(True), **bound})
        if cond_out != cond_in and not (
            isinstance(values[0], np.ndarray) and bool(np.asarray(values[0]).reshape(-1)[0])
        ):
            raise node.error("a Loop body whose condition output is computed is not supported")
        return [ops.add(i, 1), *values[1:]]

    inputs = [("__iteration__", counter), *zip(names[2:], carried)]
    graph, parents = subgraph(node, body, inputs, step)
    outs = ops.repeat(graph, trips, *parents)
    return list(outs)[1 : 1 + len(carried)]


def call(node: Any) -> list[Any]:
    """PopART's ``ai.graphcore`` Call: PopXL's ``call`` of a subgraph made from ``callee``
    (its inputs bound to the node's inputs in order)."""
    callee = node.attr("callee")
    names = [i.name for i in callee.input]
    if len(names) != node.n_inputs:
        raise node.error(f"the callee takes {len(names)} inputs, the node gives {node.n_inputs}")
    inputs = list(zip(names, (node.tensor(i) for i in range(node.n_inputs))))
    graph, parents = subgraph(node, callee, inputs, lambda bound: run_graph(node, callee, bound))
    out = ops.call(graph, *parents)
    return list(out) if isinstance(out, tuple) else [out]


CONTROL: dict[str, Callable[[Any], list]] = {"If": _if, "Loop": _loop}
