"""The report page's data (``tremula.profile.report``): every number against the golden
profile's hand-worked values (``fixtures.py``), and bad input kept to warnings."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tremula.errors import ProfileError
from tremula.profile import write_profile
from tremula.profile.liveness import liveness_steps
from tremula.profile.report import write_html
from tremula.profile.report.data import build_model
from tremula.profile.report.load import load_report
from tremula.profile.report.page import decode_data
from tremula.profile.report.steps import operation_of


@pytest.fixture
def report_dir(tmp_path: Path, graph: dict, execution: dict) -> Path:
    write_profile(tmp_path / "report", graph, execution)
    return tmp_path / "report"


def test_summary_numbers_are_the_profiles(report_dir: Path) -> None:
    model = build_model(load_report(report_dir))
    assert model["warnings"] == []
    s = model["summary"]
    assert s["memoryIncludingGaps"] == 560 + 576 + 352 + 352
    assert s["memoryExcludingGaps"] == 1544
    assert s["memoryByRegion"] == {"nonInterleaved": 1160, "interleaved": 384, "overflowed": 0}
    assert (s["alwaysLiveBytes"], s["peakNotAlwaysLiveBytes"]) == (1448, 96)
    assert (s["maxTile"], s["maxTileBytes"], s["tilesOutOfMemory"]) == (1, 576, 0)
    assert s["cycles"] == 400
    assert s["seconds"] == pytest.approx(400 / 1.6e9)
    available = 400 * 4
    assert s["cycleShares"]["compute"] == pytest.approx(480 / available)
    assert s["cycleShares"]["sync"] == pytest.approx(320 / available)
    assert s["cycleShares"]["idle"] == pytest.approx(440 / available)


def test_memory_section(report_dir: Path) -> None:
    mem = build_model(load_report(report_dir))["memory"]
    assert mem["totalIncludingGaps"] == [560, 576, 352, 352]
    assert mem["categories"]["vertexCode"] == [200, 200, 80, 80]
    assert mem["categories"]["message"] == [0, 0, 16, 16]
    assert set(mem["categories"]) == {
        "variable", "constant", "vertexCode", "vertexInstanceState", "controlCode",
        "internalExchangeCode", "hostExchangeCode", "stack", "message",
    }  # fmt: skip
    # Adder's vertex memory (120 code + 8 state + 4 edge pointers) is on tiles 0 and 1 only
    adder = next(r for r in mem["vertexTypes"] if r["name"] == "Adder")
    assert adder == {"name": "Adder", "tiles": [0, 1], "bytes": [132, 132]}
    assert mem["alwaysLive"] == [472, 472, 252, 252]
    assert mem["variables"] is None  # the golden profile has no variable table


def test_liveness_steps_from_the_by_program_tree(graph: dict) -> None:
    programs, amounts, source = liveness_steps(graph)
    assert source == "byProgram"
    assert programs.tolist() == [1, 2, 4, 5]  # the leaves, in program order
    assert amounts.tolist() == [32, 64, 96, 64]


def test_liveness_steps_prefer_the_program_steps_table(graph: dict) -> None:
    graph["memory"]["liveness"]["programSteps"] = {
        "program": [1, 2, 3, 4, 5, 3],
        "notAlwaysLiveBytes": [32, 64, 64, 96, 64, 64],
    }
    programs, amounts, source = liveness_steps(graph)
    assert (source, programs.tolist(), amounts.tolist()) == (
        "programSteps",
        [1, 2, 3, 4, 5, 3],
        [32, 64, 64, 96, 64, 64],
    )


def test_execution_section_and_tile_rows(report_dir: Path) -> None:
    ex = build_model(load_report(report_dir))["execution"]
    steps = ex["steps"]
    assert steps["from"] == [0, 100, 160, 200, 240, 360]
    assert steps["cycles"] == [100, 60, 40, 40, 120, 40]
    assert [ex["types"][t] for t in steps["type"]] == [
        "StreamCopy", "OnTileExecute", "Sync", "DoExchange", "OnTileExecute", "Sync",
    ]  # fmt: skip
    assert [ex["names"][i] for i in steps["name"]][:2] == ["hostToIpu/x", "double"]
    # compute set 1 ("add") runs on tiles 0 and 1: its estimated cycles by tile
    assert ex["tileRows"]["computeSet"]["1"] == [120, 120, 0, 0]
    assert ex["numSteps"] == 6


def test_steps_are_capped(report_dir: Path) -> None:
    ex = build_model(load_report(report_dir), max_steps=4)["execution"]
    assert len(ex["steps"]["from"]) == 4
    assert ex["numSteps"] == 6


def test_operations_group_a_compute_set_with_its_exchanges() -> None:
    assert operation_of("layer/matmul/partials/ExchangePre") == "layer/matmul/partials"
    assert operation_of("layer/matmul/partials/ExchangePost") == "layer/matmul/partials"
    assert operation_of("layer/matmul/partials") == "layer/matmul/partials"


def test_operations_rows(report_dir: Path) -> None:
    ops = build_model(load_report(report_dir))["operations"]
    rows = {r["name"]: r for r in ops["rows"]}
    assert ops["totalCycles"] == 400
    assert rows["add"]["cycles"] == 120 and rows["add"]["Compute"] == 120
    assert rows["Sync (program 3)"]["steps"] == 2
    assert rows["Sync (program 3)"]["Sync"] == 80
    # vertex memory of compute set 1 summed over tiles: (120 + 8 + 4) x 2
    assert rows["add"]["memory"] == 264
    assert ops["rows"][0]["name"] == "add"  # largest first


def test_operations_flops_of_a_matmul(tmp_path: Path) -> None:
    """A matmul's FLOPs are 2 m n k; the bias add's m n; unknown FLOPs stay None."""
    import numpy as np

    import popxl
    import popxl.ops as ops

    m, k, n = 12, 40, 20
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((m, k), np.float32), name="a")
        b = popxl.variable(np.ones((k, n), np.float32), name="b")
        y = ops.add(ops.matmul(a, b), popxl.variable(np.ones(n, np.float32), name="bias"))
        ops.host_store(popxl.d2h_stream((m, n), popxl.float32, name="y"), y)
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        session.engine.write_report(str(tmp_path / "mm"))
    rows = build_model(load_report(tmp_path / "mm"))["operations"]["rows"]
    flops = {r["name"].split("/")[0]: r["flops"] for r in rows if r["flops"] is not None}
    assert flops == {"matmul_out": 2 * m * n * k, "add_out": m * n}
    assert any(r["flops"] is None for r in rows)  # the stream copies


def test_page_carries_the_model(report_dir: Path, tmp_path: Path) -> None:
    page = write_html(report_dir, tmp_path / "page.html")
    text = page.path.read_text()
    assert page.size == len(text.encode())
    assert "<script src" not in text and "http://" not in text and "https://" not in text
    payload = decode_data(text)
    assert payload["compare"] is None
    assert payload["report"]["summary"]["cycles"] == 400
    assert (report_dir / "report.html").exists() is False  # -o was given
    assert write_html(report_dir).path == report_dir / "report.html"


# ---- bad input ----


def test_missing_execution_profile_is_a_warning(report_dir: Path) -> None:
    (report_dir / "execution.json").unlink()
    model = build_model(load_report(report_dir))
    assert any("execution.json: missing" in w for w in model["warnings"])
    assert model["execution"] is None and model["memory"] is not None


def test_truncated_json_names_the_file(report_dir: Path) -> None:
    text = (report_dir / "execution.json").read_text()
    (report_dir / "execution.json").write_text(text[: len(text) // 2])
    model = build_model(load_report(report_dir))
    (warning,) = [w for w in model["warnings"] if "execution.json" in w]
    assert "truncated JSON" in warning
    assert model["summary"]["memoryIncludingGaps"] == 1840  # the graph still shows


def test_invalid_json_names_the_file_and_line(report_dir: Path) -> None:
    (report_dir / "graph.json").write_text('{"target": {,}}\n')
    model = build_model(load_report(report_dir))
    (warning,) = [w for w in model["warnings"] if "graph.json" in w]
    assert "invalid JSON" in warning and "line 1" in warning
    assert model["memory"] is None and model["execution"]["cycles"] == 400


def test_nothing_readable_raises(tmp_path: Path) -> None:
    (tmp_path / "graph.json").write_text("[1, 2")
    with pytest.raises(ProfileError, match=r"graph\.json: truncated JSON"):
        load_report(tmp_path)
    with pytest.raises(ProfileError, match="no such report directory"):
        load_report(tmp_path / "absent")


def test_other_format_version_is_a_warning(report_dir: Path, graph: dict) -> None:
    graph["formatVersion"] = "2.0"
    (report_dir / "graph.json").write_text(json.dumps(graph))
    model = build_model(load_report(report_dir))
    assert any("format version '2.0'" in w and "graph.json" in w for w in model["warnings"])
    assert model["summary"]["cycles"] == 400


def test_poplar_2_profile_is_recognised(tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "profile.pop")) as db:  # a `with` alone keeps it open
        db.execute("create table t (x)")
        db.commit()
    with pytest.raises(ProfileError) as info:
        load_report(tmp_path)
    assert "profile.pop: a Poplar SDK 2.x profile" in str(info.value)
    with pytest.raises(ProfileError, match="SQLite database"):
        load_report(tmp_path / "profile.pop")


def test_validation_failures_are_warnings_and_broken_sections_are_skipped(
    report_dir: Path, graph: dict
) -> None:
    del graph["memory"]["byTile"]
    graph["programs"][2]["computeSet"] = 7
    (report_dir / "graph.json").write_text(json.dumps(graph))
    model = build_model(load_report(report_dir))
    failing = sorted(w for w in model["warnings"] if "fails validation" in w)
    assert len(failing) == 2
    assert "execution.json" in failing[0] and "computeSet: 0 != programs[2]" in failing[0]
    assert "graph.json" in failing[1] and "byTile" in failing[1]
    assert any(w.startswith("memory view: cannot be built") for w in model["warnings"])
    assert model["memory"] is None
    assert model["execution"]["cycles"] == 400 and model["programs"] is not None


def test_a_profile_without_steps_says_so_once(report_dir: Path) -> None:
    (report_dir / "execution.json").write_text('{"profilerMode": "CPU"}\n')
    model = build_model(load_report(report_dir))
    assert model["warnings"] == [
        "execution profile: profiler mode 'CPU' records no steps; the trace and operations "
        "views are empty"
    ]
    assert model["execution"] is None and model["summary"]["memoryIncludingGaps"] == 1840
