"""``popart._internal.ir.op``: the op classes of PopXL's bindings, one per PopART op,
generated from Tremula's op registry (``classes.py``): ``op.AddOp``, ``op.CallOp``,
``op.LoopOp``, ``op.InitOp``, ``op.IpuCopyOp``, ...; host and remote exchanges in
``op.exchange``, collectives in ``op.collectives``."""

from __future__ import annotations

from typing import Any

from tremula.popxl._ir.core.enums import ScatterReduction
from tremula.popxl._ir.op import collectives, exchange
from tremula.popxl._ir.op.base import Op
from tremula.popxl._ir.op.classes import class_named, classes_in, op_class
from tremula.popxl._ir.op.subgraph import (
    MatMulPartialsType,
    SerialiseSettings,
    SerialiseSettingsMode,
)

__all__ = [
    "MatMulPartialsType",
    "Op",
    "ScatterReduction",
    "SerialiseSettings",
    "SerialiseSettingsMode",
    "collectives",
    "exchange",
    "op_class",
]


def __getattr__(name: str) -> Any:
    return class_named(name, "")


def __dir__() -> list[str]:
    return sorted({*__all__, *classes_in("")})
