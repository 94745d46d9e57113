"""Fixtures of the PopDist tests: ``launch.py`` (running ``tremula poprun``) is loaded under
the unique module name ``tremula_tests_popdist_launch``, which the test modules import."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "tremula_tests_popdist_launch"

if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("launch.py"))
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)
