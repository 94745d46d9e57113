"""Every script in examples/ runs (they assert their own results), with the arguments of
:data:`ARGS` where its defaults are sized for a person rather than the test suite. The
multi-instance examples of ``examples/distributed`` run under ``tremula poprun`` in
``tests/popdist``."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(p for p in ROOT.rglob("*.py") if p.parent.name != "distributed")
#: command-line arguments of examples run at smaller sizes here
ARGS = {"char_gru.py": ["--steps", "2", "--iterations", "1"], "addons_gpt.py": ["--steps", "20"]}
#: examples built on Graphcore's popxl-addons, run from ../shared/clients as its users run it
ADDONS = ROOT.parents[1] / "shared" / "clients" / "popxl-addons"
NEEDS_ADDONS = {"addons_gpt.py"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(path), *ARGS.get(path.name, [])])
    if path.name in NEEDS_ADDONS:
        monkeypatch.syspath_prepend(str(ADDONS))
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out
