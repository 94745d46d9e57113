"""Compiled programs: what the engine runs and what the graph profile's ``programs`` lists.

A user program (``Execute``, ``Copy`` ...) compiles to one or more nodes of the profile's program
types (``OnTileExecute``, ``DoExchange``, ``StreamCopy`` ...). Each node has a program id
(its index in the profile), the static steps it produces, and the tensor accesses the
liveness analysis needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.engine.computeset import CompiledComputeSet
from tremula.engine.group import LIVE_KEPT
from tremula.engine.plan import CopyPlan, Gather
from tremula.engine.timeline import StepInfo, tile_balances
from tremula.errors import EngineError
from tremula.poplar.handles import DataStream, HostFunction, RemoteBuffer

if TYPE_CHECKING:
    from tremula.poplar.program import PrintTensorFmt


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
    #: the step of the last run when the compute set's cycles depend on the data
    #: (``CompiledComputeSet.dynamic``); None: ``step``
    live: StepInfo | None = None
    #: steps of recent runs by the identities of the groups' cycle arrays: ``(the arrays,
    #: the step, its cycles by tile)`` (a propagation step whose buckets were seen before
    #: gets the same arrays, hence the same step, without scheduling it again)
    _live_steps: dict[tuple[int, ...], tuple[list[Any], StepInfo, Any]] = field(
        default_factory=dict
    )

    def __post_init__(self) -> None:
        self.ptype = "OnTileExecute"

    def note_live(self, target: Any) -> np.ndarray:
        """Set :attr:`live` from the last run's cycles; returns its cycles by tile (a step
        noted before again when every group's cycles are the same arrays)."""
        counts = [g.live_cycles for g in self.ccs.groups]
        key = tuple(id(c) for c in counts)
        seen = self._live_steps.get(key)
        if seen is not None and all(a is b for a, b in zip(counts, seen[0])):
            self.live = seen[1]
            return seen[2]
        cycles, active, balance = self.ccs.live_schedule(target)
        tiles = np.flatnonzero(cycles > 0)
        tb, atb = tile_balances(cycles, target.num_tiles)
        record = replace(
            self.step.record,
            tile_balance=tb,
            active_tiles=int(tiles.size),
            active_tile_balance=atb,
            thread_balance=balance,
        )
        self.live = replace(
            self.step,
            record=record,
            tiles=tiles,
            cycles=cycles[tiles].astype(np.int64),
            active_cycles=int(active.sum()),
        )
        if len(self._live_steps) >= LIVE_KEPT:
            self._live_steps.pop(next(iter(self._live_steps)))
        self._live_steps[key] = (counts, self.live, cycles)
        return cycles

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
    plan: CopyPlan | None = field(default=None, init=False)  # how the copy moves data

    def __post_init__(self) -> None:
        self.ptype = self.kind
        if self.copy is not None:
            self.plan = CopyPlan(*self.copy)

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


@dataclass(frozen=True)
class StreamIn:
    """Host to device: the next transfer of ``stream`` into ``dst``."""

    stream: DataStream
    dst: Gather

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("w", self.dst)]


@dataclass(frozen=True)
class StreamOut:
    """Device to host: ``src`` into the next transfer of ``stream``."""

    stream: DataStream
    src: Gather

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("r", self.src)]


@dataclass(frozen=True)
class RemoteLoad:
    """Rows ``offset`` of a remote buffer into ``dst``."""

    buffer: RemoteBuffer
    dst: Gather
    offset: int | Gather

    def accesses(self) -> list[tuple[str, Gather]]:
        out = [("w", self.dst)]
        return out + ([("r", self.offset)] if isinstance(self.offset, Gather) else [])


@dataclass(frozen=True)
class RemoteStore:
    """``src`` into rows ``offset`` of a remote buffer."""

    buffer: RemoteBuffer
    src: Gather
    offset: int | Gather

    def accesses(self) -> list[tuple[str, Gather]]:
        out = [("r", self.src)]
        return out + ([("r", self.offset)] if isinstance(self.offset, Gather) else [])


@dataclass(frozen=True)
class HostCall:
    """A host function called with ``inputs``, filling ``outputs``."""

    function: HostFunction
    inputs: tuple[Gather, ...]
    outputs: tuple[Gather, ...]

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("r", g) for g in self.inputs] + [("w", g) for g in self.outputs]


@dataclass(frozen=True)
class Print:
    """``PrintTensor``: ``src`` shown on the host as ``title: value``."""

    title: str
    src: Gather
    shape: tuple[int, ...]
    fmt: PrintTensorFmt | None = None  # None: NumPy's layout with ", "

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("r", self.src)]


@dataclass(frozen=True)
class CodeLoad:
    """A function's code copied from its function buffer into tile memory."""

    function: int  # the poplar Function id

    def accesses(self) -> list[tuple[str, Gather]]:
        return []


HostAction = StreamIn | StreamOut | RemoteLoad | RemoteStore | HostCall | Print | CodeLoad


@dataclass(eq=False)
class HostNode(Node):
    """A host exchange (a StreamCopy program) performing ``action``."""

    action: HostAction
    exchange: int
    step: StepInfo
    sync: StepInfo

    def __post_init__(self) -> None:
        self.ptype = "StreamCopy"

    def profile_fields(self) -> dict[str, Any]:
        return {"exchange": self.exchange}

    def accesses(self) -> list[tuple[str, Gather]]:
        return self.action.accesses()


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
    body: Node | None = None  # set once the function is compiled

    def __post_init__(self) -> None:
        self.ptype = "Call"

    @property
    def callee(self) -> Node:
        """The called function's body (compiled before the plan is run or walked)."""
        if self.body is None:
            raise EngineError(f"function {self.graph_function} called before it was compiled")
        return self.body

    def profile_fields(self) -> dict[str, Any]:
        return {"target": self.function}


@dataclass(eq=False)
class WriteUndefNode(Node):
    gathers: tuple[Gather, ...]

    def __post_init__(self) -> None:
        self.ptype = "WriteUndef"

    def accesses(self) -> list[tuple[str, Gather]]:
        return [("u", g) for g in self.gathers]


def reachable(root: Node) -> Iterator[Node]:
    """Every node reachable from ``root``, function bodies included, each once."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        if isinstance(node, CallNode) and node.body is not None:
            stack.append(node.body)
        stack.extend(node.children())
