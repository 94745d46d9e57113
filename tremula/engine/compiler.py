"""Compiling the engine's programs into a step plan: one rule per program class (a table).

A user program (``Execute``, ``Copy`` ...) compiles to one or more nodes (``nodes.py``), each
with the static steps it will put on the timeline.

Everything static is decided here, once: compiled compute sets, exchange plans, the cycles of
every step on every tile, and the profile's program, exchange and compute-set tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.computeset import CompiledComputeSet, compile_compute_set
from tremula.engine.exchange import (
    ExchangePlan,
    TileLayout,
    Transfers,
    cross_replica_link,
    plan_exchange,
    split_by_ipu,
    transfers_for,
)
from tremula.engine.plan import Gather
from tremula.engine.timeline import StepInfo
from tremula.errors import ProgramError
from tremula.poplar import program as P
from tremula.poplar.graph import GraphState
from tremula.poplar.handles import DataStream, Function, FunctionBuffer, RemoteBuffer
from tremula.poplar.tensor import Tensor
from tremula.profile.schema import MEMORY_BY_INSTRUCTION_PARTS


@dataclass
class HostExchange:
    """One host exchange (a StreamCopy program), for the profile's ``hostExchanges``."""

    bytes_sent: np.ndarray  # device -> host, per tile
    bytes_received: np.ndarray  # host -> device, per tile
    cycles_by_tile: np.ndarray


def _balance(d: np.ndarray, n: int) -> tuple[float, float]:
    peak = int(d.max(initial=0))
    if peak == 0:
        return 1.0, 1.0
    active = int(np.count_nonzero(d))
    return float(d.sum() / (n * peak)), float(d.sum() / (active * peak))


class DataFields(TypedDict):
    """The data fields of an exchange step (as the execution profile names them)."""

    totalData: int
    dataBalance: float


