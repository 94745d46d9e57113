"""Lowering of ``popxl/ops/call.py`` and ``repeat.py``: a call copies the inputs into the
subgraph's input tensors, calls its function, and copies the outputs out (and modified
inputs back); a repeat loops the call of its body, copying each output back into its
loop-carried input."""

from __future__ import annotations

from tremula import poplar
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.repeat import loop_plan


def _copy_in(lw: Lowerer, op: OpNode, env: Env, inputs: list, prog: poplar.Sequence) -> None:
    for parent, dst in zip(op.inputs, inputs):
        lw.copy(env[parent], dst, prog)


def _copy_back(lw: Lowerer, op: OpNode, env: Env, inputs: list, prog: poplar.Sequence) -> None:
    for i in op.modified:
        lw.copy(inputs[i], env[op.inputs[i]], prog)


def _inlinable(lw: Lowerer, graph: Graph) -> bool:
    """A graph called from one site only, with no op writing anything in place (so no
    input can be modified), no code loading and no nested call: lowering it at its call
    site with its inputs aliased to the parent tensors is indistinguishable from a call
    with copies."""
    counts = lw.call_sites()
    if counts.get(graph, 0) != 1 or graph in lw.code_loaded_graphs():
        return False
    return all(not op.modified and not op.called_graphs for op in graph.ops)


def _inline(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    graph = op.attrs["graphs"][0]
    inner = Env()
    lw.bind_leaves(graph, inner)
    inner.update((g_in, env[p]) for g_in, p in zip(graph.inputs, op.inputs))
    lw.lower_ops(graph, inner, prog)
    parents = {id(env[p]) for p in op.inputs}
    for out, g_out in zip(op.outputs, graph.outputs):
        value = inner[g_out]
        if id(value) in parents or g_out in graph.inputs:  # an input passed through: copy
            env[out] = lw.new_tensor(out)
            lw.copy(value, env[out], prog)
        else:
            env[out] = value  # a fresh activation of this site


@rule("Call")
def call(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    if _inlinable(lw, op.attrs["graphs"][0]):
        _inline(lw, op, env, prog)
        return
    sub = lw.subgraph(op.attrs["graphs"][0])
    _copy_in(lw, op, env, sub.inputs, prog)
    prog.add(poplar.Call(sub.function))
    for out, src in zip(op.outputs, sub.outputs):
        env[out] = lw.new_tensor(out)
        lw.copy(src, env[out], prog)
    _copy_back(lw, op, env, sub.inputs, prog)


@rule("Repeat")
def repeat(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """Loop the body's call through the wrapper's routing (``loop_plan``): each loop input
    lives in the body input(s) it feeds (or a tensor of its own if it feeds none), and each
    iteration carries its outputs into them; the wrapper itself lowers to nothing."""
    plan = loop_plan(op)
    sub = lw.subgraph(plan.body)
    homes: list[list[poplar.Tensor]] = [[] for _ in op.inputs]
    for i, k in enumerate(plan.feeds):
        homes[k].append(sub.inputs[i])
    for k, parent in enumerate(op.inputs):
        if not homes[k]:
            homes[k].append(lw.new_tensor(parent, name=f"{parent.id}/loop_in{k}"))
        for dst in homes[k]:
            lw.copy(env[parent], dst, prog)
    body = poplar.Sequence([poplar.Call(sub.function)])
    carried = []
    for j, (kind, idx) in enumerate(plan.carries):  # via temporaries: outputs may alias inputs
        src = sub.outputs[idx] if kind == "output" else homes[idx][0]
        tmp = lw.new_tensor(op.outputs[j], name=f"{op.outputs[j].id}/carry")
        lw.copy(src, tmp, body)
        carried.append(tmp)
    for j, tmp in enumerate(carried):
        for dst in homes[j]:
            lw.copy(tmp, dst, body)
    prog.add(poplar.Repeat(op.attrs["count"], body))
    for j, out in enumerate(op.outputs):
        env[out] = lw.new_tensor(out)
        lw.copy(homes[j][0], env[out], prog)
    for k in op.modified:
        lw.copy(homes[k][0], env[op.inputs[k]], prog)
