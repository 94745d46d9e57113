"""Compile rules of the programs that move data: ``Copy`` (tensor to tensor as an
exchange, over the IPU-Links between IPUs; to and from streams, remote buffers; a function's
code load), ``CrossReplicaCopy`` and ``PrintTensor``. Each takes the :class:`StepPlan` and a
program and returns its node (``COMPILE_RULES`` in ``compiler.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.exchange import (
    ExchangePlan,
    cross_replica_link,
    plan_exchange,
    split_by_ipu,
    transfers_for,
)
from tremula.engine.plan import Gather
from tremula.errors import ProgramError
from tremula.poplar import program as P
from tremula.poplar.handles import DataStream, Function, FunctionBuffer, RemoteBuffer
from tremula.poplar.tensor import Tensor
from tremula.target import Target

if TYPE_CHECKING:
    from tremula.engine.compiler import StepPlan


def compile_copy(sp: StepPlan, p: P.Copy) -> N.Node:
    s, d = p.src, p.dst
    name = p.name
    if isinstance(s, Tensor) and isinstance(d, Tensor):
        return _tensor_copy(sp, s, d, name or "Copy")
    action: N.HostAction
    if isinstance(s, DataStream) and isinstance(d, Tensor):
        b = sp.bytes_by_tile(d)
        action = N.StreamIn(s, Gather.of(d.dtype, d.addresses))
        return sp.host_node(action, name or f"{s.name}/StreamCopy", np.zeros_like(b), b)
    if isinstance(d, DataStream) and isinstance(s, Tensor):
        b = sp.bytes_by_tile(s)
        action = N.StreamOut(d, Gather.of(s.dtype, s.addresses))
        return sp.host_node(action, name or f"{d.name}/StreamCopy", b, np.zeros_like(b))
    if isinstance(s, RemoteBuffer) or isinstance(d, RemoteBuffer):
        return _remote_copy(sp, p)
    if isinstance(s, FunctionBuffer) and isinstance(d, Function):
        return _code_load(sp, d, name)
    raise ProgramError(f"Copy from {type(s).__name__} to {type(d).__name__} unsupported")


def _tensor_copy(sp: StepPlan, s: Tensor, d: Tensor, name: str) -> N.Node:
    src = s.addresses.reshape(-1)
    dst = d.addresses.reshape(-1)
    st = sp.state
    ts = st.space(s.dtype).tile_of[src].astype(np.int64)
    td = st.space(d.dtype).tile_of[dst].astype(np.int64)
    # an element moving from tile a to tile b, named by its destination address and by
    # its source address (a broadcast is sent once and received by every tile)
    moves = transfers_for(td, ts, dst, sp.space_ids[d.dtype], d.dtype.size, to_other=False)
    read = transfers_for(td, ts, src, sp.space_ids[s.dtype], s.dtype.size, to_other=False)
    same = ts == td
    local = np.bincount(td[same], minlength=sp.target.num_tiles) * d.dtype.size
    internal, external = split_by_ipu(sp.target, moves)
    read_internal, read_external = split_by_ipu(sp.target, read)
    copy = (Gather.of(s.dtype, src), Gather.of(d.dtype, dst))
    if len(external) and not len(internal) and not local.any():
        # between IPUs only: the GlobalExchange, after its global sync, moves it all; no
        # empty on-IPU exchange with its internal sync before it
        plan = plan_exchange(sp.target, external, "global", None, sp.layout, read_external)
        return sp.exchange_node(plan, name, copy)
    nodes: list[N.Node] = []
    plan = plan_exchange(
        sp.target, internal, "internal", local.astype(np.int64), sp.layout, read_internal
    )
    nodes.append(sp.exchange_node(plan, name, copy))
    if len(external):  # over the IPU-Links: a broadcast crosses them once per IPU
        plan = plan_exchange(sp.target, external, "global", None, sp.layout, read_external)
        nodes.append(sp.exchange_node(plan, f"{name}/Global"))
    return nodes[0] if len(nodes) == 1 else sp.add(N.SeqNode(nodes), name)


def _offset(p: P.Copy) -> int | Gather:
    off = p.offset
    if isinstance(off, Tensor):
        return Gather.of(off.dtype, off.addresses)
    return 0 if off is None else int(off)


def _remote_copy(sp: StepPlan, p: P.Copy) -> N.Node:
    offset = _offset(p)
    if isinstance(p.src, RemoteBuffer) and isinstance(p.dst, Tensor):
        buf, t = p.src, p.dst
        b = sp.bytes_by_tile(t)
        action: N.HostAction = N.RemoteLoad(buf, Gather.of(t.dtype, t.addresses), offset)
        name = p.name or f"{buf.name}/RemoteLoad"
        return sp.host_node(action, name, np.zeros_like(b), b, remote=True)
    if isinstance(p.dst, RemoteBuffer) and isinstance(p.src, Tensor):
        buf, t = p.dst, p.src
        b = sp.bytes_by_tile(t)
        action = N.RemoteStore(buf, Gather.of(t.dtype, t.addresses), offset)
        name = p.name or f"{buf.name}/RemoteStore"
        return sp.host_node(action, name, b, np.zeros_like(b), remote=True)
    raise ProgramError(f"Copy {p.name!r}: a remote buffer copies to or from a tensor")


def _code_load(sp: StepPlan, fn: Function, name: str) -> N.Node:
    sp.function_position(fn)
    code = sp.function_code[fn.id]
    return sp.host_node(
        N.CodeLoad(fn.id), name or f"{fn.name}/CodeLoad", np.zeros_like(code), code, remote=True
    )


def _cross_replica_plan(
    tg: Target, sent: np.ndarray, recv: np.ndarray, pairs: np.ndarray
) -> ExchangePlan:
    """A CrossReplicaCopy's exchange: each tile's bytes over its exchange port, all of them
    over the link between the replicas' IPUs (``exchange.cross_replica_link``)."""
    busy = np.maximum(sent, recv)
    link = int(np.ceil(busy.sum() / cross_replica_link(tg, pairs)[1]))
    cycles = np.where(
        busy > 0,
        tg.exchange_fixed_cycles + np.maximum(-(-busy // tg.exchange_bytes_per_cycle), link),
        0,
    ).astype(np.int64)
    return ExchangePlan(
        "global",
        sent,
        recv,
        cycles,
        np.where(busy > 0, tg.exchange_code_bytes_per_region, 0),
        int(recv.sum()),
    )


def compile_cross_replica(sp: StepPlan, p: P.CrossReplicaCopy) -> N.Node:
    replicas = sp.state.replication_factor
    for s, d in p.replica_map:
        if not (0 <= s < replicas and 0 <= d < replicas):
            raise ProgramError(
                f"CrossReplicaCopy {p.name!r}: replica pair ({s}, {d}) out "
                f"of range for {replicas} replica(s)"
            )
    sent = sp.bytes_by_tile(p.src)
    recv = sp.bytes_by_tile(p.dst)
    pairs = np.array(p.replica_map, dtype=np.int64).reshape(-1, 2)
    plan = _cross_replica_plan(sp.target, sent, recv, pairs)
    cycles = plan.cycles_by_tile
    index = len(sp.external_exchanges)
    sp.external_exchanges.append(plan)
    name = p.name or "CrossReplicaCopy"
    step = sp.step(
        "GlobalExchange",
        name,
        cycles,
        True,
        external_exchange=index,
        data=sp.data_fields(sent, recv),
    )
    node = N.CrossReplicaNode(
        index,
        step,
        sp.sync_step(name, "External"),
        Gather.of(p.src.dtype, p.src.addresses),
        Gather.of(p.dst.dtype, p.dst.addresses),
        pairs[:, 0],
        pairs[:, 1],
    )
    sp.add(node, name)
    return node


def compile_print(sp: StepPlan, p: P.PrintTensor) -> N.Node:
    t = p.tensor
    assert t is not None  # PrintTensor's constructor requires it
    b = sp.bytes_by_tile(t)
    action = N.Print(p.title, Gather.of(t.dtype, t.addresses), t.shape, p.fmt)
    return sp.host_node(action, p.name or f"{p.title or 'tensor'}/PrintTensor", b, np.zeros_like(b))
