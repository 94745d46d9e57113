"""PopART's ``Builder``: writes a real ONNX ``ModelProto`` with PopART's tensor ids, domains,
attributes and metadata (a weight's ``VariableSettings`` travel in the model's metadata).

Tensor ids follow PopART's rule: a base name (the ``debugContext``, or ``input``,
``init_input``, ``<OpType>:<i>``), then ``base/1``, ``base/2`` ... on collision, prefixed by
the name scopes joined with ``/``. Initialisers are written as ``raw_data`` (which PopART
reads too). Node attributes and scopes (virtual graph, pipeline stage, comm group, ...) are
in :mod:`tremula.popart.builder_attrs`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np

from tremula.errors import PopartException
from tremula.popart import onnxutil
from tremula.popart.builder_attrs import NodeAttributes
from tremula.popart.opsets import AI_ONNX_OPSETS, AiGraphcoreOpset1, OnnxOpSignature, Opset
from tremula.popart.types import TensorInfo, type_row
from tremula.popxl._ir.core.enums import VariableRetrievalMode
from tremula.popxl._ir.core.options import InputSettings
from tremula.popxl._ir.core.variable_settings import VariableSettings

__all__ = ["Builder"]

_DEFAULT_ONNX = 10
_GC = "ai.graphcore"
_UNSUPPORTED_INIT = {"DOUBLE", "COMPLEX64", "COMPLEX128", "STRING", "UNDEFINED"}
_REDUCTIONS = {0: "Sum", 1: "Mean", 2: "None"}


class Builder(NodeAttributes):
    """Builds an ONNX model the PopART way.

    Args:
        modelProtoOrFilename: an existing model (serialized bytes or a file) to extend.
        opsets: ``{"ai.onnx": 9, "ai.graphcore": 1}``: the versions of the domains.
        builderCore: accepted for compatibility.

    Raises:
        PopartException: the onnx package is missing, or the model cannot be read.
    """

    def __init__(
        self,
        modelProtoOrFilename: Any = None,
        opsets: dict[str, int] | None = None,
        builderCore: Any = None,
    ) -> None:
        self._onnx = onnxutil.onnx()
        super().__init__()
        self._nodes: list[Any] = []
        self._inputs: list[Any] = []  # ValueInfoProto, initializers included
        self._initializers: dict[str, Any] = {}  # id -> TensorProto
        self._outputs: list[str] = []
        self._meta: list[tuple[str, str]] = []
        self._counters: dict[str, int] = {}
        self._infos: dict[str, TensorInfo] = {}  # inputs and initializers (full shapes)
        self._producer: dict[str, Any] = {}  # op output id -> node
        self._versions: dict[str, int] = {}
        self._imports: dict[str, int] = {}  # domain -> version, once a node uses it
        self._debug_ids = itertools.count(1)
        self._inferred: tuple[int, dict[str, Any]] = (-1, {})
        self._graph_name = "BuilderGraph"
        self._parent: Builder | None = None  # the enclosing Builder of a subgraph Builder
        self._outer: set[str] = set()  # its tensors this subgraph reads by name
        for domain, version in (opsets or {}).items():
            self._versions["" if domain in ("ai.onnx", "") else domain] = int(version)
        if modelProtoOrFilename is not None:
            self._load(onnxutil.load_model(modelProtoOrFilename, "Builder"))

    # ---- opsets ----
    def _opset(self, domain: str, version: int) -> Opset:
        name = "ai.onnx" if domain == "" else domain
        have = self._versions.setdefault(domain, version)
        if have != version:
            label = "aiOnnxOpset" if domain == "" else "aiGraphcoreOpset"
            raise RuntimeError(
                f"Invalid opset '{label}{version}' selected. Opset for domain {name} already "
                f"defined as {have}"
            )
        return AI_ONNX_OPSETS[version](self) if domain == "" else AiGraphcoreOpset1(self)

    @property
    def aiOnnx(self) -> Opset:
        """The ai.onnx ops at the version in use (default 10)."""
        return self._opset("", self._versions.get("", _DEFAULT_ONNX))

    @property
    def aiGraphcore(self) -> Opset:
        return self._opset(_GC, 1)

    @property
    def aiGraphcoreOpset1(self) -> Opset:
        return self._opset(_GC, 1)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("aiOnnxOpset") and name[11:].isdigit():
            version = int(name[11:])
            if version not in AI_ONNX_OPSETS:
                raise AttributeError(
                    f"Builder: {name} is not offered (ai.onnx versions "
                    f"{min(AI_ONNX_OPSETS)}..{max(AI_ONNX_OPSETS)})"
                )
            return self._opset("", version)
        raise AttributeError(f"'Builder' object has no attribute {name!r}")

    # ---- ids ----
    def _next_id(self, base: str) -> str:
        name = self.getNameScope() + base
        n = self._counters.get(name)
        if n is None and not self._taken(name):
            self._counters[name] = 0
            return name
        n = 0 if n is None else n
        while True:
            n += 1
            candidate = f"{name}/{n}"
            if not self._taken(candidate):
                self._counters[name] = n
                return candidate

    def _has(self, tid: str) -> bool:
        """``tid`` names a tensor here: an input, an initializer, an op output, or a tensor
        of an enclosing Builder that a subgraph Builder took (``addInputTensorFromParentGraph``)."""
        return tid in self._infos or tid in self._producer or tid in self._outer

    def _taken(self, tid: str) -> bool:
        """``tid`` is used here or in an enclosing Builder (ONNX names are unique in scope)."""
        b: Builder | None = self
        while b is not None:
            if tid in b._infos or tid in b._producer:
                return True
            b = b._parent
        return False

    def _check_id(self, tid: Any, what: str) -> str:
        if not isinstance(tid, str) or not self._has(tid):
            raise PopartException(
                f"{what}: {tid!r} is not a tensor of this Builder (its tensors: inputs "
                f"{self.getInputTensorIds()}, and the outputs of its ops)"
            )
        return tid

    # ---- tensors ----
    def addInputTensor(self, *args: Any, **kwargs: Any) -> str:
        """Add a graph input: ``(TensorInfo, debugContext="")``, ``(TensorInfo,
        InputSettings, debugContext="")``, ``(dataType, shape, debugContext="")`` or
        ``(dataType, shape, InputSettings, debugContext="")``; returns its id."""
        args = list(args)  # type: ignore[assignment]
        if args and isinstance(args[0], TensorInfo):
            info = args.pop(0)  # type: ignore[attr-defined]
        elif len(args) >= 2 or "shape" in kwargs:
            dtype = args.pop(0) if args else kwargs.pop("dataType")  # type: ignore[attr-defined]
            shape = args.pop(0) if args else kwargs.pop("shape")  # type: ignore[attr-defined]
            info = TensorInfo(dtype, shape)
        else:
            info = kwargs.pop("tensorInfo", None)
            if not isinstance(info, TensorInfo):
                raise TypeError("addInputTensor: give a TensorInfo, or a data type and a shape")
        settings = args.pop(0) if args and isinstance(args[0], InputSettings) else None  # type: ignore[attr-defined]
        settings = kwargs.pop("settings", settings) or InputSettings()
        debug = str(args.pop(0) if args else kwargs.pop("debugContext", ""))  # type: ignore[attr-defined]
        if args or kwargs:
            raise TypeError(f"addInputTensor: unexpected arguments {args or sorted(kwargs)}")
        tid = self._next_id(debug or "input")
        self._add_input(tid, info)
        self._meta += [
            (f"__tile_set/{tid}", str(int(settings.tileSet))),
            (f"__exchange_strategy/{tid}", str(int(settings.exchangeStrategy))),
            (f"__replicated_stream_mode/{tid}", str(int(settings.replicatedStreamMode))),
        ]
        return tid

    def _add_input(self, tid: str, info: TensorInfo) -> None:
        helper = self._onnx.helper
        vi = helper.make_tensor_value_info(tid, type_row(info.data_type()).onnx, info.shape())
        self._inputs.append(vi)
        self._infos[tid] = info
        self._meta.append((f"__debug_id/input/{tid}", str(next(self._debug_ids))))

    def addInitializedInputTensor(self, initVal: Any, *args: Any, **kwargs: Any) -> str:
        """Add a weight initialised with ``initVal``: ``(initVal, debugContext="")`` or
        ``(initVal, variableSettings, debugContext="")``. With a grouping of G > 1 groups
        the array has a leading axis of G rows (checked when a session is made).

        Raises:
            PopartException: float64 or another type PopART cannot initialise; settings
                made from a stride and group size (not serialisable).
        """
        args = list(args)  # type: ignore[assignment]
        settings = args.pop(0) if args and isinstance(args[0], VariableSettings) else None  # type: ignore[attr-defined]
        settings = kwargs.pop("variableSettings", settings) or VariableSettings()
        debug = str(args.pop(0) if args else kwargs.pop("debugContext", ""))  # type: ignore[attr-defined]
        if args or kwargs:
            raise TypeError(f"addInitializedInputTensor: unexpected arguments {args or kwargs}")
        array = np.ascontiguousarray(initVal)
        info = TensorInfo(array)
        if info.data_type() in _UNSUPPORTED_INIT:
            raise PopartException(f"Unsupported data type for initialized data ({info})")
        comm = settings.getSharedVariableDomain()  # stride-form settings are refused here
        tid = self._next_id(debug or "init_input")
        self._add_input(tid, info)
        self._initializers[tid] = onnxutil.from_array(array, tid)
        mode = settings.getRetrievalMode()
        self._meta += [
            (f"__comm_group_type/{tid}", str(int(comm.type))),
            (f"__comm_group_size/{tid}", str(comm.replica_group_size)),
            (f"__variable_settings/{tid}", str(int(VariableRetrievalMode(mode)))),
        ]
        return tid

    def addOutputTensor(self, outputName: str) -> None:
        """Mark a tensor as a graph output (what a session returns is set by anchors)."""
        self._outputs.append(self._check_id(outputName, "addOutputTensor"))

    # ---- nodes (called by the opset methods) ----
    def _add_node(
        self,
        opset: Opset,
        op: OnnxOpSignature,
        inputs: list[str],
        values: dict[str, Any],
        n_out: int,
        debug: str,
    ) -> list[str]:
        name = op.onnx
        for i, tid in enumerate(inputs):
            if tid != "":
                self._check_id(tid, f"{name} input {i}")
        attrs = self._attributes(op, values)
        attrs.update(self._scope_attributes())
        attrs["__debug_info_id"] = next(self._debug_ids)
        outputs = [self._next_id(f"{debug or name}:{i}") for i in range(n_out)]
        node = self._onnx.helper.make_node(
            name, inputs, outputs, name=debug or "", domain=op.domain or None, **attrs
        )
        self._nodes.append(node)
        for out in outputs:
            self._producer[out] = node
        self._imports.setdefault(opset.domain, opset.version)
        return outputs

    def _attributes(self, op: OnnxOpSignature, values: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for a in op.attrs:
            value = values.get(a.name)
            if value is None or (a.kind in ("ints", "floats", "strings") and len(value) == 0):
                if a.kind == "commgroup" and self._comm_scope is not None:
                    out[a.onnx or a.name] = list(self._comm_scope)
                continue
            out[a.onnx or a.name] = _ATTR_KINDS[a.kind](value)  # type: ignore[operator]
        return out

    # ---- the model ----
    def _model(self, with_outputs: bool = True) -> Any:
        ox = self._onnx
        helper = ox.helper
        outputs = []
        if with_outputs and self._outputs:
            inferred = self._infer()
            outputs = [inferred.get(t) or ox.ValueInfoProto(name=t) for t in self._outputs]
        graph = helper.make_graph(
            self._nodes,
            self._graph_name,
            self._inputs,
            outputs,
            initializer=list(self._initializers.values()),
        )
        onnx_version = self._imports.get("", self._versions.get("", _DEFAULT_ONNX))
        imports = [helper.make_opsetid(d, v) for d, v in self._imports.items()]
        model = helper.make_model(graph, opset_imports=imports, producer_name="popart")
        model.ir_version = 3 if onnx_version <= 8 else 4
        for key, value in self._meta:
            model.metadata_props.add(key=key, value=value)
        return model

    def getModelProto(self) -> bytes:
        """The serialized ONNX ``ModelProto``."""
        return self._model().SerializeToString()

    def saveModelProto(self, filename: str) -> None:
        with open(filename, "wb") as f:
            f.write(self.getModelProto())

    def embedReplicationFactor(self, replicationFactor: int) -> None:
        """Write ``__replicationFactor`` into the model's metadata, so a checkpoint's grouped
        initialisers can be read back without the session that wrote them."""
        self._meta.append(("__replicationFactor", str(int(replicationFactor))))

    def _infer(self) -> dict[str, Any]:
        """ValueInfo of every tensor ONNX shape inference (and the Graphcore rules) can
        type, cached until a node is added."""
        if self._inferred[0] == len(self._nodes):
            return self._inferred[1]
        from tremula.popart.shapes import infer_value_infos

        infos = infer_value_infos(self._model(with_outputs=False), self._infos)
        self._inferred = (len(self._nodes), infos)
        return infos

    # ---- queries ----
    def getInputTensorIds(self) -> list[str]:
        return [vi.name for vi in self._inputs]

    def getOutputTensorIds(self) -> list[str]:
        return list(self._outputs)

    def getValueTensorIds(self) -> list[str]:
        return [t for t in self._infer() if t not in self._infos]

    def getTrainableTensorIds(self) -> list[str]:
        return [t for t in self._initializers if self._infos[t].data_type() in ("FLOAT", "FLOAT16")]

    def isInitializer(self, id: str) -> bool:
        return id in self._initializers

    def getTensorShape(self, id: str) -> list[int]:
        """The shape of a tensor: an initialiser's full host shape (with the group axis),
        an op output's from shape inference.

        Raises:
            PopartException: an unknown id, or a tensor whose shape cannot be inferred.
        """
        return self._tensor_info(id, "getTensorShape").shape()

    def getTensorDtypeString(self, id: str) -> str:
        return self._tensor_info(id, "getTensorDtypeString").data_type_lcase()

    def _tensor_info(self, tid: str, what: str) -> TensorInfo:
        self._check_id(tid, what)
        if tid in self._infos:
            return self._infos[tid]
        vi = self._infer().get(tid)
        shape = onnxutil.value_shape(vi) if vi is not None else None
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise PopartException(f"{what}: the shape of {tid!r} cannot be inferred")
        return TensorInfo(onnxutil.onnx_elem_name(vi.type.tensor_type.elem_type), shape)  # type: ignore[arg-type, union-attr]

    def reshape_const(
        self, aiOnnx: Opset, args: list[str], shape: Iterable[int], debugContext: str = ""
    ) -> str:
        """Reshape ``args[0]`` to ``shape`` (an int64 Constant and a Reshape)."""
        const = aiOnnx.constant(np.asarray(list(shape), dtype=np.int64), debugContext)  # type: ignore[attr-defined]
        return aiOnnx.reshape([args[0], const], debugContext)  # type: ignore[attr-defined]

    # ---- subgraphs (If's branches, Loop's body, call's callee) ----
    def createSubgraphBuilder(self) -> Builder:
        """A Builder for a subgraph of this one: pass it as ``logical_if``'s branches,
        ``loop``'s body or ``aiGraphcore.call``'s callee. It shares this Builder's opsets
        and names (its ids never shadow this Builder's)."""
        child = Builder()
        child._parent, child._versions, child._imports = self, self._versions, self._imports
        child._debug_ids = self._debug_ids
        child._graph_name = f"{self._graph_name}_subgraph{next(self._debug_ids)}"
        return child

    def setGraphName(self, name: str) -> None:
        self._graph_name = str(name)

    def addInputTensorFromParentGraph(self, tensorId: str) -> None:
        """Let this subgraph read ``tensorId`` of an enclosing Builder by name (ONNX's
        outer-scope reference; it adds no input).

        Raises:
            PopartException: no enclosing Builder has that tensor.
        """
        b = self._parent
        while b is not None and not b._has(tensorId):
            b = b._parent
        if b is None:
            raise PopartException(
                f"addInputTensorFromParentGraph: {tensorId!r} is not a tensor of an enclosing "
                f"Builder"
            )
        self._outer.add(tensorId)

    def addUntypedInputTensor(self, debugContext: str = "") -> str:
        """Add a subgraph input of no declared type (a Loop body's condition and carried
        values); returns its id."""
        tid = self._next_id(str(debugContext) or "input")
        self._inputs.append(self._onnx.ValueInfoProto(name=tid))
        self._infos[tid] = TensorInfo("FLOAT", [])  # a placeholder: the id is taken
        return tid

    def _graph(self) -> Any:
        """This subgraph Builder's ``GraphProto``."""
        return self._model().graph

    # ---- loading ----
    def _load(self, model: Any) -> None:
        graph = model.graph
        self._graph_name = graph.name or self._graph_name
        self._nodes = list(graph.node)
        self._inputs = list(graph.input)
        self._initializers = {t.name: t for t in graph.initializer}
        self._outputs = [o.name for o in graph.output]
        self._meta = [(p.key, p.value) for p in model.metadata_props]
        for op in model.opset_import:
            self._imports[op.domain] = op.version
            self._versions.setdefault(op.domain, op.version)
        for vi in graph.input:
            shape = onnxutil.value_shape(vi) or ()
            name = onnxutil.onnx_elem_name(vi.type.tensor_type.elem_type)
            self._infos[vi.name] = TensorInfo(name, [d if isinstance(d, int) else 1 for d in shape])
        for node in self._nodes:
            for out in node.output:
                self._producer[out] = node


def _ints(value: Any) -> list[int]:
    return [int(v) for v in value]


_ATTR_KINDS = {
    "i": int,
    "f": float,
    "s": str,
    "ints": _ints,
    "floats": lambda v: [float(x) for x in v],
    "strings": lambda v: [str(x) for x in v],
    "dtype": lambda v: type_row(v).onnx,
    "reduction": lambda v: _REDUCTIONS[int(v)],
    "collective": int,
    "commgroup": lambda v: [int(v.type), int(v.replica_group_size)],
    "tensor": lambda v: onnxutil.from_array(np.asarray(v), ""),
    "graph": lambda v: v._graph(),
}
