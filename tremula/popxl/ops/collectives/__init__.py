"""Collectives across replicas (``popxl.ops.collectives``); see ``collectives.py``.
``CommGroup`` and ``CommGroupType`` are the bindings' (``popart._internal.ir``), re-exported as
in PopXL. PopXL's modules of the replicated collectives (``replicated_all_reduce`` ...) are
names of ``collectives.py`` here, as ``popxl.ops``' op modules are (the package attribute is
the function, the module is reached by import)."""

import sys

from tremula.popxl._ir.core.enums import CommGroupType
from tremula.popxl._ir.core.grouping import CommGroup
from tremula.popxl.context import make_atomic
from tremula.popxl.ops.collectives.all_reduce import (
    all_reduce,
    all_reduce_identical_grad_inputs,
    all_reduce_identical_inputs,
)
from tremula.popxl.ops.collectives.collectives import (
    replica_sharded_slice,
    replicated_all_gather,
    replicated_all_reduce,
    replicated_all_reduce_,
    replicated_reduce_scatter,
    replicated_slice,
)

__all__ = [
    "CommGroup",
    "CommGroupType",
    "all_reduce",
    "all_reduce_identical_grad_inputs",
    "all_reduce_identical_inputs",
    "replica_sharded_slice",
    "replicated_all_gather",
    "replicated_all_reduce",
    "replicated_all_reduce_",
    "replicated_reduce_scatter",
    "replicated_slice",
]

make_atomic(globals(), __all__)  # a refused call adds nothing (see popxl.ops)

#: PopXL's module of each replicated collective -> the Tremula module defining it
for _name in ("replicated_all_gather", "replicated_all_reduce", "replicated_reduce_scatter"):
    sys.modules.setdefault(f"{__name__}.{_name}", sys.modules[f"{__name__}.collectives"])
