"""A text summary of a profile, in the style of Poplar's ``Engine::printProfileSummary``.

Sections: Target, Graph, Memory Usage (totals, by region, by data type, vertex data, by tile
and the most-used tiles), Liveness and, with an execution profile, Execution (total cycles,
time, the tile-cycle breakdown and optionally every step). Numbers use thousands separators
(``1,472``); byte sizes of the target use Poplar's units (``624.0 kB`` is 624 KiB).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula.errors import ProfileError
from tremula.profile import schema
from tremula.profile.hosttime import host_time_rows

#: Human names of the memory categories: first those of Poplar's summary, in its order, then
#: names for the categories its example report does not show (after the descriptions in
#: Graphcore's "Poplar profiling data format" document).
CATEGORY_LABELS: dict[str, str] = {
    "variable": "Variables",
    "constant": "Constants",
    "hostExchangePacketHeader": "Host Exchange Packet Headers",
    "globalExchangePacketHeader": "Global Exchange Packet Headers",
    "stack": "Stack",
    "vertexInstanceState": "Vertex Instances",
    "copyDescriptor": "Copy Descriptors",
    "vectorListDescriptor": "VectorList Descriptors",
    "vertexFieldData": "Vertex Field Data",
    "controlTable": "Control Table",
    "controlCode": "Control Code",
    "vertexCode": "Vertex Code",
    "internalExchangeCode": "Internal Exchange Code",
    "hostExchangeCode": "Host Exchange Code",
    "globalExchangeCode": "Global Exchange Code",
    "instrumentationResults": "Instrumentation Results",
    "sharedCodeStorage": "Shared Code Storage",
    "sharedDataStorage": "Shared Data Storage",
    "controlId": "Control IDs",
    "message": "Internal Exchange Messages",
    "hostMessage": "Host Exchange Messages",
    "globalMessage": "Global Exchange Messages",
    "outputEdge": "Output Edges",
    "rearrangement": "Rearrangement Buffers",
    "multiple": "Multiple Categories",
}
#: The parts of vertex data (byVertexType keys) and their names in the summary.
VERTEX_DATA_LABELS: tuple[tuple[str, str], ...] = (
    ("vertexDataBytes", "Internal vertex state"),
    ("edgePtrBytes", "Edge pointers"),
    ("copyPtrBytes", "Copy pointers"),
    ("paddingBytes", "Padding"),
    ("descriptorBytes", "Descriptors"),
)
#: The ``tileCycles`` keys and their names in the summary.
TILE_CYCLES_LABELS: tuple[tuple[str, str], ...] = (
    ("compute", "Compute (inc. idle threads)"),
    ("activeCompute", "Compute (exc. idle threads)"),
    ("doExchange", "Internal exchange"),
    ("globalExchange", "Global exchange"),
    ("streamCopy", "Host exchange (StreamCopy)"),
    ("copySharedStructure", "Shared structure copy"),
    ("sync", "Sync"),
)
REGION_LABELS: tuple[tuple[str, str], ...] = (
    ("nonInterleaved", "Non-interleaved"),
    ("interleaved", "Interleaved"),
    ("overflowed", "Overflowed"),
)

#: A report line: (depth, label, value). A None value prints the label verbatim.
Row = tuple[int, str, str | None]


def summarise(
    graph: Mapping[str, Any],
    execution: Mapping[str, Any] | None = None,
    *,
    show_execution_steps: bool = False,
    show_var_storage: bool = False,
    top_tiles: int = 5,
    host_time: Mapping[str, Any] | None = None,
    top_steps: int = 20,
) -> str:
    """Summarise a profile as text.

    Args:
        graph: A valid graph profile (see :func:`tremula.profile.validate`).
        execution: Its execution profile, or None for a compile-only report.
        show_execution_steps: List every step: ``<Type>: <name>`` then its cycles, active
            tiles and tile balance.
        show_var_storage: Add per-tile liveness to the most-used tiles, and the
            not-always-live tree by program.
        top_tiles: How many of the most-used tiles (by memory including gaps) to break down.
        host_time: A host-time document (``tremula.profile.hosttime``, read from
            ``host_time.json``): adds a "Host time" section ranking the steps by the host
            CPU time they took. The profile itself never holds host time.
        top_steps: How many steps the host-time section lists (0: all).

    Returns:
        The report, ending with a newline. Equal profiles give equal reports.

    Raises:
        ProfileError: If the profile lacks a field the report needs.
    """
    try:
        sections = [
            ("Target", _target_rows(graph["target"])),
            ("Graph", _graph_rows(graph["graph"])),
            ("Memory Usage", _MemoryReport(graph).rows(top_tiles, show_var_storage)),
            ("Liveness", _liveness_rows(graph, show_var_storage)),
        ]
        if "instances" in graph:
            sections.append(("Instance", _instance_rows(graph["instances"])))
        if execution is not None:
            sections.append(("Execution", _execution_rows(graph, execution, show_execution_steps)))
        else:
            none = (
                "none: the graph profile came without its execution profile (no steps, no cycles)"
            )
            sections.append(("Execution", [(0, none, None)]))
        if host_time is not None:
            sections.append(("Host time", host_time_rows(host_time, top_steps)))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ProfileError(
            f"cannot summarise the profile ({type(exc).__name__}: {exc}); "
            "validate() lists its problems"
        ) from exc
    return "\n\n".join(_render(title, rows) for title, rows in sections) + "\n"


# -- formatting -----------------------------------------------------------------------------


def _bytes(n: int) -> str:
    return f"{int(n):,} B"


def _scaled(n: int) -> str:
    """A size in Poplar's summary units: ``256.0 kB``, ``304.0 MB`` (powers of 1024)."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return _bytes(n)


