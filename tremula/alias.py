"""Alias packages: ``popxl``, ``popart`` (and ``popdist``) are the modules of
``tremula.popxl``, ``tremula.popart`` ... under a second name, so existing programs import
them unchanged. ``popxl.X.Y`` *is* the module ``tremula.popxl.X.Y`` (one module object
under two names, so ``isinstance`` checks and module state agree).

The target's modules loaded so far are registered under their alias names at once. This
matters where a module and a function share a name, as in PopXL: ``popxl.ops.call`` is the
function, and ``from popxl.ops.call import CallSiteInfo`` must find the registered module
without rebinding ``popxl.ops.call`` to it (Python sets a package attribute only when it
loads a submodule for the first time). Modules loaded later are aliased by a finder, and
when it aliases a package (one loaded on first use, like ``popxl.ops``), it registers the
modules loaded below that package at the same time, for the same reason."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Loader
else:
    # the base of import finders and loaders: ``importlib.abc.Loader`` to the type checker,
    # a plain class at run time (they work by protocol; ``importlib.abc`` would load
    # ``importlib.resources``, ``tempfile``, ``shutil`` and ``pathlib`` at every ``import
    # popxl``, about 15 ms in each instance of a job)
    Loader = object

__all__ = ["Loader", "install"]


class _AliasFinder(Loader):
    """Resolves ``<alias>.X`` to the module ``<target>.X`` (a meta path finder and its
    loader)."""

    def __init__(self, alias: str, target: str) -> None:
        self.prefix = alias + "."
        self.target = target + "."

    def find_spec(
        self, fullname: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.prefix):
            return None
        real = self.target + fullname[len(self.prefix) :]
        if real not in sys.modules and importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        real = self.target + spec.name[len(self.prefix) :]
        module = importlib.import_module(real)
        _register(real, spec.name)  # a package loaded on first use: its modules so far
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


def _register(target: str, alias: str) -> None:
    """Register the loaded modules below ``target`` under ``alias``."""
    for name, module in list(sys.modules.items()):
        if name.startswith(target + ".") and module is not None:
            sys.modules.setdefault(alias + name[len(target) :], module)


def install(alias: str, target: str) -> None:
    """Make ``alias.X`` import ``target.X``: the loaded ``target.X`` modules are registered
    as ``alias.X`` now, later ones by a finder (installed once per alias)."""
    _register(target, alias)
    for finder in sys.meta_path:
        if isinstance(finder, _AliasFinder) and finder.prefix == alias + ".":
            return
    sys.meta_path.insert(0, _AliasFinder(alias, target))
