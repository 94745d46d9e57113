"""Alias packages: ``popxl``, ``popart`` (and ``popdist``) are the modules of
``tremula.popxl``, ``tremula.popart`` ... under a second name, so existing programs import
them unchanged. ``popxl.X.Y`` *is* the module ``tremula.popxl.X.Y`` (one module object
under two names, so ``isinstance`` checks and module state agree)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

__all__ = ["install"]


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``<alias>.X`` to the module ``<target>.X``."""

    def __init__(self, alias: str, target: str) -> None:
        self.prefix = alias + "."
        self.target = target + "."

    def find_spec(self, fullname: str, path: object, target: object = None):
        if not fullname.startswith(self.prefix):
            return None
        real = self.target + fullname[len(self.prefix) :]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target + spec.name[len(self.prefix) :])

    def exec_module(self, module: ModuleType) -> None:
        return None


def install(alias: str, target: str) -> None:
    """Make ``alias.X`` import ``target.X`` (once per alias)."""
    for finder in sys.meta_path:
        if isinstance(finder, _AliasFinder) and finder.prefix == alias + ".":
            return
    sys.meta_path.insert(0, _AliasFinder(alias, target))
