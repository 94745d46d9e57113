"""PopXL tensors: ``Tensor`` (an activation, produced by an op), ``Variable`` (state that
persists across runs), ``Constant``; ``TensorSpec`` (defined in :mod:`tremula.popxl._spec`).

``popxl.tensor`` also gives the factories of variables and constants, as PopXL's module
does: ``constant``, ``variable``, ``graph_input`` and ``graph_output`` live in
:mod:`tremula.popxl._variables`,
``remote_variable``, ``remote_replica_sharded_variable``, ``replica_sharded_buffer`` and
``replica_sharded_variable`` in :mod:`tremula.popxl._remote_variables`; they are imported at
the end of this module (they build the classes defined here).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from tremula.errors import UndefinedValue
from tremula.popxl import dtypes
from tremula.popxl._spec import TensorSpec
from tremula.popxl.context import get_current_context, undo_on_error
from tremula.popxl.typing_ import NewAliasAnnotation

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.ir import Ir
    from tremula.popxl.ops.base import OpNode
    from tremula.popxl.replica_grouping import ReplicaGrouping


class Tensor:
    """A tensor of a graph. Identity semantics: ``==`` and ``hash`` compare identity (use
    ``ops.equal`` for element-wise comparison)."""

    __array_ufunc__ = None  # NumPy defers to our reflected operators

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"popxl.{type(self).__name__} cannot be constructed directly: tensors are made by "
            f"popxl.variable, popxl.constant, popxl.graph_input and the ops"
        )

    @classmethod
    def _create(
        cls,
        graph: Graph,
        tensor_id: str,
        spec: TensorSpec,
        producer: OpNode | None = None,
    ) -> Tensor:
        """A new tensor object (not yet added to ``graph``): what the factories and ops use,
        as ``Tensor()`` itself is refused, as in PopXL."""
        self = cls.__new__(cls)
        self._setup(graph, tensor_id, spec, producer)
        return self

    def _setup(
        self,
        graph: Graph,
        tensor_id: str,
        spec: TensorSpec,
        producer: OpNode | None = None,
    ) -> None:
        self._graph = graph
        self._id = tensor_id
        self._name = graph._tensor_name(tensor_id)
        self._spec = spec
        self._producer = producer
        ctx = get_current_context()
        self._ipu = ctx.ipu
        self._tile_set = "io" if ctx.io_tiles else "compute"

    # ---- identity and description ----
    @property
    def id(self) -> str:
        return self._id

    @property
    def name(self) -> str:
        return self._name

    @property
    def scope(self) -> str:
        return self._id[: -len(self._name)].rstrip("/") if self._id.endswith(self._name) else ""

    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def ir(self) -> Ir:
        return self._graph.ir

    @property
    def dtype(self) -> dtypes.dtype:
        return self._spec.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._spec.shape

    @property
    def meta_shape(self) -> tuple[int, ...]:
        return self._spec.meta_shape

    @property
    def spec(self) -> TensorSpec:
        return self._spec

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nelms(self) -> int:
        return math.prod(self.shape)

    def _get_ipu_and_tile_set(
        self, raise_on_undefined_tile_set: bool = True, raise_on_undefined_ipu: bool = True
    ) -> tuple[int, str]:
        """The virtual IPU and tile set of the tensor, as PopART finds them: its producer's
        (for an output of a ``Call`` or loop, those of the called graph's output it carries,
        where an op makes that), else those of the first op that consumes it;
        ``(-1, "undefined")`` for a tensor no op touches (a variable, constant or graph
        input not used yet).

        Raises:
            UndefinedValue: the IPU (or tile set) is undefined and asked to raise.
        """
        op = self._producer
        inner = op.callee_output(self) if op is not None else None
        if inner is not None and inner._producer is not None:
            return inner._get_ipu_and_tile_set(raise_on_undefined_tile_set, raise_on_undefined_ipu)
        if op is None:
            op = next((o for o in self._graph._ops if any(i is self for i in o.inputs)), None)
        ipu, tile_set = (-1, "undefined") if op is None else (op.ipu_of(self) or 0, op.tile_set)
        if raise_on_undefined_ipu and ipu == -1:
            why = "made in popxl.ipu(None)" if op else "has no producer and no consumer yet"
            raise UndefinedValue(
                f"Tensor's IPU is undefined. Tensor {self._id!r} of graph "
                f"{self._graph.name!r} {why}."
            )
        if raise_on_undefined_tile_set and tile_set == "undefined":
            raise UndefinedValue(
                f"Tensor's tile set is undefined. Tensor {self._id!r} of graph "
                f"{self._graph.name!r} has no producer and no consumer yet."
            )
        return ipu, tile_set

    @property
    def ipu(self) -> int:
        """The virtual IPU of the tensor: its producer's (0 unless made inside
        ``popxl.ipu(n)``), else its first consumer's.

        Raises:
            UndefinedValue: (a ``ValueError``) no op produces or consumes the tensor, or
                its op was made inside ``popxl.ipu(None)``.
        """
        return self._get_ipu_and_tile_set(False, True)[0]

    @property
    def tile_set(self) -> str:
        """``"compute"`` or ``"io"``: its producer's tile set, else its first consumer's.

        Raises:
            UndefinedValue: no op produces or consumes the tensor.
        """
        return self._get_ipu_and_tile_set(True, False)[1]

    @property
    def location_info(self) -> Any:
        """Where the tensor lives, as PopART's ``TensorLocationInfo`` (PopXL's property):
        ``isRemote()`` with ``getRemoteBufferInfo()`` ``(buffer id, entry)`` for a remote
        variable, ``isSharded()`` for a replica-sharded one."""
        from tremula.popxl._ir.tensor import TensorLocationInfo

        return TensorLocationInfo._of(self)

    @property
    def in_sync_with_ipu(self) -> bool:
        return True

    @property
    def producer(self) -> OpNode | None:
        return self._producer

    @property
    def _pb_tensor(self) -> Any:
        """This tensor in PopXL's IR bindings (``popart._internal.ir.Tensor``)."""
        from tremula.popxl._ir import tensor_handle

        return tensor_handle(self)

    @staticmethod
    def _from_pb_tensor(pb_tensor: Any) -> Tensor:
        """The tensor of a binding handle (the same Tensor, Variable or Constant object)."""
        return pb_tensor._t

    def strides(self, shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """Byte strides of a C-ordered array of ``shape`` (default: this tensor's)."""
        shape = self.shape if shape is None else tuple(shape)
        return np.empty(shape, dtype=self.dtype.as_numpy()).strides if shape else ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._id} {self.dtype} {self.shape}]"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __len__(self) -> int:
        """``shape[0]``; also the truth value (``if t:``), as PopXL defines no other.

        Raises:
            ValueError: a scalar tensor (no length, so no truth value either).
        """
        if not self.shape:
            raise ValueError(f"Tensor {self._id!r} doesn't have a length: it is a scalar")
        return self.shape[0]

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(f"tensor {self._id!r} is not iterable (index it instead)")

    def __contains__(self, item: object) -> bool:
        raise TypeError(f"`in` is not supported on tensor {self._id!r} (use ops.equal)")

    # ---- operators (ops imported on use: the op layer builds on this module) ----
    def _ops(self) -> Any:
        from tremula.popxl import ops

        return ops

    def _ensure_tensor(
        self, value: Any, dtype: dtypes.dtype | None = None, raise_on_empty: bool = True
    ) -> Tensor:
        """``value`` as an operand of this tensor's operators (PopXL's helper, which custom
        ops call too): a Tensor as it is, anything else a constant of ``dtype`` (default:
        this tensor's dtype) in the current graph.

        Raises:
            ValueError: ``value`` has no elements (unless ``raise_on_empty`` is False).
        """
        if isinstance(value, Tensor):
            return value
        data = np.asarray(value)
        if raise_on_empty and data.size == 0:
            raise ValueError(
                f"The value has 0 elements: cannot combine tensor {self._id!r} with {value!r}"
            )
        return constant(data, dtype=self.dtype if dtype is None else dtype)

    def _binary(self, op_name: str, other: Any, reflected: bool = False) -> Tensor:
        """``ops.<op_name>(self, other)`` (``(other, self)`` when reflected); a host value
        ``other`` becomes a constant of this tensor's dtype, removed again if the op is
        refused."""
        fn = getattr(self._ops(), op_name)
        with undo_on_error():
            o = self._ensure_tensor(other)
            return fn(o, self) if reflected else fn(self, o)

    # Binary operators: ``a + b`` is ``ops.add(a, b)``, ``2 + a`` is ``ops.add(constant(2), a)``.
    def __add__(self, other: TensorLike) -> Tensor:
        return self._binary("add", other)

    def __radd__(self, other: TensorLike) -> Tensor:
        return self._binary("add", other, True)

    def __sub__(self, other: TensorLike) -> Tensor:
        return self._binary("sub", other)

    def __rsub__(self, other: TensorLike) -> Tensor:
        return self._binary("sub", other, True)

    def __mul__(self, other: TensorLike) -> Tensor:
        return self._binary("mul", other)

    def __rmul__(self, other: TensorLike) -> Tensor:
        return self._binary("mul", other, True)

    def __truediv__(self, other: TensorLike) -> Tensor:
        return self._binary("div", other)

    def __rtruediv__(self, other: TensorLike) -> Tensor:
        return self._binary("div", other, True)

    def __pow__(self, other: TensorLike) -> Tensor:
        return self._binary("pow", other)

    def __rpow__(self, other: TensorLike) -> Tensor:
        return self._binary("pow", other, True)

    def __mod__(self, other: TensorLike) -> Tensor:
        return self._binary("fmod", other)

    def __rmod__(self, other: TensorLike) -> Tensor:
        return self._binary("fmod", other, True)

    def __matmul__(self, other: TensorLike) -> Tensor:
        return self._binary("matmul", other)

    def __rmatmul__(self, other: TensorLike) -> Tensor:
        return self._binary("matmul", other, True)

    def __and__(self, other: TensorLike) -> Tensor:
        return self._binary("logical_and", other)

    def __rand__(self, other: TensorLike) -> Tensor:
        return self._binary("logical_and", other, True)

    def __or__(self, other: TensorLike) -> Tensor:
        return self._binary("logical_or", other)

    def __ror__(self, other: TensorLike) -> Tensor:
        return self._binary("logical_or", other, True)

    def __neg__(self) -> Tensor:
        return self._ops().negate(self)

    def __invert__(self) -> Tensor:
        return self._ops().logical_not(self)

    def __iadd__(self, o: TensorLike) -> Tensor:
        with undo_on_error():  # a refused add_ leaves no constant behind
            self._ops().add_(self, self._ensure_tensor(o))
        return self

    def __getitem__(self, key: Any) -> Tensor:
        return self._ops().getitem(self, key)

    # ---- shape methods ----
    def reshape(self, shape: tuple[int, ...]) -> Tensor:
        return self._ops().reshape(self, shape)

    def reshape_(self, shape: tuple[int, ...]) -> Tensor:
        return self._ops().reshape_(self, shape)

    def flatten(self) -> Tensor:
        return self._ops().flatten(self)

    def flatten_(self) -> Tensor:
        return self._ops().flatten_(self)

    def transpose(self, permutation: tuple[int, ...] | None = None) -> Tensor:
        return self._ops().transpose(self, permutation)

    def transpose_(self, permutation: tuple[int, ...] | None = None) -> Tensor:
        return self._ops().transpose_(self, permutation)

    def detach(self) -> Tensor:
        return self._ops().detach(self)

    def detach_(self) -> Tensor:
        return self._ops().detach_(self)

    @property
    def T(self) -> Tensor:
        return self.transpose()

    @property
    def T_(self) -> Tensor:
        return self.transpose_()

    def diag(self) -> Tensor:
        if self.rank != 2:
            raise ValueError(
                f"Diag expected a 2d tensor. Tensor {self._id!r} has shape {self.shape}"
            )
        n = min(self.shape)
        return self.flatten()[0 : n * self.shape[1] : self.shape[1] + 1]

    def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
        """``ops.ipu_copy(self, destination, source)``; ``source`` defaults to the IPU of
        the tensor's producer (a variable or constant has none: its ``copy_to_ipu`` asks
        for ``src``)."""
        return self._ops().ipu_copy(self, destination, source)


