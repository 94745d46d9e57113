"""The Chrome trace export: processes per IPU, five lanes, one event per step and lane."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from tremula.profile import to_chrome_trace
from tremula.profile.chrome import LANES


def _steps(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_container(graph: dict, execution: dict) -> None:
    trace = to_chrome_trace(graph, execution)
    assert trace["displayTimeUnit"] == "ns"
    assert trace["otherData"]["profilerMode"] == "IPU_MODEL"
    assert trace["otherData"]["cycles"] == 400
    json.dumps(trace)  # plain JSON


def test_metadata(graph: dict, execution: dict) -> None:
    meta = [e for e in to_chrome_trace(graph, execution)["traceEvents"] if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert names == {0: "IPU 0 (IPU_MODEL, ipu2)", 1: "Counters (all IPUs)"}
    lanes = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert lanes == dict(enumerate(["Program steps", "Compute", "Exchange", "Sync", "StreamCopy"]))


def test_one_event_per_step_and_lane(graph: dict, execution: dict) -> None:
    events = _steps(to_chrome_trace(graph, execution))
    assert len(events) == 12
    program_lane = [e["name"] for e in events if e["tid"] == 0]
    assert program_lane == [
        "hostToIpu/x",
        "double",
        "Sync (program 3)",
        "exchangeX",
        "add",
        "Sync (program 3)",
    ]
    per_lane = Counter(LANES[e["tid"]] for e in events if e["tid"] != 0)
    assert per_lane == {"Compute": 2, "Exchange": 1, "Sync": 2, "StreamCopy": 1}


def test_times_are_microseconds_with_raw_cycles_in_args(graph: dict, execution: dict) -> None:
    double = [e for e in _steps(to_chrome_trace(graph, execution)) if e["name"] == "double"]
    assert [e["tid"] for e in double] == [0, LANES.index("Compute")]
    event = double[0]
    assert event["ts"] == pytest.approx(100 / 1600)  # 1.6 GHz: 1,600 cycles per microsecond
    assert event["dur"] == pytest.approx(60 / 1600)
    assert event["cat"] == "step,OnTileExecute"
    assert event["args"] == execution["simulation"]["steps"][1]
    assert (event["args"]["cyclesFrom"], event["args"]["cyclesTo"]) == (100, 160)


def test_steps_go_to_the_ipus_whose_tiles_take_part(graph: dict, execution: dict) -> None:
    graph["target"].update(numIPUs=2, tilesPerIPU=2)  # tiles 0, 1 on IPU 0; 2, 3 on IPU 1
    trace = to_chrome_trace(graph, execution)
    names = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"
    }
    assert names == {
        0: "IPU 0 (IPU_MODEL, ipu2)",
        1: "IPU 1 (IPU_MODEL, ipu2)",
        2: "Counters (all IPUs)",
    }
    ipus: dict[str, set[int]] = {}
    for event in _steps(trace):
        ipus.setdefault(event["name"], set()).add(event["pid"])
    assert ipus == {
        "hostToIpu/x": {0},  # only tiles 0 and 1 receive host data
        "double": {0, 1},
        "Sync (program 3)": {0, 1},
        "exchangeX": {0, 1},  # tiles 0, 1 send to tiles 2, 3
        "add": {0},  # compute set 1 has vertices on tiles 0 and 1 only
    }


def test_no_simulation_gives_metadata_only(graph: dict) -> None:
    trace = to_chrome_trace(graph, {"profilerMode": "NONE"})
    assert {e["ph"] for e in trace["traceEvents"]} == {"M"}
    assert trace["otherData"]["cycles"] is None


def test_counters_of_live_memory_and_active_tiles(graph: dict, execution: dict) -> None:
    trace = to_chrome_trace(graph, execution)
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert {e["pid"] for e in counters} == {1}  # the counters' process, after IPU 0
    tiles = [(e["ts"] * 1600, e["args"]["tiles"]) for e in counters if e["name"] == "Active tiles"]
    assert tiles == [(0, 2), (100, 4), (160, 4), (200, 4), (240, 2), (360, 4)]
    live = [e["args"] for e in counters if e["name"] == "Live memory (bytes)"]
    # byProgram leaves: programs 1, 2, 4, 5 hold 32, 64, 96, 64 not-always-live bytes; the
    # syncs (program 3) are no leaf of the tree: 0
    assert [a["notAlwaysLive"] for a in live] == [32, 64, 0, 96, 64, 0]
    assert {a["alwaysLive"] for a in live} == {1448}
