"""The constants of the profile format: field names, enumerations and per-type field tables.

Everything here restates ``FORMAT.md`` as data, so that the validator, the summary and the
Chrome trace export share one definition. Tuples are in the order FORMAT.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# -- target ---------------------------------------------------------------------------------

TARGET_TYPES: tuple[str, ...] = ("IPU_MODEL", "IPU", "CPU")
IPU_VERSIONS: tuple[str, ...] = ("ipu1", "ipu2", "bow", "cpu")
#: Integer fields of ``target`` (``clockFrequency`` is a float, the rest are checked apart).
TARGET_INT_FIELDS: tuple[str, ...] = (
    "bytesPerIPU",
    "bytesPerTile",
    "numIPUs",
    "tilesPerIPU",
    "numTiles",
    "totalMemory",
    "minSyncDelay",
    "replicationFactor",
)

# -- graph, compute sets, exchanges ---------------------------------------------------------

GRAPH_COUNT_FIELDS: tuple[str, ...] = ("numComputeSets", "numEdges", "numVars", "numVertices")
#: Keys of ``computeSets.cycleEstimates`` (present for IPU_MODEL targets).
CYCLE_ESTIMATE_KEYS: tuple[str, ...] = (
    "activeCyclesByTile",
    "activeCyclesByVertexType",
    "cyclesByTile",
)
#: Keys of ``exchanges`` (internal exchanges), each ``[ex][tile]``.
EXCHANGE_KEYS: tuple[str, ...] = (
    "bytesReceivedByTile",
    "bytesSentByTile",
    "cyclesByTile",
    "codeBytesByTile",
)
#: Keys of ``externalExchanges`` and ``hostExchanges``, each ``[ex][tile]``.
EXTERNAL_EXCHANGE_KEYS: tuple[str, ...] = (
    "bytesReceivedByTile",
    "bytesSentByTile",
    "estimatedCyclesByTile",
)
#: The three exchange tables of the graph profile and their keys.
EXCHANGE_TABLES: dict[str, tuple[str, ...]] = {
    "exchanges": EXCHANGE_KEYS,
    "externalExchanges": EXTERNAL_EXCHANGE_KEYS,
    "hostExchanges": EXTERNAL_EXCHANGE_KEYS,
}

# -- programs -------------------------------------------------------------------------------

#: Required fields of each program type (``type`` and the optional ``name`` aside).
PROGRAM_FIELDS: dict[str, tuple[str, ...]] = {
    "Sequence": ("children",),
    "OnTileExecute": ("computeSet",),
    "DoExchange": ("exchange", "memoryByInstruction"),
    "GlobalExchange": ("exchange",),
    "StreamCopy": ("exchange",),
    "Repeat": ("children", "count"),
    "RepeatWhileTrue": ("children",),
    "RepeatWhileFalse": ("children",),
    "If": ("children",),
    "IfElse": ("children",),
    "SetLocalConsensusFromVar": (),
    "Switch": ("children", "caseValues"),
    "Sync": ("syncType",),
    "Call": ("target",),
    "WriteUndef": (),
    "CopySharedStructure": (),
}
PROGRAM_TYPES: tuple[str, ...] = tuple(PROGRAM_FIELDS)
#: Allowed number of children per program type: (minimum, maximum or None for no maximum).
PROGRAM_CHILD_COUNTS: dict[str, tuple[int, int | None]] = {
    "Sequence": (0, None),
    "Repeat": (1, 1),
    "RepeatWhileTrue": (2, 2),
    "RepeatWhileFalse": (2, 2),
    "If": (1, 1),
    "IfElse": (2, 2),
    "Switch": (1, None),
}
#: The exchange table a program's ``exchange`` field indexes, per program type.
PROGRAM_EXCHANGE_TABLES: dict[str, str] = {
    "DoExchange": "exchanges",
    "GlobalExchange": "externalExchanges",
    "StreamCopy": "hostExchanges",
}
#: Keys of a DoExchange program's ``memoryByInstruction``; ``total`` is the sum of the others.
MEMORY_BY_INSTRUCTION_PARTS: tuple[str, ...] = (
    "delay",
    "exchange",
    "other",
    "receiveAddress",
    "receiveFormat",
    "receiveMux",
    "send",
    "sendWithPutAddress",
    "sendWithPutFormat",
    "sendWithPutMux",
)
MEMORY_BY_INSTRUCTION_KEYS: tuple[str, ...] = (*MEMORY_BY_INSTRUCTION_PARTS, "total")
SYNC_TYPES: tuple[str, ...] = ("Internal", "External")

# -- memory ---------------------------------------------------------------------------------

MEMORY_REGIONS: tuple[str, ...] = ("interleaved", "nonInterleaved", "overflowed")
OVERLAP_KINDS: tuple[str, ...] = ("nonOverlapped", "overlapped")
#: Keys of ``memory.byTile``, each ``[tile]``.
BY_TILE_KEYS: tuple[str, ...] = (
    "interleaved",
    "interleavedIncludingGaps",
    "nonInterleaved",
    "nonInterleavedIncludingGaps",
    "overflowed",
    "overflowedIncludingGaps",
    "total",
    "totalIncludingGaps",
)
#: Categories of ``memory.byCategory``, all always present.
MEMORY_CATEGORIES: tuple[str, ...] = (
    "constant",
    "controlCode",
    "controlId",
    "controlTable",
    "copyDescriptor",
    "globalExchangeCode",
    "globalExchangePacketHeader",
    "globalMessage",
    "hostExchangeCode",
    "hostExchangePacketHeader",
    "hostMessage",
    "instrumentationResults",
    "internalExchangeCode",
    "message",
    "multiple",
    "outputEdge",
    "rearrangement",
    "sharedCodeStorage",
    "sharedDataStorage",
    "stack",
    "variable",
    "vectorListDescriptor",
    "vertexCode",
    "vertexFieldData",
    "vertexInstanceState",
)
#: The parts of ``memory.byComputeSet`` / ``memory.byVertexType``; ``totalBytes`` sums them.
VERTEX_MEMORY_PARTS: tuple[str, ...] = (
    "codeBytes",
    "copyPtrBytes",
    "descriptorBytes",
    "edgePtrBytes",
    "paddingBytes",
    "vertexDataBytes",
)
#: Keys of ``memory.byComputeSet`` (each ``[cs][tile]``) and ``memory.byVertexType``
#: (each ``[type][tile]``).
VERTEX_MEMORY_KEYS: tuple[str, ...] = (*VERTEX_MEMORY_PARTS, "totalBytes")

# -- execution profile ----------------------------------------------------------------------

PROFILER_MODES: tuple[str, ...] = (
    "NONE",
    "CPU",
    "IPU_MODEL",
    "COMPUTE_SETS",
    "SINGLE_TILE_COMPUTE_SETS",
    "VERTICES",
    "EXTERNAL_EXCHANGES",
    "HOST_EXCHANGES",
)
#: Modes whose profile may omit ``programTrace`` and ``simulation``.
MODES_WITHOUT_TRACE: tuple[str, ...] = ("NONE", "CPU")
#: Arrays each mode adds to the execution profile.
MODE_FIELDS: dict[str, tuple[str, ...]] = {
    "COMPUTE_SETS": ("computeSetCyclesByTile",),
    "SINGLE_TILE_COMPUTE_SETS": ("computeSetCycles",),
    "VERTICES": ("vertexCycles", "vertexComputeSet", "vertexType"),
    "EXTERNAL_EXCHANGES": ("externalExchangeCycles",),
    "HOST_EXCHANGES": ("hostExchangeCycles",),
}
#: Keys of ``simulation.tileCycles``.
TILE_CYCLES_KEYS: tuple[str, ...] = (
    "activeCompute",
    "compute",
    "copySharedStructure",
    "doExchange",
    "globalExchange",
    "streamCopy",
    "sync",
)
#: The ``tileCycles`` keys that partition tile time (``activeCompute`` is part of ``compute``).
TILE_CYCLES_PARTITION: tuple[str, ...] = tuple(k for k in TILE_CYCLES_KEYS if k != "activeCompute")
#: The ``tileCycles`` key that counts the tile time of each step type.
STEP_TILE_CYCLES: dict[str, str] = {
    "OnTileExecute": "compute",
    "DoExchange": "doExchange",
    "GlobalExchange": "globalExchange",
    "StreamCopy": "streamCopy",
    "Sync": "sync",
    "CopySharedStructure": "copySharedStructure",
}

#: Integer fields every step has, besides ``type`` and the optional ``name``.
STEP_INT_FIELDS: tuple[str, ...] = ("program", "cycles", "cyclesFrom", "cyclesTo", "activeTiles")
#: Float fields in [0, 1] every step has.
STEP_BALANCE_FIELDS: tuple[str, ...] = ("tileBalance", "activeTileBalance")
STEP_COMMON_FIELDS: tuple[str, ...] = ("type", *STEP_INT_FIELDS, *STEP_BALANCE_FIELDS)
#: Extra fields per step type.
STEP_FIELDS: dict[str, tuple[str, ...]] = {
    "OnTileExecute": ("computeSet", "threadBalance", "cyclesOverlapped"),
    "DoExchange": ("exchange", "totalData", "dataBalance", "cyclesOverlapped"),
    "GlobalExchange": ("externalExchange", "totalData", "dataBalance"),
    "StreamCopy": ("hostExchange", "totalData", "dataBalance"),
    "CopySharedStructure": ("totalData", "dataBalance", "cyclesOverlapped"),
    "Sync": ("syncType",),
}
STEP_TYPES: tuple[str, ...] = tuple(STEP_FIELDS)
#: Step types whose steps say how many of their cycles overlap the previous step's.
OVERLAPPING_STEP_TYPES: tuple[str, ...] = tuple(
    t for t, fields in STEP_FIELDS.items() if "cyclesOverlapped" in fields
)
#: Step fields that index a graph-profile table, and the table they index.
STEP_INDEX_FIELDS: dict[str, str] = {
    "computeSet": "computeSets",
    "exchange": "exchanges",
    "externalExchange": "externalExchanges",
    "hostExchange": "hostExchanges",
}


@dataclass(frozen=True)
class StepRecord:
    """What the execution profile says of one step: its type, program and (optional)
    name, its place on the timeline, and the fields of its type (``STEP_FIELDS``; None:
    not given). The engine fills the compile-time fields once per program node and the
    timeline's fields per run; :meth:`to_json` is the one place a step becomes the profile's
    dict, in FORMAT.md's key order."""

    type: str
    program: int
    name: str = ""
    tile_balance: float | None = None  # a Sync's is known only when it runs
    active_tiles: int | None = None
    active_tile_balance: float | None = None
    compute_set: int | None = None
    thread_balance: float | None = None
    exchange: int | None = None
    external_exchange: int | None = None
    host_exchange: int | None = None
    total_data: int | None = None
    data_balance: float | None = None
    sync_type: str | None = None

    def __post_init__(self) -> None:
        if self.type not in STEP_FIELDS:
            raise ValueError(f"step type {self.type!r} is not one of {STEP_TYPES}")
        for attr, key in _STEP_ATTRS.items():
            if getattr(self, attr) is not None and key not in STEP_FIELDS[self.type]:
                raise ValueError(f"a {self.type} step has no field {key!r}")

    def to_json(
        self,
        start: int,
        end: int,
        overlapped: int,
        balance: float | None,
        num_tiles: int,
    ) -> dict[str, Any]:
        """The step as the profile writes it, for a run from cycle ``start`` to ``end``
        overlapping the previous step by ``overlapped`` cycles; a Sync's tile balance is
        ``balance`` (the timeline's) over all ``num_tiles`` tiles."""
        s: dict[str, Any] = {"type": self.type, "program": self.program}
        if self.name:
            s["name"] = self.name
        s.update(cycles=end - start, cyclesFrom=start, cyclesTo=end)
        if self.type == "Sync":
            s.update(
                syncType=self.sync_type,
                tileBalance=balance,
                activeTiles=num_tiles,
                activeTileBalance=balance,
            )
            return s
        s.update(
            tileBalance=self.tile_balance,
            activeTiles=self.active_tiles,
            activeTileBalance=self.active_tile_balance,
        )
        for key in STEP_FIELDS[self.type]:
            attr = _STEP_KEY_ATTRS.get(key)
            value = None if attr is None else getattr(self, attr)
            if value is not None:
                s[key] = value
        if self.type in OVERLAPPING_STEP_TYPES:
            s["cyclesOverlapped"] = overlapped
        return s


