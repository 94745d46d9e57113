"""PopXL ops (``popxl.ops``): functions that add ops to the current graph.

Every function offered here is atomic: a call that is refused (``TypeError``,
``ValueError``, ...) leaves the graph as it was, without the constants it made from host
values or the ops it added before the refusal (DESIGN principle 5).
"""

from tremula.popxl.context import make_atomic
from tremula.popxl.ops import collectives, var_updates
from tremula.popxl.ops import sparse as sparse  # Tremula's sparse layer: not in __all__
from tremula.popxl.ops.call import CallSiteInfo, call, call_with_info, repeat, repeat_with_info
from tremula.popxl.ops.control import *  # noqa: F403
from tremula.popxl.ops.control import __all__ as _control
from tremula.popxl.ops.conv import *  # noqa: F403
from tremula.popxl.ops.conv import __all__ as _conv
from tremula.popxl.ops.debug import *  # noqa: F403
from tremula.popxl.ops.debug import __all__ as _debug
from tremula.popxl.ops.elementwise import *  # noqa: F403  (generated from the table)
from tremula.popxl.ops.elementwise import __all__ as _elementwise
from tremula.popxl.ops.fp8 import *  # noqa: F403
from tremula.popxl.ops.fp8 import __all__ as _fp8
from tremula.popxl.ops.gather import *  # noqa: F403
from tremula.popxl.ops.gather import __all__ as _gather
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
from tremula.popxl.ops.misc import *  # noqa: F403
from tremula.popxl.ops.misc import __all__ as _misc
from tremula.popxl.ops.nn import *  # noqa: F403
from tremula.popxl.ops.nn import __all__ as _nn
from tremula.popxl.ops.random import *  # noqa: F403
from tremula.popxl.ops.random import __all__ as _random
from tremula.popxl.ops.reduce import *  # noqa: F403
from tremula.popxl.ops.reduce import __all__ as _reduce
from tremula.popxl.ops.resize import *  # noqa: F403
from tremula.popxl.ops.resize import __all__ as _resize
from tremula.popxl.ops.roi_align import *  # noqa: F403
from tremula.popxl.ops.roi_align import __all__ as _roi_align
from tremula.popxl.ops.shape import *  # noqa: F403
from tremula.popxl.ops.shape import __all__ as _shape
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
    *_nn,
    *_gather,
    *_misc,
    *_random,
    *_control,
    *_debug,
    *_conv,
    *_fp8,
    *_resize,
    *_roi_align,
    *_reduce,
    *_shape,
    "CallSiteInfo",
    "call",
    "call_with_info",
    "cast",
    "collectives",
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

make_atomic(globals(), [*__all__, "getitem", "remote_code_load"])
