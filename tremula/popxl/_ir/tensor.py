"""``popart._internal.ir.Tensor`` (``tensor._pb_tensor``), ``TensorInfo`` and ``Consumers``:
a view of a Tremula tensor with PopART's methods (one handle per tensor)."""

from __future__ import annotations

import builtins
import math
from typing import TYPE_CHECKING, Any, cast

from tremula.errors import PopartException, UnsupportedBindingError
from tremula.popxl._ir.core.enums import DataType, PopartEnum
from tremula.popxl._ir.handles import register, view_of
from tremula.popxl._ir.unsupported import unsupported_attr
from tremula.popxl.streams import HostToDeviceStream
from tremula.popxl.tensor import Constant, Variable
from tremula.popxl.tensor import Tensor as XlTensor

if TYPE_CHECKING:
    from tremula.popxl._ir.graph import Graph
    from tremula.popxl._ir.op import Op
    from tremula.popxl._ir.view import Region


class TensorType(PopartEnum):
    """PopART's ``TensorType``: what kind of tensor the IR holds (``Tensor.tensorType()``)."""

    ActGrad = 0  # an op's output or a graph input
    Const = 1
    Stream = 2  # the tensor of a host-to-device stream
    Unknown = 3
    Variable = 4


class TensorTypeInfo:
    """PopART's ``TensorTypeInfo``: a ``TensorType`` and its name."""

    def __init__(self, tensorType: TensorType, typeName: builtins.str | None = None) -> None:
        self._type = tensorType
        self._name = tensorType.name if typeName is None else builtins.str(typeName)

    def type(self) -> TensorType:
        return self._type

    def type_s(self) -> builtins.str:
        return self._name


class TensorInfo:
    """A tensor's data type and shape (PopART's ``TensorInfo``): ``TensorInfo(dataType,
    shape, metaShape=())``, the type a ``DataType``, its name (``"FLOAT"``) or a popxl
    dtype."""

    def __init__(self, dataType: Any = None, shape: Any = (), metaShape: Any = ()) -> None:
        self.set(dataType, shape, metaShape)

    def set(self, dataType: Any, shape: Any = None, metaShape: Any = ()) -> None:
        """Set the type and shape (``TensorInfo()`` and type ``UNDEFINED``: no type, as a
        PopART tensor's info before its producer's setup)."""
        from tremula.popxl.dtypes import dtype as xl_dtype

        if isinstance(dataType, builtins.str) and dataType in DataType.__members__:
            dataType = DataType[dataType]
        undefined = dataType is None or dataType is DataType.UNDEFINED
        self._dtype = None if undefined else xl_dtype.as_dtype(dataType)
        if isinstance(shape, builtins.str):
            shape = _shape_from_string(shape)
        if shape is not None or not hasattr(self, "_shape"):
            self._shape = tuple(int(d) for d in (() if shape is None else shape))
        self._meta_shape = tuple(int(d) for d in metaShape)

    def isSet(self) -> bool:
        """Whether the info has a data type (``TensorInfo()`` has not: ``UNDEFINED``)."""
        return self._dtype is not None

    def shape(self) -> list[int]:
        return list(self._shape)

    def metaShape(self) -> list[int]:
        return list(self._meta_shape)

    def rank(self) -> int:
        return len(self._shape)

    def nelms(self) -> int:
        return math.prod(self._shape)

    def nbytes(self) -> int:
        return 0 if self._dtype is None else self.nelms() * self._dtype.as_numpy().itemsize

    def dim(self, index: int) -> int:
        return self._shape[index]

    def dataType(self) -> DataType:
        """PopART's ``DataType`` (``popxl.dtype.as_dtype`` gives the popxl dtype back)."""
        if self._dtype is None:
            return DataType.UNDEFINED
        return cast(DataType, self._dtype._pb_dtype)

    def data_type(self) -> builtins.str:
        """The type's name (``"FLOAT"``, ``"FLOAT16"``), as PopART's."""
        return builtins.str(self.dataType().name)

    def data_type_lcase(self) -> builtins.str:
        """The type's name in lower case (``"float"``, ``"float16"``), as PopART's."""
        return builtins.str(self.dataType().name).lower()

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorInfo)
            and other._dtype is self._dtype
            and other._shape == self._shape
            and other._meta_shape == self._meta_shape
        )

    def __hash__(self) -> int:
        return hash((self.dataType(), self._shape, self._meta_shape))

    def __repr__(self) -> builtins.str:
        return f"TensorInfo({self.dataType().name}, {list(self._shape)})"

    def __str__(self) -> builtins.str:
        """PopART's ``TensorInfo`` text: ``FLOAT   [2 3]``."""
        return f"{self.data_type():<8}[{' '.join(map(builtins.str, self._shape))}]"


