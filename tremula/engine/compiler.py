"""Compiling the engine's programs into a step plan: one rule per program class (a table,
``COMPILE_RULES``); the rules are in ``programs.py`` (compute sets, calls, control flow) and
``copies.py`` (copies, streams, remote buffers, host calls, cross-replica copies).

A user program (``Execute``, ``Copy`` ...) compiles to one or more nodes (``nodes.py``), each
with the static steps it will put on the timeline; :class:`StepPlan` holds the tables and
builds the nodes and steps the rules ask for.

Everything static is decided here, once: compiled compute sets, exchange plans, the cycles of
every step on every tile, and the profile's program, exchange and compute-set tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from tremula.engine import copies, programs
from tremula.engine import nodes as N
from tremula.engine.computeset import CompiledComputeSet, compile_compute_set
from tremula.engine.exchange import ExchangePlan, Transfers, plan_exchange, split_by_ipu
from tremula.engine.plan import Gather
from tremula.engine.tilelayout import TileLayout
from tremula.engine.timeline import StepInfo, tile_balances
from tremula.errors import ProgramError
from tremula.poplar import program as P
from tremula.poplar.graph import GraphState
from tremula.poplar.handles import Function
from tremula.poplar.tensor import Tensor
from tremula.profile.schema import MEMORY_BY_INSTRUCTION_PARTS, StepRecord


@dataclass(eq=False)
class HostExchange:
    """One host exchange (a StreamCopy program), for the profile's ``hostExchanges``."""

    bytes_sent: np.ndarray  # device -> host, per tile
    bytes_received: np.ndarray  # host -> device, per tile
    cycles_by_tile: np.ndarray


class DataFields(NamedTuple):
    """The data fields of an exchange step (the profile's ``totalData``, ``dataBalance``)."""

    total_data: int
    data_balance: float


