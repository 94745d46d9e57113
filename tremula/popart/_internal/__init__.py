"""``popart._internal``: PopART's internal modules that PopXL programs use.

``popart._internal.ir`` is PopXL's IR bindings, ``tremula.popxl._ir``: the same module
object under PopART's name (and its submodules, ``popart._internal.ir.op.exchange`` and so
on, the same modules too). The bindings live in the PopXL layer because PopXL hands their
handles out (``graph._pb_graph``, ...); this package only names them, and adds the PopART
classes PopART's bindings define in that module (``popart._internal.ir.ReplicaGrouping``,
which is only there, and ``CommGroup``, ``CommGroupType``, ``DataType``,
``VariableSettings``, ``VariableRetrievalMode``, which ``popart`` re-exports from it): PopXL
below cannot import them.
"""

from __future__ import annotations

import sys

from tremula.alias import install
from tremula.popart.enums import CommGroupType, DataType, VariableRetrievalMode
from tremula.popart.grouping import CommGroup, ReplicaGrouping
from tremula.popart.variable_settings import VariableSettings
from tremula.popxl import _ir as ir

#: PopART's classes in ``popart._internal.ir`` (spec popart.md 1.1, 2.4)
POPART_NAMES = {
    "CommGroup": CommGroup,
    "CommGroupType": CommGroupType,
    "DataType": DataType,
    "ReplicaGrouping": ReplicaGrouping,
    "VariableRetrievalMode": VariableRetrievalMode,
    "VariableSettings": VariableSettings,
}
for _name, _value in POPART_NAMES.items():
    setattr(ir, _name, _value)

sys.modules[f"{__name__}.ir"] = ir
install(f"{__name__}.ir", "tremula.popxl._ir")

__all__ = ["ir"]
