"""Settings and fixtures shared by the whole suite.

Property-based tests (hypothesis) are derandomized, so a run draws the same examples on
every machine (the project's rule: same program, inputs and seed give the same numbers),
and have no per-example deadline: a loaded CI machine must not turn a slow example into a
failure. Tests that set their own ``@settings`` keep them.

``tests/evaluator.py``, the one way tests run a PopXL graph against NumPy and take finite
differences, is importable as ``tremula_tests_evaluator``. ``run_example`` runs each of the
repository's examples once per session, with autoReport
on: the example tests check that they run, the report tests render their profiles.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import io
import json
import runpy
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "tremula", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("tremula")


# ---- the one test evaluator (tests/evaluator.py), importable by a unique name ----

_EVALUATOR = "tremula_tests_evaluator"
if _EVALUATOR not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _EVALUATOR, Path(__file__).with_name("evaluator.py")
    )
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_EVALUATOR] = _module
    _spec.loader.exec_module(_module)


# ---- the repository's examples, each run once per test session ----


EXAMPLES_ROOT = Path(__file__).resolve().parents[1] / "examples"
#: command-line arguments of examples run at smaller sizes in the suite
EXAMPLE_ARGS = {
    "char_gru.py": ["--steps", "2", "--iterations", "1"],
    "addons_gpt.py": ["--steps", "20"],
}
#: examples built on Graphcore's popxl-addons, run from ../shared/clients as its users run it
ADDONS = EXAMPLES_ROOT.parents[1] / "shared" / "clients" / "popxl-addons"
NEEDS_ADDONS = {"addons_gpt.py"}
#: examples run without autoReport (the report tests profile the RigL trainer's engine on its
#: own; with autoReport its four engines would write into the folder and engine_2..4)
NO_REPORT = {"rigl_digits.py"}


@dataclass(frozen=True)
class ExampleRun:
    """What running an example printed, and the autoReport folder its engines wrote
    (``graph.json``, ``execution.json`` of its first engine, later ones writing into
    ``engine_<n>`` within it; None if it made none or is in :data:`NO_REPORT`)."""

    stdout: str
    profile: Path | None


class ExampleRunner:
    """Runs each example once, as ``python examples/...`` would, with Poplar's autoReport
    on (``POPLAR_ENGINE_OPTIONS``), so that the example tests and the report tests share
    one run."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs: dict[Path, ExampleRun] = {}

    def __call__(self, path: Path) -> ExampleRun:
        if path not in self.runs:
            self.runs[path] = self._run(path)
        return self.runs[path]

    def _run(self, path: Path) -> ExampleRun:
        folder = self.root / path.relative_to(EXAMPLES_ROOT).with_suffix("")
        options = {"autoReport.all": "true", "autoReport.directory": str(folder)}
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
            if path.name not in NO_REPORT:
                mp.setenv("POPLAR_ENGINE_OPTIONS", json.dumps(options))
            mp.setattr(sys, "argv", [str(path), *EXAMPLE_ARGS.get(path.name, [])])
            if path.name in NEEDS_ADDONS:
                mp.syspath_prepend(str(ADDONS))
            runpy.run_path(str(path), run_name="__main__")
            gc.collect()  # engines left open write their execution profile when collected
        made = (folder / "graph.json").exists() and (folder / "execution.json").exists()
        return ExampleRun(out.getvalue(), folder if made else None)


@pytest.fixture(scope="session")
def run_example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleRunner]:
    """``run_example(path) -> ExampleRun``: an example's run, made on first use."""
    yield ExampleRunner(tmp_path_factory.mktemp("examples"))
