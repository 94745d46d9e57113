"""Tremula's PopART: ``import popart`` resolves here (see the ``popart`` alias package).

PopART is the ONNX front door of the same stack: ``Builder`` writes real ONNX models,
sessions turn an ONNX graph into a PopXL IR and run it on the IPU Model through PopXL's
lowering, with replica-grouped weights (``VariableSettings``) and ONNX checkpoints. Also the
small PopART names that PopXL programs use directly (``getLogger``, ``DeviceManager``,
``DataType``, ``CommGroupType``, ``SyncPattern``, the exception classes). See
``OVERVIEW.md``.
"""

from tremula.errors import ApplicationRuntimeError as poplar_application_runtime_error
from tremula.errors import PopartException as popart_exception
from tremula.errors import PopartInternalException as popart_internal_exception
from tremula.errors import PopartRuntimeError as popart_runtime_error
from tremula.popart.builder import Builder
from tremula.popart.dataflow import AnchorReturnType, DataFlow, PyStepIO, PyWeightsIO
from tremula.popart.devices import DeviceInfo, DeviceManager
from tremula.popart.optimizers import SGD, Adam, ClipNormSettings, ConstSGD
from tremula.popart.session import InferenceSession, InputShapeInfo, Patterns, TrainingSession
from tremula.popart.types import TensorInfo
from tremula.popxl._ir.core.enums import *  # noqa: F403
from tremula.popxl._ir.core.enums import __all__ as _enums
from tremula.popxl._ir.core.grouping import CommGroup
from tremula.popxl._ir.core.log import Logger, getLogger
from tremula.popxl._ir.core.options import (
    AutomaticLossScalingSettings,
    BatchSerializationSettings,
    ExecutionPhaseSettings,
    InputSettings,
    SessionOptions,
    TensorLocation,
    TensorLocationSettings,
)
from tremula.popxl._ir.core.variable_settings import VariableSettings

__version__ = "3.3.0"

#: the default opset versions of a Builder's domains
defaultAiOnnxOpset = 10
defaultAiGraphcoreOpset = 1
defaultAiOnnxMlOpset = 1


def reservedGradientPrefix() -> str:
    """The prefix of gradient tensor ids (``Gradient___w``)."""
    return "Gradient___"


def reservedAccumPrefix() -> str:
    """The prefix of gradient accumulator ids."""
    return "Accum___"


def reservedAcclPrefix() -> str:
    """The prefix of optimizer state (SGD velocity, Adam moments) ids."""
    return "Accl___"


__all__ = [
    *_enums,
    "Adam",
    "AnchorReturnType",
    "DataFlow",
    "PyStepIO",
    "PyWeightsIO",
    "SGD",
    "AutomaticLossScalingSettings",
    "BatchSerializationSettings",
    "Builder",
    "ClipNormSettings",
    "CommGroup",
    "ConstSGD",
    "DeviceInfo",
    "DeviceManager",
    "ExecutionPhaseSettings",
    "InferenceSession",
    "InputSettings",
    "InputShapeInfo",
    "Logger",
    "Patterns",
    "SessionOptions",
    "TensorInfo",
    "TensorLocation",
    "TensorLocationSettings",
    "TrainingSession",
    "VariableSettings",
    "defaultAiGraphcoreOpset",
    "defaultAiOnnxMlOpset",
    "defaultAiOnnxOpset",
    "getLogger",
    "popart_exception",
    "popart_internal_exception",
    "popart_runtime_error",
    "poplar_application_runtime_error",
    "reservedAccumPrefix",
    "reservedAcclPrefix",
    "reservedGradientPrefix",
]
