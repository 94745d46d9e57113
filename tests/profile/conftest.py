"""Fixtures of the profile tests: the golden 4-tile profile pair of ``fixtures.py``.

``fixtures.py`` is loaded under a unique module name, so that it cannot collide with a
``fixtures`` module of another test directory.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_MODULE_NAME = "tremula_tests_profile_fixtures"


def _load_fixtures() -> ModuleType:
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    spec = importlib.util.spec_from_file_location(
        _MODULE_NAME, Path(__file__).with_name("fixtures.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def fx() -> ModuleType:
    """The fixtures module: ``golden_graph()``, ``golden_execution()``, ``scaled_profile()``."""
    return _load_fixtures()


@pytest.fixture
def graph(fx: ModuleType) -> dict[str, Any]:
    """A fresh golden graph profile."""
    return fx.golden_graph()


@pytest.fixture
def execution(fx: ModuleType) -> dict[str, Any]:
    """A fresh golden execution profile."""
    return fx.golden_execution()
