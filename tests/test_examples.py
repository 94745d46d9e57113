"""Every script in examples/ runs (they assert their own results), with the arguments of
``EXAMPLE_ARGS`` (``tests/conftest.py``) where its defaults are sized for a person rather
than the test suite. Each runs once per session (the ``run_example`` fixture), with
autoReport on: ``tests/profile/test_profile_report_browser.py`` renders their profiles.
The multi-instance examples of ``examples/distributed`` run under ``tremula poprun`` in
``tests/popdist``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(p for p in ROOT.rglob("*.py") if p.parent.name != "distributed")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path, run_example: Any) -> None:
    assert run_example(path).stdout
