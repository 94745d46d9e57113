"""Tremula's Poplar layer: what a graph is.

Names follow Poplar's in snake_case: ``Graph``, ``Tensor``, ``add_variable``,
``set_tile_mapping``, ``Sequence``, ``Execute``, ``Copy`` ... ``Engine`` is re-exported from
:mod:`tremula.engine` on first use (the one upward reference, kept lazy so that the graph
layer never imports the engine to be used on its own).
"""

from __future__ import annotations

from typing import Any

from tremula.poplar.codelet import (
    Batch,
    Codelet,
    Field,
    InOut,
    Input,
    Output,
    State,
    VertexInfo,
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


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from tremula.engine import Engine  # layering: the documented facade exception

        return Engine
    raise AttributeError(f"module 'tremula.poplar' has no attribute {name!r}")
