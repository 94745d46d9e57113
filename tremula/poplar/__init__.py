"""Tremula's Poplar layer: what a graph is.

Names follow Poplar's in snake_case: ``Graph``, ``Tensor``, ``add_variable``,
``set_tile_mapping``, ``Sequence``, ``Execute``, ``Copy`` ... ``Engine`` is re-exported from
:mod:`tremula.engine` (the one upward reference).

Every name is imported on first use (:mod:`tremula.lazy`): ``from tremula import poplar``
loads nothing, and ``poplar.FLOAT`` loads only ``poplar.types``, so the layers above (PopXL's
dtypes) import the graph layer's types without its graphs, programs and vertices, and the
graph layer is never made to import the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tremula.engine import Engine  # the documented upward facade
    from tremula.poplar.batch import Batch, VertexInfo
    from tremula.poplar.codelet import (
        Codelet,
        Field,
        InOut,
        Input,
        Output,
        State,
        VertexType,
    )
    from tremula.poplar.device import Device, IPUModel
    from tremula.poplar.graph import Graph
    from tremula.poplar.handles import (
        ComputeSet,
        DataStream,
        Function,
        FunctionBuffer,
        HostFunction,
        RemoteBuffer,
        Vertex,
        VertexField,
        Vertices,
    )
    from tremula.poplar.mapping import calc_linear_tile_mapping, linear_tiles, map_tensor_linearly
    from tremula.poplar.program import (
        Call,
        Copy,
        CrossReplicaCopy,
        Execute,
        If,
        PrintTensor,
        PrintTensorFmt,
        Program,
        Repeat,
        RepeatWhileFalse,
        RepeatWhileTrue,
        Sequence,
        Switch,
        Sync,
        SyncType,
        WriteUndef,
    )
    from tremula.poplar.tensor import Tensor, concat
    from tremula.poplar.types import (
        BOOL,
        CHAR,
        DOUBLE,
        FLOAT,
        HALF,
        INT,
        LONGLONG,
        QUARTER_F143,
        QUARTER_F152,
        SHORT,
        SIGNED_CHAR,
        UNSIGNED_CHAR,
        UNSIGNED_INT,
        UNSIGNED_LONGLONG,
        UNSIGNED_SHORT,
        Type,
        as_type,
    )
    from tremula.poplar.vertices import Segments
else:
    from tremula.lazy import attach

    __getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "BOOL",
    "CHAR",
    "DOUBLE",
    "FLOAT",
    "HALF",
    "INT",
    "LONGLONG",
    "QUARTER_F143",
    "QUARTER_F152",
    "SHORT",
    "SIGNED_CHAR",
    "UNSIGNED_CHAR",
    "UNSIGNED_INT",
    "UNSIGNED_LONGLONG",
    "UNSIGNED_SHORT",
    "Batch",
    "Call",
    "Codelet",
    "ComputeSet",
    "Copy",
    "CrossReplicaCopy",
    "DataStream",
    "Device",
    "Engine",
    "Execute",
    "Field",
    "Function",
    "FunctionBuffer",
    "Graph",
    "HostFunction",
    "IPUModel",
    "If",
    "InOut",
    "Input",
    "Output",
    "PrintTensor",
    "PrintTensorFmt",
    "Program",
    "RemoteBuffer",
    "Repeat",
    "RepeatWhileFalse",
    "RepeatWhileTrue",
    "Segments",
    "Sequence",
    "State",
    "Switch",
    "Sync",
    "SyncType",
    "Tensor",
    "Type",
    "Vertex",
    "VertexField",
    "VertexInfo",
    "VertexType",
    "Vertices",
    "WriteUndef",
    "as_type",
    "calc_linear_tile_mapping",
    "concat",
    "linear_tiles",
    "map_tensor_linearly",
]