def _shape_from_string(text: builtins.str) -> tuple[int, ...]:
    """A shape written as PopART's ``TensorInfo(dataType, shape)`` takes it in text:
    ``"(2,3)"``, ``"()"`` for a scalar (``TensorInfo::shapeFromString``).

    Raises:
        popart_exception: text that is not a parenthesised list of integers.
    """
    inner = text.strip()
    if len(inner) < 2 or inner[0] != "(" or inner[-1] != ")":
        raise PopartException(f'TensorInfo: invalid string for shape {text!r} (write "(2,3)")')
    try:
        return tuple(int(d) for d in inner[1:-1].split(",") if d.strip())
    except ValueError:
        raise PopartException(f"TensorInfo: invalid string for shape {text!r}") from None


class TensorLocationInfo:
    """Where a tensor lives (PopART's ``TensorLocationInfo``, what
    ``popxl.Tensor.location_info`` gives): in a remote buffer (``isRemote``, with
    ``getRemoteBufferInfo()`` its ``(remote buffer id, entry)``, ``(-1, -1)`` otherwise), and
    sharded between replicas (``isSharded``). A view of the tensor when it was asked for:
    variables are placed by the popxl factories (``remote_variable``,
    ``remote_replica_sharded_variable``, ``replica_sharded_variable``), not through it."""

    def __init__(self, remote: bool = False, sharded: bool = False, buffer: Any = (-1, -1)):
        self._remote = bool(remote)
        self._sharded = bool(sharded)
        self._buffer = (int(buffer[0]), int(buffer[1]))
        self._tensor: XlTensor | None = None  # the tensor viewed (then read-only)

    @classmethod
    def _of(cls, t: XlTensor) -> TensorLocationInfo:
        where = getattr(t, "remote", None)  # variables: (RemoteBuffer, entry) or None
        sharded = getattr(t, "shard_over", None) is not None
        if where is None:
            view = cls(False, sharded)
        else:
            buffer, entry = where
            view = cls(True, sharded, (buffer.remote_buffer_id, entry))
        view._tensor = t
        return view

    def _settable(self, method: builtins.str) -> None:
        """Refuse to set the location of a tensor through its view (Tremula places
        variables by the popxl factories, which its lowering reads)."""
        if self._tensor is not None:
            raise UnsupportedBindingError(
                f"popart._internal.ir.TensorLocationInfo.{method} is not supported by Tremula "
                f"on a tensor's location ({self._tensor.id!r}): make remote or sharded "
                f"variables with popxl.remote_variable / replica_sharded_variable"
            )

    def setRemote(self, remote: bool) -> None:
        self._settable("setRemote")
        self._remote = bool(remote)

    def setSharded(self, sharded: bool) -> None:
        self._settable("setSharded")
        self._sharded = bool(sharded)

    def setRemoteBufferInfo(self, remoteBufferId: int, index: int) -> None:
        """The remote buffer and its entry the tensor lives in."""
        self._settable("setRemoteBufferInfo")
        self._buffer = (int(remoteBufferId), int(index))

    def isRemote(self) -> bool:
        return self._remote

    def isSharded(self) -> bool:
        return self._sharded

    def getRemoteBufferInfo(self) -> tuple[int, int]:
        return self._buffer

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorLocationInfo) and (
            other._remote,
            other._sharded,
            other._buffer,
        ) == (self._remote, self._sharded, self._buffer)

    def __hash__(self) -> int:
        return hash((self._remote, self._sharded, self._buffer))

    def __repr__(self) -> builtins.str:
        return (
            f"TensorLocationInfo(remote={self._remote}, sharded={self._sharded}, "
            f"remoteBufferInfo={self._buffer})"
        )


