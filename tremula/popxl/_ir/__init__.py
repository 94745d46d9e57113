"""PopXL's IR bindings over Tremula's own IR: the module that programs import as
``popart._internal.ir`` (``import popart._internal.ir as _ir``).

In Graphcore's SDK this module is C++ (pybind11 over PopART's IR) and PopXL is written on
it. In Tremula the IR is PopXL's own plain Python (``tremula.popxl``), and this module is a
view of it under PopART's names: ``ir._pb_ir``, ``graph._pb_graph``, ``tensor._pb_tensor``
and ``session._pb_session`` are handles on the same Ir, graphs, tensors and session the
lowering reads, and the ops are the IR's op records themselves (each made as an instance of
its binding class, ``op.py``). Editing through the bindings edits the program that runs.
It lives in the PopXL layer because PopXL hands these handles out, and it owns the PopART
classes its bindings define and PopART's Python re-exports (``core``: ``CommGroup``,
``ReplicaGrouping``, ``VariableSettings``, ``DataType``, ..., and the ``SessionOptions``
``Ir.getSessionOptions`` gives); it imports nothing from ``tremula.popart``. See
``OVERVIEW.md`` for the surface and what Tremula does not bind.

Its names load on first use (:mod:`tremula.lazy`): ``import popxl`` installs the
stand-ins of :mod:`native` without loading the bindings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tremula.popxl._ir import op, patterns, transforms, view
    from tremula.popxl._ir.autodiff import BwdGraphInfo, ExpectedConnection, ExpectedConnectionType
    from tremula.popxl._ir.basics import (
        DebugContext,
        DebugInfo,
        NumInputs,
        OperatorIdentifier,
        OptionalDataType,
        OptionalFloat,
        OptionalInt,
        Scope,
        Settings,
        addScope,
        removeScope,
    )
    from tremula.popxl._ir.build import Tensors
    from tremula.popxl._ir.core.enums import (
        AccumulationType,
        AutodiffStitchStrategy,
        CommGroupType,
        DataType,
        InitType,
        ReductionType,
        ReplicatedTensorSharding,
        TensorStorage,
        VariableRetrievalMode,
    )
    from tremula.popxl._ir.core.grouping import CommGroup, ReplicaGrouping
    from tremula.popxl._ir.core.variable_settings import VariableSettings
    from tremula.popxl._ir.graph import Graph, GraphId, graph_handle
    from tremula.popxl._ir.ir import Ir, ir_handle
    from tremula.popxl._ir.op import Op
    from tremula.popxl._ir.op.var_update import OptimizerValue
    from tremula.popxl._ir.session import Session, session_handle
    from tremula.popxl._ir.tensor import (
        Consumers,
        RemoteBufferInfo,
        Tensor,
        TensorInfo,
        TensorLocationInfo,
        TensorType,
        TensorTypeInfo,
        tensor_handle,
    )
    from tremula.popxl._ir.topocons import TopoCons
    from tremula.popxl._ir.verify import verify_ir
    from tremula.popxl.ops.collectives.collectives import CollectiveOperator
    from tremula.popxl.tensorlocation import ExecutionContext, TileSet
else:
    from tremula.lazy import attach

    __getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "AccumulationType",
    "AutodiffStitchStrategy",
    "BwdGraphInfo",
    "CollectiveOperator",
    "CommGroup",
    "CommGroupType",
    "Consumers",
    "DataType",
    "DebugContext",
    "DebugInfo",
    "ExecutionContext",
    "ExpectedConnection",
    "ExpectedConnectionType",
    "Graph",
    "GraphId",
    "InitType",
    "Ir",
    "NumInputs",
    "Op",
    "OperatorIdentifier",
    "OptimizerValue",
    "OptionalDataType",
    "OptionalFloat",
    "OptionalInt",
    "ReductionType",
    "RemoteBufferInfo",
    "ReplicaGrouping",
    "ReplicatedTensorSharding",
    "Scope",
    "Session",
    "Settings",
    "Tensor",
    "TensorInfo",
    "TensorLocationInfo",
    "TensorStorage",
    "TensorType",
    "TensorTypeInfo",
    "Tensors",
    "TileSet",
    "TopoCons",
    "VariableRetrievalMode",
    "VariableSettings",
    "addScope",
    "graph_handle",
    "ir_handle",
    "op",
    "patterns",
    "removeScope",
    "session_handle",
    "tensor_handle",
    "transforms",
    "verify_ir",
    "view",
]
