"""PopART bindings that Tremula does not provide: using one raises
:class:`~tremula.errors.UnsupportedBindingError` (a ``NotImplementedError`` naming the binding
and the method, and an ``AttributeError``, so ``hasattr(op, "getSettings")`` is False rather
than an exception), never a bare ``AttributeError`` from deep inside.

The names are those of PopART's pybind11 modules (``python/popart._internal.ir/bindings/
{ir,graph,tensor,op,topocons}.cpp`` and ``popart.cpp`` for the session) that Tremula leaves
out; a name Tremula implements is never reached here (``__getattr__`` runs for missing names
only, and a test checks that the table lists none). Names that PopART does not bind on a
class (a typo, or ``getCalledGraph`` on an op that calls no graph, which is how programs ask)
stay a plain ``AttributeError``.
"""

from __future__ import annotations

from typing import Any, NoReturn

from tremula.errors import UnsupportedBindingError


def _each(groups: dict[str, str]) -> dict[str, str]:
    """``{why: "name name ..."}`` -> ``{name: why}``."""
    return {name: why for why, names in groups.items() for name in names.split()}


_PLACEMENT = "place ops with popxl.ipu / pipeline_stage contexts and read Op.ipu"
_ALIASES = "Tremula has no PopART alias model (its inplacing is its lowering's views)"
_OUTLINING = "Tremula does no outlining"
_KINDS = "Tremula keeps no PopART op or tensor classification; check Op.opType"
_SHARDING = "Tremula has no PopART batch serialisation or sharding"
_INTERNAL = "Tremula keeps no PopART internal state for it"

