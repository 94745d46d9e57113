"""Fixtures of the host-embedding tests.

``programs.py`` (the PopXL programs the tests run and their NumPy references) is loaded
under a unique module name, ``tremula_tests_embedding_programs``, so that it cannot collide
with a module of another test directory; test modules import it by that name.
``host_path`` runs a test on both paths of the host's SGD update (compiled and NumPy).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_NAME = "tremula_tests_embedding_programs"

if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("programs.py"))
    assert _spec is not None and _spec.loader is not None
    sys.modules[_NAME] = _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)


@pytest.fixture(params=["compiled", "numpy"])
def host_path(request):
    """Run the host's SGD updates on their compiled path (``fused.py``, when numba is
    installed) and on their NumPy path (``kernels.py``)."""
    from tremula.libs import jit

    if request.param == "compiled" and not jit.available():
        pytest.skip("numba (the fast extra) is not installed")
    previous = jit.set_enabled(request.param == "compiled")
    yield request.param
    jit.set_enabled(previous)
