"""PopART bindings that Tremula does not provide: calling one raises ``NotImplementedError``
naming the binding and the method, never an ``AttributeError`` from deep inside.

Names that PopART does not bind on a class stay ``AttributeError`` (``hasattr(op,
"getCalledGraph")`` is how programs ask an op whether it calls a graph).
"""

from __future__ import annotations

from typing import Any, NoReturn

#: binding class -> {method: why Tremula does not provide it}
UNSUPPORTED: dict[str, dict[str, str]] = {
    "Ir": {
        "logIr": "Tremula has no PopART IR log; print graphs with addons' print_schedule",
        "dotCheckpoint": "Tremula writes no dot checkpoints",
        "applyTransform": "PopART's C++ transforms do not exist in Tremula",
        "updateVertices": "Tremula keeps no PopART vertex state",
        "setIsPrepared": "a Tremula Ir is prepared by creating a Session",
        "serialise": "Tremula serialises no PopART IR",
        "removeIsolatedGraphs": "Tremula keeps every graph of an Ir",
    },
    "Graph": {
        "removeIsolatedTensors": "Tremula keeps the tensors of a graph (PopXL lists them)",
        "addConstInit": "add constants with popxl.constant",
        "addVarInit": "add variables with popxl.variable",
        "addStream": "add streams with popxl.h2d_stream / d2h_stream",
        "replaceTensor": "reconnect the consumers with Op.connectInTensor",
    },
    "Tensor": {
        "setTensorData": "write variables through Session.write_variables_data",
        "tensorData": "read variables through Session.get_tensor_data",
        "anyAlias": "Tremula has no PopART alias model",
        "getVirtualGraphIdAndTileSet": "read Tensor.ipu and Tensor.tile_set",
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
    },
    "IfOp": {
        "opInToSubgraphInIndex": "an If op's two branches are mapped by ConditionalSiteInfo",
        "subgraphInToOpInIndex": "an If op's two branches are mapped by ConditionalSiteInfo",
    },
    "Session": {
        "getReport": "profiles come from session.engine (get_execution_profile)",
        "getSummaryReport": "profiles come from session.engine (get_execution_profile)",
        "getSerializedGraph": "Tremula serialises no Poplar graph",
        "compileAndExport": "Tremula exports no executables",
        "loadExecutableFromFile": "Tremula loads no executables",
    },
}


def lookup(cls: type, name: str) -> NoReturn:
    """Raise for ``cls.name``: ``NotImplementedError`` if PopART binds it on ``cls`` (or a
    base) but Tremula does not, else ``AttributeError``."""
    for klass in cls.__mro__:
        why = UNSUPPORTED.get(klass.__name__, {}).get(name)
        if why is not None:
            raise NotImplementedError(
                f"popart._internal.ir.{klass.__name__}.{name} is not supported by Tremula: {why}"
            )
    raise AttributeError(f"'{cls.__name__}' object has no attribute '{name}'")


def unsupported_attr(obj: Any, name: str) -> Any:
    """``__getattr__`` of the binding classes."""
    if name.startswith("__"):
        raise AttributeError(name)
    return lookup(type(obj), name)