def _percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole if whole else 0.0:.1f}%"


def _matrix(rows: Sequence[Sequence[int]], num_rows: int) -> np.ndarray:
    """A ``[row][tile]`` list as a 2-D int array, also when it has no rows."""
    arr = np.asarray(rows, np.int64)
    return arr if arr.ndim == 2 else np.zeros((num_rows, 0), np.int64)


def _render(title: str, rows: Sequence[Row]) -> str:
    """Render rows under ``title:``, values in one column for the whole section.

    A value's first word (its number) is right-aligned in that column and the rest (unit,
    tile, percentage) follows it, as in Poplar's summary.
    """
    valued = [(depth, label, value) for depth, label, value in rows if value is not None]
    label_width = max((2 * depth + len(label) for depth, label, _ in valued), default=0) + 1
    head_width = max((len(value.split(" ", 1)[0]) for _, _, value in valued), default=0)
    lines = [f"{title}:"]
    for depth, label, value in rows:
        indent = "  " * (depth + 1)
        if value is None:
            lines.append(indent + label)
            continue
        head, _, tail = value.partition(" ")
        name = f"{label}:".ljust(label_width - 2 * depth)
        lines.append(f"{indent}{name}  {head:>{head_width}}{' ' if tail else ''}{tail}")
    return "\n".join(lines)


# -- sections -------------------------------------------------------------------------------


def _target_rows(t: Mapping[str, Any]) -> list[Row]:
    return [
        (0, "Number of IPUs", f"{t['numIPUs']:,}"),
        (0, "Tiles per IPU", f"{t['tilesPerIPU']:,}"),
        (0, "Total Tiles", f"{t['numTiles']:,}"),
        (0, "Memory Per-Tile", _scaled(t["bytesPerTile"])),
        (0, "Total Memory", _scaled(t["totalMemory"])),
        (0, "Clock Speed (approx)", f"{t['clockFrequency'] / 1e6:,.1f} MHz"),
    ]


def _instance_rows(inst: Mapping[str, Any]) -> list[Row]:
    """An instance of a PopRun job: its replicas and its copies to and from the others."""
    reps = inst["replicas"]
    span = f"{reps[0]}..{reps[-1]}" if len(reps) > 1 else str(reps[0])
    rows: list[Row] = [
        (0, "Instance", f"{inst['index']} of {inst['count']}"),
        (0, "Replicas", f"{span} of {inst['replicationFactor']}"),
        (0, "Cross-instance copies", f"{len(inst['crossInstanceCopies']):,}"),
    ]
    for c in inst["crossInstanceCopies"]:
        rows.append((1, c["name"] or f"program {c['program']}", None))
        rows.append((2, "Sent", f"{_bytes(c['bytesSent'])} to instances {c['sendsTo']}"))
        rows.append(
            (2, "Received", f"{_bytes(c['bytesReceived'])} from instances {c['receivesFrom']}")
        )
        rows.append((2, "Cycles", f"{c['cycles']:,} ({c['link']})"))
    return rows


