"""The execution-side sections of the page: trace steps, per-tile cycles, operations and
liveness per program step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tremula.profile import schema
from tremula.profile.chrome import STEP_LANES, IpuLocator
from tremula.profile.liveness import liveness_steps

#: Per-tile cycles of each step kind: step field -> (execution key, graph path) in order of
#: preference (the measured cycles of a profiler mode before the graph's estimates).
TILE_CYCLE_SOURCES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "computeSet": ("computeSetCyclesByTile", ("computeSets", "cycleEstimates", "cyclesByTile")),
    "exchange": (None, ("exchanges", "cyclesByTile")),
    "externalExchange": ("externalExchangeCycles", ("externalExchanges", "estimatedCyclesByTile")),
    "hostExchange": ("hostExchangeCycles", ("hostExchanges", "estimatedCyclesByTile")),
}
#: Name suffixes of the exchanges the engine runs around a compute set: an operation's steps
#: are the compute set's and these.
EXCHANGE_SUFFIXES: tuple[str, ...] = ("/ExchangePre", "/ExchangePost")
#: The lanes of the operations table's cycle split (the trace's lanes).
LANES: tuple[str, ...] = ("Compute", "Exchange", "Sync", "StreamCopy")

Model = dict[str, Any]


def _steps(execution: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    simulation = execution.get("simulation")
    if not isinstance(simulation, Mapping):
        mode = execution.get("profilerMode")
        raise ValueError(f"profiler mode {mode!r} records no simulation (no steps to show)")
    return simulation["steps"]


def step_name(step: Mapping[str, Any]) -> str:
    """A step's name, or ``<type> (program <id>)`` for an unnamed one."""
    return step.get("name") or f"{step['type']} (program {step['program']})"


def execution_section(
    graph: Mapping[str, Any] | None, execution: Mapping[str, Any], max_steps: int
) -> Model:
    """The trace: steps as columns (the first ``max_steps``), and per-tile cycles of the
    compute sets and exchanges they ran."""
    steps = _steps(execution)
    simulation = execution["simulation"]
    kept = steps[:max_steps]
    target = (graph or {}).get("target", {})
    num_tiles = int(target.get("numTiles", max((s.get("activeTiles", 0) for s in kept), default=1)))
    num_ipus = int(target.get("numIPUs", 1))
    types = list(schema.STEP_TYPES)
    names: dict[str, int] = {}
    columns: dict[str, list] = {k: [] for k in
                                ("type", "program", "from", "cycles", "tileBalance",
                                 "activeTiles", "totalData", "ref", "name", "ipus")}  # fmt: skip
    locator = IpuLocator(graph, num_ipus) if graph is not None and num_ipus > 1 else None
    for step in kept:
        stype = step["type"]
        if stype not in types:
            types.append(stype)
        ref_key = next((k for k in TILE_CYCLE_SOURCES if k in step), None)
        columns["type"].append(types.index(stype))
        columns["program"].append(int(step["program"]))
        columns["from"].append(int(step["cyclesFrom"]))
        columns["cycles"].append(int(step["cycles"]))
        columns["tileBalance"].append(round(float(step.get("tileBalance", 0.0)), 4))
        columns["activeTiles"].append(int(step.get("activeTiles", 0)))
        columns["totalData"].append(int(step.get("totalData", 0)))
        columns["ref"].append(int(step[ref_key]) if ref_key else -1)
        columns["name"].append(names.setdefault(step_name(step), len(names)))
        ipus = locator.ipus(step) if locator else range(num_ipus)
        columns["ipus"].append(sum(1 << i for i in ipus if i < 31))
    return {
        "profilerMode": execution.get("profilerMode"),
        "cycles": int(simulation["cycles"]),
        "tileCycles": {k: int(v) for k, v in simulation["tileCycles"].items()},
        "clockFrequency": float(target.get("clockFrequency", 0.0)),
        "numTiles": num_tiles,
        "numIPUs": num_ipus,
        "numSteps": len(steps),
        "types": types,
        "lanes": {t: STEP_LANES.get(t, "Exchange") for t in types},
        "names": list(names),
        "steps": columns,
        "tileRows": _tile_rows(graph, execution, kept),
    }


