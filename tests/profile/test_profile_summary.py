"""The text summary of the golden profile: every figure is worked out in ``fixtures.py``."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tremula.errors import ProfileError
from tremula.profile import summarise


def _section(text: str, title: str) -> str:
    """One section of a report: from its ``title:`` line to the next blank line."""
    for block in text.split("\n\n"):
        if block.startswith(f"{title}:\n"):
            return block
    raise AssertionError(f"no section {title!r} in:\n{text}")


def _value(text: str, label: str) -> str:
    """The value printed after ``label:`` (first occurrence), without the alignment."""
    match = re.search(rf"^[ ]*{re.escape(label)}:[ ]+(.*)$", text, re.MULTILINE)
    assert match, f"no line {label!r} in:\n{text}"
    return match.group(1)


@pytest.fixture
def report(graph: dict, execution: dict) -> str:
    return summarise(graph, execution)


def test_sections_in_order(report: str) -> None:
    titles = [line[:-1] for line in report.splitlines() if line and not line.startswith(" ")]
    assert titles == ["Target", "Graph", "Memory Usage", "Liveness", "Execution"]
    assert report.endswith("\n")


def test_target(report: str) -> None:
    target = _section(report, "Target")
    assert _value(target, "Number of IPUs") == "1"
    assert _value(target, "Tiles per IPU") == "4"
    assert _value(target, "Total Tiles") == "4"
    assert _value(target, "Memory Per-Tile") == "4.0 kB"
    assert _value(target, "Total Memory") == "16.0 kB"
    assert _value(target, "Clock Speed (approx)") == "1,600.0 MHz"


def test_graph(report: str) -> None:
    graph = _section(report, "Graph")
    assert _value(graph, "Number of vertices") == "6"
    assert _value(graph, "Number of edges") == "14"
    assert _value(graph, "Number of variables") == "5"
    assert _value(graph, "Number of compute sets") == "2"


def test_memory_totals(report: str) -> None:
    memory = _section(report, "Memory Usage")
    assert _value(memory, "Including Gaps") == "1,840 B"
    assert _value(memory, "Non-interleaved") == "1,160 B"
    assert _value(memory, "Interleaved") == "384 B"
    assert _value(memory, "Overflowed") == "0 B"
    assert _value(memory, "Total") == "1,544 B"


def test_memory_by_data_type(report: str) -> None:
    by_type = _section(report, "Memory Usage").split("By Data Type:\n", 1)[1]
    by_type = by_type.split("Vertex Data", 1)[0]
    rows = [line.split(":") for line in by_type.strip().splitlines()]
    assert [(name.strip(), value.strip()) for name, value in rows] == [
        ("Variables", "320 B"),
        ("Constants", "16 B"),
        ("Stack", "256 B"),
        ("Vertex Instances", "40 B"),
        ("Control Code", "192 B"),
        ("Vertex Code", "560 B"),
        ("Internal Exchange Code", "96 B"),
        ("Host Exchange Code", "32 B"),
        ("Internal Exchange Messages", "32 B"),
    ]  # zero categories are left out; the sum is the 1,544 B total


def test_vertex_data(report: str) -> None:
    memory = _section(report, "Memory Usage")
    assert "Vertex Data (40 B):" in memory
    assert _value(memory, "Internal vertex state") == "32 B"
    assert _value(memory, "Edge pointers") == "8 B"
    assert _value(memory, "Padding") == "0 B"
    assert _value(memory, "Adder") == "24 B"
    assert _value(memory, "Doubler") == "16 B"
    assert memory.index("Adder:") < memory.index("Doubler:")  # largest first


def test_by_tile(report: str) -> None:
    memory = _section(report, "Memory Usage")
    assert _value(memory, "Maximum (Including Gaps)") == "576 B on tile 1"
    assert _value(memory, "Maximum (Excluding Gaps)") == "488 B on tile 0"
    assert "    0 tile(s) out of memory\n" in memory
    tiles = re.findall(r"^\s+Tile (\d+):$", memory, re.MULTILINE)
    assert tiles == ["1", "0", "2", "3"]  # by memory including gaps, ties by tile id
    tile_1 = memory.split("Tile 1:", 1)[1]
    assert _value(tile_1, "Including Gaps") == "576 B"
    assert _value(tile_1, "Excluding Gaps") == "488 B"
    assert _value(tile_1, "Non-interleaved") == "360 B"
    assert _value(tile_1, "Vertex Code") == "200 B"


def test_top_tiles_and_out_of_memory(graph: dict) -> None:
    graph["target"]["bytesPerTile"] = 500
    memory = _section(summarise(graph, top_tiles=1), "Memory Usage")
    assert "2 tile(s) out of memory" in memory  # 560 and 576 > 500
    assert re.findall(r"Tile (\d+):", memory) == ["1"]


def test_liveness(report: str) -> None:
    liveness = _section(report, "Liveness")
    assert _value(liveness, "Always-live") == "1,448 B"
    assert _value(liveness, "Not-always-live (peak)") == "96 B"
    label = "Maximum per tile (always-live + max not-always-live)"
    assert _value(liveness, label) == "488 B on tile 0"
    assert "by program" not in liveness


def test_var_storage(graph: dict) -> None:
    text = summarise(graph, show_var_storage=True)
    liveness = _section(text, "Liveness")
    assert _value(liveness, "main (program 0)") == "96 B"
    assert _value(liveness, "exchangeX (program 4)") == "96 B"
    tile_2 = _section(text, "Memory Usage").split("Tile 2:", 1)[1]
    assert _value(tile_2, "Always-live") == "252 B"
    assert _value(tile_2, "Not-always-live (peak step)") == "32 B"


def test_execution(report: str) -> None:
    execution = _section(report, "Execution")
    assert "Profiler mode: IPU_MODEL" in execution
    assert _value(execution, "Total cycles") == "400 (approx 0.250 microseconds)"
    assert "Tile cycles (cycles x tiles = 1,600):" in execution
    expected = {
        "Compute (inc. idle threads)": "480 (30.0%)",
        "Compute (exc. idle threads)": "80 (5.0%)",
        "Internal exchange": "160 (10.0%)",
        "Global exchange": "0 (0.0%)",
        "Host exchange (StreamCopy)": "200 (12.5%)",
        "Shared structure copy": "0 (0.0%)",
        "Sync": "320 (20.0%)",
        "Idle": "440 (27.5%)",
    }
    for label, value in expected.items():
        assert _value(execution, label) == value
    assert _value(execution, "Number of steps") == "6"
    assert "Cycles:" not in execution


def test_execution_steps(graph: dict, execution: dict) -> None:
    steps = summarise(graph, execution, show_execution_steps=True).split("  Steps:\n", 1)[1]
    assert steps.splitlines() == [
        "    StreamCopy: hostToIpu/x",
        "      Cycles: 100  Active Tiles: 2  Tile Balance: 50.0%",
        "    OnTileExecute: double",
        "      Cycles: 60  Active Tiles: 4  Tile Balance: 100.0%",
        "    Sync: (Internal, program 3)",
        "      Cycles: 40  Active Tiles: 4  Tile Balance: 100.0%",
        "    DoExchange: exchangeX",
        "      Cycles: 40  Active Tiles: 4  Tile Balance: 100.0%",
        "    OnTileExecute: add",
        "      Cycles: 120  Active Tiles: 2  Tile Balance: 50.0%",
        "    Sync: (Internal, program 3)",
        "      Cycles: 40  Active Tiles: 4  Tile Balance: 100.0%",
    ]


def test_numbers_end_in_one_column(report: str) -> None:
    lines = _section(report, "Target").splitlines()[1:]
    ends = {re.search(r":\s+(\S+)", line).end(1) for line in lines}
    assert len(ends) == 1


def test_thousands_separators(fx: Any) -> None:
    graph, execution = fx.scaled_profile(368, 2)
    text = summarise(graph, execution)
    assert _value(text, "Tiles per IPU") == "1,472"
    assert _value(text, "Total Memory") == "5.8 MB"
    assert _value(text, "Including Gaps") == "677,120 B"
    assert _value(text, "Number of steps") == "12"


def test_deterministic(graph: dict, execution: dict) -> None:
    assert summarise(graph, execution) == summarise(graph, execution)


def test_execution_without_simulation(graph: dict) -> None:
    execution = _section(summarise(graph, {"profilerMode": "NONE"}), "Execution")
    assert execution.splitlines()[1:] == [
        "  Profiler mode: NONE",
        "  No simulation in this profile",
    ]


def test_incomplete_profile(graph: dict) -> None:
    del graph["memory"]
    with pytest.raises(ProfileError, match="cannot summarise the profile"):
        summarise(graph)
