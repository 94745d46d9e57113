"""Python stand-ins for C++ PopART custom ops that PopXL programs build at import time.

popxl-addons compiles its custom ops with ``cppimport`` (``import cppimport.import_hook``,
then ``from . import <op>_binding``: the hook builds ``<op>_binding.cpp`` against the SDK's
PopART headers). Three of them, its strided collectives, are imported by ``import
popxl_addons`` itself; a fourth, the tensor-parallel all-reduce, by its TP layers. They are
replicated collectives over a replica grouping (given by stride and group size, or as a
grouping), which Tremula's collectives already are, so Tremula serves their binding modules
in Python (:data:`STAND_INS`) instead of compiling them. The other custom ops
of popxl-addons (rotary embedding, sharded cross-entropy, ...) need a compiler and the SDK:
importing one raises ``ImportError`` naming it.

The finder is installed when PopXL is imported; when ``cppimport.import_hook`` puts its own
finder first in ``sys.meta_path``, this one moves back in front of it, so that the modules
it serves are not compiled.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

from tremula.alias import Loader as _Loader

#: module name suffix -> the stand-in module serving it
STAND_INS = {
    f"replicated_strided_collectives.replicated_{kind}_strided_binding": (
        "tremula.popxl._ir.custom_collectives"
    )
    for kind in ("all_gather", "reduce_scatter", "all_reduce")
}
STAND_INS["replicated_all_reduce_TP.replicated_all_reduce_TP_binding"] = (
    "tremula.popxl._ir.custom_collectives"
)
_CLIENT = "popxl_addons.ops."
_HOOK = "cppimport.import_hook"


class _AfterHook(_Loader):
    """Loads ``cppimport.import_hook`` with its own loader, then puts the finder back in
    front of the hook that module installed."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        install(first=True)


class _Finder(_Loader):
    """Serves :data:`STAND_INS`; refuses popxl-addons' other C++ modules by name (a meta path
    finder and loader by protocol, like :mod:`tremula.alias`'s)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == _HOOK:
            real = importlib.machinery.PathFinder.find_spec(fullname, path)
            if real is None or real.loader is None:
                return None
            return importlib.util.spec_from_loader(
                fullname, _AfterHook(real.loader), origin=real.origin
            )
        if not fullname.startswith(_CLIENT):
            return None
        suffix = fullname[len(_CLIENT) :]
        if suffix in STAND_INS:
            return importlib.machinery.ModuleSpec(fullname, self)
        if fullname.endswith(("_binding", "_impl")) and _has_cpp(fullname):
            raise ImportError(
                f"{fullname} is a C++ PopART custom op built by cppimport against the Poplar "
                f"SDK; Tremula does not build C++ custom ops (Tremula serves in Python: "
                f"{sorted(STAND_INS)})",
                name=fullname,
            )
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(STAND_INS[spec.name[len(_CLIENT) :]])

    def exec_module(self, module: ModuleType) -> None:
        return None


def _has_cpp(fullname: str) -> bool:
    """Whether popxl-addons ships ``fullname`` as C++ source (a cppimport module)."""
    parent, _, leaf = fullname.rpartition(".")
    package = sys.modules.get(parent)
    paths = getattr(package, "__path__", None) or []
    return any(os.path.exists(os.path.join(p, leaf + ".cpp")) for p in paths)


_FINDER = _Finder()


def install(first: bool = False) -> None:
    """Put the finder in ``sys.meta_path`` (once), or move it first (``first``)."""
    if _FINDER in sys.meta_path:
        if not first:
            return
        sys.meta_path.remove(_FINDER)
    sys.meta_path.insert(0, _FINDER)
