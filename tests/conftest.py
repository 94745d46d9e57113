"""Settings and fixtures shared by the whole suite.

Property-based tests (hypothesis) are derandomized, so a run draws the same examples on
every machine (the project's rule: same program, inputs and seed give the same numbers),
and have no per-example deadline: a loaded CI machine must not turn a slow example into a
failure. Tests that set their own ``@settings`` keep them.

``tests/evaluator.py``, the one way tests run a PopXL graph against NumPy and take finite
differences, is importable as ``tremula_tests_evaluator``. ``run_example`` runs each of the
repository's examples once per session, with autoReport
on: the example tests check that they run, the report tests render their profiles.

Client code (Graphcore's popxl-addons and models, not part of the repository) is found
through one setting, ``TREMULA_CLIENTS`` (``tools/clients.py``). The test modules of the
folders in :data:`CLIENT_FOLDERS` import it at their top: when it is absent, each such
module is one test that skips with a message saying how to provide it, or fails under CI
(``CI=true``).
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
from types import ModuleType
from typing import Any

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


# ---- client code (tools/clients.py: $TREMULA_CLIENTS, default ../shared/clients) ----


def _load_clients_module() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "tools" / "clients.py"
    spec = importlib.util.spec_from_file_location("tremula_tools_clients", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


clients = _load_clients_module()
#: test folders (under tests/) whose modules import client code, with the clients they need
CLIENT_FOLDERS = {"addons": ("popxl-addons",), "models": ("popxl-addons",)}

_addons = clients.find("popxl-addons")
if not _addons.missing and str(_addons["popxl-addons"]) not in sys.path:
    sys.path.insert(0, str(_addons["popxl-addons"]))  # imported as its users import it


def need_clients(*names: str) -> Any:
    """The clients ``names``; when one is absent the calling test skips with a message
    saying how to provide it (fails under CI)."""
    lookup = clients.find(*names)
    if lookup.missing:
        if clients.in_ci():
            pytest.fail(f"CI=true: {lookup.message}", pytrace=False)
        pytest.skip(lookup.message)
    return lookup


class _ClientsAbsent(pytest.Item):
    """Stands for a test module whose client code is absent: skips (fails under CI)."""

    def runtest(self) -> None:
        need_clients(*self.parent.needs)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.path.name}: needs {', '.join(self.parent.needs)}"


class _ClientsModule(pytest.File):
    """A test module not imported because the client code it needs is absent."""

    needs: tuple[str, ...] = ()

    def collect(self) -> Iterator[pytest.Item]:
        yield _ClientsAbsent.from_parent(self, name="clients")


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    tests = Path(__file__).resolve().parent
    try:
        folder = module_path.resolve().relative_to(tests).parts[0]
    except (ValueError, IndexError):
        return None
    needs = CLIENT_FOLDERS.get(folder)
    if not needs or not clients.find(*needs).missing:
        return None
    module = _ClientsModule.from_parent(parent, path=module_path)
    module.needs = needs
    return module


# ---- the repository's examples, each run once per test session ----


EXAMPLES_ROOT = Path(__file__).resolve().parents[1] / "examples"
#: command-line arguments of examples run at smaller sizes in the suite
EXAMPLE_ARGS = {
    "char_gru.py": ["--steps", "2", "--iterations", "1"],
    "addons_gpt.py": ["--steps", "20"],
}
#: examples built on Graphcore's popxl-addons (run from the clients folder as its users run it)
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
        if path.name in NEEDS_ADDONS:
            need_clients("popxl-addons")
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
                mp.syspath_prepend(str(clients.find("popxl-addons")["popxl-addons"]))
            runpy.run_path(str(path), run_name="__main__")
            gc.collect()  # engines left open write their execution profile when collected
        made = (folder / "graph.json").exists() and (folder / "execution.json").exists()
        return ExampleRun(out.getvalue(), folder if made else None)


@pytest.fixture(scope="session")
def run_example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleRunner]:
    """``run_example(path) -> ExampleRun``: an example's run, made on first use."""
    yield ExampleRunner(tmp_path_factory.mktemp("examples"))
