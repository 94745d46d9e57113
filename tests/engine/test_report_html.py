"""``autoReport.outputHtml`` (a Tremula engine option): ``report.html`` next to the JSON
profiles, for Poplar's Engine and for popxl.Session (through ``POPLAR_ENGINE_OPTIONS``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula import demo
from tremula.errors import EngineError
from tremula.profile.report.page import decode_data


def test_engine_writes_the_page_next_to_the_json(tmp_path: Path) -> None:
    options = {
        "autoReport.all": "true",
        "autoReport.directory": str(tmp_path),
        "autoReport.outputHtml": "true",
    }
    result = demo.build_and_run(16, options=options)
    result.engine.close()  # autoReport writes the execution profile and page at the end
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["execution.json", "graph.json", "report.html"]
    page = decode_data((tmp_path / "report.html").read_text())["report"]
    execution = json.loads((tmp_path / "execution.json").read_text())
    assert page["warnings"] == []
    assert page["summary"]["cycles"] == execution["simulation"]["cycles"]
    assert page["memory"]["variables"]["names"][:2] == ["x", "y"]
    assert result.total == pytest.approx(result.expected, rel=1e-5)


def test_no_page_unless_asked(tmp_path: Path) -> None:
    demo.build_and_run(
        16, options={"autoReport.all": "true", "autoReport.directory": str(tmp_path)}
    )
    assert not (tmp_path / "report.html").exists()


def test_bad_flag_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"'autoReport.outputHtml': expected 'true' or 'false'"):
        demo.build_and_run(16, options={"autoReport.outputHtml": "maybe"})


def test_popxl_session_writes_the_page(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(
        "POPLAR_ENGINE_OPTIONS",
        json.dumps(
            {
                "autoReport.all": "true",
                "autoReport.directory": str(tmp_path),
                "autoReport.outputHtml": "true",
            }
        ),
    )
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream((4, 8), popxl.float32, name="x")
        y = ops.relu(ops.host_load(stream)) * 2.0
        out = popxl.d2h_stream(y.shape, y.dtype, name="y")
        ops.host_store(out, y)
    data = np.arange(-16, 16, dtype=np.float32).reshape(4, 8)
    with popxl.Session(ir, "ipu_model") as session:
        result = session.run({stream: data})[out]
    np.testing.assert_array_equal(result, np.maximum(data, 0) * 2)
    page = decode_data((tmp_path / "report.html").read_text())["report"]
    assert page["target"]["numTiles"] == 1472
    assert page["summary"]["cycles"] > 0
