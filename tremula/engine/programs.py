"""Compile rules of the programs that run and sequence code: ``Execute`` (a compute set
with the exchanges it needs before and after it), ``Call`` (a function, compiled once, or a
host function), and control flow (``Sequence``, ``Repeat``, ``RepeatWhile``, ``If``,
``Switch``, ``Sync``, ``WriteUndef``). Each takes the :class:`StepPlan` and a program and
returns its node (``COMPILE_RULES`` in ``compiler.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.plan import Gather
from tremula.poplar import program as P
from tremula.poplar.handles import Function
from tremula.poplar.tensor import Tensor

if TYPE_CHECKING:
    from tremula.engine.compiler import StepPlan


def compile_execute(sp: StepPlan, p: P.Execute) -> N.Node:
    ccs = sp.compute_sets[p.compute_set.id]
    pre, post = sp.cs_plans(ccs)
    parts: list[N.Node] = []
    for plan, suffix in pre:
        parts.append(sp.exchange_node(plan, f"{ccs.name}/{suffix}"))
    step = sp.step(
        "OnTileExecute",
        ccs.name,
        ccs.cycles_by_tile,
        False,
        active_cycles=int(ccs.active_cycles_by_tile.sum()),
        compute_set=ccs.id,
        thread_balance=ccs.thread_balance,
    )
    tile = N.OnTileNode(ccs, step)
    sp.add(tile, ccs.name)
    parts.append(tile)
    for plan, suffix in post:
        parts.append(sp.exchange_node(plan, f"{ccs.name}/{suffix}"))
    if len(parts) == 1:
        return tile
    return sp.add(N.SeqNode(parts), p.name or ccs.name)


def compile_call(sp: StepPlan, p: P.Call) -> N.Node:
    fn = p.function
    if isinstance(fn, Function):
        pos = sp.function_position(fn)
        node = N.CallNode(pos, fn.id, sp.function_roots[pos])
        return sp.add(node, p.name or f"Call/{fn.name}")
    ins = tuple(Gather.of(t.dtype, t.addresses) for t in p.inputs)
    outs = tuple(Gather.of(t.dtype, t.addresses) for t in p.outputs)
    zero = np.zeros(sp.target.num_tiles, np.int64)
    sent = sum((sp.bytes_by_tile(t) for t in p.inputs), zero)
    recv = sum((sp.bytes_by_tile(t) for t in p.outputs), zero)
    name = p.name or f"{fn.name}/HostCall"
    return sp.host_node(N.HostCall(fn, ins, outs), name, sent, recv)


def compile_sequence(sp: StepPlan, p: P.Sequence) -> N.Node:
    children = [sp.compile(c) for c in p.programs]
    return sp.add(N.SeqNode(children), p.name)


def compile_repeat(sp: StepPlan, p: P.Repeat) -> N.Node:
    return sp.add(N.RepeatNode(int(p.count), sp.compile(p.body)), p.name)


def _pred(t: Tensor) -> Gather:
    return Gather.of(t.dtype, t.addresses)


def compile_repeat_while(sp: StepPlan, p: P._RepeatWhile) -> N.Node:
    cond, body = sp.compile(p.condition), sp.compile(p.body)
    sync = sp.sync_step(p.name, "Internal")
    node = N.RepeatWhileNode(cond, _pred(p.predicate), body, p.until, sync)
    return sp.add(node, p.name)


def compile_if(sp: StepPlan, p: P.If) -> N.Node:
    then = sp.compile(p.then)
    empty_else = isinstance(p.else_, P.Sequence) and not p.else_.programs
    else_ = None if empty_else else sp.compile(p.else_)
    sync = sp.sync_step(p.name, "Internal")
    return sp.add(N.IfNode(_pred(p.predicate), then, else_, sync), p.name)


def compile_switch(sp: StepPlan, p: P.Switch) -> N.Node:
    cases = [sp.compile(c) for _, c in p.cases]
    default = sp.compile(p.default)
    values = np.array([v for v, _ in p.cases], dtype=np.int64)
    sync = sp.sync_step(p.name, "Internal")
    return sp.add(N.SwitchNode(_pred(p.control), values, cases, default, sync), p.name)


def compile_sync(sp: StepPlan, p: P.Sync) -> N.Node:
    kind = "External" if p.sync_type == "external" else "Internal"
    return sp.add(N.SyncNode(sp.sync_step(p.name, kind)), p.name)


def compile_write_undef(sp: StepPlan, p: P.WriteUndef) -> N.Node:
    return sp.add(N.WriteUndefNode((Gather.of(p.tensor.dtype, p.tensor.addresses),)), p.name)
