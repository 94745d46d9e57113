"""Building an IR through the bindings, as PopART's binding tests and PopXL's own op
functions do: ``Graph.addActGrad`` / ``addVarInit`` / ``addConstInit`` / ``addStream`` /
``addInput`` / ``markAsInput`` / ``removeInput``, the graph's ``Tensors`` and the op
factories ``Graph.createOp_<X>Op(opid, settings)`` and ``Graph.createConnectedOp_<X>Op(ins,
outs, opid, settings)``, one pair per op class of the registry (``op/classes.py``).

What is built is the popxl IR itself (variables are popxl variables, a main-graph stream
is a popxl host-to-device stream), so a Session runs it. An op factory takes what PopART's
constructor takes: the opid, the settings and the op's attributes, mapped onto Tremula's op
attributes where ``constructors.py`` has the class (an axis, a shape, a callee graph, ...);
attributes of other classes are refused, naming the op and the popxl function that makes
it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tremula.errors import PopartException, UnsupportedBindingError
from tremula.popxl._ir.basics import OperatorIdentifier, Scope, Settings, graph_scope
from tremula.popxl.tensor import Constant, TensorSpec, Variable
from tremula.popxl.tensor import Tensor as XlTensor

if TYPE_CHECKING:
    from tremula.popxl._ir.tensor import Tensor, TensorInfo, TensorType
    from tremula.popxl.graph import Graph as XlGraph


def _free_id(graph: XlGraph, tensor_id: Any) -> str:
    tid = builtins.str(tensor_id)
    if tid in graph._tensors:
        raise PopartException(f"Tensor::add(Tensor*) - Tensor {tid} already in Tensors")
    return tid


def _spec(info: TensorInfo, what: str) -> TensorSpec:
    from tremula.popxl._ir.tensor import TensorInfo

    if not isinstance(info, TensorInfo):
        raise TypeError(f"{what}: expected a TensorInfo, got {type(info).__name__}")
    if info._dtype is None:
        raise PopartException(f"{what}: the TensorInfo has no data type (UNDEFINED)")
    return TensorSpec(tuple(info.shape()), info._dtype, tuple(info.metaShape()))


def _host_array(info: TensorInfo, data: Any, tensor_id: str) -> np.ndarray:
    """The host data of a tensor made with ``info``: ``data`` in the info's type and shape."""
    spec = _spec(info, f"tensor {tensor_id!r}")
    arr = np.asarray(data)
    if arr.size != int(np.prod(spec.shape, dtype=np.int64)):
        raise PopartException(
            f"Tensor {tensor_id!r}: {arr.size} elements of data for a TensorInfo of shape "
            f"{list(spec.shape)}"
        )
    # (np.ascontiguousarray would give a scalar a dimension)
    return np.array(arr.astype(spec.dtype.as_numpy()).reshape(spec.shape), order="C")


def set_tensor_type(t: XlTensor, tensor_type: TensorType) -> None:
    """Give ``t`` the PopART tensor type the bindings report (``Tensor.setTensorType``,
    tensors made with ``_ir.Tensor(id, type, graph)``)."""
    t._pb_tensor_type = tensor_type  # type: ignore[attr-defined]