class RemoteBufferInfo:
    """A remote buffer's slot type and number of slots (PopART's ``RemoteBufferInfo``:
    ``TensorInfo``, ``repeats``), what ``Ir.getRemoteBufferInfo`` gives."""

    def __init__(self, info: TensorInfo, repeats: int) -> None:
        if not isinstance(info, TensorInfo):
            raise TypeError(f"RemoteBufferInfo: expected a TensorInfo, got {type(info).__name__}")
        self.TensorInfo = info
        self.repeats = int(repeats)

    def __repr__(self) -> builtins.str:
        return f"RemoteBufferInfo({self.TensorInfo!r}, repeats={self.repeats})"


class Consumers:
    """The ops of a tensor's graph that read it."""

    def __init__(self, t: XlTensor) -> None:
        self._t = t

    def getOps(self) -> list[Op]:
        ops = [op for op in self._t.graph._ops if any(u is self._t for u in op.inputs)]
        return cast("list[Op]", ops)

    def getTotal(self) -> int:
        return sum(u is self._t for op in self._t.graph._ops for u in op.inputs)

    def getMap(self) -> dict[Op, int]:
        return {op: self.n(op) for op in self.getOps()}

    def n(self, op: Op) -> int:
        """How many of ``op``'s inputs are the tensor (0 if it does not read it)."""
        return sum(u is self._t for u in op.inputs)


