"""Building the graph and execution profiles (``tremula/profile/FORMAT.md``) from what the
engine compiled and what the timeline recorded. Plain JSON-ready dicts: ints, floats,
strings and lists, in a fixed order. Every key list and per-type field table comes from
``tremula/profile/schema.py``: a writer maps each of the schema's keys to where its value
comes from, so a key renamed there fails here at once rather than drifting."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tremula.engine import nodes as N
from tremula.engine.compiler import StepPlan
from tremula.engine.exchange import cross_replica_link
from tremula.engine.memory import MemoryReport
from tremula.engine.timeline import Timeline
from tremula.profile import schema


def _l(a: np.ndarray) -> list[int]:
    return [int(x) for x in np.asarray(a).tolist()]


def _target(sp: StepPlan) -> dict[str, Any]:
    tg = sp.target
    return {
        "type": tg.target_type,
        "bytesPerIPU": tg.bytes_per_ipu,
        "bytesPerTile": tg.memory_bytes_per_tile,
        "clockFrequency": float(tg.tile_clock_frequency),
        "numIPUs": tg.num_ipus,
        "tilesPerIPU": tg.tiles_per_ipu,
        "numTiles": tg.num_tiles,
        "totalMemory": tg.total_memory,
        "relativeSyncDelayByTile": _l(tg.relative_sync_delays()),
        "minSyncDelay": tg.min_sync_delay,
        "ipuVersion": tg.ipu_version,
        "replicationFactor": sp.state.replication_factor,
    }


def _programs(sp: StepPlan) -> list[dict[str, Any]]:
    out = []
    for node in sp.nodes:
        entry: dict[str, Any] = {"type": node.ptype}
        if node.name:
            entry["name"] = node.name
        if not isinstance(node, N.CallNode) and (node.children() or isinstance(node, N.SeqNode)):
            entry["children"] = [k.pid for k in node.children()]
        entry.update(node.profile_fields())
        out.append(entry)
    return out


def _compute_sets(sp: StepPlan, types: list[str], cycle_estimates: bool) -> dict[str, Any]:
    index = {name: i for i, name in enumerate(types)}
    counts, vtypes, active_by_type = [], [], []
    for ccs in sp.compute_sets:
        counts.append([g.n for g in ccs.groups])
        vtypes.append([index[g.vertex_type.name] for g in ccs.groups])
        row = [0] * len(types)
        for name, cyc in ccs.active_cycles_by_type.items():
            row[index[name]] = int(cyc)
        active_by_type.append(row)
    out: dict[str, Any] = {
        "names": [c.name for c in sp.compute_sets],
        "vertexCounts": counts,
        "vertexTypes": vtypes,
        "flops": [c.flops for c in sp.compute_sets],  # a Tremula extension (FORMAT.md)
    }
    if cycle_estimates:
        estimates = {
            "activeCyclesByTile": lambda: [_l(c.active_cycles_by_tile) for c in sp.compute_sets],
            "activeCyclesByVertexType": lambda: active_by_type,
            "cyclesByTile": lambda: [_l(c.cycles_by_tile) for c in sp.compute_sets],
        }
        out["cycleEstimates"] = {k: estimates[k]() for k in schema.CYCLE_ESTIMATE_KEYS}
    return out


#: The attribute of an exchange plan (or host exchange) each exchange-table key reads.
_EXCHANGE_ATTRS = {
    "bytesReceivedByTile": "bytes_received",
    "bytesSentByTile": "bytes_sent",
    "cyclesByTile": "cycles_by_tile",
    "estimatedCyclesByTile": "cycles_by_tile",
    "codeBytesByTile": "code_bytes",
}


def _exchanges(sp: StepPlan) -> dict[str, Any]:
    tables: dict[str, Sequence[object]] = {
        "exchanges": sp.exchanges,
        "externalExchanges": sp.external_exchanges,
        "hostExchanges": sp.host_exchanges,
    }
    return {
        name: {k: [_l(getattr(x, _EXCHANGE_ATTRS[k])) for x in tables[name]] for k in keys}
        for name, keys in schema.EXCHANGE_TABLES.items()
    }


def _by_program(entry: dict, totals: np.ndarray) -> dict[str, Any]:
    a, b = entry["first"], entry["last"]
    seg = totals[a : b + 1]
    return {
        "program": entry["node"].pid,
        "bytes": int(seg.max()) if seg.size else 0,
        "children": [_by_program(c, totals) for c in entry["children"]],
    }


def _memory(mem: MemoryReport, tree: list[dict]) -> dict[str, Any]:
    by_cat: dict[str, dict[str, Any]] = {}
    for c in schema.MEMORY_CATEGORIES:
        regions = mem.by_category[c]
        kinds = schema.OVERLAP_KINDS
        total = np.add.reduce([regions[r][k] for r in schema.MEMORY_REGIONS for k in kinds])
        by_cat[c] = {r: {k: _l(regions[r][k]) for k in kinds} for r in schema.MEMORY_REGIONS}
        by_cat[c]["total"] = _l(total)
    return {
        "byTile": {k: _l(mem.by_tile[k]) for k in schema.BY_TILE_KEYS},
        "byCategory": by_cat,
        "byComputeSet": {k: [_l(r) for r in v] for k, v in mem.by_compute_set.items()},
        "byVertexType": {k: [_l(r) for r in v] for k, v in mem.by_vertex_type.items()},
        "liveness": {
            "alwaysLive": {"bytesByTile": _l(mem.always_live), "bytes": int(mem.always_live.sum())},
            "notAlwaysLive": {
                "bytesByTile": _l(mem.not_always_live_at_peak),
                "maxBytesByTile": _l(mem.not_always_live_peak),
                "maxBytes": int(mem.step_totals.max(initial=0)),
                "byProgram": [_by_program(t, mem.step_totals) for t in tree],
            },
            "programSteps": dict(  # a Tremula extension (FORMAT.md)
                zip(
                    schema.PROGRAM_STEPS_KEYS,
                    (_l(mem.step_programs), _l(mem.step_totals[: mem.step_programs.size])),
                    strict=True,
                )
            ),
        },
    }


def graph_profile(sp: StepPlan, mem: MemoryReport, tree: list[dict]) -> dict[str, Any]:
    st = sp.state
    num_edges = 0
    for ccs in sp.compute_sets:
        for g in ccs.groups:
            for name in g.gathers:
                sub = g.batch._sub.get(name + "#count")
                num_edges += int(sub.sum()) if sub is not None else g.n
    is_model = sp.target.target_type != "CPU"
    counts = {
        "numComputeSets": len(sp.compute_sets),
        "numEdges": num_edges,
        "numVars": len(st.variables),
        "numVertices": st.num_vertices,
    }
    profile: dict[str, Any] = {
        "target": _target(sp),
        "optimizationInfo": {
            "numPrograms": float(len(sp.nodes)),
            "numExchanges": float(len(sp.exchanges)),
            "numExternalExchanges": float(len(sp.external_exchanges)),
            "numHostExchanges": float(len(sp.host_exchanges)),
            "numFunctions": float(len(sp.function_roots)),
        },
        "graph": {k: counts[k] for k in schema.GRAPH_COUNT_FIELDS},
        "vertexTypes": {"names": list(mem.vertex_types), "sizes": list(mem.vertex_type_sizes)},
        "computeSets": _compute_sets(sp, mem.vertex_types, is_model),
        **_exchanges(sp),
        "programs": _programs(sp),
        "controlPrograms": [r.pid for r in sp.control_roots],
        "functionPrograms": [r.pid for r in sp.function_roots],
        "memory": _memory(mem, tree),
        "variables": mem.variables,  # a Tremula extension (FORMAT.md)
    }
    return profile


def _vertex_arrays(sp: StepPlan) -> dict[str, list[int]]:
    """The VERTICES mode's arrays, in vertex id order."""
    ids, cycles, css, types = [], [], [], []
    names: dict[str, int] = {}
    for ccs in sp.compute_sets:
        for g in ccs.groups:
            idx = names.setdefault(g.vertex_type.name, len(names))
            ids.append(g.vertex_ids)
            cycles.append(g.cycles)
            css.append(np.full(g.n, ccs.id))
            types.append(np.full(g.n, idx))
    if not ids:
        return {"vertexCycles": [], "vertexComputeSet": [], "vertexType": []}
    order = np.argsort(np.concatenate(ids), kind="stable")
    return {
        "vertexCycles": _l(np.concatenate(cycles)[order]),
        "vertexComputeSet": _l(np.concatenate(css)[order]),
        "vertexType": _l(np.concatenate(types)[order]),
    }


