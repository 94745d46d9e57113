"""Collectives across replicas (``popxl.ops.collectives``); see ``collectives.py``.
``CommGroup`` and ``CommGroupType`` are re-exported as in PopXL."""

from tremula.libs.gcl.grouping import CommGroup, CommGroupType
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
