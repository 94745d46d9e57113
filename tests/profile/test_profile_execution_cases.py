"""Each execution-profile invariant violation is caught, with the field path in the message.

Every case edits the golden execution profile (``fixtures.py``) with ``fx.mutate`` ops and
expects a problem starting with the given text; the golden graph profile gives the sizes.
"""

from __future__ import annotations

from typing import Any

import pytest

from tremula.errors import ProfileError
from tremula.profile import check_execution_profile, validate

E = "executionProfile"
S = f"{E}.simulation.steps"
STEPS = "simulation.steps"
TC = "simulation.tileCycles"


def _mode(mode: str, **arrays: Any) -> list[tuple]:
    return [("set", "profilerMode", mode), *(("set", k, v) for k, v in arrays.items())]


CASES: list[tuple[str, list[tuple], str]] = [
    (
        "mode",
        [("set", "profilerMode", "TURBO")],
        f"{E}.profilerMode: 'TURBO' is not one of NONE, CPU",
    ),
    ("no mode", [("del", "profilerMode")], f"{E}.profilerMode: missing"),
    (
        "trace index",
        [("set", "programTrace", [0, 1, 99])],
        f"{E}.programTrace[2]: 99 is not a valid index into programs (6 entries)",
    ),
    (
        "trace type",
        [("set", "programTrace", [0, "1"])],
        f"{E}.programTrace[1]: expected an int, got '1' (str)",
    ),
    ("no trace", [("del", "programTrace")], f"{E}.programTrace: missing"),
    ("no simulation", [("del", "simulation")], f"{E}.simulation: missing"),
    (
        "total cycles",
        [("set", "simulation.cycles", "400")],
        f"{E}.simulation.cycles: expected an int, got '400' (str)",
    ),
    ("no steps", [("del", STEPS)], f"{E}.simulation.steps: missing"),
    ("step object", [("set", f"{STEPS}.0", "x")], f"{S}[0]: expected an object, got 'x' (str)"),
    (
        "cycles",
        [("set", f"{STEPS}.1.cycles", 61)],
        f"{S}[1].cycles: 61 != cyclesTo - cyclesFrom = 60",
    ),
    (
        "cyclesTo",
        [("set", f"{STEPS}.5.cyclesTo", 500), ("set", f"{STEPS}.5.cycles", 140)],
        f"{S}[5].cyclesTo: 500 > simulation.cycles = 400",
    ),
    ("cyclesFrom", [("set", f"{STEPS}.0.cyclesFrom", -1)], f"{S}[0].cyclesFrom: -1 < 0"),
    (
        "tileBalance",
        [("set", f"{STEPS}.0.tileBalance", 1.5)],
        f"{S}[0].tileBalance: 1.5 is not in [0, 1]",
    ),
    (
        "activeTileBalance",
        [("set", f"{STEPS}.2.activeTileBalance", -0.1)],
        f"{S}[2].activeTileBalance: -0.1 is not in [0, 1]",
    ),
    (
        "nan balance",
        [("set", f"{STEPS}.2.tileBalance", float("nan"))],
        f"{S}[2].tileBalance: expected a finite number, got nan (float)",
    ),
    (
        "dataBalance",
        [("set", f"{STEPS}.3.dataBalance", 2)],
        f"{S}[3].dataBalance: 2 is not in [0, 1]",
    ),
    ("threadBalance", [("del", f"{STEPS}.1.threadBalance")], f"{S}[1].threadBalance: missing"),
    ("totalData", [("del", f"{STEPS}.3.totalData")], f"{S}[3].totalData: missing"),
    (
        "activeTiles",
        [("set", f"{STEPS}.1.activeTiles", 5)],
        f"{S}[1].activeTiles: 5 > numTiles = 4",
    ),
    ("no activeTiles", [("del", f"{STEPS}.1.activeTiles")], f"{S}[1].activeTiles: missing"),
    (
        "computeSet",
        [("set", f"{STEPS}.1.computeSet", 7)],
        f"{S}[1].computeSet: 7 is not a valid index into computeSets (2 entries)",
    ),
    (
        "exchange",
        [("set", f"{STEPS}.3.exchange", 3)],
        f"{S}[3].exchange: 3 is not a valid index into exchanges (1 entries)",
    ),
    (
        "hostExchange",
        [("set", f"{STEPS}.0.hostExchange", 1)],
        f"{S}[0].hostExchange: 1 is not a valid index into hostExchanges (1 entries)",
    ),
    ("syncType", [("del", f"{STEPS}.2.syncType")], f"{S}[2].syncType: missing"),
    ("step type", [("set", f"{STEPS}.1.type", "Dance")], f"{S}[1].type: unknown step type 'Dance'"),
    (
        "step program",
        [("set", f"{STEPS}.4.program", 99)],
        f"{S}[4].program: 99 is not a valid index into programs (6 entries)",
    ),
    (
        "cyclesOverlapped",
        [("set", f"{STEPS}.1.cyclesOverlapped", -1)],
        f"{S}[1].cyclesOverlapped: -1 < 0",
    ),
    (
        "name",
        [("set", f"{STEPS}.1.name", "triple")],
        f"{S}[1].name: 'triple' != programs[2].name = 'double'",
    ),
    (
        "no name",
        [("del", f"{STEPS}.1.name")],
        f"{S}[1].name: missing, but programs[2].name = 'double'",
    ),
    (
        "extra name",
        [("set", f"{STEPS}.2.name", "sync")],
        f"{S}[2].name: 'sync' given, but programs[3] has no name",
    ),
    (
        "cs mismatch",
        [("set", f"{STEPS}.1.computeSet", 1)],
        f"{S}[1].computeSet: 1 != programs[2].computeSet = 0",
    ),
    (
        "sync mismatch",
        [("set", f"{STEPS}.2.syncType", "External")],
        f"{S}[2].syncType: 'External' != programs[3].syncType = 'Internal'",
    ),
    ("tileCycles", [("set", f"{TC}.sync", -5)], f"{E}.{TC}.sync: -5 < 0"),
    ("tileCycles key", [("del", f"{TC}.streamCopy")], f"{E}.{TC}.streamCopy: missing"),
    (
        "tileCycles sum",
        [("set", f"{TC}.compute", 2000)],
        f"{E}.{TC}: compute + copySharedStructure + doExchange + globalExchange + streamCopy"
        " + sync = 2680 > simulation.cycles x numTiles = 1600",
    ),
    ("compute sets", _mode("COMPUTE_SETS"), f"{E}.computeSetCyclesByTile: missing"),
    (
        "compute set rows",
        _mode("COMPUTE_SETS", computeSetCyclesByTile=[[1, 2, 3, 4]]),
        f"{E}.computeSetCyclesByTile: 1 entries != len(computeSets.names) = 2",
    ),
    (
        "single tile",
        _mode("SINGLE_TILE_COMPUTE_SETS", computeSetCycles=[1, 2, 3]),
        f"{E}.computeSetCycles: 3 entries != len(computeSets.names) = 2",
    ),
    (
        "vertex cs",
        _mode(
            "VERTICES",
            vertexCycles=[5] * 6,
            vertexComputeSet=[0, 0, 0, 0, 1, 2],
            vertexType=[0] * 6,
        ),
        f"{E}.vertexComputeSet[5]: 2 is not a valid index into computeSets (2 entries)",
    ),
    (
        "vertex type",
        _mode("VERTICES", vertexCycles=[5] * 6, vertexComputeSet=[0] * 6, vertexType=[0] * 5 + [2]),
        f"{E}.vertexType[5]: 2 is not a valid index into vertexTypes (2 entries)",
    ),
    (
        "vertex lengths",
        _mode("VERTICES", vertexCycles=[5] * 6, vertexComputeSet=[0] * 6, vertexType=[0] * 5),
        f"{E}.vertexType: 5 entries != len(vertexCycles) = 6",
    ),
    (
        "external rows",
        _mode("EXTERNAL_EXCHANGES", externalExchangeCycles=[[0] * 4]),
        f"{E}.externalExchangeCycles: 1 entries != len(externalExchanges.bytesReceivedByTile) = 0",
    ),
    (
        "host tiles",
        _mode("HOST_EXCHANGES", hostExchangeCycles=[[1, 2, 3]]),
        f"{E}.hostExchangeCycles[0]: 3 entries != numTiles = 4",
    ),
]

