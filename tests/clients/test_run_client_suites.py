"""``tools/run_client_suites.py`` on a made-up clients folder laid out as Graphcore's: one
pytest per test file from the model's folder, each test's outcome read back, the failures
compared with an expected-failures list, a model whose configuration this Python refuses
reported as not run, the deselected hub-downloading file never started."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
ROOT = TOOLS.parent

GOOD = """
import os
from pathlib import Path

import config
import popxl


def test_config():
    assert config.VALUE == 1


def test_popxl_is_tremulas():
    assert Path(popxl.__file__).resolve().is_relative_to(os.environ["EXPECTED_ROOT"])


class TestGroup:
    def test_in_class(self):
        assert True
"""
BAD = """
import pytest


def test_fails():
    raise ValueError("boom")


def test_skips():
    pytest.skip("not here")
"""
REFUSED = (
    "raise ValueError(\"mutable default <class 'config.Embedding'> for field embedding is "
    'not allowed: use default_factory")'
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def fake_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = tmp_path / "clients"
    for marker in (
        "popxl-addons/popxl_addons/__init__.py",
        "examples-utils/examples_utils/__init__.py",
        "graphcore-examples/utils/examples_tests/__init__.py",
    ):
        _write(base / marker, "")
    gptj = base / "graphcore-examples/nlp/gpt_j/popxl"
    _write(gptj / "config.py", "VALUE = 1\n")
    _write(gptj / "tests/test_good.py", GOOD)
    _write(gptj / "tests/unit/test_bad.py", BAD)
    _write(gptj / "tests/unit/test_broken.py", "raise ImportError('op x not served')\n")
    _write(gptj / "tests/integration/execution/test_overfitting.py", "raise SystemExit(3)\n")
    bert = base / "graphcore-examples/nlp/bert/popxl"
    _write(bert / "config.py", REFUSED + "\n")
    _write(bert / "tests/test_any.py", "def test_any():\n    pass\n")
    monkeypatch.setenv("TREMULA_CLIENTS", str(base))
    monkeypatch.setenv("EXPECTED_ROOT", str(ROOT))
    return base


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(TOOLS))
    for name in ("run_client_suites", "clients"):
        sys.modules.pop(name, None)
    return importlib.import_module("run_client_suites")


def test_runs_each_file_and_gates_on_the_expected_failures(
    fake_clients: Path, runner: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    known = tmp_path / "known.txt"
    known.write_text(
        "# expected failures\n"
        "gpt_j/tests/unit/test_bad.py::test_fails # raises on purpose\n"
        "gpt_j/tests/unit/test_broken.py # its op is not served\n"
        "gpt_j/tests/test_good.py::test_config # listed, but passes\n"
    )
    logs = tmp_path / "logs"
    assert runner.main(["--known", str(known), "--log-dir", str(logs)]) == 0
    out = capsys.readouterr().out
    assert "ok   gpt_j/tests/test_good.py: 3 passed, 0 failed, 0 skipped" in out
    assert "FAIL gpt_j/tests/unit/test_bad.py: 0 passed, 1 failed, 1 skipped" in out
    assert "gpt_j/tests/unit/test_bad.py::test_fails: ValueError: boom" in out
    assert "gpt_j/tests/unit/test_broken.py: ImportError: op x not served" in out
    assert "gpt_j/tests/integration/execution/test_overfitting.py: deselected" in out
    assert "bert/tests/test_any.py: not run on this Python (above)" in out
    assert "  not run: Python" in out
    assert "refuses its configuration dataclasses" in out
    assert "NOW PASSES (remove it from the expected failures): gpt_j/tests/test_good.py" in out
    assert out.rstrip().endswith("clients: 3 passed, 2 failed (2 expected, 0 new), 1 skipped")
    assert "known failures: 2, new failures: 0, now passing: 1" in out
    assert not (logs / "gpt_j__tests__integration__execution__test_overfitting.py.log").exists()

    known.write_text("gpt_j/tests/unit/test_broken.py # its op is not served\n")
    assert runner.main(["--known", str(known), "--models", "gpt_j"]) == 1
    out = capsys.readouterr().out
    assert "NEW FAILURE gpt_j/tests/unit/test_bad.py::test_fails: ValueError: boom" in out
    assert "known failures: 1, new failures: 1, now passing: 0" in out


def test_verdict_strict_and_record(
    runner: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [
        runner.FileRun(
            "m/tests/test_a.py",
            cases=[
                runner.Case("m/tests/test_a.py::test_ok", "passed"),
                runner.Case("m/tests/test_a.py::test_bad", "failed", "ValueError: boom"),
            ],
        ),
        runner.FileRun("m/tests/test_b.py", cases=[runner.Case("m/tests/test_b.py", "error")]),
    ]
    known = {"m/tests/test_a.py::test_bad": "boom", "m/tests/test_b.py": "broken"}
    assert runner.verdict(runs, known, strict=False) == 0
    assert runner.verdict(runs, known, strict=True) == 1
    assert runner.verdict(runs, {"m/tests/test_a.py": "the whole file"}, strict=False) == 1
    capsys.readouterr()
    listed = {**known, "m/tests/test_a.py::test_ok": "fixed", "m/tests/test_a.py::test_gone": "-k"}
    assert runner.verdict(runs, listed, strict=False) == 0
    out = capsys.readouterr().out
    assert "NOW PASSES (remove it from the expected failures): m/tests/test_a.py::test_ok" in out
    assert "test_gone" not in out  # not run (deselected): not said to pass
    path = tmp_path / "known.txt"
    path.write_text("# header\ngone/test_x.py::test_y # was failing\n")
    runner.record(path, runs)
    assert path.read_text().splitlines() == [
        "# header",
        "m/tests/test_a.py::test_bad # ValueError: boom",
        "m/tests/test_b.py # failed",
    ]
    assert runner.read_known(path) == {
        "m/tests/test_a.py::test_bad": "ValueError: boom",
        "m/tests/test_b.py": "failed",
    }


def test_missing_clients_and_bad_lists_are_named(
    runner: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREMULA_CLIENTS", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit) as exc:
        runner.main(["--known", str(tmp_path / "none.txt")])
    assert exc.value.code == 2
    bad = tmp_path / "bad.txt"
    bad.write_text("gpt_j/tests/test_a.py::test_b without a reason\n")
    with pytest.raises(SystemExit, match=r"bad.txt:1: expected '<test id> # <reason>'"):
        runner.read_known(bad)
