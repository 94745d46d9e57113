"""``tremula profile report`` and ``tremula profile trace`` on the command line; the trace
validated against the Trace Event Format (spec section 6.4) as a JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tremula.profile import write_profile
from tremula.profile.cli import main
from tremula.profile.report.page import decode_data

_NUMBER = {"type": "number"}
_ID = {"type": "integer", "minimum": 0}
#: The Trace Event Format's JSON object form and the event kinds Tremula writes (M, X, C),
#: each with the fields the format requires of it (Perfetto's JSON importer reads the same).
TRACE_EVENT_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"$ref": "#/definitions/event"}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "definitions": {
        "event": {
            "type": "object",
            "required": ["name", "ph", "pid", "tid"],
            "properties": {
                "name": {"type": "string"},
                "cat": {"type": "string"},
                "ph": {"enum": ["M", "X", "C"]},
                "pid": _ID,
                "tid": _ID,
                "args": {"type": "object"},
                "ts": {**_NUMBER, "minimum": 0},
                "dur": {**_NUMBER, "minimum": 0},
            },
            "allOf": [
                {
                    "if": {"properties": {"ph": {"const": "X"}}},
                    "then": {"required": ["ts", "dur"]},
                },
                {
                    "if": {"properties": {"ph": {"const": "C"}}},
                    "then": {
                        "required": ["ts", "args"],
                        "properties": {"args": {"type": "object", "additionalProperties": _NUMBER}},
                    },
                },
                {
                    "if": {"properties": {"ph": {"const": "M"}}},
                    "then": {
                        "required": ["args"],
                        "properties": {
                            "name": {
                                "enum": [
                                    "process_name",
                                    "process_sort_index",
                                    "thread_name",
                                    "thread_sort_index",
                                ]
                            }
                        },
                    },
                },
            ],
        }
    },
}


@pytest.fixture
def report_dir(tmp_path: Path, graph: dict, execution: dict) -> Path:
    write_profile(tmp_path / "report", graph, execution)
    return tmp_path / "report"


def test_trace_command_writes_a_valid_trace(report_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "trace.json"
    assert main(["trace", str(report_dir), "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    jsonschema.validate(trace, TRACE_EVENT_SCHEMA)
    kinds = [e["ph"] for e in trace["traceEvents"]]
    assert kinds.count("X") == 12 and kinds.count("C") == 12  # 6 steps x 2; 2 counters x 6
    assert f"wrote {out}" in capsys.readouterr().out


def test_the_schema_rejects_what_perfetto_would(report_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    main(["trace", str(report_dir), "-o", str(out)])
    trace = json.loads(out.read_text())
    broken = next(e for e in trace["traceEvents"] if e["ph"] == "X")
    del broken["dur"]
    with pytest.raises(jsonschema.ValidationError, match="'dur' is a required property"):
        jsonschema.validate(trace, TRACE_EVENT_SCHEMA)


def test_trace_needs_an_execution_profile(report_dir: Path, tmp_path: Path, capsys) -> None:
    (report_dir / "execution.json").unlink()
    assert main(["trace", str(report_dir), "-o", str(tmp_path / "t.json")]) == 1
    assert "no execution profile" in capsys.readouterr().err


def test_report_command(report_dir: Path, tmp_path: Path, capsys) -> None:
    other = tmp_path / "other"
    write_profile(other, *_slower(report_dir))
    out = tmp_path / "page.html"
    assert main(["report", str(report_dir), "-o", str(out), "--compare", str(other)]) == 0
    payload = decode_data(out.read_text())
    assert payload["report"]["summary"]["cycles"] == 400
    assert payload["compare"]["source"] == str(other)
    assert f"wrote {out}" in capsys.readouterr().out


def _slower(report_dir: Path) -> tuple[dict, dict]:
    graph = json.loads((report_dir / "graph.json").read_text())
    execution = json.loads((report_dir / "execution.json").read_text())
    return graph, execution


def test_report_warns_and_still_writes(report_dir: Path, capsys) -> None:
    (report_dir / "execution.json").write_text('{"profilerMode": "IPU_MODEL", "simul')
    assert main(["report", str(report_dir)]) == 0
    captured = capsys.readouterr()
    assert "warning:" in captured.err and "execution.json: truncated JSON" in captured.err
    payload = decode_data((report_dir / "report.html").read_text())
    assert payload["report"]["execution"] is None
    assert any("truncated" in w for w in payload["report"]["warnings"])


def test_report_of_nothing_fails_naming_the_path(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path / "missing")]) == 1
    assert "missing: no such report directory" in capsys.readouterr().err