class Tensor:
    """A Tremula tensor as PopART's ``Tensor`` bindings show it (``tensor._pb_tensor``)."""

    def __init__(self, *args: Any) -> None:
        """``Tensor(id, tensorType, graph[, debugContext])`` makes a tensor of ``graph`` that
        the graph does not hold (as PopART's constructor: ``Graph.addActGrad`` and the
        other adds make tensors it holds); ``Tensor(popxl_tensor)`` is the view of one
        (``tensor_handle``: one view per tensor)."""
        if len(args) in (3, 4):
            from tremula.popxl._ir.build import set_tensor_type
            from tremula.popxl._ir.op.edit import _UNSET

            tensor_id, tensor_type, graph = args[:3]
            g = getattr(graph, "_g", None)
            if g is None or not isinstance(tensor_type, TensorType):
                raise TypeError("Tensor(id, TensorType, Graph[, DebugContext])")
            t = XlTensor._create(g, builtins.str(tensor_id), _UNSET)
            set_tensor_type(t, tensor_type)
            register(t, self)
        elif len(args) == 1 and isinstance(args[0], XlTensor):
            t = args[0]
        else:
            raise TypeError("Tensor(id, TensorType, Graph[, DebugContext]) or Tensor(popxl Tensor)")
        self._t = t

    @property
    def id(self) -> builtins.str:
        return self._t.id

    def str(self) -> builtins.str:
        return self._t.id

    @property
    def info(self) -> TensorInfo:
        """The type and shape (``TensorInfo()``, type ``UNDEFINED``, for a tensor added
        through the bindings whose info is not set yet)."""
        from tremula.popxl._ir.op.edit import _UNSET

        if self._t._spec is _UNSET:
            return TensorInfo()
        return TensorInfo(self._t.dtype, self._t.shape, self._t.meta_shape)

    @info.setter
    def info(self, value: TensorInfo) -> None:
        """Set the tensor's type and shape (what PopART's binding tests do to an ActGrad
        tensor they add; an op's ``setup()`` sets its outputs')."""
        from tremula.popxl._ir.build import _spec

        self._t._spec = _spec(value, f"{self._t.id}.info")

    @property
    def tensorLocationInfo(self) -> TensorLocationInfo:
        return TensorLocationInfo._of(self._t)

    @property
    def consumers(self) -> Consumers:
        return Consumers(self._t)

    def tensorType(self) -> TensorType:
        """``TensorType.Variable`` (variables, replica-sharded shards and remote variables
        too), ``Const``, ``Stream`` (a host-to-device stream's tensor, as PopXL's
        ``h2d_stream`` adds it) or ``ActGrad`` (every other tensor: op outputs, graph inputs,
        a device-to-host stream's tensor, which PopXL adds as an ActGrad)."""
        t = self._t
        chosen = getattr(t, "_pb_tensor_type", None)  # made or set through the bindings
        if chosen is not None:
            return cast(TensorType, chosen)
        if isinstance(t, Variable):
            return TensorType.Variable
        if isinstance(t, Constant):
            return TensorType.Const
        if t.graph is t.ir.main_graph and any(
            s.tensor_id == t.id and isinstance(s, HostToDeviceStream) for s in t.ir._streams
        ):
            return TensorType.Stream
        return TensorType.ActGrad

    def getTensorTypeInfo(self) -> TensorTypeInfo:
        """PopART's ``TensorTypeInfo`` of :meth:`tensorType` (``type()``, ``type_s()``)."""
        return TensorTypeInfo(self.tensorType())

    def getReplicatedStreamMode(self) -> Any:
        """``ReplicatedStreamMode.Replicate``: PopART's default, which PopXL keeps; each
        replica streams its own data (a host-to-device stream takes one array per
        replica), and Tremula has no broadcast mode."""
        from tremula.popxl._ir.core.enums import ReplicatedStreamMode

        return ReplicatedStreamMode.Replicate

    def tensor_type(self) -> builtins.str:
        """The name of :meth:`tensorType` (PopART's ``Tensor::tensor_type()``: ``"Variable"``,
        ``"Const"``, ``"Stream"``, ``"ActGrad"``), by which PopXL picks a tensor's class."""
        return self.tensorType().name

    def setTensorType(self, tensorType: TensorType) -> None:
        """Set the type the bindings report (the popxl tensor's class stays what it is)."""
        from tremula.popxl._ir.build import set_tensor_type

        if not isinstance(tensorType, TensorType):
            raise TypeError(f"setTensorType: expected a TensorType, got {tensorType!r}")
        set_tensor_type(self._t, tensorType)

    def clone(self, graph: Graph) -> Tensor:
        """A new tensor ``clone_<id>`` of ``graph`` (not held by it) with this tensor's
        type and info, as PopART's ``Tensor::clone``."""
        clone = Tensor(f"clone_{self._t.id}", self.tensorType(), graph)
        return clone if not self.info.isSet() else clone._with_info(self.info)

    def _with_info(self, info: TensorInfo) -> Tensor:
        self.info = info
        return self

    def getVariableSettings(self) -> Any:
        """A variable's PopART ``VariableSettings``: its replica grouping (a non-constant
        grouping's ``const_rg``, the grouping its values are kept under) with its retrieval
        mode, the settings ``popxl.variable`` gives PopART.

        Raises:
            popart_exception: the tensor is not a variable.
        """
        t = self._t
        if not isinstance(t, Variable):
            raise PopartException(
                f"getVariableSettings: tensor {t.id!r} is a {self.tensor_type()} tensor; only "
                f"variables have VariableSettings"
            )
        return t.replica_grouping.const_rg._to_variable_settings(t.retrieval_mode)

    def hasTensorData(self) -> bool:
        """Whether the tensor holds host data: variables and constants do."""
        return isinstance(self._t, (Variable, Constant))

    def getGraph(self) -> Graph:
        from tremula.popxl._ir.graph import graph_handle

        return graph_handle(self._t.graph)

    def getIr(self) -> Any:
        from tremula.popxl._ir.ir import ir_handle

        return ir_handle(self._t.ir)

    def hasProducer(self) -> bool:
        return self._t._producer is not None

    def getProducer(self) -> Op:
        if self._t._producer is None:
            raise PopartException(f"No producer for tensor {self._t.id}")
        return cast("Op", self._t._producer)

    def getProducerUnsafe(self) -> Op | None:
        """The producer, None if the tensor has none."""
        return cast("Op | None", self._t._producer)

    # ---- placement: the producer's, else the first consumer's (popxl Tensor.ipu) ----
    def getVirtualGraphIdAndTileSetUnsafe(self) -> tuple[int, Any]:
        """``(virtual IPU, TileSet)`` of the producer, else of the first consumer; ``(-1,
        TileSet.Undefined)`` for a tensor no op touches (what PopXL's ``Tensor.ipu`` and
        ``tile_set`` read)."""
        from tremula.popxl.tensorlocation import TileSet

        ipu, tiles = self._t._get_ipu_and_tile_set(False, False)
        tile_set = {"compute": TileSet.Compute, "io": TileSet.IO}.get(tiles, TileSet.Undefined)
        return int(ipu), tile_set

    def getVirtualGraphIdAndTileSet(self) -> tuple[int, Any]:
        """As the unsafe form, raising for a tensor with no virtual graph."""
        found = self.getVirtualGraphIdAndTileSetUnsafe()
        if found[0] == -1:
            raise PopartException(
                f"Invalid call to getVirtualGraphIdAndTileSet, Tensor {self._t.id} does not "
                f"have one"
            )
        return found

    def getVirtualGraphIdUnsafe(self) -> int:
        return self.getVirtualGraphIdAndTileSetUnsafe()[0]

    def getVirtualGraphId(self) -> int:
        return self.getVirtualGraphIdAndTileSet()[0]

    def hasVirtualGraphId(self) -> bool:
        return self.getVirtualGraphIdUnsafe() != -1

    def isGraphInput(self) -> bool:
        return any(u is self._t for u in self._t.graph._inputs)

    def isGraphOutput(self) -> bool:
        return any(u is self._t for u in self._t.graph._outputs)

    def getGraphInputIndex(self) -> int:
        return self.getGraph().getInputIndex(self._t.id)

    def getGraphOutputIndex(self) -> int:
        return self.getGraph().getOutputIndex(self._t.id)

    def isAliased(self) -> bool:
        """Whether an op that reads the tensor gives an output that aliases it (a view
        of it, or the output of an op that writes it in place), as PopART's alias model
        says."""
        t = self._t
        return any(
            aliases_of(op, i) for op in t.graph._ops for i, v in enumerate(op.inputs) if v is t
        )

    def isModified(self, considerLoopInput: bool = True) -> bool:
        """Whether an op that reads the tensor writes it in place (an in-place op, a var
        update, a call or loop passing it by reference), as PopART's ``Tensor::isModified``
        asks its consumers. (``considerLoopInput``: a loop's inputs are its op's inputs in
        Tremula, so a loop that writes one is such a consumer either way.)"""
        t = self._t
        return any(
            v is t and i in op.modified for op in t.graph._ops for i, v in enumerate(op.inputs)
        )

    def modifiedRegionsByOps(self, ops: Any, aliasModel: Any = None) -> list[Region]:
        """The regions of this tensor that ``ops`` write in place: the whole tensor where one
        of them modifies it or a view of it (Tremula records modification per input), else
        an empty region."""
        from tremula.popxl._ir.view import Region

        written = _modified_by(self._t, list(ops))
        return [Region.getFull(self._t.shape) if written else Region.getEmpty(self._t.rank)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tensor) and other._t is self._t

    def __hash__(self) -> int:
        return id(self._t)

    def __repr__(self) -> builtins.str:
        return f"popart._internal.ir.Tensor({self._t.id!r})"

    def __getattr__(self, name: builtins.str) -> Any:
        return unsupported_attr(self, name)


