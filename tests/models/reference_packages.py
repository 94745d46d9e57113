"""The reference packages the model tests compare against (torch, Hugging Face Transformers:
the ``models`` extra): a missing one skips the test module, except under CI (``CI=true``),
where it must be installed."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def reference(name: str) -> ModuleType:
    """The package ``name``; missing, the calling test module is skipped (outside CI)."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        return importlib.import_module(name)
    return pytest.importorskip(name)
