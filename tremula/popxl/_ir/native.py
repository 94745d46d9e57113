"""The import hook that serves C++ PopART custom ops in Python, identified by what they are.

PopXL programs build their custom ops with ``cppimport``: a Python wrapper runs ``import
cppimport.import_hook``, then ``from . import <op>_binding``, and cppimport's hook
compiles ``<op>_binding.cpp`` (next to the wrapper) against the SDK's PopART headers.
popxl-addons ships nine such ops and several models keep their own copies. Tremula
builds no C++: this finder, put in front of cppimport's, recognises any cppimport module
(a ``<name>.cpp`` / ``.c`` whose first line mentions cppimport, found where the import
looks: the parent package's folders, or ``sys.path``), wherever it lives, by the PopART
operator identifiers its C++ declares (:mod:`.cpp_source`), and serves it with the module
:data:`tremula.popxl.custom_ops.SERVED` names for them: a new module holding that
module's public names (the binding classes whose ``createOpInGraph`` the wrapper calls).

A C++ module whose identifiers Tremula does not serve (or that declares none) raises
``ImportError`` naming the module, its file and the identifiers, before anything is
compiled.

The finder is installed when PopXL is imported; when ``cppimport.import_hook`` puts its own
finder first in ``sys.meta_path``, this one moves back in front of it. Only the import of a
module with a cppimport source next to it reads C++ or loads a serving module.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from tremula.alias import Loader as _Loader
from tremula.popxl._ir.cpp_source import find_module_source, operator_ids

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


def serving_module(fullname: str, source: str) -> str:
    """The module serving the cppimport module ``fullname`` whose C++ is ``source``.

    Raises:
        ImportError: the C++ declares no custom op, or one Tremula does not serve, or ops
            served by different modules (naming the module, the file and the identifiers).
    """
    from tremula.popxl.custom_ops import SERVED

    ids = operator_ids(source)
    if not ids:
        raise ImportError(
            f"{fullname} is a C++ module ({source}) built by cppimport against the Poplar "
            f"SDK that declares no PopART custom op (no OperatorIdentifier); Tremula builds "
            f"no C++ and serves only PopART custom ops it knows, by their identifier "
            f"(tremula.popxl.custom_ops.SERVED)",
            name=fullname,
            path=source,
        )
    missing = [i for i in ids if i not in SERVED]
    modules = sorted({SERVED[i] for i in ids if i in SERVED})
    if missing or len(modules) != 1:
        why = (
            f"operator identifier(s) {', '.join(map(str, missing))} not served"
            if missing
            else f"its ops are served by different modules ({', '.join(modules)})"
        )
        raise ImportError(
            f"{fullname} is a C++ PopART custom op ({source}) built by cppimport against "
            f"the Poplar SDK, declaring {', '.join(map(str, ids))}: {why}. Tremula builds "
            f"no C++; it serves custom ops in Python by their identifier (domain::type:"
            f"version), and serves {len(SERVED)}: see tremula.popxl.custom_ops.SERVED",
            name=fullname,
            path=source,
        )
    return modules[0]


class _Finder(_Loader):
    """Serves cppimport modules by their operator identifiers (a meta path finder and
    loader by protocol, like :mod:`tremula.alias`'s)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == _HOOK:
            real = importlib.machinery.PathFinder.find_spec(fullname, path)
            if real is None or real.loader is None:
                return None
            return importlib.util.spec_from_loader(
                fullname, _AfterHook(real.loader), origin=real.origin
            )
        folders = list(path) if path is not None else list(sys.path)
        source = find_module_source(fullname.rpartition(".")[2], folders)
        if source is None:
            return None
        serving = serving_module(fullname, source)
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=source)
        spec.loader_state = serving
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        serving = importlib.import_module(spec.loader_state)
        module = ModuleType(spec.name, f"{spec.name}: served by {serving.__name__} (Tremula)")
        names = getattr(serving, "__all__", None) or [
            n for n in vars(serving) if not n.startswith("_")
        ]
        for name in names:
            setattr(module, name, getattr(serving, name))
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


_FINDER = _Finder()


def install(first: bool = False) -> None:
    """Put the finder in ``sys.meta_path`` (once), or move it first (``first``)."""
    if _FINDER in sys.meta_path:
        if not first:
            return
        sys.meta_path.remove(_FINDER)
    sys.meta_path.insert(0, _FINDER)
