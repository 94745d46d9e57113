"""A hand-built golden profile pair: a 4-tile IPU_MODEL run, every number worked out below.

The program (``programs``)::

    0 Sequence "main"         children [1, 2, 3, 4, 5, 3]
    1 StreamCopy "hostToIpu/x" host exchange 0: 32 bytes into each of tiles 0 and 1
    2 OnTileExecute "double"  compute set 0: one Doubler on every tile
    3 Sync (Internal)         used twice
    4 DoExchange "exchangeX"  exchange 0: tiles 0, 1 send 16 bytes to tiles 2, 3
    5 OnTileExecute "add"     compute set 1: one Adder on each of tiles 0 and 1

The timeline (clock 1.6 GHz, so 1,600 cycles per microsecond)::

    step 0 StreamCopy     0 -> 100   tiles 0, 1        streamCopy   2 x 100 = 200
    step 1 double       100 -> 160   all tiles         compute      4 x 60  = 240
    step 2 Sync         160 -> 200   all tiles         sync         4 x 40  = 160
    step 3 exchangeX    200 -> 240   all tiles         doExchange   4 x 40  = 160
    step 4 add          240 -> 360   tiles 0, 1        compute      2 x 120 = 240
    step 5 Sync         360 -> 400   all tiles         sync         4 x 40  = 160

    tileCycles: compute 480, activeCompute 4 x 10 + 2 x 20 = 80, doExchange 160,
    streamCopy 200, sync 320; the rest of 400 x 4 = 1,600 tile cycles is idle (440).

Memory per tile (bytes; every other category is zero)::

                             tile 0  tile 1  tile 2  tile 3
    variable     interleaved     64      64       0       0   (not overlapped)
                 nonInterleaved  32      32      32      32   (not overlapped)
                 nonInterleaved  16      16      16      16   (overlapped)
    constant     nonInterleaved   8       8       0       0
    vertexCode   nonInterleaved 200     200      80      80   (Doubler 80, Adder 120)
    vertexInstanceState  nonI.   16      16       4       4   (Doubler 4, Adder 8 + 4 edge ptrs)
    controlCode  nonInterleaved  48      48      48      48
    internalExchangeCode nonI.   24      24      24      24
    hostExchangeCode     nonI.   16      16       0       0
    stack        interleaved     64      64      64      64
    message      nonInterleaved   0       0      16      16   (overlapped)

    interleaved                 128     128      64      64   (sum 384)
    nonInterleaved              360     360     220     220   (sum 1,160)
    total                       488     488     284     284   (sum 1,544)
    totalIncludingGaps          560     576     352     352   (sum 1,840)

Liveness: the overlapped bytes (variable 16 per tile, message 16 on tiles 2 and 3) are
not-always-live: [16, 16, 32, 32], 96 in all; the rest is always-live: [472, 472, 252, 252],
1,448 in all.
"""

from __future__ import annotations

import copy
from typing import Any

from tremula.profile import schema

NUM_TILES = 4
ZEROS = [0] * NUM_TILES

#: Non-zero category arrays: category -> (region, overlap kind) -> per-tile bytes.
CATEGORY_BYTES: dict[str, dict[tuple[str, str], list[int]]] = {
    "variable": {
        ("interleaved", "nonOverlapped"): [64, 64, 0, 0],
        ("nonInterleaved", "nonOverlapped"): [32, 32, 32, 32],
        ("nonInterleaved", "overlapped"): [16, 16, 16, 16],
    },
    "constant": {("nonInterleaved", "nonOverlapped"): [8, 8, 0, 0]},
    "vertexCode": {("nonInterleaved", "nonOverlapped"): [200, 200, 80, 80]},
    "vertexInstanceState": {("nonInterleaved", "nonOverlapped"): [16, 16, 4, 4]},
    "controlCode": {("nonInterleaved", "nonOverlapped"): [48, 48, 48, 48]},
    "internalExchangeCode": {("nonInterleaved", "nonOverlapped"): [24, 24, 24, 24]},
    "hostExchangeCode": {("nonInterleaved", "nonOverlapped"): [16, 16, 0, 0]},
    "stack": {("interleaved", "nonOverlapped"): [64, 64, 64, 64]},
    "message": {("nonInterleaved", "overlapped"): [0, 0, 16, 16]},
}


