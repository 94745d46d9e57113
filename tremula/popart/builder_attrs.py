"""The Builder's node attributes and scopes: name scopes, virtual graphs, pipeline stages,
execution phases, comm groups, recomputation, available memory proportion, partials type,
and reading / writing any attribute of the node that produces a tensor.

Scoped settings become attributes of every node added inside the scope (PopART's names:
``__ipu_number``, ``__pipeline_stage``, ``__execution_phase``, ``__collectiveCommGroup``,
``__schedule_priority`` ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tremula.errors import PopartException

_ATTR = {
    "virtualGraph": "__ipu_number",
    "pipelineStage": "__pipeline_stage",
    "executionPhase": "__execution_phase",
    "schedulePriority": "__schedule_priority",
    "recomputeOutputInBackwardPass": "__recompute_output_in_backward_pass",
    "outputTensorLocation": "__output_tensor_location",
}
_AMP = "__available_memory"
_PARTIALS = "__partials_type"


class _Scope:
    """``with builder.virtualGraph(1):`` (also usable as a plain call that sets an attribute
    on a tensor's node, see :meth:`NodeAttributes._scoped`)."""

    def __init__(self, owner: NodeAttributes, key: str, value: Any) -> None:
        self._owner, self._key, self._value = owner, key, value

    def __enter__(self) -> None:
        self._owner._scope_stack.append((self._key, self._value))

    def __exit__(self, *exc: Any) -> None:
        self._owner._scope_stack.pop()


class NodeAttributes:
    """Scopes and node attributes of a Builder (mixed into :class:`Builder`)."""

    _producer: dict[str, Any]

    def __init__(self) -> None:
        self._names: list[str] = []
        self._scope_stack: list[tuple[str, Any]] = []

    # ---- scopes ----
    @contextmanager
    def nameScope(self, name: str) -> Iterator[None]:
        """Prefix the ids made inside with ``name/``."""
        self._names.append(str(name))
        try:
            yield
        finally:
            self._names.pop()

    def getNameScope(self, name: str = "") -> str:
        return "".join(f"{n}/" for n in self._names) + name

    def _scope_attributes(self) -> dict[str, Any]:
        return {key: value for key, value in self._scope_stack}

    @property
    def _comm_scope(self) -> tuple[int, int] | None:
        for key, value in reversed(self._scope_stack):
            if key == "__collectiveCommGroup":
                return value
        return None

    def _scoped(self, method: str, args: tuple[Any, ...]) -> Any:
        """One argument: a scope; two (tensor id(s), value): set the attribute now."""
        key = _ATTR[method]
        if len(args) == 1:
            return _Scope(self, key, _value(args[0]))
        if len(args) == 2:
            self.addNodeAttribute(key, _value(args[1]), _ids(args[0]))
            return None
        raise TypeError(f"Builder.{method}: expected (value) or (tensorId, value)")

    def virtualGraph(self, *args: Any) -> Any:
        """``with builder.virtualGraph(ipu):`` or ``builder.virtualGraph(tensorId, ipu)``
        (accepted: every op runs on the replica's IPUs)."""
        return self._scoped("virtualGraph", args)

    def pipelineStage(self, *args: Any) -> Any:
        """Accepted: a pipeline stage attribute (pipelining does not change the numbers)."""
        return self._scoped("pipelineStage", args)

    def executionPhase(self, *args: Any) -> Any:
        return self._scoped("executionPhase", args)

    def schedulePriority(self, *args: Any) -> Any:
        return self._scoped("schedulePriority", args)

    def recomputeOutputInBackwardPass(self, nodeOutputNames: Any, value: Any = 1) -> None:
        self.addNodeAttribute(
            _ATTR["recomputeOutputInBackwardPass"], int(value), _ids(nodeOutputNames)
        )

    def commGroup(self, type: Any = 0, size: int = 0) -> _Scope:
        """``with builder.commGroup(type, size):``: collectives inside use that group."""
        return _Scope(self, "__collectiveCommGroup", [int(type), int(size)])

    def outlineAttributes(self, attributes: dict[str, str]) -> _Scope:
        return _Scope(self, "__outline", [f"{k}:{v}" for k, v in attributes.items()])

    # ---- per-node settings ----
    def setAvailableMemoryProportion(
        self, nodeOutputName: Any, availableMemoryProportion: float
    ) -> None:
        """Set the proportion of tile memory a matmul or convolution may use for temporary
        data.

        Raises:
            PopartException: a proportion outside (0, 1].
        """
        p = float(availableMemoryProportion)
        if not 0.0 < p <= 1.0:
            raise PopartException("availableMemoryProportion must be in (0,1]")
        self.addNodeAttribute(_AMP, p, _ids(nodeOutputName))

    def setPartialsType(self, nodeOutputName: str, partialsType: str) -> None:
        self.addNodeAttribute(_PARTIALS, str(partialsType), _ids(nodeOutputName))

    def getPartialsType(self, nodeOutputName: str) -> str:
        return self._get(_PARTIALS, nodeOutputName, "getPartialsType")

    def setSerializeMatMul(
        self, nodeOutputNames: Any, mode: str, factor: int = 0, keep_precision: bool = False
    ) -> None:
        ids = _ids(nodeOutputNames)
        self.addNodeAttribute("__serialize_matmul_mode", str(mode), ids)
        self.addNodeAttribute("__serialize_matmul_factor", int(factor), ids)
        self.addNodeAttribute("__serialize_matmul_precision", int(keep_precision), ids)

    def setInplacePreferences(self, nodeOutputName: str, prefs: dict[str, float]) -> None:
        """Accepted (inplacing does not change the numbers)."""

    # ---- any attribute ----
    def _node(self, tid: str, what: str) -> Any:
        node = self._producer.get(tid)
        if node is None:
            raise PopartException(f"{what}: no node produces tensor {tid!r}")
        return node

    def _nodes_of(self, ids: Iterable[str], what: str) -> list[Any]:
        nodes: list[Any] = []
        for tid in ids:
            node = self._node(tid, what)
            if all(n is not node for n in nodes):
                nodes.append(node)
        if len(nodes) != 1:
            raise PopartException(
                f"{what}: the tensors {sorted(ids)} must be outputs of one node (found "
                f"{len(nodes)})"
            )
        return nodes

    def addNodeAttribute(
        self, attributeName: str, attributeValue: Any, nodeOutputNames: Any
    ) -> None:
        """Set an attribute of the node whose outputs are ``nodeOutputNames``."""
        from onnx import helper

        (node,) = self._nodes_of(_ids(nodeOutputNames), "addNodeAttribute")
        for i, a in enumerate(node.attribute):
            if a.name == attributeName:
                del node.attribute[i]
                break
        node.attribute.append(helper.make_attribute(attributeName, attributeValue))

    def _get(self, name: str, tid: Any, what: str) -> Any:
        from onnx import helper

        (node,) = self._nodes_of(_ids(tid), what)
        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        raise PopartException(f"{what}: the node of {sorted(_ids(tid))} has no attribute {name!r}")

    def nodeHasAttribute(self, attributeName: str, nodeOutputNames: Any) -> bool:
        (node,) = self._nodes_of(_ids(nodeOutputNames), "nodeHasAttribute")
        return any(a.name == attributeName for a in node.attribute)

    def getAllNodeAttributeNames(self, nodeOutputNames: Any) -> list[str]:
        (node,) = self._nodes_of(_ids(nodeOutputNames), "getAllNodeAttributeNames")
        return [a.name for a in node.attribute]

    def removeNodeAttribute(self, attributeName: str, nodeOutputNames: Any) -> None:
        (node,) = self._nodes_of(_ids(nodeOutputNames), "removeNodeAttribute")
        for i, a in enumerate(node.attribute):
            if a.name == attributeName:
                del node.attribute[i]
                return
        raise PopartException(f"removeNodeAttribute: no attribute {attributeName!r}")

    def getInt64NodeAttribute(self, name: str, ids: Any) -> int:
        return int(self._get(name, ids, "getInt64NodeAttribute"))

    def getInt64VectorNodeAttribute(self, name: str, ids: Any) -> list[int]:
        return [int(v) for v in self._get(name, ids, "getInt64VectorNodeAttribute")]

    def getFloatNodeAttribute(self, name: str, ids: Any) -> float:
        return float(self._get(name, ids, "getFloatNodeAttribute"))

    def getFloatVectorNodeAttribute(self, name: str, ids: Any) -> list[float]:
        return [float(v) for v in self._get(name, ids, "getFloatVectorNodeAttribute")]

    def getStringNodeAttribute(self, name: str, ids: Any) -> str:
        value = self._get(name, ids, "getStringNodeAttribute")
        return value.decode() if isinstance(value, bytes) else str(value)

    def getStringVectorNodeAttribute(self, name: str, ids: Any) -> list[str]:
        return [
            v.decode() if isinstance(v, bytes) else str(v)
            for v in self._get(name, ids, "getStringVectorNodeAttribute")
        ]

    def getBoolNodeAttribute(self, name: str, ids: Any) -> bool:
        return bool(self._get(name, ids, "getBoolNodeAttribute"))

    def getVirtualGraph(self, nodeOutputNames: Any = None) -> int:
        return self._current_or_node("__ipu_number", nodeOutputNames, "getVirtualGraph")

    def getPipelineStage(self, nodeOutputNames: Any = None) -> int:
        return self._current_or_node("__pipeline_stage", nodeOutputNames, "getPipelineStage")

    def getExecutionPhase(self, nodeOutputNames: Any = None) -> int:
        return self._current_or_node("__execution_phase", nodeOutputNames, "getExecutionPhase")

    def hasVirtualGraph(self, nodeOutputNames: Any = None) -> bool:
        return self._has_current_or_node("__ipu_number", nodeOutputNames)

    def hasPipelineStage(self, nodeOutputNames: Any = None) -> bool:
        return self._has_current_or_node("__pipeline_stage", nodeOutputNames)

    def hasExecutionPhase(self, nodeOutputNames: Any = None) -> bool:
        return self._has_current_or_node("__execution_phase", nodeOutputNames)

    def _current_or_node(self, key: str, ids: Any, what: str) -> int:
        if ids is not None:
            return int(self._get(key, ids, what))
        for k, v in reversed(self._scope_stack):
            if k == key:
                return int(v)
        raise PopartException(f"{what}: no {key} scope is open")

    def _has_current_or_node(self, key: str, ids: Any) -> bool:
        if ids is not None:
            return self.nodeHasAttribute(key, ids)
        return any(k == key for k, _ in self._scope_stack)


def _ids(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _value(v: Any) -> Any:
    return int(v) if not isinstance(v, (list, tuple, str)) else v
