"""PopXL ops (``popxl.ops``): functions that add ops to the current graph.

Every function offered here is atomic: a call that is refused (``TypeError``,
``ValueError``, ...) leaves the graph as it was, without the constants it made from host
values or the ops it added before the refusal (DESIGN principle 5).

PopXL keeps most ops in a module of the op's name (``popxl/ops/add.py``), and ``ops.add``
is the function while ``import popxl.ops.add`` gives the module. Tremula groups ops by
family; :data:`POPXL_MODULES` makes every PopXL module name importable as the Tremula module
that holds its names, so ``from popxl.ops.call import CallSiteInfo`` or ``from
popxl.ops.conv import PadType`` work and leave ``ops.call`` / ``ops.conv`` the functions.
"""

import sys
from types import ModuleType

from tremula.popxl.context import make_atomic
from tremula.popxl.ops import code_copy, collectives, utils, var_updates
from tremula.popxl.ops import multi_exchange as multi_exchange  # merge_exchange's op
from tremula.popxl.ops import rnn as rnn  # Tremula's GRU layer: not in __all__
from tremula.popxl.ops import sparse as sparse  # Tremula's sparse layer: not in __all__
from tremula.popxl.ops.binary import *  # noqa: F403
from tremula.popxl.ops.binary import __all__ as _binary
from tremula.popxl.ops.call import CallSiteInfo, call, call_with_info
from tremula.popxl.ops.control import *  # noqa: F403
from tremula.popxl.ops.control import __all__ as _control
from tremula.popxl.ops.conv import *  # noqa: F403
from tremula.popxl.ops.conv import __all__ as _conv
from tremula.popxl.ops.debug import *  # noqa: F403
from tremula.popxl.ops.debug import __all__ as _debug
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
from tremula.popxl.ops.repeat import repeat, repeat_with_info
from tremula.popxl.ops.resize import *  # noqa: F403
from tremula.popxl.ops.resize import __all__ as _resize
from tremula.popxl.ops.roi_align import *  # noqa: F403
from tremula.popxl.ops.roi_align import __all__ as _roi_align
from tremula.popxl.ops.scatter import *  # noqa: F403
from tremula.popxl.ops.scatter import __all__ as _scatter
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
from tremula.popxl.ops.unary import *  # noqa: F403
from tremula.popxl.ops.unary import __all__ as _unary

__all__ = [
    *_binary,
    *_unary,
    *_nn,
    *_gather,
    *_scatter,
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


def _module(name: str) -> ModuleType:
    return sys.modules[f"{__name__}.{name}"]


#: PopXL's op modules whose name is not also a function: the Tremula module holding their
#: names (PopXL: ``ops.pool``, ``ops.negative_log_likelihood`` ... are modules).
_MODULE_ONLY = {
    "pool": _module("conv"),
    "batch_norm": _module("nn"),
    "code_copy": code_copy,
    "roialign": _module("roi_align"),
    "argminmax": _module("reduce"),
    "lamb": _module("reduce"),
    "negative_log_likelihood": _module("nn"),
    "random_seed": _module("random"),
    "random": _module("random"),
    "utils": utils,
    "collectives": collectives,
    "var_updates": var_updates,
}
#: PopXL's op modules named like the function they define (``ops.add`` is the function).
_SHADOWED = [
    "abs",
    "add",
    "call",
    "cast",
    "concat",
    "conditional",
    "conv",
    "cos",
    "cumsum",
    "interpolate",
    "detach",
    "div",
    "dropout",
    "dynamic_slice",
    "dynamic_update",
    "equal",
    "exp",
    "floor",
    "log",
    "onehot",
    "topk",
    "fmod",
    "gather",
    "gelu",
    "geluerf",
    "group_norm",
    "host_load",
    "host_store",
    "histogram",
    "increment_mod",
    "init",
    "io_tile_copy",
    "ipu_copy",
    "l1",
    "l2",
    "logical_and",
    "logical_not",
    "logical_or",
    "logsum",
    "logsumexp",
    "matmul",
    "max",
    "mean",
    "median",
    "min",
    "mul",
    "negate",
    "pow",
    "print_tensor",
    "prod",
    "relu",
    "repeat",
    "reshape",
    "remote_load",
    "remote_store",
    "scaled_add",
    "scatter",
    "scatter_reduce",
    "shaped_dropout",
    "sin",
    "slice",
    "softmax",
    "split",
    "sqrt",
    "squeeze",
    "sub",
    "subsample",
    "sum",
    "sumsquare",
    "tanh",
    "transpose",
    "where",
    "swish",
    "greater",
    "identity",
    "isnan",
    "isinf",
    "isfinite",
    "ceil",
    "clip",
    "sign",
]
#: Every PopXL op-module name -> the module ``import popxl.ops.<name>`` gives.
POPXL_MODULES: dict[str, ModuleType] = {
    **{n: sys.modules[globals()[n].__module__] for n in _SHADOWED},
    **_MODULE_ONLY,
}
globals().update({n: m for n, m in _MODULE_ONLY.items() if n not in globals()})
for _name, _mod in POPXL_MODULES.items():
    sys.modules.setdefault(f"{__name__}.{_name}", _mod)
