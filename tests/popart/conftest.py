"""The PopART tests' helpers (``helpers.py``) load under a unique module name,
``tremula_tests_popart_helpers``, so they cannot collide with another directory's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "tremula_tests_popart_helpers"

if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("helpers.py"))
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)