def _graph_rows(g: Mapping[str, Any]) -> list[Row]:
    return [
        (0, "Number of vertices", f"{g['numVertices']:,}"),
        (0, "Number of edges", f"{g['numEdges']:,}"),
        (0, "Number of variables", f"{g['numVars']:,}"),
        (0, "Number of compute sets", f"{g['numComputeSets']:,}"),
    ]


class _MemoryReport:
    """The Memory Usage section: totals, by region, by data type, vertex data, by tile."""

    def __init__(self, graph: Mapping[str, Any]) -> None:
        memory = graph["memory"]
        self.bytes_per_tile = int(graph["target"]["bytesPerTile"])
        self.by_tile = {k: np.asarray(memory["byTile"][k], np.int64) for k in schema.BY_TILE_KEYS}
        categories = memory["byCategory"]
        #: Per-tile totals of the categories present, in CATEGORY_LABELS order.
        self.categories = {
            name: np.asarray(categories[name]["total"], np.int64)
            for name in CATEGORY_LABELS
            if name in categories
        }
        self.by_vertex_type = memory["byVertexType"]
        self.vertex_type_names = graph["vertexTypes"]["names"]
        self.liveness = memory["liveness"]

    def rows(self, top_tiles: int, show_var_storage: bool) -> list[Row]:
        """All rows of the section."""
        return [
            *self._total_rows(),
            *self._vertex_data_rows(),
            *self._by_tile_rows(top_tiles, show_var_storage),
        ]

    def _total_rows(self) -> list[Row]:
        t = self.by_tile
        rows: list[Row] = [
            (0, "Total:", None),
            (1, "Including Gaps", _bytes(t["totalIncludingGaps"].sum())),
            (1, "Excluding Gaps:", None),
            (2, "By Memory Region:", None),
            *((3, label, _bytes(t[key].sum())) for key, label in REGION_LABELS),
            (2, "Total", _bytes(t["total"].sum())),
            (2, "By Data Type:", None),
        ]
        rows += self._category_rows(3, slice(None))
        return rows

    def _category_rows(self, depth: int, tiles: slice | int) -> list[Row]:
        """Non-zero categories, summed over ``tiles``."""
        sums = {name: int(np.sum(arr[tiles])) for name, arr in self.categories.items()}
        return [(depth, CATEGORY_LABELS[name], _bytes(n)) for name, n in sums.items() if n]

    def _vertex_data_rows(self) -> list[Row]:
        num_types = len(self.vertex_type_names)
        parts = {key: _matrix(self.by_vertex_type[key], num_types) for key, _ in VERTEX_DATA_LABELS}
        per_type = sum(arr.sum(axis=1) for arr in parts.values())
        total = int(np.sum(per_type))
        order = sorted(range(len(self.vertex_type_names)), key=lambda i: (-per_type[i], i))
        return [
            (2, f"Vertex Data ({_bytes(total)}):", None),
            (3, "By Category:", None),
            *((4, label, _bytes(parts[key].sum())) for key, label in VERTEX_DATA_LABELS),
            (3, "By Type:", None),
            *((4, self.vertex_type_names[i], _bytes(per_type[i])) for i in order),
        ]

    def _by_tile_rows(self, top_tiles: int, show_var_storage: bool) -> list[Row]:
        including, excluding = self.by_tile["totalIncludingGaps"], self.by_tile["total"]
        if including.size == 0:
            return [(0, "By Tile: no tiles", None)]
        worst_in, worst_ex = int(np.argmax(including)), int(np.argmax(excluding))
        out_of_memory = int(np.count_nonzero(including > self.bytes_per_tile))
        top = np.argsort(-including, kind="stable")[: max(top_tiles, 0)]
        rows: list[Row] = [
            (0, "By Tile:", None),
            (1, "Maximum (Including Gaps)", f"{_bytes(including[worst_in])} on tile {worst_in}"),
            (1, "Maximum (Excluding Gaps)", f"{_bytes(excluding[worst_ex])} on tile {worst_ex}"),
            (1, f"{out_of_memory:,} tile(s) out of memory", None),
            (1, f"Most-used tiles (by memory including gaps), top {len(top)}:", None),
        ]
        for tile in top:
            rows += self._tile_rows(int(tile), show_var_storage)
        return rows

    def _tile_rows(self, tile: int, show_var_storage: bool) -> list[Row]:
        t = self.by_tile
        rows: list[Row] = [
            (2, f"Tile {tile}:", None),
            (3, "Including Gaps", _bytes(t["totalIncludingGaps"][tile])),
            (3, "Excluding Gaps", _bytes(t["total"][tile])),
            *((3, label, _bytes(t[key][tile])) for key, label in REGION_LABELS),
        ]
        if show_var_storage:
            always = self.liveness["alwaysLive"]["bytesByTile"][tile]
            never = self.liveness["notAlwaysLive"]
            rows += [
                (3, "Always-live", _bytes(always)),
                (3, "Not-always-live (peak step)", _bytes(never["bytesByTile"][tile])),
                (3, "Not-always-live (max)", _bytes(never["maxBytesByTile"][tile])),
            ]
        return [*rows, (3, "By Data Type:", None), *self._category_rows(4, tile)]