def _tile_rows(
    graph: Mapping[str, Any] | None, execution: Mapping[str, Any], steps: list
) -> dict[str, dict[str, list[int]]]:
    """``{step field: {index: cycles by tile}}`` for every compute set and exchange run."""
    out: dict[str, dict[str, list[int]]] = {}
    for key, (exec_key, graph_path) in TILE_CYCLE_SOURCES.items():
        used = sorted({int(s[key]) for s in steps if key in s})
        table: Any = execution.get(exec_key) if exec_key else None
        if table is None and graph is not None:
            table = graph
            for part in graph_path:
                table = table.get(part) if isinstance(table, Mapping) else None
        if not used or table is None:
            continue
        out[key] = {str(i): [int(x) for x in table[i]] for i in used if 0 <= i < len(table)}
    return out


def operation_of(name: str) -> str:
    """The operation a step belongs to: its name without an exchange suffix (the pre- and
    post-exchanges of a compute set belong to the compute set's operation)."""
    for suffix in EXCHANGE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def operations_section(graph: Mapping[str, Any] | None, execution: Mapping[str, Any]) -> Model:
    """Steps grouped by operation: cycles per lane, steps, cycle-weighted tile balance, the
    vertex memory of the operation's compute sets and the FLOPs of the compute sets its
    steps ran (None where no compute set's FLOPs are known), largest first."""
    rows: dict[str, Model] = {}
    memory = _compute_set_memory(graph)
    flops = compute_set_flops(graph)
    for step in _steps(execution):
        op = operation_of(step_name(step))
        row = rows.get(op)
        if row is None:
            row = rows[op] = {"name": op, "cycles": 0, "steps": 0, "balanced": 0.0, "flops": None,
                              "computeSets": set(), **{lane: 0 for lane in LANES}}  # fmt: skip
        cycles = int(step["cycles"])
        row[STEP_LANES.get(step["type"], "Exchange")] += cycles
        row["cycles"] += cycles
        row["steps"] += 1
        row["balanced"] += cycles * float(step.get("tileBalance", 0.0))
        if "computeSet" in step:
            cs = int(step["computeSet"])
            row["computeSets"].add(cs)
            known = flops.get(cs)
            if known is not None:
                row["flops"] = (row["flops"] or 0) + known
    out = []
    for row in rows.values():
        cs = row.pop("computeSets")
        balanced = row.pop("balanced")
        row["tileBalance"] = round(balanced / row["cycles"], 4) if row["cycles"] else 1.0
        row["memory"] = int(sum(memory[i] for i in cs if i < len(memory)))
        out.append(row)
    out.sort(key=lambda r: (-r["cycles"], r["name"]))
    return {"rows": out, "totalCycles": int(sum(r["cycles"] for r in out)), "lanes": list(LANES)}


def compute_set_flops(graph: Mapping[str, Any] | None) -> dict[int, int | None]:
    """The FLOPs of one run of each compute set (``computeSets.flops``, a Tremula extension
    of the format): compute set -> FLOPs, or None where unknown; empty without the table."""
    table = ((graph or {}).get("computeSets") or {}).get("flops")
    if not isinstance(table, list):
        return {}
    return {i: None if v is None else int(v) for i, v in enumerate(table)}


def _compute_set_memory(graph: Mapping[str, Any] | None) -> np.ndarray:
    """Vertex memory of each compute set, summed over tiles (zeros if unknown)."""
    rows = ((graph or {}).get("memory") or {}).get("byComputeSet", {}).get("totalBytes")
    if not rows:
        return np.zeros(0, np.int64)
    return np.asarray([int(np.sum(r)) for r in rows], np.int64)


def liveness_section(graph: Mapping[str, Any]) -> Model:
    """Not-always-live bytes per program step, with each step's program."""
    programs, amounts, source = liveness_steps(graph)
    live = graph["memory"]["liveness"]
    return {
        "alwaysLive": int(live["alwaysLive"]["bytes"]),
        "peak": int(live["notAlwaysLive"]["maxBytes"]),
        "program": programs.tolist(),
        "bytes": amounts.tolist(),
        "source": source,
    }
