"""Every script in examples/ runs (they assert their own results)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").rglob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path, capsys) -> None:
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out
