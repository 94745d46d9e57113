"""``tremula profile summary|validate`` on report directories: output and exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tremula.profile import write_profile
from tremula.profile.cli import main


@pytest.fixture
def report(tmp_path: Path, graph: dict, execution: dict) -> Path:
    directory = tmp_path / "report"
    write_profile(directory, graph, execution)
    return directory


def test_validate_ok(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(report)]) == 0
    assert capsys.readouterr().out == "ok: 6 steps, 6 programs\n"


def test_validate_graph_only_warns_and_fails(
    tmp_path: Path, graph: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 30: a run killed before autoReport's last write left graph.json alone, and
    # validate said "ok: 0 steps"
    write_profile(tmp_path, graph, None)
    assert main(["validate", str(tmp_path)]) == 3
    captured = capsys.readouterr()
    assert captured.out == "graph profile ok: 6 programs; no execution profile\n"
    assert captured.err.startswith(f"warning: {tmp_path} has graph.json but no execution.json")
    assert "killed" in captured.err


def test_summary_graph_only_says_the_execution_profile_is_missing(
    tmp_path: Path, graph: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    write_profile(tmp_path, graph, None)
    assert main(["summary", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "Execution:\n  none: the graph profile came without its execution profile" in (
        captured.out
    )
    assert captured.err.startswith("warning: ") and "no execution.json" in captured.err


def test_validate_lists_problems(
    tmp_path: Path, graph: dict, execution: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    graph["memory"]["byTile"]["total"][3] = 290
    execution["simulation"]["steps"][1]["cycles"] = 61
    write_profile(tmp_path, graph, execution)
    assert main(["validate", str(tmp_path)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "graphProfile.memory.byTile.total[3]: 290"
        " != interleaved + nonInterleaved + overflowed = 284",
        "graphProfile.memory.byCategory.*.total[3]: 284 != byTile.total = 290",
        "executionProfile.simulation.steps[1].cycles: 61 != cyclesTo - cyclesFrom = 60",
        "3 problem(s)",
    ]


def test_summary(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Target:\n")
    assert "Total cycles:" in out
    assert "OnTileExecute: double" not in out


def test_summary_with_steps(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(report), "--steps", "--top-tiles", "1"]) == 0
    out = capsys.readouterr().out
    assert "    OnTileExecute: double\n" in out
    assert "Tile 0:" not in out and "Tile 1:" in out


def test_summary_of_a_single_file(
    tmp_path: Path, report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["summary", str(report / "graph.json")]) == 0
    captured = capsys.readouterr()
    assert "Memory Usage:" in captured.out and "Total cycles" not in captured.out
    assert "holds a graph profile without an execution profile" in captured.err


def test_missing_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(tmp_path / "nowhere")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and "nowhere" in captured.err


def test_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["explain", "x"]) == 2
    assert "usage: tremula profile" in capsys.readouterr().err


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "summary" in capsys.readouterr().out