#: StepRecord attribute -> profile key of the per-type fields (``STEP_FIELDS``)
_STEP_ATTRS: dict[str, str] = {
    "compute_set": "computeSet",
    "thread_balance": "threadBalance",
    "exchange": "exchange",
    "external_exchange": "externalExchange",
    "host_exchange": "hostExchange",
    "total_data": "totalData",
    "data_balance": "dataBalance",
    "sync_type": "syncType",
}
_STEP_KEY_ATTRS: dict[str, str] = {key: attr for attr, key in _STEP_ATTRS.items()}

#: For a step whose program has the step's type: (step field, program field) that must agree.
STEP_PROGRAM_LINKS: dict[str, tuple[str, str]] = {
    "OnTileExecute": ("computeSet", "computeSet"),
    "DoExchange": ("exchange", "exchange"),
    "GlobalExchange": ("externalExchange", "exchange"),
    "StreamCopy": ("hostExchange", "exchange"),
    "Sync": ("syncType", "syncType"),
}

# -- Tremula extensions (FORMAT.md) ---------------------------------------------------------

#: Top-level key of both profiles: a hash of the graph profile, equal in the execution
#: profiles of the same compiled program (so a mismatched graph.json / execution.json pair is
#: refused).
GRAPH_ID = "graphId"

#: Keys of ``memory.liveness.programSteps``: each linearised step's program and the
#: not-always-live bytes over all tiles at that step.
PROGRAM_STEPS_KEYS: tuple[str, ...] = ("program", "notAlwaysLiveBytes")
#: Keys of the graph profile's ``variables`` table, one entry per variable in each.
VARIABLE_TABLE_KEYS: tuple[str, ...] = (
    "names",
    "bytes",
    "alwaysLive",
    "liveFrom",
    "liveTo",
    "tileRuns",
)
