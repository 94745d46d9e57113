"""Fixtures of the engine tests.

``codelets.py`` is loaded under a unique module name (``tremula_tests_engine_codelets``) so
that it cannot collide with a ``codelets`` module of another test directory; test modules
import it by that name.

Every engine a test builds with ``make_engine`` has its profiles validated after the test:
the graph profile always, the execution profile when the engine was loaded.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tremula.errors import EngineError
from tremula.profile import check_execution_profile, check_graph_profile

_MODULE_NAME = "tremula_tests_engine_codelets"


def _load_codelets() -> ModuleType:
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    spec = importlib.util.spec_from_file_location(
        _MODULE_NAME, Path(__file__).with_name("codelets.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


_codelets = _load_codelets()


@pytest.fixture(autouse=True)
def _validate_profiles():
    """Validate the profiles of every engine the test made (see ``make_engine``)."""
    _codelets.ENGINES.clear()
    yield
    engines = list(_codelets.ENGINES)
    _codelets.ENGINES.clear()
    for i, engine in enumerate(engines):
        graph = engine.get_graph_profile()
        problems = check_graph_profile(graph)
        try:
            execution = engine.get_execution_profile()
        except EngineError:  # never loaded
            execution = None
        if execution is not None:
            problems += check_execution_profile(execution, graph)
        assert not problems, f"engine {i} of the test: invalid profiles:\n" + "\n".join(
            problems[:20]
        )