def aliases_of(op: Any, i: int) -> list[XlTensor]:
    """The outputs of ``op`` that alias its input ``i``: the outputs of a view op
    (``OpDefinition.view``), of an in-place op whose definition writes input ``i``
    (``OpDefinition.modifies``; not what else an op writes, as ``adam_updater``'s time step or
    a call's by-reference inputs: those ops' outputs are new tensors), and the in-place loads
    of a merged exchange."""
    if "aliases" in op.attrs:  # a merged exchange: its in-place loads' outputs
        return [op.outputs[o] for k, o in op.attrs["aliases"] if k == i]
    d = op.definition
    if d.view or (i in op.modified and i in d.modifies and not d.graphs):
        return [o for o in op.outputs if o is not None]
    return []


def _modified_by(t: XlTensor, ops: list[Any]) -> bool:
    """Whether one of ``ops`` writes ``t`` or a view of it in place."""
    seen, todo = set(), [t]
    chosen = set(map(id, ops))
    while todo:
        u = todo.pop()
        if id(u) in seen:
            continue
        seen.add(id(u))
        for op in u.graph._ops:
            for i, v in enumerate(op.inputs):
                if v is not u:
                    continue
                if id(op) in chosen and i in op.modified:
                    return True
                todo.extend(aliases_of(op, i))
    return False


def tensor_handle(t: XlTensor) -> Tensor:
    """The binding handle of a popxl tensor (one per tensor)."""
    if not isinstance(t, XlTensor):
        raise TypeError(f"expected a popxl Tensor, got {type(t).__name__}")
    return view_of(t, Tensor)