class Variable(Tensor):
    """A tensor whose value persists across runs: initialised from host data, read back with
    ``Session.get_tensor_data``."""

    _data: np.ndarray  # host data: shape_on_host (the initial value, then the host copy)
    _replica_grouping: ReplicaGrouping
    _retrieval_mode: str
    _remote: tuple[Any, int] | None  # (RemoteBuffer, entry)
    _shard_over: int | None  # replica-sharded: how many replicas share one copy

    @classmethod
    def _create_variable(
        cls,
        graph: Graph,
        tensor_id: str,
        spec: TensorSpec,
        data: np.ndarray,
        replica_grouping: ReplicaGrouping,
        retrieval_mode: str,
    ) -> Variable:
        self = cls.__new__(cls)
        self._setup(graph, tensor_id, spec)
        self._data = data  # host data: shape_on_host (the initial value, then the host copy)
        self._replica_grouping = replica_grouping
        self._retrieval_mode = retrieval_mode
        self._remote = None
        self._shard_over = None
        return self

    def copy_to_ipu(self, dst: int, src: int) -> Tensor:  # type: ignore[override]
        """``ops.ipu_copy(self, dst, src)`` with ``src`` required, as in PopXL: a variable
        or constant (which shares this method) has no producer to take the source IPU from."""
        return self._ops().ipu_copy(self, dst, src)

    @property
    def replica_grouping(self) -> ReplicaGrouping:
        return self._replica_grouping

    @property
    def retrieval_mode(self) -> str:
        return self._retrieval_mode

    @property
    def shape_on_replica(self) -> tuple[int, ...]:
        return self.shape

    @property
    def shape_on_host(self) -> tuple[int, ...]:
        groups = self._replica_grouping.num_groups
        return (groups, *self.shape) if groups > 1 else self.shape

    # ---- host storage (Tremula: what a Session reads and writes) ----
    @property
    def host_data(self) -> np.ndarray:
        """The host copy, ``shape_on_host`` (the initial value until a Session writes it)."""
        return self._data

    def store_host(self, value: np.ndarray) -> None:
        """Set the host copy (``shape_on_host``); a memmap is written and flushed, a read-only
        one left as it is."""
        if isinstance(self._data, np.memmap):
            if self._data.flags.writeable:
                self._data[...] = value
                self._data.flush()
        else:
            self._data = np.array(value, dtype=self.dtype.as_numpy())  # float8: codes

    @property
    def remote(self) -> tuple[Any, int] | None:
        """``(RemoteBuffer, entry)`` of a variable that lives in a remote buffer, else None."""
        return self._remote

    @property
    def shard_over(self) -> int | None:
        """The number of replicas the variable is sharded over (None: not sharded)."""
        return self._shard_over


