"""Each graph-profile invariant violation is caught, with the field path in the message.

Every case edits the golden graph profile (``fixtures.py``) with ``fx.mutate`` ops and expects
a problem starting with the given text: the path, then the actual and expected values.
"""

from __future__ import annotations

from typing import Any

import pytest

from tremula.errors import ProfileError
from tremula.profile import check_graph_profile, validate

P = "graphProfile"
EST = "computeSets.cycleEstimates"
CAT = "memory.byCategory"
NAL = "memory.liveness.notAlwaysLive"

CASES: list[tuple[str, list[tuple], str]] = [
    (
        "numTiles",
        [("set", "target.numTiles", 5)],
        f"{P}.target.numTiles: 5 != numIPUs x tilesPerIPU = 4",
    ),
    (
        "totalMemory",
        [("set", "target.totalMemory", 1)],
        f"{P}.target.totalMemory: 1 != bytesPerTile x numTiles = 16384",
    ),
    (
        "bytesPerIPU",
        [("set", "target.bytesPerIPU", 4096)],
        f"{P}.target.bytesPerIPU: 4096 != bytesPerTile x tilesPerIPU = 16384",
    ),
    (
        "target type",
        [("set", "target.type", "GPU")],
        f"{P}.target.type: 'GPU' is not one of IPU_MODEL, IPU, CPU",
    ),
    (
        "ipuVersion",
        [("set", "target.ipuVersion", "ipu9")],
        f"{P}.target.ipuVersion: 'ipu9' is not one of",
    ),
    (
        "sync delays",
        [("set", "target.relativeSyncDelayByTile", [0, 1, 2])],
        f"{P}.target.relativeSyncDelayByTile: 3 entries != tilesPerIPU = 4",
    ),
    ("no clock", [("del", "target.clockFrequency")], f"{P}.target.clockFrequency: missing"),
    (
        "clock type",
        [("set", "target.clockFrequency", "fast")],
        f"{P}.target.clockFrequency: expected a finite number, got 'fast' (str)",
    ),
    ("clock zero", [("set", "target.clockFrequency", 0.0)], f"{P}.target.clockFrequency: 0.0 <= 0"),
    ("no IPUs", [("set", "target.numIPUs", 0)], f"{P}.target.numIPUs: 0 < 1"),
    (
        "bool as int",
        [("set", "target.minSyncDelay", True)],
        f"{P}.target.minSyncDelay: expected an int, got True (bool)",
    ),
    ("no target", [("del", "target")], f"{P}.target: missing"),
    (
        "optimizationInfo",
        [("set", "optimizationInfo.x", "y")],
        f"{P}.optimizationInfo.x: expected a finite number, got 'y' (str)",
    ),
    (
        "numComputeSets",
        [("set", "graph.numComputeSets", 3)],
        f"{P}.graph.numComputeSets: 3 != len(computeSets.names) = 2",
    ),
    ("numEdges", [("set", "graph.numEdges", -1)], f"{P}.graph.numEdges: -1 < 0"),
    (
        "vertex sizes",
        [("set", "vertexTypes.sizes", [4])],
        f"{P}.vertexTypes.sizes: 1 entries != len(vertexTypes.names) = 2",
    ),
    (
        "vertex name",
        [("set", "vertexTypes.names.1", 7)],
        f"{P}.vertexTypes.names[1]: expected a string, got 7 (int)",
    ),
    (
        "cs name",
        [("set", "computeSets.names.1", None)],
        f"{P}.computeSets.names[1]: expected a string, got None",
    ),
    (
        "cs vertex type",
        [("set", "computeSets.vertexTypes.1.0", 5)],
        f"{P}.computeSets.vertexTypes[1][0]: 5 is not a valid index into vertexTypes (2 entries)",
    ),
    (
        "cs vertex lists",
        [("append", "computeSets.vertexCounts.1", 1)],
        f"{P}.computeSets.vertexTypes[1]: 1 != len({P}.computeSets.vertexCounts[1]) = 2",
    ),
    (
        "cs rows",
        [("set", "computeSets.vertexCounts", [[4]])],
        f"{P}.computeSets.vertexCounts: 1 entries != len(computeSets.names) = 2",
    ),
    (
        "cycles < active",
        [("set", f"{EST}.cyclesByTile.1.0", 10)],
        f"{P}.{EST}.cyclesByTile[1][0]: 10 < activeCyclesByTile = 20",
    ),
    (
        "active row",
        [("set", f"{EST}.activeCyclesByTile.0", [10, 10, 10])],
        f"{P}.{EST}.activeCyclesByTile[0]: 3 entries != numTiles = 4",
    ),
    (
        "active by type",
        [("set", f"{EST}.activeCyclesByVertexType.0.1", 1)],
        f"{P}.{EST}.activeCyclesByVertexType.*[0]: 41 != sum of activeCyclesByTile = 40",
    ),
    (
        "by type width",
        [("set", f"{EST}.activeCyclesByVertexType", [[40], [40]])],
        f"{P}.{EST}.activeCyclesByVertexType[0]: 1 entries != len(vertexTypes.names) = 2",
    ),
    ("no estimates", [("del", EST)], f"{P}.{EST}: missing"),
    (
        "float element",
        [("set", "exchanges.cyclesByTile.0.1", 40.5)],
        f"{P}.exchanges.cyclesByTile[0][1]: expected an int, got 40.5 (float)",
    ),
    (
        "negative",
        [("set", "exchanges.bytesSentByTile", [[16, 16, -1, -2]])],
        f"{P}.exchanges.bytesSentByTile[0][2]: -1 < 0 (and 1 more)",
    ),
    (
        "exchange rows",
        [("append", "exchanges.codeBytesByTile", [24] * 4)],
        f"{P}.exchanges.codeBytesByTile: 2 entries != len(exchanges.bytesReceivedByTile) = 1",
    ),
    (
        "host key",
        [("del", "hostExchanges.estimatedCyclesByTile")],
        f"{P}.hostExchanges.estimatedCyclesByTile: missing",
    ),
    (
        "external rows",
        [("append", "externalExchanges.bytesSentByTile", [0] * 4)],
        f"{P}.externalExchanges.bytesSentByTile: 1 entries"
        " != len(externalExchanges.bytesReceivedByTile) = 0",
    ),
    (
        "program type",
        [("set", "programs.1.type", "Teleport")],
        f"{P}.programs[1].type: unknown program type 'Teleport'",
    ),
    (
        "program cs",
        [("set", "programs.2.computeSet", 2)],
        f"{P}.programs[2].computeSet: 2 is not a valid index into computeSets (2 entries)",
    ),
    (
        "program child",
        [("set", "programs.0.children", [1, 99])],
        f"{P}.programs[0].children[1]: 99 is not a valid index into programs (6 entries)",
    ),
    ("no children", [("del", "programs.0.children")], f"{P}.programs[0].children: missing"),
    (
        "stream exchange",
        [("set", "programs.1.exchange", 1)],
        f"{P}.programs[1].exchange: 1 is not a valid index into hostExchanges (1 entries)",
    ),
    ("exchange field", [("del", "programs.4.exchange")], f"{P}.programs[4].exchange: missing"),
    (
        "no memoryByInstruction",
        [("del", "programs.4.memoryByInstruction")],
        f"{P}.programs[4].memoryByInstruction: missing",
    ),
    (
        "instruction total",
        [("set", "programs.4.memoryByInstruction.total", 25)],
        f"{P}.programs[4].memoryByInstruction.total: 25 != sum of the other fields = 24",
    ),
    (
        "instruction key",
        [("del", "programs.4.memoryByInstruction.send")],
        f"{P}.programs[4].memoryByInstruction.send: missing",
    ),
    (
        "sync type",
        [("set", "programs.3.syncType", "Sideways")],
        f"{P}.programs[3].syncType: 'Sideways' is not one of Internal, External",
    ),
    (
        "program name",
        [("set", "programs.2.name", 3)],
        f"{P}.programs[2].name: expected a string, got 3 (int)",
    ),
    (
        "program object",
        [("set", "programs.2", "x")],
        f"{P}.programs[2]: expected an object, got 'x' (str)",
    ),
    (
        "repeat children",
        [("append", "programs", {"type": "Repeat", "children": [1, 2], "count": 2})],
        f"{P}.programs[6].children: 2 children, a Repeat has 1",
    ),
    (
        "repeat count",
        [("append", "programs", {"type": "Repeat", "children": [1], "count": -1})],
        f"{P}.programs[6].count: -1 < 0",
    ),
    (
        "if-else",
        [("append", "programs", {"type": "IfElse", "children": [1]})],
        f"{P}.programs[6].children: 1 children, a IfElse has 2",
    ),
    (
        "case values",
        [("append", "programs", {"type": "Switch", "children": [1, 2, 3], "caseValues": [0]})],
        f"{P}.programs[6].caseValues: 1 != len(children) - 1 = 2",
    ),
    (
        "call target",
        [("append", "programs", {"type": "Call", "target": 0})],
        f"{P}.programs[6].target: 0 is not a valid index into functionPrograms (0 entries)",
    ),
    (
        "control programs",
        [("set", "controlPrograms", [7])],
        f"{P}.controlPrograms[0]: 7 is not a valid index into programs (6 entries)",
    ),
    (
        "function programs",
        [("set", "functionPrograms", ["x"])],
        f"{P}.functionPrograms[0]: expected an int, got 'x' (str)",
    ),
    (
        "byTile total",
        [("set", "memory.byTile.total.3", 290)],
        f"{P}.memory.byTile.total[3]: 290 != interleaved + nonInterleaved + overflowed = 284",
    ),
    (
        "region gaps",
        [("set", "memory.byTile.interleavedIncludingGaps.0", 100)],
        f"{P}.memory.byTile.interleavedIncludingGaps[0]: 100 < interleaved = 128",
    ),
    (
        "total gaps",
        [("set", "memory.byTile.totalIncludingGaps.2", 200)],
        f"{P}.memory.byTile.totalIncludingGaps[2]: 200 < total = 284",
    ),
    (
        "byTile length",
        [("set", "memory.byTile.overflowed", [0, 0, 0])],
        f"{P}.memory.byTile.overflowed: 3 entries != numTiles = 4",
    ),
    (
        "category total",
        [("set", f"{CAT}.stack.total.0", 60)],
        f"{P}.{CAT}.stack.total[0]: 60 != sum of the six region arrays = 64",
    ),
    (
        "categories sum",
        [
            ("set", f"{CAT}.stack.total.0", 60),
            ("set", f"{CAT}.stack.interleaved.nonOverlapped.0", 60),
        ],
        f"{P}.{CAT}.*.total[0]: 484 != byTile.total = 488",
    ),
    ("no category", [("del", f"{CAT}.rearrangement")], f"{P}.{CAT}.rearrangement: missing"),
    (
        "unknown category",
        [("set", f"{CAT}.bogus", {})],
        f"{P}.{CAT}.bogus: unknown memory category",
    ),
    (
        "category length",
        [("set", f"{CAT}.variable.interleaved.overlapped", [0, 0, 0])],
        f"{P}.{CAT}.variable.interleaved.overlapped: 3 entries != numTiles = 4",
    ),
    (
        "totalBytes",
        [("set", "memory.byVertexType.totalBytes.0.0", 0)],
        f"{P}.memory.byVertexType.totalBytes[0][0]: 0 != sum of the other parts = 84",
    ),
    (
        "byComputeSet rows",
        [("append", "memory.byComputeSet.codeBytes", [80] * 4)],
        f"{P}.memory.byComputeSet.codeBytes: 3 entries != len(computeSets.names) = 2",
    ),
    (
        "always-live",
        [("set", "memory.liveness.alwaysLive.bytes", 1)],
        f"{P}.memory.liveness.alwaysLive.bytes: 1 != sum of bytesByTile = 1448",
    ),
    (
        "max by tile",
        [("set", f"{NAL}.maxBytesByTile.2", 0)],
        f"{P}.{NAL}.maxBytesByTile[2]: 0 < bytesByTile = 32",
    ),
    (
        "maxBytes",
        [("set", f"{NAL}.maxBytes", 95)],
        f"{P}.{NAL}.maxBytes: 95 != sum of bytesByTile = 96",
    ),
    (
        "tree program",
        [("set", f"{NAL}.byProgram.0.children.1.program", 99)],
        f"{P}.{NAL}.byProgram[0].children[1].program: 99"
        " is not a valid index into programs (6 entries)",
    ),
    (
        "tree bytes",
        [("set", f"{NAL}.byProgram.0.children.2.bytes", 97)],
        f"{P}.{NAL}.byProgram[0].children[2].bytes: 97 > notAlwaysLive.maxBytes = 96",
    ),
    (
        "tree children",
        [("del", f"{NAL}.byProgram.0.children")],
        f"{P}.{NAL}.byProgram[0].children: missing",
    ),
    ("no liveness", [("del", "memory.liveness")], f"{P}.memory.liveness: missing"),
]


@pytest.mark.parametrize(("ops", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_graph_violation_is_caught(fx: Any, graph: dict, ops: list[tuple], expected: str) -> None:
    fx.mutate(graph, ops)
    problems = check_graph_profile(graph)
    assert any(problem.startswith(expected) for problem in problems), problems
    with pytest.raises(ProfileError, match=r"problem\(s\) in the profile"):
        validate(graph)
