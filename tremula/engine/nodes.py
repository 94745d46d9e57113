"""Lowered programs: what the engine runs and what the graph profile's ``programs`` lists.

A user program (``Execute``, ``Copy`` ...) lowers to one or more nodes of Poplar's lowered
kinds (``OnTileExecute``, ``DoExchange``, ``StreamCopy`` ...). Each node has a program id
(its index in the profile), the static steps it produces, and the tensor accesses the
liveness analysis needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tremula.engine.computeset import CompiledComputeSet
from tremula.engine.plan import Gather
from tremula.engine.timeline import StepInfo
from tremula.poplar.handles import DataStream, HostFunction, RemoteBuffer


@dataclass(eq=False)
class Node:
    pid: int = field(default=-1, init=False)
    name: str = field(default="", init=False)
    ptype: str = field(default="", init=False)

    def children(self) -> tuple[Node, ...]:
        return ()

    def profile_fields(self) -> dict[str, Any]:
        return {}

    def accesses(self) -> list[tuple[str, Gather]]:
        """``("r" | "w" | "u", gather)``: read, write, or write-undef of elements."""
        return []


@dataclass(eq=False)
class SeqNode(Node):
    nodes: list[Node]

    def __post_init__(self) -> None:
        self.ptype = "Sequence"

    def children(self) -> tuple[Node, ...]:
        return tuple(self.nodes)


@dataclass(eq=False)
class OnTileNode(Node):
    ccs: CompiledComputeSet
    step: StepInfo

    def __post_init__(self) -> None:
        self.ptype = "OnTileExecute"

    def profile_fields(self) -> dict[str, Any]:
        return {"computeSet": self.ccs.id}

    def accesses(self) -> list[tuple[str, Gather]]:
        out = []
        for g in self.ccs.groups:
            fields = g.vertex_type.codelet.fields
            for name, gather in g.gathers.items():
                if fields[name].reads:
                    out.append(("r", gather))
                if fields[name].writes:
                    out.append(("w", gather))
        return out


@dataclass(eq=False)
class ExchangeNode(Node):
    """An internal (DoExchange) or inter-IPU (GlobalExchange) exchange; when ``copy`` is
    given it also performs a tensor-to-tensor copy."""

    kind: str  # DoExchange or GlobalExchange
    exchange: int
    step: StepInfo
    sync: StepInfo
    copy: tuple[Gather, Gather] | None = None
    instructions: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.ptype = self.kind

    def profile_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"exchange": self.exchange}
        if self.instructions is not None:
            fields["memoryByInstruction"] = self.instructions
        return fields

    def accesses(self) -> list[tuple[str, Gather]]:
        return [] if self.copy is None else [("r", self.copy[0]), ("w", self.copy[1])]


@dataclass(eq=False)
class CrossReplicaNode(Node):
    """A copy between replicas over the IPU-links (a GlobalExchange)."""

    exchange: int
    step: StepInfo
    sync: StepInfo
    src: Gather
    dst: Gather
    sources: np.ndarray  # replica ids
    dests: np.ndarray

    def __post_init__(self) -> None:
        self.ptype = "GlobalExchange"

    def profile_fields(self) -> dict[str, Any]:
        return {"exchange": self.exchange}

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("r", self.src), ("w", self.dst)]


@dataclass(eq=False)
class HostNode(Node):
    """A host exchange (StreamCopy): stream copies, remote-buffer copies, host-function
    calls, tensor prints and code loads. ``action`` selects the run handler."""

    action: str  # h2d, d2h, remote_load, remote_store, host_call, print, code_load
    exchange: int
    step: StepInfo
    sync: StepInfo
    reads: tuple[Gather, ...] = ()
    writes: tuple[Gather, ...] = ()
    stream: DataStream | None = None
    buffer: RemoteBuffer | None = None
    offset: int | Gather | None = None
    host_function: HostFunction | None = None
    title: str = ""
    shape: tuple[int, ...] = ()
    function: int = -1

    def __post_init__(self) -> None:
        self.ptype = "StreamCopy"

    def profile_fields(self) -> dict[str, Any]:
        return {"exchange": self.exchange}

    def accesses(self) -> list[tuple[str, Gather]]:
        out = [("r", g) for g in self.reads] + [("w", g) for g in self.writes]
        if isinstance(self.offset, Gather):
            out.append(("r", self.offset))
        return out


@dataclass(eq=False)
class RepeatNode(Node):
    count: int
    body: Node

    def __post_init__(self) -> None:
        self.ptype = "Repeat"

    def children(self) -> tuple[Node, ...]:
        return (self.body,)

    def profile_fields(self) -> dict[str, Any]:
        return {"count": self.count}


@dataclass(eq=False)
class RepeatWhileNode(Node):
    condition: Node
    predicate: Gather
    body: Node
    until: bool
    sync: StepInfo

    def __post_init__(self) -> None:
        self.ptype = "RepeatWhileFalse" if self.until else "RepeatWhileTrue"

    def children(self) -> tuple[Node, ...]:
        return (self.condition, self.body)

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("r", self.predicate)]


@dataclass(eq=False)
class IfNode(Node):
    predicate: Gather
    then: Node
    else_: Node | None  # None: no else branch (Poplar's If; IfElse otherwise)
    sync: StepInfo

    def __post_init__(self) -> None:
        self.ptype = "If" if self.else_ is None else "IfElse"

    def children(self) -> tuple[Node, ...]:
        return (self.then,) if self.else_ is None else (self.then, self.else_)

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("r", self.predicate)]


@dataclass(eq=False)
class SwitchNode(Node):
    control: Gather
    values: np.ndarray
    cases: list[Node]
    default: Node
    sync: StepInfo

    def __post_init__(self) -> None:
        self.ptype = "Switch"

    def children(self) -> tuple[Node, ...]:
        return (*self.cases, self.default)

    def profile_fields(self) -> dict[str, Any]:
        return {"caseValues": [int(v) for v in self.values]}

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("r", self.control)]


@dataclass(eq=False)
class SyncNode(Node):
    step: StepInfo

    def __post_init__(self) -> None:
        self.ptype = "Sync"

    def profile_fields(self) -> dict[str, Any]:
        return {"syncType": self.step.sync_type}


@dataclass(eq=False)
class CallNode(Node):
    function: int  # index into functionPrograms
    graph_function: int  # the poplar Function id
    body: Node | None = None  # set once the function is lowered

    def __post_init__(self) -> None:
        self.ptype = "Call"

    def profile_fields(self) -> dict[str, Any]:
        return {"target": self.function}


@dataclass(eq=False)
class WriteUndefNode(Node):
    gathers: tuple[Gather, ...]

    def __post_init__(self) -> None:
        self.ptype = "WriteUndef"

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("u", g) for g in self.gathers]