#: The arrays each profiler mode adds (``schema.MODE_FIELDS`` names them), by name.
_MODE_ARRAYS: dict[str, Callable[[StepPlan, np.ndarray], dict[str, Any]]] = {
    "COMPUTE_SETS": lambda sp, cs: {"computeSetCyclesByTile": [_l(r) for r in cs]},
    "SINGLE_TILE_COMPUTE_SETS": lambda sp, cs: {
        "computeSetCycles": _l(cs.max(axis=1)) if cs.size else []
    },
    "VERTICES": lambda sp, cs: _vertex_arrays(sp),
    "EXTERNAL_EXCHANGES": lambda sp, cs: {
        "externalExchangeCycles": [_l(p.cycles_by_tile) for p in sp.external_exchanges]
    },
    "HOST_EXCHANGES": lambda sp, cs: {
        "hostExchangeCycles": [_l(h.cycles_by_tile) for h in sp.host_exchanges]
    },
}


def execution_profile(
    sp: StepPlan, tl: Timeline, mode: str, cs_cycles: np.ndarray
) -> dict[str, Any]:
    if mode in schema.MODES_WITHOUT_TRACE:
        return {"profilerMode": mode}
    T = sp.target.num_tiles
    steps = [
        info.record.to_json(start, end, overlapped, balance, T)
        for info, start, end, overlapped, balance in tl.steps
    ]
    out: dict[str, Any] = {
        "profilerMode": mode,
        "programTrace": list(tl.trace),
        "simulation": {"cycles": tl.cycles, "tileCycles": dict(tl.tile_cycles), "steps": steps},
    }
    if mode in schema.MODE_FIELDS:
        arrays = _MODE_ARRAYS[mode](sp, cs_cycles)
        out.update((k, arrays[k]) for k in schema.MODE_FIELDS[mode])
    return out


