"""PopART's ``SessionOptions`` (defaults from PopART's ``sessionoptions.hpp``) and the small
settings classes they hold (``TensorLocation``, ``TensorLocationSettings``, ...).

Tremula acts on the options that change what a program computes or reports (replication,
gradient accumulation and its reduction, constant weights, engine options, the cycle
counter); the others (pipelining, outlining, recomputation, memory placement, ...) are
accepted and their values logged at debug level when a session is made, because on the IPU
Model they would change only the schedule, not the numbers.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from tremula.popxl._ir.core.enums import (
    ExchangeStrategy,
    Instrumentation,
    MeanReductionStrategy,
    MergeVarUpdateType,
    RecomputationType,
    ReductionType,
    ReplicatedStreamMode,
    ReplicatedTensorSharding,
    SyntheticDataMode,
    TensorStorage,
    TileSet,
    VirtualGraphMode,
)
from tremula.popxl._ir.core.grouping import CommGroup

__all__ = [
    "AutomaticLossScalingSettings",
    "BatchSerializationSettings",
    "ExecutionPhaseSettings",
    "InputSettings",
    "SessionOptions",
    "TensorLocation",
    "TensorLocationSettings",
]


class _Settings:
    """A settings record: keyword arguments over class-level defaults, PopART's names."""

    _defaults: dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = list(self._defaults)
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}: at most {len(names)} positional arguments")
        values = dict(self._defaults) | dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in self._defaults:
                raise TypeError(f"{type(self).__name__}: unknown argument {key!r}")
            values[key] = value
        for key, value in values.items():
            object.__setattr__(self, key, value() if callable(value) else value)

    if TYPE_CHECKING:  # the fields are set from _defaults

        def __getattr__(self, key: str) -> Any: ...

    def __setattr__(self, key: str, value: Any) -> None:
        if key not in self._defaults:
            raise AttributeError(f"{type(self).__name__} has no attribute {key!r}")
        object.__setattr__(self, key, value)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self._defaults)

    __hash__ = None  # type: ignore[assignment]

    if TYPE_CHECKING:  # the settings are made from ``_defaults``: any name, any value

        def __getattr__(self, key: str) -> Any: ...

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._defaults)
        return f"{type(self).__name__}({body})"


class TensorLocation(_Settings):
    """Where a tensor lives (accepted; the IPU Model keeps every tensor on chip).

    PopART's constructors: ``TensorLocation(storage)``, ``(storage,
    replicatedTensorSharding[, shardingDomain])`` and ``(storage, loadTileSet,
    storageTileSet, replicatedTensorSharding[, shardingDomain])``; or keywords.
    """

    _defaults = {
        "storage": TensorStorage.OnChip,
        "loadTileSet": TileSet.Compute,
        "storageTileSet": TileSet.Compute,
        "replicatedTensorSharding": ReplicatedTensorSharding.Off,
        "shardingDomain": CommGroup,
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) >= 2 and isinstance(args[1], ReplicatedTensorSharding):
            if len(args) > 3:
                raise TypeError(
                    "TensorLocation(storage, replicatedTensorSharding[, shardingDomain])"
                )
            names = ("storage", "replicatedTensorSharding", "shardingDomain")
            kwargs = dict(zip(names, args)) | kwargs
            args = ()
        super().__init__(*args, **kwargs)


class InputSettings(_Settings):
    """How an input is streamed (accepted; written to the model's metadata)."""

    _defaults = {
        "tileSet": TileSet.Compute,
        "exchangeStrategy": ExchangeStrategy.JustInTime,
        "replicatedStreamMode": ReplicatedStreamMode.Replicate,
    }


class TensorLocationSettings(_Settings):
    """A TensorLocation and the sizes from which it applies (accepted)."""

    _defaults = {
        "location": TensorLocation,
        "minElementsForOffChip": 2,
        "minElementsForReplicatedTensorSharding": 8192,
    }


class ExecutionPhaseSettings(_Settings):
    _defaults = {"phases": 0, "stages": 2}


class BatchSerializationSettings(_Settings):
    _defaults = {
        "factor": 0,
        "concatOnVirtualGraphChange": True,
        "concatOnExecutionPhaseChange": True,
        "concatOnPipelineStageChange": True,
    }


class AutomaticLossScalingSettings(_Settings):
    _defaults = {
        "enabled": False,
        "binEdgeLocation": 0.125,
        "thresholdUpperCountProportion": 1e-7,
        "toTrackTensors": None,
        "updatePeriod": 1,
    }


class AccumulateOuterFragmentSettings(_Settings):
    _defaults = {"schedule": 0, "excludedVirtualGraphs": list}


#: options that change what Tremula computes
ACTED_ON = (
    "enableReplicatedGraphs",
    "replicatedGraphCount",
    "enableGradientAccumulation",
    "accumulationFactor",
    "accumulationAndReplicationReductionType",
    "meanAccumulationAndReplicationReductionStrategy",
    "constantWeights",
    "engineOptions",
    "enableDistributedReplicatedGraphs",
    "globalReplicationFactor",
    "globalReplicaOffset",
    "instrumentWithHardwareCycleCounter",
    "hardwareInstrumentations",
)