class Tensors:
    """PopART's ``Tensors`` of a graph (``Graph.getTensors()``, ``_ir.Tensors(graph)``)."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph  # the binding Graph
        self._g: XlGraph = graph._g

    def get(self, tensorId: str) -> Tensor:
        return cast("Tensor", self._graph.getTensor(tensorId))

    def contains(self, tensorId: str, scope: Scope | None = None) -> bool:
        if scope is None:
            return builtins.str(tensorId) in self._g._tensors
        return self.find(tensorId, scope) != ""

    def find(self, tensorId: str, scope: Scope) -> str:
        """The id of ``tensorId`` in ``scope`` or the nearest enclosing scope that has it
        (PopART's ``Tensors::find``), ``""`` if none has."""
        names = list(scope._names)
        while True:
            candidate = "/".join([*names, builtins.str(tensorId)])
            if candidate in self._g._tensors:
                return candidate
            if not names:
                return ""
            names.pop()

    def n(self) -> int:
        return len(self._g._tensors)

    def getAllTensorIds(self) -> list[str]:
        return list(self._g._tensors)

    def getAll(self) -> list[Tensor]:
        """Every tensor of the graph, sorted by id (PopART's ``Tensors::getAll``, what
        PopXL's ``Graph.tensors`` lists)."""
        from tremula.popxl._ir.tensor import tensor_handle

        return [tensor_handle(self._g._tensors[tid]) for tid in sorted(self._g._tensors)]

    def getIds(self, tensorType: TensorType) -> list[str]:
        return [t.id for t in self.getOfType(tensorType)]

    def getOfType(self, tensorType: TensorType | list[TensorType]) -> list[Tensor]:
        """The tensors of a type (or of any of a list of types), in the graph's order."""
        from tremula.popxl._ir.tensor import tensor_handle

        wanted = set(tensorType) if isinstance(tensorType, (list, tuple, set)) else {tensorType}
        views = [tensor_handle(t) for t in self._g._tensors.values()]
        return [v for v in views if v.tensorType() in wanted]

    def getNoProducerIds(self) -> list[str]:
        return [t.id for t in self._g._tensors.values() if t._producer is None]

    def remove(self, tensorId: str) -> None:
        """Remove a tensor no op reads or writes and that is no graph input or output.

        Raises:
            popart_exception: no such tensor, or it is still in use (naming what uses it).
        """
        t = self.get(tensorId)._t
        g = self._g
        users = [op for op in g._ops if any(u is t for u in (*op.inputs, *op.outputs))]
        ends = [u for u in (*g._inputs, *g._outputs) if u is t]
        if users or ends:
            raise PopartException(
                f"Tensors::remove: {t.id!r} is still used ({users or 'graph input/output'})"
            )
        del g._tensors[t.id]

    def addActGrad(self, tensorId: str, debugContext: Any = None) -> None:
        self._graph.addActGrad(tensorId, debugContext)

    def addVarInit(self, tensorId: str, info: Any, data: Any, debugContext: Any = None) -> None:
        self._graph.addVarInit(tensorId, info, data, debugContext)

    def addConstInit(self, tensorId: str, info: Any, data: Any, debugContext: Any = None) -> None:
        self._graph.addConstInit(tensorId, info, data, debugContext)

    def addStream(self, tensorId: str, info: Any, debugContext: Any = None) -> None:
        self._graph.addStream(tensorId, info, debugContext)

    def __len__(self) -> int:
        return self.n()


class GraphBuilding:
    """The building methods of ``popart._internal.ir.Graph`` (mixed into the Graph view)."""

    _g: XlGraph

    if TYPE_CHECKING:

        def getTensor(self, tensorId: str) -> Tensor: ...

        def getGraphString(self) -> str: ...

        def _check_uncalled(self, what: str) -> None: ...

    def _add(self, t: XlTensor) -> None:
        self._g._add_tensor(t)

    def addActGrad(self, tensorId: str, debugContext: Any = None) -> None:
        """Add an activation (or gradient) tensor with no producer yet; its ``info`` is set
        by ``tensor.info = ...`` or by the op that comes to produce it (``setup()``)."""
        from tremula.popxl._ir.op.edit import new_tensor

        new_tensor(self._g, _free_id(self._g, tensorId), None)

    def addVarInit(self, tensorId: str, info: TensorInfo, data: Any, debugContext: Any = None):
        """Add a variable initialised from ``data`` (a popxl ``Variable``, in the main
        graph: Tremula holds variables there only, as popxl.variable does)."""
        g = self._g
        tid = _free_id(g, tensorId)
        if g is not g.ir.main_graph:
            raise PopartException(
                f"addVarInit({tid!r}): Tremula holds variables in the main graph only "
                f"(not {self.getGraphString()})"
            )
        arr = _host_array(info, data, tid)
        spec = _spec(info, "addVarInit")
        rg = g.ir.replica_grouping()
        self._add(Variable._create_variable(g, tid, spec, arr, rg, "one_per_group"))

    def addConstInit(self, tensorId: str, info: TensorInfo, data: Any, debugContext: Any = None):
        """Add a constant holding ``data`` (in the info's type and shape)."""
        g = self._g
        tid = _free_id(g, tensorId)
        arr = _host_array(info, data, tid)
        self._add(Constant._create_constant(g, tid, _spec(info, tid), arr))

    def addStream(self, tensorId: str, info: TensorInfo, debugContext: Any = None) -> None:
        """Add the tensor of a host-to-device stream: in the main graph a popxl
        ``HostToDeviceStream`` named ``tensorId`` (what ``popxl.h2d_stream`` makes)."""
        from tremula.popxl._ir.tensor import TensorType
        from tremula.popxl.streams import HostToDeviceStream

        g = self._g
        tid = _free_id(g, tensorId)
        spec = _spec(info, "addStream")
        t = XlTensor._create(g, tid, spec)
        if g is g.ir.main_graph:
            if tid in g.ir._stream_names:
                raise PopartException(f"addStream: a stream named {tid!r} exists already")
            stream = HostToDeviceStream.__new__(HostToDeviceStream)
            stream._spec, stream._name, stream._tensor = spec, tid, t
            g.ir._streams.append(stream)
            g.ir._stream_names.add(tid)
        else:
            set_tensor_type(t, TensorType.Stream)
        self._add(t)

    def addInput(self, *args: Any) -> None:
        """``addInput(tensorId, info)`` appends a new input tensor; ``addInput(index,
        tensorId, info, overwrite)`` puts it at ``index`` (replacing the input there if
        ``overwrite``)."""
        if len(args) == 2:
            index, (tensor_id, info), overwrite = len(self._g._inputs), args, False
        elif len(args) == 4:
            index, tensor_id, info, overwrite = args
        else:
            raise TypeError(
                "addInput(tensorId, info) or addInput(index, tensorId, info, overwrite)"
            )
        ins = self._g._inputs
        index = int(index)
        if not 0 <= index <= len(ins) or (overwrite and index == len(ins)):
            raise PopartException(f"addInput: index {index} out of range ({len(ins)} inputs)")
        spec = _spec(info, "addInput")
        tid = _free_id(self._g, tensor_id)
        self._check_uncalled("addInput")
        t = XlTensor._create(self._g, tid, spec)
        self._add(t)
        if overwrite:
            ins[index] = t
        else:
            ins.insert(index, t)

    def markAsInput(self, tensorId: str) -> None:
        """Append the graph's tensor ``tensorId`` to its inputs."""
        from tremula.popxl._ir.op.edit import graph_tensor

        t = graph_tensor(self._g, tensorId)
        if t._producer is not None:
            raise PopartException(f"markAsInput: {t.id!r} is produced by {t._producer!r}")
        self._check_uncalled("markAsInput")
        self._g._add_input(t, False)

    def removeInput(self, where: int | str) -> None:
        """Remove an input, by index or by tensor id; the tensor stays in the graph."""
        ins = self._g._inputs
        if isinstance(where, builtins.str):
            index = next((i for i, t in enumerate(ins) if t.id == where), -1)
        else:
            index = int(where)
        if not 0 <= index < len(ins):
            raise PopartException(
                f"removeInput: no input {where!r} in {self.getGraphString()} ({len(ins)} inputs)"
            )
        self._check_uncalled("removeInput")
        self._g._by_ref_inputs.discard(ins[index])
        del ins[index]

    def getTensors(self) -> Tensors:
        return Tensors(self)

    def getTensorsOfType(self, tensorType: TensorType) -> list[Tensor]:
        return Tensors(self).getOfType(tensorType)

    def getScope(self) -> Scope:
        return graph_scope(cast(Any, self))


# ---- op factories: Graph.createOp_<X>Op / createConnectedOp_<X>Op ----
_CREATE = "createOp_"
_CONNECTED = "createConnectedOp_"


def op_type_of_class(class_name: str) -> str | None:
    """The Tremula op type whose binding class is ``class_name`` (the op's own type where
    several types share a class, as ``MatMulOp``)."""
    from tremula.popxl._ir.names import op_name
    from tremula.popxl.ops.base import OPS

    found = [t for t in OPS if op_name(t).cls == class_name]
    if not found:
        return None
    return next((t for t in found if op_name(t).op_type == t), found[0])


def op_factory(graph: Any, name: str) -> Callable[..., Any] | None:
    """``graph.createOp_<X>`` / ``graph.createConnectedOp_<X>`` for the op class ``<X>``
    (None for other names; ``AttributeError`` for a class the registry has no op of)."""
    if name.startswith(_CONNECTED):
        class_name, connected = name[len(_CONNECTED) :], True
    elif name.startswith(_CREATE):
        class_name, connected = name[len(_CREATE) :], False
    else:
        return None
    op_type = op_type_of_class(class_name)
    if op_type is None:
        raise AttributeError(
            f"'Graph' object has no attribute '{name}': Tremula's op registry has no op of "
            f"class {class_name}"
        )
    if connected:

        def create_connected(ins: Any, outs: Any, *args: Any, **kwargs: Any) -> Any:
            return _create_connected(graph, op_type, name, ins, outs, args, kwargs)

        create_connected.__name__ = name
        return create_connected

    def create(*args: Any, **kwargs: Any) -> Any:
        return _create(graph, op_type, name, args, kwargs)

    create.__name__ = name
    return create


def _split_args(
    op_type: str, what: str, args: tuple, kwargs: dict
) -> tuple[Any, Any, dict[str, Any] | None]:
    """(opid, settings, constructor arguments) of a factory call. The opid may be absent
    (PopART makes its in-place ops from settings alone); the other arguments are those of
    PopART's constructor (``constructors.py``), refused for a class with no entry there."""
    from tremula.popxl._ir.constructors import bind_arguments
    from tremula.popxl._ir.names import op_name
    from tremula.popxl.context import OpSettings

    rest_kw = dict(kwargs)
    opid = rest_kw.pop("opid", None)
    settings = rest_kw.pop("settings", None)
    rest = list(args)
    if opid is None:  # (a None argument is an argument: an unset optional)
        opid = next((a for a in rest if isinstance(a, OperatorIdentifier)), None)
        rest = [a for a in rest if a is not opid or opid is None]
    if settings is None:
        settings = next((a for a in rest if isinstance(a, (Settings, OpSettings))), None)
        rest = [a for a in rest if a is not settings or settings is None]
    if settings is None or not isinstance(opid, (OperatorIdentifier, type(None))):
        raise TypeError(f"{what}: expected a Settings (and an OperatorIdentifier)")
    cls = op_name(op_type).cls
    bound = bind_arguments(cls, rest, rest_kw)
    if bound is None and (rest or rest_kw):
        raise UnsupportedBindingError(
            f"popart._internal.ir.Graph.{what} is not supported by Tremula with constructor "
            f"arguments ({len(rest) + len(rest_kw)} given): the attributes of PopART's "
            f"{cls} are not mapped onto Tremula's {op_type} op; make it with the popxl.ops "
            f"function"
        )
    return opid, settings, bound


def _placement(settings: Any) -> tuple[str, int | None, str, Any]:
    """(name, ipu, tile set, execution context) of a ``Settings`` or of the ``OpSettings``
    ``Context._get_op_settings`` gives (its name under its name scope, as PopXL's
    ``"/".join((*name_scopes, name))``)."""
    from tremula.popxl.tensorlocation import TileSet

    name = settings.name
    if isinstance(settings, Settings):
        ipu, tile_set, context = settings.vgraphId, settings.tileSet, settings.executionContext
    else:  # PopXL's _get_op_settings names the op under the name scopes
        ipu, tile_set, context = settings.ipu, settings.tile_set, settings.execution_context
        name = "/".join(filter(None, (settings.scope, name)))
    return name, ipu, "io" if tile_set == TileSet.IO else "compute", context


def _target(graph: Any, settings: Any, what: str) -> XlGraph:
    g: XlGraph = graph._g
    owner = getattr(settings.graph, "_g", settings.graph)
    if owner is not g:
        raise PopartException(f"{what}: the Settings are for another graph ({settings.graph!r})")
    return g


def _create(graph: Any, op_type: str, what: str, args: tuple, kwargs: dict) -> Any:
    """A new op of ``op_type`` in the graph, with no tensors connected."""
    from tremula.popxl._ir.constructors import made
    from tremula.popxl._ir.op.classes import op_class
    from tremula.popxl.ops import base as _base

    opid, settings, bound = _split_args(op_type, what, args, kwargs)
    g = _target(graph, settings, what)
    name, ipu, tiles, context = _placement(settings)
    attrs = {"name": name}  # op.name(), "" where the Settings have none
    d = _base.OPS[op_type]
    op = op_class(op_type)(
        _base._next_op_id[0],
        op_type,
        g,
        (),
        (),
        attrs,
        d.modifies,
        ipu,
        tiles,
        context,
        name or op_type,
        _base.user_site(),
    )
    _base._next_op_id[0] += 1
    if bound is not None:
        made(op, bound)
    if opid is not None:
        op.__dict__["opid"] = opid  # an instance attribute: popxl.ops' ops have none
    g._ops.append(op)
    return op


def _create_connected(
    graph: Any, op_type: str, what: str, ins: Any, outs: Any, args: tuple, kwargs: dict
) -> Any:
    """A new op with inputs ``ins`` ({index: tensor id}) and outputs ``outs`` (existing
    tensors are taken from their producers, others made), set up. A refused call (unknown
    tensor, inputs the op refuses) leaves the graph as it was."""
    g: XlGraph = graph._g
    tensors_before = dict(g._tensors)
    op = _create(graph, op_type, what, args, kwargs)
    taken: list[tuple[XlTensor, Any, int]] = []
    try:
        for index, tid in sorted(dict(ins).items()):
            op.connectInTensor(int(index), tid)
        for index, tid in sorted(dict(outs).items()):
            existing = g._tensors.get(builtins.str(tid))
            if existing is None:
                op.createAndConnectOutTensor(int(index), tid)
                continue
            producer = cast(Any, existing._producer)  # a binding Op
            if producer is not None:
                slot = next(i for i, u in enumerate(producer.outputs) if u is existing)
                taken.append((existing, producer, slot))
                producer.disconnectOutTensor(existing)
            op.connectOutTensor(int(index), tid)
        op.setup()
    except Exception:
        op.disconnectAllInputs()
        op.disconnectAllOutputs()
        g._ops.remove(op)
        for t, producer, slot in taken:
            producer.connectOutTensor(slot, t.id)
        for tid in [t for t in g._tensors if t not in tensors_before]:
            del g._tensors[tid]
        raise
    return op