def _category(name: str) -> dict[str, Any]:
    parts = CATEGORY_BYTES.get(name, {})
    entry: dict[str, Any] = {
        region: {kind: list(parts.get((region, kind), ZEROS)) for kind in schema.OVERLAP_KINDS}
        for region in schema.MEMORY_REGIONS
    }
    entry["total"] = [sum(p[tile] for p in parts.values()) for tile in range(NUM_TILES)]
    return entry


def _vertex_memory(code: list[list[int]], data: list[list[int]], edges: list[list[int]]) -> dict:
    """byComputeSet / byVertexType: code, vertex data and edge pointers; the rest is zero."""
    rows = len(code)
    memory = {key: [list(ZEROS) for _ in range(rows)] for key in schema.VERTEX_MEMORY_KEYS}
    memory["codeBytes"], memory["vertexDataBytes"], memory["edgePtrBytes"] = code, data, edges
    memory["totalBytes"] = [
        [c + d + e for c, d, e in zip(*row)] for row in zip(code, data, edges, strict=True)
    ]
    return copy.deepcopy(memory)


def _vertex_type_memory() -> dict:
    # [Doubler, Adder] on every tile; Doubler is also compute set 0, Adder compute set 1.
    return _vertex_memory(
        code=[[80, 80, 80, 80], [120, 120, 0, 0]],
        data=[[4, 4, 4, 4], [8, 8, 0, 0]],
        edges=[[0, 0, 0, 0], [4, 4, 0, 0]],
    )


MEMORY_BY_INSTRUCTION = {
    "delay": 8,
    "exchange": 0,
    "other": 0,
    "receiveAddress": 4,
    "receiveFormat": 0,
    "receiveMux": 4,
    "send": 8,
    "sendWithPutAddress": 0,
    "sendWithPutFormat": 0,
    "sendWithPutMux": 0,
    "total": 24,
}


def _programs() -> list[dict[str, Any]]:
    return [
        {"type": "Sequence", "name": "main", "children": [1, 2, 3, 4, 5, 3]},
        {"type": "StreamCopy", "name": "hostToIpu/x", "exchange": 0},
        {"type": "OnTileExecute", "name": "double", "computeSet": 0},
        {"type": "Sync", "syncType": "Internal"},
        {
            "type": "DoExchange",
            "name": "exchangeX",
            "exchange": 0,
            "memoryByInstruction": dict(MEMORY_BY_INSTRUCTION),
        },
        {"type": "OnTileExecute", "name": "add", "computeSet": 1},
    ]


def _memory() -> dict[str, Any]:
    return {
        "byTile": {
            "interleaved": [128, 128, 64, 64],
            "interleavedIncludingGaps": [128, 128, 64, 64],
            "nonInterleaved": [360, 360, 220, 220],
            "nonInterleavedIncludingGaps": [368, 376, 224, 224],
            "overflowed": list(ZEROS),
            "overflowedIncludingGaps": list(ZEROS),
            "total": [488, 488, 284, 284],
            "totalIncludingGaps": [560, 576, 352, 352],
        },
        "byCategory": {name: _category(name) for name in schema.MEMORY_CATEGORIES},
        "byComputeSet": _vertex_type_memory(),
        "byVertexType": _vertex_type_memory(),
        "liveness": {
            "alwaysLive": {"bytesByTile": [472, 472, 252, 252], "bytes": 1448},
            "notAlwaysLive": {
                "bytesByTile": [16, 16, 32, 32],
                "maxBytesByTile": [16, 16, 32, 32],
                "maxBytes": 96,
                "byProgram": [
                    {
                        "program": 0,
                        "bytes": 96,
                        "children": [
                            {"program": 1, "bytes": 32, "children": []},
                            {"program": 2, "bytes": 64, "children": []},
                            {"program": 4, "bytes": 96, "children": []},
                            {"program": 5, "bytes": 64, "children": []},
                        ],
                    }
                ],
            },
        },
    }


