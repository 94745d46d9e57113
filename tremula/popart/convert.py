"""From an ONNX graph to PopXL ops: :class:`OnnxGraph` reads a ``ModelProto`` (inputs,
initialisers, nodes, opsets, metadata) and :class:`Converter` walks its nodes in order,
calling each node's rule from :data:`tremula.popart.rules.ONNX_RULES` with a :class:`Node`.

Values are PopXL tensors of the graph being built, or NumPy arrays for values known on the
host (initialisers used as shapes, ``Constant`` nodes, shapes of tensors, and whatever the
rules fold from them); a NumPy value becomes a PopXL constant where a device op needs it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tremula import popxl
from tremula.errors import PopartException
from tremula.popart import onnxutil
from tremula.popart.types import onnx_to_numpy, popxl_dtype

_DEFAULT_VERSIONS = {"": 10, "ai.graphcore": 1}


@dataclass
class OnnxGraph:
    """What a session needs of an ONNX model."""

    model: Any
    opsets: dict[str, int]
    inputs: dict[str, tuple[np.dtype, tuple[Any, ...]]]  # data inputs: dtype, shape
    initializers: dict[str, np.ndarray]
    nodes: list[Any]
    outputs: list[str]
    meta: dict[str, str]
    consumers: dict[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def parse(cls, model: Any) -> OnnxGraph:
        graph = model.graph
        inits = {t.name: onnxutil.to_array(t) for t in graph.initializer}
        inputs = {}
        for vi in graph.input:
            if vi.name in inits:
                continue
            dtype = onnx_to_numpy(vi.type.tensor_type.elem_type, f"input {vi.name!r}")
            inputs[vi.name] = (dtype, onnxutil.value_shape(vi) or ())
        opsets = dict(_DEFAULT_VERSIONS)
        opsets.update(
            {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        )
        consumers: dict[str, list[Any]] = {}
        for node in graph.node:
            for name in onnxutil.node_reads(node):
                consumers.setdefault(name, []).append(node)
        return cls(
            model,
            opsets,
            inputs,
            inits,
            list(graph.node),
            [o.name for o in graph.output],
            onnxutil.metadata(model),
            consumers,
        )

    def ancestors(self, targets: Iterable[str]) -> set[str]:
        """Every tensor id the targets depend on (themselves included)."""
        producer = {o: n for n in self.nodes for o in n.output}
        seen: set[str] = set()
        todo = [t for t in targets if t]
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            node = producer.get(t)
            if node is not None:
                todo.extend(onnxutil.node_reads(node))
        return seen


class Node:
    """One ONNX node as a rule sees it."""

    __slots__ = ("_attrs", "cx", "domain", "op_type", "proto", "version")

    def __init__(self, cx: Converter, proto: Any) -> None:
        self.cx = cx
        self.proto = proto
        self.op_type = proto.op_type
        self.domain = "" if proto.domain == "ai.onnx" else proto.domain
        self.version = cx.opsets.get(self.domain, 1)
        self._attrs = {a.name: a for a in proto.attribute}

    @property
    def where(self) -> str:
        name = self.proto.name or (self.proto.output[0] if self.proto.output else "")
        return f"{self.op_type} node {name!r}"

    @property
    def training(self) -> bool:
        return self.cx.training

    def error(self, message: str) -> PopartException:
        return PopartException(f"{self.where}: {message}")

    # ---- attributes ----
    def attr(self, name: str, default: Any = None) -> Any:
        a = self._attrs.get(name)
        if a is None:
            return default
        value = onnxutil.onnx().helper.get_attribute_value(a)
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            return [v.decode() for v in value]
        if hasattr(value, "dims"):  # a TensorProto
            return onnxutil.to_array(value)
        return value

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    # ---- inputs ----
    @property
    def n_inputs(self) -> int:
        return len(self.proto.input)

    @property
    def n_outputs(self) -> int:
        return len(self.proto.output)

    def has(self, i: int) -> bool:
        return i < len(self.proto.input) and self.proto.input[i] != ""

    def value(self, i: int) -> Any:
        if not self.has(i):
            raise self.error(f"input {i} is missing")
        return self.cx.value(self.proto.input[i], self)

    def is_const(self, i: int) -> bool:
        return isinstance(self.value(i), np.ndarray)

    def tensor(self, i: int) -> popxl.Tensor:
        """Input ``i`` as a PopXL tensor (a host value becomes a constant)."""
        v = self.value(i)
        return self.cx.constant(self.proto.input[i], v) if isinstance(v, np.ndarray) else v

    def tensors(self) -> list[popxl.Tensor]:
        return [self.tensor(i) for i in range(self.n_inputs) if self.has(i)]

    def const(self, i: int, what: str = "") -> np.ndarray:
        """Input ``i``'s value on the host (shapes, axes, pads ...).

        Raises:
            PopartException: the value is computed on the device.
        """
        v = self.value(i)
        if not isinstance(v, np.ndarray):
            raise self.error(
                f"input {i} ({what or self.proto.input[i]!r}) must be known before the run "
                f"(an initializer or a constant), but it is computed by the model"
            )
        return v

    def ints(self, i: int, what: str = "") -> list[int]:
        return [int(x) for x in np.asarray(self.const(i, what)).reshape(-1)]

    def shape(self, i: int) -> tuple[int, ...]:
        return tuple(int(d) for d in np.shape(self.value(i)))

    def update(self, i: int, value: popxl.Tensor) -> None:
        """Replace the weight that is input ``i`` by ``value`` after the step (a batch
        norm's running statistics)."""
        self.cx.updates[self.proto.input[i]] = value

    def seed(self) -> popxl.Tensor:
        """A fresh seed for a random op."""
        return self.cx.next_seed(self)


class _Missing:
    """An output a rule did not produce (refused if something reads it)."""

    def __init__(self, node: Node, index: int) -> None:
        self.where, self.index = node.where, index


class Converter:
    """Converts ONNX nodes into the PopXL graph in context."""

    def __init__(self, graph: OnnxGraph, training: bool, values: dict[str, Any]) -> None:
        self.graph = graph
        self.opsets = graph.opsets
        self.training = training
        self.env: dict[str, Any] = dict(values)
        self.updates: dict[str, popxl.Tensor] = {}
        self._constants: dict[tuple[int, str], popxl.Tensor] = {}
        self._seed: popxl.Tensor | None = None

    def value(self, name: str, node: Node) -> Any:
        v = self.env.get(name)
        if v is None:
            raise node.error(f"input {name!r} is not produced by any node, input or initializer")
        if isinstance(v, _Missing):
            raise node.error(f"reads output {v.index} of {v.where}, which Tremula does not compute")
        return v

    def constant(self, name: str, value: np.ndarray) -> popxl.Tensor:
        """A PopXL constant of a host value (one per name and graph)."""
        graph = popxl.gcg()
        key = (id(graph), name)
        t = self._constants.get(key)
        if t is None:
            arr = np.asarray(value)
            t = popxl.constant(arr, popxl_dtype(_device_dtype(arr.dtype)))
            self._constants[key] = t
        return t

    def set_seed(self, seed: popxl.Tensor | None) -> None:
        self._seed = seed

    def next_seed(self, node: Node) -> popxl.Tensor:
        if self._seed is None:
            raise node.error("a random op needs a seed; none was provided")
        self._seed, out = popxl.ops.split_random_seed(self._seed)
        return out

    def run(self, nodes: Iterable[Any]) -> None:
        from tremula.popart.rules import ONNX_RULES

        for proto in nodes:
            node = Node(self, proto)
            rule = ONNX_RULES.get((node.domain, node.op_type))
            if rule is None:
                domain = node.domain or "ai.onnx"
                raise PopartException(
                    f"{node.where}: ONNX op type {domain}.{node.op_type} is not supported by "
                    f"Tremula's PopART (inputs {list(proto.input)}, outputs "
                    f"{list(proto.output)})"
                )
            outs = [np.asarray(o) if isinstance(o, np.generic) else o for o in rule(node)]
            for i, name in enumerate(proto.output):
                if name:
                    self.env[name] = outs[i] if i < len(outs) else _Missing(node, i)


def _device_dtype(dtype: np.dtype) -> np.dtype:
    """The device type of a host value: 64-bit values become 32-bit, as in PopART."""
    return _NARROW.get(np.dtype(dtype), np.dtype(dtype))


_NARROW = {
    np.dtype(np.int64): np.dtype(np.int32),
    np.dtype(np.float64): np.dtype(np.float32),
    np.dtype(np.uint64): np.dtype(np.uint32),
}