class StepPlan:
    """The engine's programs and the functions they call, compiled into nodes and steps, with
    the tables the profiles list (programs, compute sets, exchanges, host exchanges)."""

    def __init__(self, state: GraphState) -> None:
        self.state = state
        self.target = state.target
        self.space_ids = {t: i for i, t in enumerate(state.spaces)}
        self.layout = TileLayout.build([sp.tiles() for sp in state.spaces.values()])
        self.nodes: list[N.Node] = []
        self._cs_exchanges: dict[int, tuple] = {}
        self.compute_sets: list[CompiledComputeSet] = []
        for cs in state.compute_sets:
            ccs = compile_compute_set(state, cs, self.space_ids, self.layout)
            self.cs_plans(ccs)  # planned while its moves are fresh, which are then let go
            ccs.pre = ccs.post = Transfers.empty()
            self.compute_sets.append(ccs)
        self.exchanges: list[ExchangePlan] = []
        self.external_exchanges: list[ExchangePlan] = []
        self.host_exchanges: list[HostExchange] = []
        self.function_roots: list[N.Node] = []  # index = functionPrograms position
        self.function_index: dict[int, int] = {}  # poplar function id -> position
        self.function_code: dict[int, np.ndarray] = {}  # function id -> code bytes per tile
        self._compiling: set[int] = set()
        self.control_roots: list[N.Node] = []
        #: which variables only carry values between two compute sets (``fusion.Carried``),
        #: set by the engine after its liveness walk; None: no fused replays
        self.carried: Any = None

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

    def add(self, node: N.Node, name: str = "") -> N.Node:
        """Append ``node`` to the profile's programs (its ``pid`` is its index)."""
        node.pid = len(self.nodes)
        node.name = name or node.name
        self.nodes.append(node)
        return node

    def step(
        self,
        ptype: str,
        name: str,
        d: np.ndarray,
        lockstep: bool,
        active_cycles: int = 0,
        *,
        data: DataFields | None = None,
        compute_set: int | None = None,
        thread_balance: float | None = None,
        exchange: int | None = None,
        external_exchange: int | None = None,
        host_exchange: int | None = None,
    ) -> StepInfo:
        """The static step of the next node: per-tile cycles ``d``, balances and the fields
        of its type (``data``: an exchange's)."""
        tiles = np.flatnonzero(d > 0)
        tb, atb = tile_balances(d, self.target.num_tiles)
        record = StepRecord(
            ptype,
            self.next_pid,
            name,
            tile_balance=tb,
            active_tiles=int(tiles.size),
            active_tile_balance=atb,
            compute_set=compute_set,
            thread_balance=thread_balance,
            exchange=exchange,
            external_exchange=external_exchange,
            host_exchange=host_exchange,
            total_data=None if data is None else data.total_data,
            data_balance=None if data is None else data.data_balance,
        )
        return StepInfo(
            record, tiles, d[tiles].astype(np.int64), active_cycles=active_cycles, lockstep=lockstep
        )

    def sync_step(self, name: str, sync_type: str) -> StepInfo:
        """The sync step (``Internal`` or ``External``) of the next node."""
        record = StepRecord("Sync", self.next_pid, name, sync_type=sync_type)
        return StepInfo(record, np.zeros(0, np.int64), np.zeros(0, np.int64))

    @staticmethod
    def data_fields(sent: np.ndarray, recv: np.ndarray) -> DataFields:
        """An exchange step's ``totalData`` and ``dataBalance`` from its bytes per tile."""
        data = sent + recv
        peak = int(data.max(initial=0))
        active = int(np.count_nonzero(data))
        balance = float(data.sum() / (active * peak)) if peak else 1.0
        return DataFields(int(recv.sum() if recv.sum() else sent.sum()), balance)

    def exchange_node(
        self, plan: ExchangePlan, name: str, copy: tuple[Gather, Gather] | None = None
    ) -> N.ExchangeNode:
        """The node of an exchange ``plan``, listed in the profile's ``exchanges`` (internal)
        or ``externalExchanges``; ``copy`` is the (source, destination) a Copy moves."""
        internal = plan.kind == "internal"
        table = self.exchanges if internal else self.external_exchanges
        index = len(table)
        table.append(plan)
        kind = "DoExchange" if internal else "GlobalExchange"
        step = self.step(
            kind,
            name,
            plan.cycles_by_tile,
            True,
            exchange=index if internal else None,
            external_exchange=None if internal else index,
            data=self.data_fields(plan.bytes_sent, plan.bytes_received),
        )
        sync = self.sync_step(name, "Internal" if internal else "External")
        instructions = _instructions(plan) if internal else None
        node = N.ExchangeNode(kind, index, step, sync, copy, instructions)
        self.add(node, name)
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
        step = self.step(
            "StreamCopy",
            name,
            d,
            True,
            host_exchange=index,
            data=self.data_fields(bytes_sent, bytes_received),
        )
        node = N.HostNode(action, index, step, self.sync_step(name, "External"))
        self.add(node, name)
        return node

    def bytes_by_tile(self, t: Tensor) -> np.ndarray:
        """Bytes of ``t`` on each tile."""
        tiles = self.state.space(t.dtype).tile_of[t.addresses.reshape(-1)]
        return (np.bincount(tiles, minlength=self.target.num_tiles) * t.dtype.size).astype(np.int64)

    def cs_plans(self, ccs: CompiledComputeSet) -> tuple[list, list]:
        """The exchange plans before and after compute set ``ccs`` (planned once)."""
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

    def function_position(self, fn: Function) -> int:
        """``fn``'s position in the profile's ``functionPrograms``, compiling it on first use."""
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


#: program class -> its compile rule (each takes a program of its key's class)
COMPILE_RULES: dict[type[P.Program], Callable[[StepPlan, Any], N.Node]] = {
    P.Sequence: programs.compile_sequence,
    P.Execute: programs.compile_execute,
    P.Repeat: programs.compile_repeat,
    P.RepeatWhileTrue: programs.compile_repeat_while,
    P.RepeatWhileFalse: programs.compile_repeat_while,
    P.If: programs.compile_if,
    P.Switch: programs.compile_switch,
    P.Copy: copies.compile_copy,
    P.CrossReplicaCopy: copies.compile_cross_replica,
    P.Sync: programs.compile_sync,
    P.Call: programs.compile_call,
    P.WriteUndef: programs.compile_write_undef,
    P.PrintTensor: copies.compile_print,
}
