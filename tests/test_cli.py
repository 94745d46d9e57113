"""The ``tremula`` command: demo and profile subcommands."""

from __future__ import annotations

import json

from tremula.cli import main


def test_demo_writes_a_valid_report(tmp_path, capsys) -> None:
    assert main(["demo", "--tiles", "4", "--report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "Tiles per IPU:" in out and "Total cycles" in out
    assert main(["profile", "validate", str(tmp_path)]) == 0
    assert main(["profile", "summary", str(tmp_path), "--steps"]) == 0
    assert "OnTileExecute" in capsys.readouterr().out


def test_validate_reports_a_broken_profile(tmp_path, capsys) -> None:
    assert main(["demo", "--tiles", "4", "--report", str(tmp_path)]) == 0
    graph = json.loads((tmp_path / "graph.json").read_text())
    graph["target"]["numTiles"] = 5
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    capsys.readouterr()
    assert main(["profile", "validate", str(tmp_path)]) == 1
    assert "numTiles" in capsys.readouterr().out