def golden_graph() -> dict[str, Any]:
    """A fresh copy of the golden graph profile."""
    return {
        "target": {
            "type": "IPU_MODEL",
            "bytesPerIPU": 16384,
            "bytesPerTile": 4096,
            "clockFrequency": 1.6e9,
            "numIPUs": 1,
            "tilesPerIPU": NUM_TILES,
            "numTiles": NUM_TILES,
            "totalMemory": 16384,
            "relativeSyncDelayByTile": [0, 1, 1, 2],
            "minSyncDelay": 30,
            "ipuVersion": "ipu2",
            "replicationFactor": 1,
        },
        "optimizationInfo": {"exchangeCodeBytes": 96.0},
        "graph": {"numComputeSets": 2, "numEdges": 14, "numVars": 5, "numVertices": 6},
        "vertexTypes": {"names": ["Doubler", "Adder"], "sizes": [4, 8]},
        "computeSets": {
            "names": ["double", "add"],
            "vertexCounts": [[4], [2]],
            "vertexTypes": [[0], [1]],
            "cycleEstimates": {
                "activeCyclesByTile": [[10, 10, 10, 10], [20, 20, 0, 0]],
                "activeCyclesByVertexType": [[40, 0], [0, 40]],
                "cyclesByTile": [[60, 60, 60, 60], [120, 120, 0, 0]],
            },
        },
        "exchanges": {
            "bytesReceivedByTile": [[0, 0, 16, 16]],
            "bytesSentByTile": [[16, 16, 0, 0]],
            "cyclesByTile": [[40, 40, 40, 40]],
            "codeBytesByTile": [[24, 24, 24, 24]],
        },
        "externalExchanges": {
            "bytesReceivedByTile": [],
            "bytesSentByTile": [],
            "estimatedCyclesByTile": [],
        },
        "hostExchanges": {
            "bytesReceivedByTile": [[32, 32, 0, 0]],
            "bytesSentByTile": [list(ZEROS)],
            "estimatedCyclesByTile": [[100, 100, 0, 0]],
        },
        "programs": _programs(),
        "controlPrograms": [0],
        "functionPrograms": [],
        "memory": _memory(),
    }


def _step(stype: str, program: int, start: int, end: int, **fields: Any) -> dict[str, Any]:
    return {
        "type": stype,
        "program": program,
        "cycles": end - start,
        "cyclesFrom": start,
        "cyclesTo": end,
        **fields,
    }


def golden_steps() -> list[dict[str, Any]]:
    """The six steps of the golden run, in execution order."""
    full = {"activeTiles": 4, "tileBalance": 1.0, "activeTileBalance": 1.0}
    half = {"activeTiles": 2, "tileBalance": 0.5, "activeTileBalance": 1.0}
    return [
        _step(
            "StreamCopy",
            1,
            0,
            100,
            name="hostToIpu/x",
            hostExchange=0,
            totalData=64,
            dataBalance=0.5,
            **half,
        ),
        _step(
            "OnTileExecute",
            2,
            100,
            160,
            name="double",
            computeSet=0,
            threadBalance=0.5,
            cyclesOverlapped=0,
            **full,
        ),
        _step("Sync", 3, 160, 200, syncType="Internal", **full),
        _step(
            "DoExchange",
            4,
            200,
            240,
            name="exchangeX",
            exchange=0,
            totalData=32,
            dataBalance=1.0,
            cyclesOverlapped=0,
            **full,
        ),
        _step(
            "OnTileExecute",
            5,
            240,
            360,
            name="add",
            computeSet=1,
            threadBalance=0.5,
            cyclesOverlapped=0,
            **half,
        ),
        _step("Sync", 3, 360, 400, syncType="Internal", **full),
    ]


