"""Tremula's PopXL-compatible frontend. ``import popxl`` resolves here (the ``popxl`` alias
package makes ``popxl`` this very module); ``import popxl.ops as ops`` gives
:mod:`tremula.popxl.ops`.

As in PopXL, importing the package loads its modules, so ``popxl.tensor``, ``popxl.ops``,
``popxl.utils`` ... are attributes after ``import popxl`` (``popxl.remote_buffer`` is the
function, as in PopXL; ``popxl.testing`` needs its own import). Three of them load on first use
(:mod:`tremula.lazy`), as attributes all the same: ``popxl.ops`` and ``popxl.transforms``
(the op library and autodiff, when a program first builds with them) and ``popxl.session``
with ``popxl.Session`` (the engine, the lowering and PopLibs behind it, when a program first
runs). ``import popxl`` itself loads the IR (graphs, tensors, dtypes, groupings): every
instance of a PopRun job pays it at start.
"""

from typing import TYPE_CHECKING

from tremula.popxl import (  # the modules, attributes of the package as in PopXL
    context,
    dtypes,
    errors,
    fp8_utils,
    graph,
    ir,
    module,
    random_seed,
    replica_grouping,
    streams,
    tensor,
    tensorlocation,
    typing_,
    utils,
)
from tremula.popxl.context import (
    gcg,
    get_current_graph,
    get_ir,
    get_main_graph,
    gir,
    gmg,
    in_sequence,
    io_tiles,
    ipu,
    name_scope,
)
from tremula.popxl.dtypes import (
    bool,
    complex64,
    complex128,
    double,
    dtype,
    float,
    float8_143,
    float8_152,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from tremula.popxl.graph import Graph
from tremula.popxl.ir import Ir
from tremula.popxl.module import Module
from tremula.popxl.random_seed import create_seeds
from tremula.popxl.remote_buffer import RemoteBuffer, remote_buffer
from tremula.popxl.replica_grouping import ReplicaGrouping
from tremula.popxl.streams import DeviceToHostStream, HostToDeviceStream, d2h_stream, h2d_stream
from tremula.popxl.tensor import (
    Constant,
    Tensor,
    TensorByRef,
    TensorSpec,
    Variable,
    constant,
    graph_input,
    graph_output,
    remote_replica_sharded_variable,
    remote_variable,
    replica_sharded_variable,
    variable,
)
from tremula.popxl.tensor import (
    replica_sharded_buffer as replica_sharded_buffer,  # not in __all__, as in PopXL
)
from tremula.popxl.tensorlocation import (
    ExecutionContext,
    ReplicatedTensorSharding,
    TensorLocation,
    TensorStorage,
    TileSet,
)

if TYPE_CHECKING:
    from tremula.popxl import ops, session, transforms
    from tremula.popxl.session import Session
else:
    from tremula.lazy import attach

    __getattr__, __dir__ = attach(__name__, __file__)

__version__ = "0.1.0"

__all__ = [
    "Constant",
    "DeviceToHostStream",
    "ExecutionContext",
    "Graph",
    "HostToDeviceStream",
    "Ir",
    "Module",
    "RemoteBuffer",
    "ReplicaGrouping",
    "ReplicatedTensorSharding",
    "Session",
    "Tensor",
    "TensorByRef",
    "TensorLocation",
    "TensorSpec",
    "TensorStorage",
    "TileSet",
    "Variable",
    "bool",
    "complex64",
    "complex128",
    "constant",
    "create_seeds",
    "d2h_stream",
    "double",
    "dtype",
    "dtypes",
    "float",
    "float8_143",
    "float8_152",
    "float16",
    "float32",
    "float64",
    "gcg",
    "get_current_graph",
    "get_ir",
    "get_main_graph",
    "gir",
    "gmg",
    "graph_input",
    "graph_output",
    "h2d_stream",
    "half",
    "in_sequence",
    "int8",
    "int16",
    "int32",
    "int64",
    "io_tiles",
    "ipu",
    "name_scope",
    "remote_buffer",
    "remote_replica_sharded_variable",
    "remote_variable",
    "replica_sharded_variable",
    "transforms",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "variable",
]

# C++ custom ops PopXL programs build at import time (popxl-addons' strided collectives)
# are served in Python instead (tremula/popxl/_ir/native.py)
from tremula.popxl._ir import native as _native

_native.install()