#: binding class -> {method: why Tremula does not provide it}
UNSUPPORTED: dict[str, dict[str, str]] = {
    "Ir": {
        "dotCheckpoint": "Tremula writes no dot checkpoints",
        "updateVertices": "Tremula keeps no PopART vertex state",
        "setIsPrepared": "a Tremula Ir is prepared by creating a Session",
        "removeIsolatedGraphs": "Tremula keeps every graph of an Ir",
        **_each(
            {
                "data flow and anchors are popxl streams": (
                    "setDataFlow getRootAnchors addAnchor remapAnchor"
                ),
                "Tremula's Ir takes its options from popxl.Ir": "setUserOptions setDeviceInfo",
                _INTERNAL: (
                    "getDeviceInfo isTraining hasReplicatedTensorSharding getExecutionMode "
                    "getMaxVirtualGraphId getNumVirtualGraphIds getRequiresRandomSeed "
                    "setRequiresRandomSeed getOpSetVersionFromModel getDefaultOpsetVersion "
                    "addAdditionalModelProtoTensors getAdditionalModelProtoTensors "
                    "timePartitionLogger "
                    "finalizeOpDebugInfo setMainGraphPathFromLoss "
                    "removeIsolatedTensors getVirtualGraphIdFromTensorProducers"
                ),
            }
        ),
    },
    "Graph": {
        "removeIsolatedTensors": "Tremula keeps the tensors of a graph (PopXL lists them)",
        "replaceTensor": "reconnect the consumers with Op.connectInTensor",
        **_each(
            {
                "add outputs with popxl.graph_output / Graph.markAsOutput": "addOutput",
                "copy graphs with popxl's graph transforms": "copyFrom",
                _INTERNAL: "getLiveSets isSchedulable getDebugInfo",
            }
        ),
    },
    "Tensor": {
        "setTensorData": "write variables through Session.write_variables_data",
        "tensorData": "read variables through Session.get_tensor_data",
        "anyAlias": "Tremula has no PopART alias model",
        "setReplicatedStreamMode": "Tremula's streams replicate (one array per replica); "
        "there is no broadcast mode",
        **_each(
            {
                "read popxl Tensor.ipu and Tensor.tile_set": "getPipelineStages",
                "read variables through Session.get_tensor_data": "getDataViaGraphTraversal",
                _ALIASES: "associatedOps",
                "read popxl Tensor.replica_grouping / retrieval_mode": (
                    "getVariableUpdateType setVariableUpdateType getCopyFromTensor "
                    "setCopyFromTensor"
                ),
                "Tremula has no PopART tensor location settings": (
                    "inputSettings returnedShape verifyMutableVoidInfo"
                ),
                _KINDS: (
                    "isOptimizerTensor isRemoteArgTensor isRandomSeedTensor "
                    "isOptimizerStateTensor isAccumulatorTensor isHostLoadTensor "
                    "isWeightTensor isAnchored isRootAnchor isUnmodifiable "
                    "isCheckpointTensor isImplicitRecomputeTensor isRestoreInplaceTensor "
                    "idIncludesPrefix isLoopInput isImplicitLoopInput isExplicitLoopInput "
                    "isLoopTripCounter consumersAllPreLoss"
                ),
                _SHARDING: "getBatchAxis",
                _INTERNAL: "getDebugInfo",
            }
        ),
    },
    "Op": {
        "setup_": "call Op.setup()",
        "getSubgraphEquivId": "Tremula does no outlining",
        "inplacePriorityDefault": "Tremula's inplacing is its lowering's views",
        "getInplaceVariant": "Tremula's inplacing is its lowering's views",
        "growAliasModel": "Tremula has no PopART alias model",
        "fwdRegMap": "Tremula has no PopART region maps",
        "bwdRegMap": "Tremula has no PopART region maps",
        "getGradOps": "Tremula's gradients come from popxl.transforms.autodiff",
        **_each(
            {
                "an op's settings are popxl contexts (ipu, name_scope, pipeline_stage)": (
                    "getSettings getScope setScope inheritPlacementAttributes"
                ),
                _PLACEMENT: (
                    "getOptionalVGraphId getIntrospectionInVirtualGraphId "
                    "getIntrospectionOutVirtualGraphId getOptionalPipelineStage "
                    "getPipelineStage setPipelineStage hasPipelineStage "
                    "getOptionalExecutionPhase getExecutionPhase setExecutionPhase "
                    "hasExecutionPhase calcAutoVirtualGraphCost"
                ),
                _SHARDING: (
                    "getOptionalBatchSerializedPhase getBatchSerializedPhase "
                    "setBatchSerializedPhase hasBatchSerializedPhase getInBatchAxis "
                    "getOutBatchAxis canShard getShardReductionType getShardRescaleFactor "
                    "loopShard"
                ),
                "only ops that call graphs map their indices (CallOp, LoopOp ...)": (
                    "getSubgraphInputs getSubgraphOutputs"
                ),
                _OUTLINING: (
                    "isOutlineable getSubgraphValue getHighSubgraphValue getLowSubgraphValue"
                ),
                _ALIASES: (
                    "modifies uses aliases overwritesTensor hasAliasedModifiers inputUnmodifiable"
                ),
                _KINDS: (
                    "isElementWiseUnary isLossOp isIpuCopyOp isNorm "
                    "isGradientClippingOp copiesOptimizerTensors isConvertibleTo "
                    "isExcludedFromPattern hasSideEffect canRecompute requiresRandomSeed "
                    "getSeedInIndex isParentOf isChildOf"
                ),
                _INTERNAL: (
                    "finalizeDebugInfo setCalledSubgraphGradInfo getDebugInfo prettyNpOut clone"
                ),
                "ops made by popxl.ops record no OperatorIdentifier (those made by "
                "Graph.createOp_<X> do); read Op.opType()": ("opid"),
            }
        ),
    },
    "IfOp": {
        "opInToSubgraphInIndex": "an If op's two branches are mapped by ConditionalSiteInfo",
        "subgraphInToOpInIndex": "an If op's two branches are mapped by ConditionalSiteInfo",
    },
    "LoopOp": _each({"loop inputs and outputs are the body graph's": "removeLoopInput"}),
    "TopoCons": {},  # PopART's TopoCons bindings are all bound (topocons.py)
    "Session": {
        "getReport": "profiles come from session.engine (get_execution_profile)",
        "getSummaryReport": "profiles come from session.engine (get_execution_profile)",
        "getSerializedGraph": "Tremula serialises no Poplar graph",
        "compileAndExport": "Tremula exports no executables",
        "loadExecutableFromFile": "Tremula loads no executables",
        **_each(
            {
                "Tremula exports and loads no executables": (
                    "loadExecutableFromStream getExecutable updateEngineCache"
                ),
                "run and move data through popxl.Session": (
                    "run prepareDevice loadEngineAndConnectStreams "
                    "connectStream connectStreamToCallback connectHostFunction "
                    "buffersFromHost broadcastWeights copyFromRemoteBuffer "
                    "copyToRemoteBuffer modelToHost resetHostWeights updateOptimizerFromHost"
                ),
                "seeds are popxl variables (popxl.create_seeds)": (
                    "setRandomSeed getRandomSeed getRNGState setRNGState"
                ),
                "cycles come from popart sessions' getCycleCount or session.engine.run_cycles": (
                    "getCycleCount"
                ),
                _INTERNAL: "getInfo getIr getDevice getDeviceInfo",
            }
        ),
    },
}


def lookup(cls: type, name: str) -> NoReturn:
    """Raise for ``cls.name``: :class:`UnsupportedBindingError` if PopART binds it on ``cls``
    (or a base) but Tremula does not, else ``AttributeError``."""
    for klass in cls.__mro__:
        why = UNSUPPORTED.get(klass.__name__, {}).get(name)
        if why is not None:
            raise UnsupportedBindingError(
                f"popart._internal.ir.{klass.__name__}.{name} is not supported by Tremula: {why}"
            )
    raise AttributeError(f"'{cls.__name__}' object has no attribute '{name}'")


def unsupported_attr(obj: Any, name: str) -> Any:
    """``__getattr__`` of the binding classes."""
    if name.startswith("__"):
        raise AttributeError(name)
    return lookup(type(obj), name)