def golden_execution() -> dict[str, Any]:
    """A fresh copy of the golden execution profile (profilerMode IPU_MODEL)."""
    return {
        "profilerMode": "IPU_MODEL",
        "programTrace": [0, 1, 2, 3, 4, 5, 3],
        "simulation": {
            "cycles": 400,
            "tileCycles": {
                "activeCompute": 80,
                "compute": 480,
                "copySharedStructure": 0,
                "doExchange": 160,
                "globalExchange": 0,
                "streamCopy": 200,
                "sync": 320,
            },
            "steps": golden_steps(),
        },
    }


def _widen(obj: Any, copies: int) -> Any:
    """Repeat every per-tile list (a list of NUM_TILES ints) ``copies`` times, recursively."""
    if isinstance(obj, dict):
        return {key: _widen(value, copies) for key, value in obj.items()}
    if isinstance(obj, list):
        if len(obj) == NUM_TILES and all(isinstance(v, int) for v in obj):
            return obj * copies
        return [_widen(value, copies) for value in obj]
    return obj


def _scale_liveness(liveness: dict[str, Any], copies: int) -> None:
    liveness["alwaysLive"]["bytes"] *= copies
    never = liveness["notAlwaysLive"]
    never["maxBytes"] *= copies
    pending = list(never["byProgram"])
    while pending:
        node = pending.pop()
        node["bytes"] *= copies
        pending.extend(node["children"])


def scaled_profile(tile_copies: int, run_copies: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The golden profile on ``4 x tile_copies`` tiles, run ``run_copies`` times in a row.

    Every invariant still holds: per-tile arrays repeat the golden four tiles, totals and
    active tile counts scale with the tiles, and each run's steps follow the previous run's.
    """
    graph = golden_graph()
    num_tiles = NUM_TILES * tile_copies
    target = graph["target"]
    target.update(tilesPerIPU=num_tiles, numTiles=num_tiles)
    target.update(bytesPerIPU=4096 * num_tiles, totalMemory=4096 * num_tiles)
    for key in ("computeSets", "exchanges", "hostExchanges", "memory", "target"):
        graph[key] = _widen(graph[key], tile_copies)
    estimates = graph["computeSets"]["cycleEstimates"]
    by_type = estimates["activeCyclesByVertexType"]
    estimates["activeCyclesByVertexType"] = [[v * tile_copies for v in row] for row in by_type]
    _scale_liveness(graph["memory"]["liveness"], tile_copies)

    execution = golden_execution()
    simulation = execution["simulation"]
    steps = []
    for run in range(run_copies):
        for step in golden_steps():
            step["cyclesFrom"] += 400 * run
            step["cyclesTo"] += 400 * run
            step["activeTiles"] *= tile_copies
            steps.append(step)
    simulation["steps"] = steps
    simulation["cycles"] = 400 * run_copies
    for key in schema.TILE_CYCLES_KEYS:
        simulation["tileCycles"][key] *= tile_copies * run_copies
    execution["programTrace"] = execution["programTrace"] * run_copies
    return graph, execution


def mutate(profile: dict[str, Any], ops: list[tuple]) -> None:
    """Apply edits to a profile in place.

    Each op is ``("set", path, value)``, ``("del", path)`` or ``("append", path, value)``; a
    path is dotted, with list indices as numbers: ``"programs.2.computeSet"``.
    """
    for op, path, *value in ops:
        *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        obj = profile
        for key in parents:
            obj = obj[key]
        if op == "set":
            obj[last] = copy.deepcopy(value[0])
        elif op == "del":
            del obj[last]
        elif op == "append":
            obj[last].append(copy.deepcopy(value[0]))
        else:
            raise ValueError(f"unknown op {op!r}")