VALID_MODES: list[tuple[str, list[tuple]]] = [
    ("compute sets", _mode("COMPUTE_SETS", computeSetCyclesByTile=[[60] * 4, [120, 120, 0, 0]])),
    ("single tile", _mode("SINGLE_TILE_COMPUTE_SETS", computeSetCycles=[60, 120])),
    (
        "vertices",
        _mode(
            "VERTICES",
            vertexCycles=[10] * 6,
            vertexComputeSet=[0] * 4 + [1] * 2,
            vertexType=[0] * 4 + [1] * 2,
        ),
    ),
    ("external", _mode("EXTERNAL_EXCHANGES", externalExchangeCycles=[])),
    ("host", _mode("HOST_EXCHANGES", hostExchangeCycles=[[100, 100, 0, 0]])),
    ("cpu", [*_mode("CPU"), ("del", "programTrace"), ("del", "simulation")]),
]


@pytest.mark.parametrize(("ops", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_execution_violation_is_caught(
    fx: Any, graph: dict, execution: dict, ops: list[tuple], expected: str
) -> None:
    fx.mutate(execution, ops)
    problems = check_execution_profile(execution, graph)
    assert any(problem.startswith(expected) for problem in problems), problems
    with pytest.raises(ProfileError, match=r"problem\(s\) in the profile"):
        validate(graph, execution)


@pytest.mark.parametrize("ops", [c[1] for c in VALID_MODES], ids=[c[0] for c in VALID_MODES])
def test_each_profiler_mode_validates(
    fx: Any, graph: dict, execution: dict, ops: list[tuple]
) -> None:
    fx.mutate(execution, ops)
    assert check_execution_profile(execution, graph) == []
