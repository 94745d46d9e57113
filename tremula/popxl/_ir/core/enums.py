"""PopART's small enums, made from one table (member names and values as PopART's Python
bindings give them, so ``int(popart.X.Y)`` and ``popart.X.Y.name`` match the SDK).

``CommGroupType`` is GCL's (:mod:`tremula.libs.gcl.grouping`): one definition serves
PopART, PopXL's collectives and the library.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from tremula.libs.gcl.grouping import CommGroupType

#: enum name -> members in value order (value = position; a string: names split on spaces)
#: or explicit (name, value) pairs
_TABLE: dict[str, str | list[str] | list[tuple[str, int]]] = {
    "DataType": (
        "UINT8 INT8 UINT16 INT16 INT32 INT64 UINT32 UINT64 BOOL FLOAT FLOAT16 BFLOAT16 "
        "FLOAT8_143 FLOAT8_152 DOUBLE COMPLEX64 COMPLEX128 STRING UNDEFINED"
    ),
    "VariableRetrievalMode": ["OnePerGroup", "AllReduceReplicas", "AllReplicas"],
    "AnchorReturnTypeId": ["Final", "EveryN", "All", "Sum"],
    "ReductionType": ["Sum", "Mean", "NoReduction"],
    "MeanReductionStrategy": ["Running", "Post", "PostAndLoss"],
    "SyncPattern": ["Full", "SinglePipeline", "ReplicaAndLadder"],
    "DeviceType": ["IpuModel", "Cpu", "Ipu", "OfflineIpu", "Sim"],
    "DeviceConnectionType": ["Always", "OnDemand", "Never"],
    "DeviceSelectionCriterion": ["First", "Random"],
    "TileSet": ["Compute", "IO", "Undefined"],
    "ExchangeStrategy": ["JustInTime", "OverlapInnerLoop", "OverlapLoops", "OverlapStep"],
    "ReplicatedStreamMode": ["Replicate", "Broadcast"],
    "ReplicatedTensorSharding": ["Off", "On"],
    "TensorStorage": ["OnChip", "OffChip"],
    "VirtualGraphMode": ["Off", "Manual", "Auto", "ExecutionPhases", "Custom"],
    "RecomputationType": ["NoRecompute", "Standard", "NormOnly", "Pipeline", "RecomputeAll"],
    "PatternsLevel": ["NoPatterns", "Minimal", "Default", "All"],
    "SGDAccumulatorAndMomentum": ["Combined", "Separate"],
    "AdamMode": ["Adam", "AdamNoBias", "AdaMax", "Lamb", "LambNoBias"],
    # op/accumulate.hpp; PopXL's var_updates pass these to its AccumulateOp
    "AccumulationType": (
        "Add DampenedAdd DampenedAddSquare DecayAdd DecayAddSquare MovingAverage "
        "MovingAverageSquare Infinity Mean"
    ),
    "WeightDecayMode": ["Decay", "L2Regularization"],
    "SyntheticDataMode": ["Off", "Zeros", "RandomNormal", "RandomUniform"],
    "InitType": ["NoInit", "Zero"],
    "MergeVarUpdateType": ["Off", "All", "AutoLoose", "AutoTight"],
    "AccumulateOuterFragmentSchedule": [
        "Scheduler",
        "Serial",
        "OverlapCycleOptimized",
        "OverlapMemoryOptimized",
    ],
    "ExecutionPhaseSchedule": ["Interleaving", "Batch", "BatchClusteredIO"],
    "BatchSerializationMethod": ["UnrollDynamic", "UnrollStatic", "Loop"],
    "BatchSerializationTransformContext": ["Fwd", "Bwd"],
    "BatchSerializationBatchSchedule": [
        "Scheduler",
        "Isomorphic",
        "OverlapOnIo",
        "OverlapOnCompute",
    ],
    "Instrumentation": ["Outer", "Inner"],
    "IrSerializationFormat": ["JSON"],
    "DotCheck": ["Fwd0", "Fwd1", "Bwd0", "PreAlias", "Final", "All"],
    "ScatterReduction": ["Sum", "Max", "Min", "Mul", "NoReduction"],
    "AutodiffStitchStrategy": [
        "RecomputeMinimal",
        "RecomputeAllNonInputs",
        "AddFwdOutputs",
        "SafeAddFwdOutputs",
    ],
    "GradientTensorTrackingMethod": [
        "AllNonViewChangingGradientTensors",
        "ConvAndMatmulGradients",
        "GradientsOfUserSpecifiedTensors",
    ],
    "ColumnMajorOrder": ["Row", "Col"],
    "CollectiveOperator": [
        ("Undefined", 0),
        ("Add", 1),
        ("Mean", 2),
        ("Mul", 3),
        ("Min", 4),
        ("Max", 5),
        ("LogicalAnd", 6),
        ("LogicalOr", 7),
        ("SquareAdd", 8),
        ("Local", 9),
    ],
}


class PopartEnum(enum.IntEnum):
    """An enum of PopART's bindings: an int, printed as ``DataType.FLOAT``."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


def _make(name: str, members: str | list[str] | list[tuple[str, int]]) -> Any:
    if isinstance(members, str):
        members = members.split()
    pairs = [m if isinstance(m, tuple) else (m, i) for i, m in enumerate(members)]
    functional: Any = PopartEnum  # the functional API (mypy reads a PopartEnum call as a member)
    made: type[enum.IntEnum] = functional(name, pairs, module=__name__)
    made.__doc__ = f"PopART's ``{name}`` ({', '.join(p[0] for p in pairs)})."
    return made


globals().update({name: _make(name, members) for name, members in _TABLE.items()})

if TYPE_CHECKING:  # the enums are made above: to static tools each name is a class

    def __getattr__(name: str) -> Any: ...


__all__ = ["CommGroupType", *_TABLE]
