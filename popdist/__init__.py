"""``popdist``: an alias of :mod:`tremula.popdist`, so programs written for PopRun / PopDist
run unmodified (``import popdist``; ``popdist.popart`` once PopART's session options exist).

``popdist.X`` is the module ``tremula.popdist.X`` (one module object under two names).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from tremula.alias import Loader as _Loader

_PREFIX = "popdist."
_TARGET = "tremula.popdist."


class _AliasFinder(_Loader):  # a finder and loader by protocol (see tremula.alias)
    def find_spec(self, fullname: str, path: object, target: object = None):
        if not fullname.startswith(_PREFIX):
            return None
        real = _TARGET + fullname[len(_PREFIX) :]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(_TARGET + spec.name[len(_PREFIX) :])

    def exec_module(self, module: ModuleType) -> None:
        return None


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())

import tremula.popdist as _real  # noqa: E402
from tremula.popdist import __all__, __getattr__  # noqa: E402, F401

# the API's names, but not those loaded on first use (``__getattr__`` serves them), so
# that ``import popdist`` starts without NumPy or MPI
globals().update({name: getattr(_real, name) for name in __all__ if name not in _real.LAZY})
