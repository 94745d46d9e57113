"""``popart._internal``: PopART's internal modules that PopXL programs use.

``popart._internal.ir`` is PopXL's IR bindings, ``tremula.popxl._ir``: the same module
object under PopART's name (and its submodules, ``popart._internal.ir.op.exchange`` and so
on, the same modules too). The bindings live in the PopXL layer because PopXL hands their
handles out (``graph._pb_graph``, ...), and they own the PopART classes PopART's bindings
define in that module (``ReplicaGrouping``, ``CommGroup``, ``VariableSettings``, ...,
``tremula.popxl._ir.core``); this package only names them.
"""

from __future__ import annotations

import sys

from tremula.alias import install
from tremula.popxl import _ir as ir

sys.modules[f"{__name__}.ir"] = ir
install(f"{__name__}.ir", "tremula.popxl._ir")

__all__ = ["ir"]