def _liveness_rows(graph: Mapping[str, Any], show_var_storage: bool) -> list[Row]:
    liveness = graph["memory"]["liveness"]
    always, never = liveness["alwaysLive"], liveness["notAlwaysLive"]
    per_tile = np.asarray(always["bytesByTile"], np.int64) + np.asarray(
        never["maxBytesByTile"], np.int64
    )
    rows: list[Row] = [
        (0, "Always-live", _bytes(always["bytes"])),
        (0, "Not-always-live (peak)", _bytes(never["maxBytes"])),
    ]
    if per_tile.size:
        tile = int(np.argmax(per_tile))
        label = "Maximum per tile (always-live + max not-always-live)"
        rows.append((0, label, f"{_bytes(per_tile[tile])} on tile {tile}"))
    if show_var_storage:
        rows.append((0, "Not-always-live by program:", None))
        rows += _program_tree_rows(never["byProgram"], graph["programs"])
    return rows


def _program_tree_rows(roots: Sequence[Any], programs: Sequence[Any]) -> list[Row]:
    """The byProgram tree, depth first, one row per node (iterative: trees may be deep)."""
    rows: list[Row] = []
    pending = [(node, 1) for node in reversed(roots)]
    while pending:
        node, depth = pending.pop()
        program = programs[node["program"]]
        label = program.get("name") or program["type"]
        rows.append((depth, f"{label} (program {node['program']})", _bytes(node["bytes"])))
        pending.extend((child, depth + 1) for child in reversed(node["children"]))
    return rows


def _execution_rows(
    graph: Mapping[str, Any], execution: Mapping[str, Any], show_steps: bool
) -> list[Row]:
    mode = execution["profilerMode"]
    rows: list[Row] = [(0, f"Profiler mode: {mode}", None)]
    simulation = execution.get("simulation")
    if simulation is None:
        return [*rows, (0, "No simulation in this profile", None)]
    target = graph["target"]
    cycles, num_tiles = int(simulation["cycles"]), int(target["numTiles"])
    micros = cycles / target["clockFrequency"] * 1e6
    rows.append((0, "Total cycles", f"{cycles:,} (approx {micros:,.3f} microseconds)"))
    rows += _tile_cycle_rows(simulation["tileCycles"], cycles * num_tiles)
    steps = simulation["steps"]
    rows.append((0, "Number of steps", f"{len(steps):,}"))
    if show_steps:
        rows.append((0, "Steps:", None))
        rows += [row for step in steps for row in _step_rows(step)]
    return rows


def _tile_cycle_rows(tile_cycles: Mapping[str, int], available: int) -> list[Row]:
    """The tileCycles breakdown, as shares of ``cycles x numTiles`` (the rest is idle)."""
    rows: list[Row] = [(0, f"Tile cycles (cycles x tiles = {available:,}):", None)]
    for key, label in TILE_CYCLES_LABELS:
        n = int(tile_cycles[key])
        rows.append((1, label, f"{n:,} ({_percent(n, available)})"))
    idle = available - sum(int(tile_cycles[key]) for key in schema.TILE_CYCLES_PARTITION)
    rows.append((1, "Idle", f"{idle:,} ({_percent(idle, available)})"))
    return rows


def _step_rows(step: Mapping[str, Any]) -> list[Row]:
    name = step.get("name")
    if name is None:
        sync = f"{step['syncType']}, " if "syncType" in step else ""
        name = f"({sync}program {step['program']})"
    balance = 100.0 * step["tileBalance"]
    return [
        (1, f"{step['type']}: {name}", None),
        (
            2,
            f"Cycles: {step['cycles']:,}  Active Tiles: {step['activeTiles']:,}"
            f"  Tile Balance: {balance:.1f}%",
            None,
        ),
    ]