class Constant(Tensor):
    """A tensor with a value fixed when the graph is built."""

    _data: np.ndarray

    @classmethod
    def _create_constant(
        cls, graph: Graph, tensor_id: str, spec: TensorSpec, data: np.ndarray
    ) -> Constant:
        self = cls.__new__(cls)
        self._setup(graph, tensor_id, spec)
        self._data = data
        return self

    copy_to_ipu = Variable.copy_to_ipu  # type: ignore[assignment]  # src required

    @property
    def host_data(self) -> np.ndarray:
        """The constant's value."""
        return self._data


#: Annotate a ``create_graph`` function parameter to pass that input by reference.
TensorByRef = NewAliasAnnotation("TensorByRef", Tensor)

#: Host values PopXL turns into tensor data (:func:`popxl.utils.to_numpy`).
ScalarType = Union[int, float, bool]  # noqa: UP007  (PopXL's alias, a runtime object)
HostScalarTensor = Union[np.ndarray, ScalarType]  # noqa: UP007
HostTensor = Union[np.ndarray, Iterable[ScalarType]]  # noqa: UP007
#: The types ``isinstance`` accepts as host tensors (torch tensors are iterable too).
host_tensor_types: tuple[type, ...] = (np.ndarray, Iterable)
#: What an op or operator accepts where a tensor is expected (host values become constants).
TensorLike = Union["Tensor", HostScalarTensor, Iterable[ScalarType]]


# The factories, under PopXL's names in this module (after the classes they build).
from tremula.popxl import _remote_variables, _variables  # noqa: E402

constant = _variables.constant
variable = _variables.variable
graph_input = _variables.graph_input
graph_output = _variables.graph_output
remote_variable = _remote_variables.remote_variable
remote_replica_sharded_variable = _remote_variables.remote_replica_sharded_variable
replica_sharded_buffer = _remote_variables.replica_sharded_buffer
replica_sharded_variable = _remote_variables.replica_sharded_variable
