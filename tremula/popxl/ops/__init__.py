"""PopXL ops (``popxl.ops``): functions that add ops to the current graph."""

from tremula.popxl.ops import var_updates
from tremula.popxl.ops.call import CallSiteInfo, call, call_with_info, repeat, repeat_with_info
from tremula.popxl.ops.elementwise import *  # noqa: F403  (generated from the table)
from tremula.popxl.ops.elementwise import __all__ as _elementwise
from tremula.popxl.ops.io import (
    host_load,
    host_store,
    remote_load,
    remote_load_,
    remote_store,
)
from tremula.popxl.ops.io import (
    remote_code_load as remote_code_load,  # not in __all__, as in PopXL
)
from tremula.popxl.ops.tensor_ops import (
    cast,
    detach,
    detach_,
    flatten,
    flatten_,
    identity,
    init,
    matmul,
    rename,
    reshape,
    reshape_,
    transpose,
    transpose_,
)
from tremula.popxl.ops.tensor_ops import (
    getitem as getitem,  # Tensor.__getitem__'s op, not PopXL API
)

__all__ = [
    *_elementwise,
    "CallSiteInfo",
    "call",
    "call_with_info",
    "cast",
    "detach",
    "detach_",
    "flatten",
    "flatten_",
    "host_load",
    "host_store",
    "identity",
    "init",
    "matmul",
    "remote_load",
    "remote_load_",
    "remote_store",
    "rename",
    "repeat",
    "repeat_with_info",
    "reshape",
    "reshape_",
    "transpose",
    "transpose_",
    "var_updates",
]
