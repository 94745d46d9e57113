"""Lowering rules of the custom ops served in Python (``tremula/popxl/custom_ops``).

A served op keeps its definition, gradient rule and lowering rule together in that
folder; its lowering module, which uses only
Poplar and PopLibs, exposes ``LOWERING_RULES`` (op type -> rule). This module imports every module
of the folder and registers what their ``LOWERING_RULES`` hold in the lowering table; the
driver imports it the first time it meets an op type with no rule (``driver.rule_for``).
"""

from __future__ import annotations

import importlib
import pkgutil

import tremula.popxl.custom_ops as _package
from tremula.lowering.driver import rule

for _info in sorted(pkgutil.iter_modules(_package.__path__), key=lambda m: m.name):
    _module = importlib.import_module(f"{_package.__name__}.{_info.name}")
    for _op_type, _fn in getattr(_module, "LOWERING_RULES", {}).items():
        rule(_op_type)(_fn)