_DEFAULTS: dict[str, Any] = {
    "enableReplicatedGraphs": False,
    "replicatedGraphCount": 1,
    "enableGradientAccumulation": False,
    "accumulationFactor": 1,
    "accumulationAndReplicationReductionType": ReductionType.Sum,
    "meanAccumulationAndReplicationReductionStrategy": MeanReductionStrategy.Post,
    "constantWeights": True,
    "enableOutlining": True,
    "enableStochasticRounding": False,
    "enableDistributedReplicatedGraphs": False,
    "globalReplicationFactor": 1,
    "globalReplicaOffset": 0,
    "enablePipelining": False,
    "virtualGraphMode": VirtualGraphMode.Off,
    "autoRecomputation": RecomputationType.NoRecompute,
    "explicitRecomputation": False,
    "weightTensorLocationSettings": TensorLocationSettings,
    "optimizerStateTensorLocationSettings": TensorLocationSettings,
    "accumulatorTensorLocationSettings": TensorLocationSettings,
    "activationTensorLocationSettings": TensorLocationSettings,
    "tensorLocationSettingsOverride": dict,
    "enableExplicitMainLoops": False,
    "useHostCopyOps": False,
    "enableExplicitIR": False,
    "engineOptions": dict,
    "convolutionOptions": dict,
    "lstmOptions": dict,
    "matmulOptions": dict,
    "reportOptions": dict,
    "gclOptions": dict,
    "cachePath": "session_cache",
    "enableEngineCaching": False,
    "enableFloatingPointChecks": False,
    "enableFullyConnectedPass": True,
    "enableGroupedMatmuls": False,
    "enableSerializedMatmuls": True,
    "enableStableNorm": False,
    "enableNonStableSoftmax": False,
    "executionPhaseSettings": ExecutionPhaseSettings,
    "batchSerializationSettings": BatchSerializationSettings,
    "accumulateOuterFragmentSettings": AccumulateOuterFragmentSettings,
    "automaticLossScalingSettings": AutomaticLossScalingSettings,
    "enableAutomaticLossScaling": False,
    "outlineThreshold": 1.0,
    "outlineSequenceBreakCost": 10000.0,
    "rearrangeAnchorsOnHost": True,
    "rearrangeStreamsOnHost": False,
    "syntheticDataMode": SyntheticDataMode.Off,
    "instrumentWithHardwareCycleCounter": False,
    "hardwareInstrumentations": lambda: {Instrumentation.Outer},
    "disableGradAccumulationTensorStreams": False,
    "enablePrefetchDatastreams": True,
    "defaultPrefetchBufferingDepth": 1,
    "bufferingDepthMap": dict,
    "decomposeGradSum": False,
    "enableLoadAndOffloadRNGState": False,
    "separateCallOpPdfs": True,
    "enableMergeExchange": True,
    "enableInplaceAmbiguityChecking": True,
    "kahnTieBreaker": "greedy",
    "swapLimitScheduler": -1,
    "timeLimitScheduler": 1e9,
    "transitiveClosureOptimizationThreshold": 100000,
    "mergeVarUpdate": MergeVarUpdateType.Off,
    "mergeVarUpdateMemThreshold": 1000000,
    "looseThresholdAtPeak": 8000,
    "aliasZeroCopy": False,
    "delayVarUpdates": True,
    "scheduleNonWeightUpdateGradientConsumersEarly": False,
    "logDir": "",
    "dotChecks": set,
    "firstDotOp": 0,
    "finalDotOp": 10000,
    "dotOpNames": False,
    "exportPoplarComputationGraph": False,
    "exportPoplarVertexGraph": False,
    "compileEngine": True,
    "opxAliasChecking": False,
    "opxModifyChecking": False,
    "partialsTypeMatMuls": "",
    "ensureFp32LossScaleTensor": False,
    "groupHostSync": False,
    "strictOpVersions": True,
    "numIOTiles": 0,
    "enableVariablesCaching": True,
    "createImplicitPipeliningFwdOnlyProgram": False,
    "throwIfLog2ScaleTensorNotInRange": True,
    "enableConstantFoldingOfMultipleConsumers": True,
    "enableSupportedDataTypeCasting": True,
    "serializedPoprithmsShiftGraphsDir": "",
    "enableReplicatedGraphsInPipelining": False,
    "exchangeStrategy": ExchangeStrategy.JustInTime,
    "subgraphCopyingStrategy": 0,
    "customCodeletCompileFlags": "",
    "customCodelets": list,
    "updatableNamedBuffers": list,
    "autodiffSettings": dict,
    "replicatedCollectivesSettings": dict,
}


class SessionOptions(_Settings):
    """PopART's ``SessionOptions``: every field with PopART's default; unknown names are
    refused (as PopART's bindings refuse them)."""

    _defaults = _DEFAULTS

    def __setattr__(self, key: str, value: Any) -> None:
        if key not in self._defaults:
            raise AttributeError(
                f"SessionOptions has no option {key!r} (misspelt? see popart.SessionOptions)"
            )
        default = self._defaults[key]
        if isinstance(default, enum.IntEnum) and not isinstance(value, enum.Enum):
            value = type(default)(value)
        object.__setattr__(self, key, value)

    def getGlobalReplicationFactor(self) -> int:
        """globalReplicationFactor when distributed, else replicatedGraphCount when
        replication is enabled, else 1."""
        if self.enableDistributedReplicatedGraphs:
            return int(self.globalReplicationFactor)
        return int(self.replicatedGraphCount) if self.enableReplicatedGraphs else 1

    def getAccumulationFactor(self) -> int:
        return int(self.accumulationFactor) if self.enableGradientAccumulation else 1

    def ignored_changes(self) -> dict[str, Any]:
        """The options set to non-default values that Tremula accepts but does not act on."""
        fresh = SessionOptions()
        return {
            k: getattr(self, k)
            for k in self._defaults
            if k not in ACTED_ON and getattr(self, k) != getattr(fresh, k)
        }
