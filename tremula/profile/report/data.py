"""The page's data: what the report views show, extracted from the profiles with NumPy.

:func:`build_model` turns a :class:`~tremula.profile.report.load.LoadedReport` into one
JSON-ready dict. The page's scripts only draw it: every number the page shows (totals,
shares, insights, operation rows) is computed here, so that tests can compare the page with
the profile through this one function. Each view's section is built on its own; a section
the profile cannot give (a missing file, a field that fails validation) is left out with a
warning, and the page shows the rest.

Sizes are bounded for large profiles, as PopVision aggregates: per-tile rows are kept only
for what was executed, sparse rows keep their non-zero tiles, and the execution trace keeps
at most ``max_steps`` steps (the first ones, with the count of the rest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from tremula.profile import schema
from tremula.profile.report.load import LoadedReport
from tremula.profile.report.steps import execution_section, liveness_section, operations_section
from tremula.profile.summary import CATEGORY_LABELS, REGION_LABELS, TILE_CYCLES_LABELS

#: Steps kept in the page's execution trace (the first ones); the count of the rest is shown.
MAX_STEPS = 50_000
#: How many entries each insight lists.
TOP = 5
#: Errors that mean "this profile section is not as the format says".
SECTION_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)

Model = dict[str, Any]


def ints(values: Any) -> list[int]:
    """A per-tile (or any) array as a list of plain ints."""
    return np.asarray(values, dtype=np.int64).reshape(-1).tolist()


def sparse(values: Any) -> dict[str, list[int]]:
    """``{"tiles": [...], "bytes": [...]}``: the non-zero entries of a per-tile array."""
    arr = np.asarray(values, dtype=np.int64).reshape(-1)
    nz = np.flatnonzero(arr)
    return {"tiles": nz.tolist(), "bytes": arr[nz].tolist()}


def build_model(loaded: LoadedReport, max_steps: int = MAX_STEPS) -> Model:
    """The data of one report's page.

    Args:
        loaded: The profiles read (either may be None) and the warnings so far.
        max_steps: The most execution steps the trace keeps.

    Returns:
        ``{"source", "warnings", "target", "graph", "memory", "liveness", "programs",
        "execution", "operations", "summary"}``; a section is None when the profiles cannot
        give it (and ``warnings`` says why, unless a file was missing).
    """
    model: Model = {"source": loaded.source, "warnings": list(loaded.warnings)}
    g, e = loaded.graph, loaded.execution
    trace = e if e is not None and isinstance(e.get("simulation"), Mapping) else None
    if e is not None and trace is None:
        model["warnings"].append(
            f"execution profile: profiler mode {e.get('profilerMode')!r} records no steps; "
            "the trace and operations views are empty"
        )
    graph_views: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
        ("target", _target),
        ("graph", lambda graph: dict(graph["graph"])),
        ("memory", memory_section),
        ("liveness", liveness_section),
        ("programs", programs_section),
    )
    for name, view in graph_views:
        model[name] = None if g is None else _section(model, name, partial(view, g))
    trace_views: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
        ("execution", lambda x: execution_section(g, x, max_steps)),
        ("operations", lambda x: operations_section(g, x)),
    )
    for name, view in trace_views:
        model[name] = None if trace is None else _section(model, name, partial(view, trace))
    model["summary"] = _section(model, "summary", lambda: summary_section(g, e, model))
    return model


def _section(model: Model, name: str, build: Callable[[], Any]) -> Any:
    """``build()``, or None with a warning when the profile lacks what it needs."""
    try:
        return build()
    except SECTION_ERRORS as exc:
        detail = f"{type(exc).__name__}: {exc}"
        model["warnings"].append(f"{name} view: cannot be built from this profile ({detail})")
        return None


def _target(graph: Mapping[str, Any]) -> Model:
    t = graph["target"]
    keys = (
        "type",
        "ipuVersion",
        "numIPUs",
        "tilesPerIPU",
        "numTiles",
        "bytesPerTile",
        "totalMemory",
        "clockFrequency",
        "replicationFactor",
    )
    return {k: t[k] for k in keys if k in t}


def memory_section(graph: Mapping[str, Any]) -> Model:
    """Per-tile memory by region and category, liveness per tile, and the sparse per-tile
    rows of vertex types and compute sets (for a tile's breakdown)."""
    mem = graph["memory"]
    by_tile = mem["byTile"]
    num_tiles = int(graph["target"]["numTiles"])
    categories = {}
    for cat in schema.MEMORY_CATEGORIES:
        row = np.asarray(mem["byCategory"][cat]["total"], np.int64)
        if row.any():
            categories[cat] = row.tolist()
    if len(by_tile["total"]) != num_tiles:
        raise ValueError(f"byTile.total has {len(by_tile['total'])} tiles, not {num_tiles}")
    live = mem.get("liveness", {})
    return {
        "numTiles": num_tiles,
        "tilesPerIPU": int(graph["target"]["tilesPerIPU"]),
        "bytesPerTile": int(graph["target"]["bytesPerTile"]),
        "total": ints(by_tile["total"]),
        "totalIncludingGaps": ints(by_tile["totalIncludingGaps"]),
        "regions": {r: ints(by_tile[r]) for r, _ in REGION_LABELS},
        "regionsIncludingGaps": {r: ints(by_tile[r + "IncludingGaps"]) for r, _ in REGION_LABELS},
        "categories": categories,
        "categoryLabels": {c: CATEGORY_LABELS.get(c, c) for c in categories},
        "alwaysLive": ints(live.get("alwaysLive", {}).get("bytesByTile", [0] * num_tiles)),
        "notAlwaysLive": ints(live.get("notAlwaysLive", {}).get("maxBytesByTile", [0] * num_tiles)),
        "vertexTypes": _sparse_rows(graph["vertexTypes"]["names"], mem, "byVertexType"),
        "computeSets": _sparse_rows(graph["computeSets"]["names"], mem, "byComputeSet"),
        "variables": _variables(graph),
    }


def _sparse_rows(names: list[str], mem: Mapping[str, Any], key: str) -> list[Model]:
    """One ``{"name", "tiles", "bytes"}`` per vertex type or compute set with memory."""
    rows = mem.get(key, {}).get("totalBytes", [])
    out = []
    for name, row in zip(names, rows):
        entry = sparse(row)
        if entry["tiles"]:
            out.append({"name": name, **entry})
    return out


def _variables(graph: Mapping[str, Any]) -> Model | None:
    """The variable table (a Tremula extension of the format), when the profile has one."""
    table = graph.get("variables")
    if not isinstance(table, Mapping):
        return None
    return {key: list(table[key]) for key in schema.VARIABLE_TABLE_KEYS if key in table}


def programs_section(graph: Mapping[str, Any]) -> Model:
    """The program table without the per-instruction memory, and the roots of the tree."""
    keep = ("type", "name", "children", "computeSet", "exchange", "target", "count", "syncType")
    programs = [{k: p[k] for k in keep if k in p} for p in graph["programs"]]
    return {
        "programs": programs,
        "controlPrograms": list(graph.get("controlPrograms", [])),
        "functionPrograms": list(graph.get("functionPrograms", [])),
    }


def summary_section(
    graph: Mapping[str, Any] | None, execution: Mapping[str, Any] | None, model: Model
) -> Model:
    """The summary view's numbers and insights."""
    out: Model = {"insights": []}
    if graph is not None and model.get("memory") is not None:
        out.update(_memory_summary(graph, model["memory"]))
        out["insights"] += _memory_insights(model["memory"], model.get("liveness"))
    if model.get("execution") is not None:
        out.update(_execution_summary(model["execution"]))
        out["insights"] += _balance_insights(model.get("operations"))
    return out


def _memory_summary(graph: Mapping[str, Any], memory: Model) -> Model:
    live = graph["memory"].get("liveness", {})
    total = np.asarray(memory["totalIncludingGaps"], np.int64)
    worst = int(np.argmax(total)) if total.size else 0
    return {
        "memoryIncludingGaps": int(total.sum()),
        "memoryExcludingGaps": int(np.sum(memory["total"])),
        "memoryByRegion": {r: int(np.sum(memory["regions"][r])) for r, _ in REGION_LABELS},
        "alwaysLiveBytes": int(live.get("alwaysLive", {}).get("bytes", 0)),
        "peakNotAlwaysLiveBytes": int(live.get("notAlwaysLive", {}).get("maxBytes", 0)),
        "maxTileBytes": int(total[worst]) if total.size else 0,
        "maxTile": worst,
        "tilesOutOfMemory": int((total > memory["bytesPerTile"]).sum()),
    }


def _memory_insights(memory: Model, liveness: Model | None) -> list[Model]:
    total = np.asarray(memory["totalIncludingGaps"], np.int64)
    out: list[Model] = []
    over = np.flatnonzero(total > memory["bytesPerTile"])
    if over.size:
        worst = over[np.argsort(-total[over], kind="stable")][:TOP].tolist()
        out.append(
            {
                "kind": "error",
                "text": f"{over.size} tile(s) out of memory (over {memory['bytesPerTile']:,} B)",
                "tiles": worst,
            }
        )
    used = total[total > 0]
    if used.size:
        ratio = float(total.max() / used.mean())
        out.append(
            {
                "kind": "warning" if ratio > 2 else "info",
                "text": f"memory balance: the fullest tile ({int(np.argmax(total))}) holds "
                f"{ratio:.1f}x the mean of the {used.size} tiles in use",
                "tiles": [int(np.argmax(total))],
            }
        )
    variables = memory.get("variables")
    if variables and variables.get("bytes"):
        sizes = np.asarray(variables["bytes"], np.int64)
        top = np.argsort(-sizes, kind="stable")[:TOP]
        names = ", ".join(f"{variables['names'][i]} ({int(sizes[i]):,} B)" for i in top)
        out.append({"kind": "info", "text": f"largest variables: {names}"})
    return out


def _execution_summary(execution: Model) -> Model:
    cycles = int(execution["cycles"])
    hz = float(execution["clockFrequency"])
    available = cycles * int(execution["numTiles"])
    tile_cycles = execution["tileCycles"]
    shares = {k: (tile_cycles.get(k, 0) / available if available else 0.0) for k, _ in
              TILE_CYCLES_LABELS}  # fmt: skip
    busy = sum(tile_cycles.get(k, 0) for k in schema.TILE_CYCLES_PARTITION)
    shares["idle"] = max(0.0, 1.0 - busy / available) if available else 0.0
    return {
        "cycles": cycles,
        "seconds": cycles / hz if hz else 0.0,
        "cycleShares": shares,
        "cycleShareLabels": dict(TILE_CYCLES_LABELS) | {"idle": "Idle"},
        "numSteps": execution["numSteps"],
    }


def _balance_insights(operations: Model | None) -> list[Model]:
    """The operations that take at least 1% of the cycles with the worst tile balance."""
    if not operations or not operations["rows"]:
        return []
    total = max(operations["totalCycles"], 1)
    heavy = [r for r in operations["rows"] if r["cycles"] >= 0.01 * total]
    heavy.sort(key=lambda r: (r["tileBalance"], -r["cycles"]))
    if not heavy:
        return []
    listed = ", ".join(f"{r['name']} ({r['tileBalance']:.0%})" for r in heavy[:TOP])
    text = f"worst tile balance (operations over 1% of cycles): {listed}"
    return [{"kind": "info", "text": text}]