def instances(sp: StepPlan, replicas: Any) -> dict[str, Any]:
    """The ``instances`` section of an instance's graph profile (a Tremula extension, see
    ``tremula/profile/FORMAT.md``): the job's layout, this instance's replicas, and every
    cross-replica copy that moves data to or from other instances, with the bytes this
    instance sends and receives, the links it uses and its modelled cycles."""
    copies = []
    for node in sp.nodes:
        if not isinstance(node, N.CrossReplicaNode):
            continue
        peers = replicas.peers_of(node.sources, node.dests)
        if not peers["sendsTo"] and not peers["receivesFrom"]:
            continue
        region = node.src.size * node.src.dtype.size
        pairs = np.stack([node.sources, node.dests], axis=1)
        copies.append(
            {
                "program": node.pid,
                "name": node.name,
                "externalExchange": node.exchange,
                "sendsTo": peers["sendsTo"],
                "receivesFrom": peers["receivesFrom"],
                "bytesSent": region * peers["regionsSent"],
                "bytesReceived": region * peers["regionsReceived"],
                "link": cross_replica_link(sp.target, pairs)[0],
                "cycles": int(node.step.cycles.max()) if node.step.cycles.size else 0,
            }
        )
    return {
        "count": replicas.instances,
        "index": replicas.instance,
        "replicationFactor": replicas.total,
        "replicas": [int(r) for r in replicas.ids],
        "crossInstanceCopies": copies,
    }
