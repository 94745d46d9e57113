"""Graphcore-style PopXL models written for Tremula's tests (``t5_popxl.py``), imported by their
tests as plain modules, as Graphcore's model tests import ``modelling``. They are built on
popxl-addons, found as ``tests/conftest.py`` finds it (``CLIENT_FOLDERS``)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