class StepPlan:
    """The engine's programs and the functions they call, compiled into nodes and steps, with
    the tables the profiles list (programs, compute sets, exchanges, host exchanges)."""

    def __init__(self, state: GraphState) -> None:
        self.state = state
        self.target = state.target
        self.space_ids = {t: i for i, t in enumerate(state.spaces)}
        tile_cuts: dict = {}  # tables for this loop only (freed after it)
        self.layout = TileLayout.build([sp.tiles() for sp in state.spaces.values()])
        self.nodes: list[N.Node] = []
        self.compute_sets: list[CompiledComputeSet] = [
            compile_compute_set(state, cs, self.space_ids, tile_cuts)
            for cs in state.compute_sets
        ]
        self.exchanges: list[ExchangePlan] = []
        self.external_exchanges: list[ExchangePlan] = []
        self.host_exchanges: list[HostExchange] = []
        self.function_roots: list[N.Node] = []  # index = functionPrograms position
        self.function_index: dict[int, int] = {}  # poplar function id -> position
        self.function_code: dict[int, np.ndarray] = {}  # function id -> code bytes per tile
        self._cs_exchanges: dict[int, tuple] = {}
        self._compiling: set[int] = set()
        self.control_roots: list[N.Node] = []

    # ---- entry points ----
    def compile_control(self, program: P.Program) -> N.Node:
        root = self.compile(program)
        self.control_roots.append(root)
        return root

    def compile(self, p: P.Program) -> N.Node:
        rule = COMPILE_RULES.get(type(p))
        if rule is None:
            raise ProgramError(f"cannot compile program of type {type(p).__name__}")
        node = rule(self, p)
        if not node.name:
            node.name = getattr(p, "name", "") or ""
        return node

    @property
    def next_pid(self) -> int:
        """The program id the next node added will get (nodes whose steps name their own
        program id are built after reading it, then added)."""
        return len(self.nodes)

    def _add(self, node: N.Node, name: str = "") -> N.Node:
        node.pid = len(self.nodes)
        node.name = name or node.name
        self.nodes.append(node)
        return node

    # ---- steps ----
    def _step(
        self,
        ptype: str,
        name: str,
        d: np.ndarray,
        lockstep: bool,
        active_cycles: int = 0,
        **fields: object,
    ) -> StepInfo:
        """The static step of the next node: per-tile cycles ``d`` and balances."""
        tiles = np.flatnonzero(d > 0)
        tb, atb = _balance(d, self.target.num_tiles)
        fields.update(tileBalance=tb, activeTiles=int(tiles.size), activeTileBalance=atb)
        return StepInfo(
            ptype,
            self.next_pid,
            name,
            tiles,
            d[tiles].astype(np.int64),
            fields,
            active_cycles=active_cycles,
            lockstep=lockstep,
        )

    def _sync_step(self, name: str, sync_type: str) -> StepInfo:
        info = StepInfo(
            "Sync",
            self.next_pid,
            name,
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            {"syncType": sync_type},
            sync_type=sync_type,
        )
        return info

    @staticmethod
    def _data_fields(sent: np.ndarray, recv: np.ndarray) -> DataFields:
        data = sent + recv
        peak = int(data.max(initial=0))
        active = int(np.count_nonzero(data))
        balance = float(data.sum() / (active * peak)) if peak else 1.0
        return DataFields(
            totalData=int(recv.sum() if recv.sum() else sent.sum()), dataBalance=balance
        )

    def exchange_node(
        self, plan: ExchangePlan, name: str, copy: tuple[Gather, Gather] | None = None
    ) -> N.ExchangeNode:
        internal = plan.kind == "internal"
        table = self.exchanges if internal else self.external_exchanges
        index = len(table)
        table.append(plan)
        kind = "DoExchange" if internal else "GlobalExchange"
        key = "exchange" if internal else "externalExchange"
        step = self._step(
            kind,
            name,
            plan.cycles_by_tile,
            True,
            **{key: index},
            **self._data_fields(plan.bytes_sent, plan.bytes_received),
        )
        sync = self._sync_step(name, "Internal" if internal else "External")
        instructions = _instructions(plan) if internal else None
        node = N.ExchangeNode(kind, index, step, sync, copy, instructions)
        self._add(node, name)
        return node

    def host_node(
        self,
        action: N.HostAction,
        name: str,
        bytes_sent: np.ndarray,
        bytes_received: np.ndarray,
        remote: bool = False,
    ) -> N.HostNode:
        tg = self.target
        per_tile = bytes_sent + bytes_received
        bpc = tg.streaming_memory_bytes_per_cycle if remote else tg.host_bytes_per_cycle
        transfer = max(
            int(np.ceil(per_tile.sum() / bpc)),
            int(-(-per_tile.max(initial=0) // tg.exchange_bytes_per_cycle)),
        )
        cycles = tg.host_sync_cycles + tg.stream_copy_fixed_cycles + transfer
        d = np.where(per_tile > 0, cycles, 0).astype(np.int64)
        if not per_tile.any():
            d[0] = cycles  # a transfer with no data still costs the host round trip
        index = len(self.host_exchanges)
        self.host_exchanges.append(HostExchange(bytes_sent, bytes_received, d))
        step = self._step(
            "StreamCopy",
            name,
            d,
            True,
            hostExchange=index,
            **self._data_fields(bytes_sent, bytes_received),
        )
        node = N.HostNode(action, index, step, self._sync_step(name, "External"))
        self._add(node, name)
        return node

    def bytes_by_tile(self, t: Tensor) -> np.ndarray:
        tiles = self.state.space(t.dtype).tile_of[t.addresses.reshape(-1)]
        return (np.bincount(tiles, minlength=self.target.num_tiles) * t.dtype.size).astype(np.int64)

    # ---- compute sets ----
    def compile_execute(self, p: P.Execute) -> N.Node:
        ccs = self.compute_sets[p.compute_set.id]
        pre, post = self._cs_plans(ccs)
        parts: list[N.Node] = []
        for plan, suffix in pre:
            parts.append(self.exchange_node(plan, f"{ccs.name}/{suffix}"))
        step = self._step(
            "OnTileExecute",
            ccs.name,
            ccs.cycles_by_tile,
            False,
            active_cycles=int(ccs.active_cycles_by_tile.sum()),
            computeSet=ccs.id,
            threadBalance=ccs.thread_balance,
        )
        tile = N.OnTileNode(ccs, step)
        self._add(tile, ccs.name)
        parts.append(tile)
        for plan, suffix in post:
            parts.append(self.exchange_node(plan, f"{ccs.name}/{suffix}"))
        if len(parts) == 1:
            return tile
        return self._add(N.SeqNode(parts), p.name or ccs.name)

    def _cs_plans(self, ccs: CompiledComputeSet) -> tuple[list, list]:
        cached = self._cs_exchanges.get(ccs.id)
        if cached is None:
            cached = (self._plans(ccs.pre, "ExchangePre"), self._plans(ccs.post, "ExchangePost"))
            self._cs_exchanges[ccs.id] = cached
        return cached

    def _plans(self, t: Transfers, suffix: str) -> list[tuple[ExchangePlan, str]]:
        internal, external = split_by_ipu(self.target, t)
        plans = []
        if len(external):
            plans.append(
                (
                    plan_exchange(self.target, external, "global", layout=self.layout),
                    f"Global{suffix}",
                )
            )
        if len(internal):
            plans.append(
                (plan_exchange(self.target, internal, "internal", layout=self.layout), suffix)
            )
        return plans

    # ---- copies ----
    def compile_copy(self, p: P.Copy) -> N.Node:
        s, d = p.src, p.dst
        name = p.name
        if isinstance(s, Tensor) and isinstance(d, Tensor):
            return self._tensor_copy(s, d, name or "Copy")
        action: N.HostAction
        if isinstance(s, DataStream) and isinstance(d, Tensor):
            b = self.bytes_by_tile(d)
            action = N.StreamIn(s, Gather.of(d.dtype, d.addresses))
            return self.host_node(action, name or f"{s.name}/StreamCopy", np.zeros_like(b), b)
        if isinstance(d, DataStream) and isinstance(s, Tensor):
            b = self.bytes_by_tile(s)
            action = N.StreamOut(d, Gather.of(s.dtype, s.addresses))
            return self.host_node(action, name or f"{d.name}/StreamCopy", b, np.zeros_like(b))
        if isinstance(s, RemoteBuffer) or isinstance(d, RemoteBuffer):
            return self._remote_copy(p)
        if isinstance(s, FunctionBuffer) and isinstance(d, Function):
            return self._code_load(d, name)
        raise ProgramError(f"Copy from {type(s).__name__} to {type(d).__name__} unsupported")

    def _tensor_copy(self, s: Tensor, d: Tensor, name: str) -> N.Node:
        src = s.addresses.reshape(-1)
        dst = d.addresses.reshape(-1)
        st = self.state
        ts = st.space(s.dtype).tile_of[src].astype(np.int64)
        td = st.space(d.dtype).tile_of[dst].astype(np.int64)
        # an element moving from tile a to tile b, named by its destination address and by
        # its source address (a broadcast is sent once and received by every tile)
        moves = transfers_for(td, ts, dst, self.space_ids[d.dtype], d.dtype.size, to_other=False)
        read = transfers_for(td, ts, src, self.space_ids[s.dtype], s.dtype.size, to_other=False)
        same = ts == td
        local = np.bincount(td[same], minlength=self.target.num_tiles) * d.dtype.size
        internal, external = split_by_ipu(self.target, moves)
        copy = (Gather.of(s.dtype, src), Gather.of(d.dtype, dst))
        nodes: list[N.Node] = []
        plan = plan_exchange(
            self.target,
            internal,
            "internal",
            local.astype(np.int64),
            self.layout,
            split_by_ipu(self.target, read)[0],
        )
        nodes.append(self.exchange_node(plan, name, copy))
        if len(external):
            nodes.append(
                self.exchange_node(
                    plan_exchange(self.target, external, "global", layout=self.layout),
                    f"{name}/Global",
                )
            )
        return nodes[0] if len(nodes) == 1 else self._add(N.SeqNode(nodes), name)

    def _offset(self, p: P.Copy) -> int | Gather:
        off = p.offset
        if isinstance(off, Tensor):
            return Gather.of(off.dtype, off.addresses)
        return 0 if off is None else int(off)

    def _remote_copy(self, p: P.Copy) -> N.Node:
        offset = self._offset(p)
        if isinstance(p.src, RemoteBuffer) and isinstance(p.dst, Tensor):
            buf, t = p.src, p.dst
            b = self.bytes_by_tile(t)
            action: N.HostAction = N.RemoteLoad(buf, Gather.of(t.dtype, t.addresses), offset)
            name = p.name or f"{buf.name}/RemoteLoad"
            return self.host_node(action, name, np.zeros_like(b), b, remote=True)
        if isinstance(p.dst, RemoteBuffer) and isinstance(p.src, Tensor):
            buf, t = p.dst, p.src
            b = self.bytes_by_tile(t)
            action = N.RemoteStore(buf, Gather.of(t.dtype, t.addresses), offset)
            name = p.name or f"{buf.name}/RemoteStore"
            return self.host_node(action, name, b, np.zeros_like(b), remote=True)
        raise ProgramError(f"Copy {p.name!r}: a remote buffer copies to or from a tensor")

    def _code_load(self, fn: Function, name: str) -> N.Node:
        self.function_position(fn)
        code = self.function_code[fn.id]
        return self.host_node(
            N.CodeLoad(fn.id), name or f"{fn.name}/CodeLoad", np.zeros_like(code), code, remote=True
        )

    # ---- functions ----
    def function_position(self, fn: Function) -> int:
        pos = self.function_index.get(fn.id)
        if pos is not None:
            return pos
        if fn.id in self._compiling:
            raise ProgramError(f"function {fn.name!r} calls itself: recursion is not allowed")
        self._compiling.add(fn.id)
        root = self.compile(fn.program)
        self._compiling.discard(fn.id)
        pos = len(self.function_roots)
        self.function_roots.append(root)
        self.function_index[fn.id] = pos
        self.function_code[fn.id] = self.code_bytes(root)
        return pos

    def code_bytes(self, root: N.Node) -> np.ndarray:
        """Vertex code of the types used in ``root`` plus its control code, per tile."""
        tg = self.target
        code = np.zeros(tg.num_tiles, dtype=np.int64)
        seen: dict[str, np.ndarray] = {}
        count = 0
        stack = [root]
        while stack:
            node = stack.pop()
            count += 1
            if isinstance(node, N.OnTileNode):
                for g in node.ccs.groups:
                    mask = seen.setdefault(g.vertex_type.name, np.zeros(tg.num_tiles, bool))
                    mask[g.tiles] = True
            if isinstance(node, N.CallNode):
                continue
            stack.extend(node.children())
        for vname, mask in seen.items():
            size = self.state.codelets.resolve(vname).codelet.code_bytes
            code += mask * size
        return code + count * tg.control_code_bytes_per_program

    def compile_call(self, p: P.Call) -> N.Node:
        fn = p.function
        if isinstance(fn, Function):
            pos = self.function_position(fn)
            node = N.CallNode(pos, fn.id, self.function_roots[pos])
            return self._add(node, p.name or f"Call/{fn.name}")
        ins = tuple(Gather.of(t.dtype, t.addresses) for t in p.inputs)
        outs = tuple(Gather.of(t.dtype, t.addresses) for t in p.outputs)
        zero = np.zeros(self.target.num_tiles, np.int64)
        sent = sum((self.bytes_by_tile(t) for t in p.inputs), zero)
        recv = sum((self.bytes_by_tile(t) for t in p.outputs), zero)
        name = p.name or f"{fn.name}/HostCall"
        return self.host_node(N.HostCall(fn, ins, outs), name, sent, recv)

    def compile_cross_replica(self, p: P.CrossReplicaCopy) -> N.Node:
        tg = self.target
        replicas = self.state.replication_factor
        for s, d in p.replica_map:
            if not (0 <= s < replicas and 0 <= d < replicas):
                raise ProgramError(
                    f"CrossReplicaCopy {p.name!r}: replica pair ({s}, {d}) out "
                    f"of range for {replicas} replica(s)"
                )
        sent = self.bytes_by_tile(p.src)
        recv = self.bytes_by_tile(p.dst)
        busy = np.maximum(sent, recv)
        pairs = np.array(p.replica_map, dtype=np.int64).reshape(-1, 2)
        link = int(np.ceil(busy.sum() / cross_replica_link(tg, pairs)[1]))
        cycles = np.where(
            busy > 0,
            tg.exchange_fixed_cycles + np.maximum(-(-busy // tg.exchange_bytes_per_cycle), link),
            0,
        ).astype(np.int64)
        plan = ExchangePlan(
            "global",
            sent,
            recv,
            cycles,
            np.where(busy > 0, tg.exchange_code_bytes_per_region, 0),
            int(recv.sum()),
        )
        index = len(self.external_exchanges)
        self.external_exchanges.append(plan)
        name = p.name or "CrossReplicaCopy"
        step = self._step(
            "GlobalExchange",
            name,
            cycles,
            True,
            externalExchange=index,
            **self._data_fields(sent, recv),
        )
        node = N.CrossReplicaNode(
            index,
            step,
            self._sync_step(name, "External"),
            Gather.of(p.src.dtype, p.src.addresses),
            Gather.of(p.dst.dtype, p.dst.addresses),
            pairs[:, 0],
            pairs[:, 1],
        )
        self._add(node, name)
        return node

    # ---- control flow ----
    def compile_sequence(self, p: P.Sequence) -> N.Node:
        children = [self.compile(c) for c in p.programs]
        return self._add(N.SeqNode(children), p.name)

    def compile_repeat(self, p: P.Repeat) -> N.Node:
        return self._add(N.RepeatNode(int(p.count), self.compile(p.body)), p.name)

    def _pred(self, t: Tensor) -> Gather:
        return Gather.of(t.dtype, t.addresses)

    def compile_repeat_while(self, p: P._RepeatWhile) -> N.Node:
        cond, body = self.compile(p.condition), self.compile(p.body)
        sync = self._sync_step(p.name, "Internal")
        node = N.RepeatWhileNode(cond, self._pred(p.predicate), body, p.until, sync)
        return self._add(node, p.name)

    def compile_if(self, p: P.If) -> N.Node:
        then = self.compile(p.then)
        empty_else = isinstance(p.else_, P.Sequence) and not p.else_.programs
        else_ = None if empty_else else self.compile(p.else_)
        sync = self._sync_step(p.name, "Internal")
        return self._add(N.IfNode(self._pred(p.predicate), then, else_, sync), p.name)

    def compile_switch(self, p: P.Switch) -> N.Node:
        cases = [self.compile(c) for _, c in p.cases]
        default = self.compile(p.default)
        values = np.array([v for v, _ in p.cases], dtype=np.int64)
        sync = self._sync_step(p.name, "Internal")
        return self._add(N.SwitchNode(self._pred(p.control), values, cases, default, sync), p.name)

    def compile_sync(self, p: P.Sync) -> N.Node:
        kind = "External" if p.sync_type == "external" else "Internal"
        return self._add(N.SyncNode(self._sync_step(p.name, kind)), p.name)

    def compile_write_undef(self, p: P.WriteUndef) -> N.Node:
        return self._add(N.WriteUndefNode((Gather.of(p.tensor.dtype, p.tensor.addresses),)), p.name)

    def compile_print(self, p: P.PrintTensor) -> N.Node:
        t = p.tensor
        assert t is not None  # PrintTensor's constructor requires it
        b = self.bytes_by_tile(t)
        action = N.Print(p.title, Gather.of(t.dtype, t.addresses), t.shape)
        return self.host_node(
            action, p.name or f"{p.title or 'tensor'}/PrintTensor", b, np.zeros_like(b)
        )


def _instructions(plan: ExchangePlan) -> dict[str, int]:
    """Poplar's ``memoryByInstruction`` breakdown of an exchange's code (all tiles)."""
    total = int(plan.code_bytes.sum())
    send = min(total, int(np.count_nonzero(plan.bytes_sent)) * 4)
    rest = total - send
    used = {"receiveAddress": rest // 2, "receiveMux": rest - rest // 2, "send": send}
    out = dict.fromkeys(MEMORY_BY_INSTRUCTION_PARTS, 0)
    for key, value in used.items():
        if key not in out:
            raise KeyError(f"memoryByInstruction has no part {key!r}")
        out[key] = value
    out["total"] = total
    return out


#: program class -> its compile method (each takes a program of its key's class)
COMPILE_RULES: dict[type[P.Program], Callable[[StepPlan, Any], N.Node]] = {
    P.Sequence: StepPlan.compile_sequence,
    P.Execute: StepPlan.compile_execute,
    P.Repeat: StepPlan.compile_repeat,
    P.RepeatWhileTrue: StepPlan.compile_repeat_while,
    P.RepeatWhileFalse: StepPlan.compile_repeat_while,
    P.If: StepPlan.compile_if,
    P.Switch: StepPlan.compile_switch,
    P.Copy: StepPlan.compile_copy,
    P.CrossReplicaCopy: StepPlan.compile_cross_replica,
    P.Sync: StepPlan.compile_sync,
    P.Call: StepPlan.compile_call,
    P.WriteUndef: StepPlan.compile_write_undef,
    P.PrintTensor: StepPlan.compile_print,
}

