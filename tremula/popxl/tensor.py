"""PopXL tensors: ``Tensor`` (an activation, produced by an op), ``Variable`` (state that
persists across runs), ``Constant``; ``TensorSpec``; and the factories ``variable``,
``constant``, ``remote_variable``, ``remote_replica_sharded_variable``,
``replica_sharded_buffer``, ``replica_sharded_variable``, ``graph_input``, ``graph_output``."""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from tremula.errors import UndefinedValue, VariableDataError
from tremula.popxl import dtypes
from tremula.popxl.context import get_current_context, undo_on_error
from tremula.popxl.typing_ import NewAliasAnnotation
from tremula.popxl.utils import to_numpy

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.ir import Ir
    from tremula.popxl.ops.base import Op
    from tremula.popxl.replica_grouping import ReplicaGrouping


class TensorSpec(Mapping):
    """Shape, dtype and meta shape of a tensor; a Mapping so that ``**spec`` works."""

    def __init__(
        self, shape: tuple[int, ...], dtype: dtypes.dtype, meta_shape: tuple[int, ...] = ()
    ) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtypes.dtype.as_dtype(dtype)
        self.meta_shape = tuple(int(s) for s in meta_shape)

    def _dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "dtype": self.dtype, "meta_shape": self.meta_shape}

    def __getitem__(self, key: str) -> Any:
        return self._dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return 3

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSpec) and self._dict() == other._dict()

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype.name, self.meta_shape))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype}, meta_shape={self.meta_shape})"


class Tensor:
    """A tensor of a graph. Identity semantics: ``==`` and ``hash`` compare identity (use
    ``ops.equal`` for element-wise comparison)."""

    __array_ufunc__ = None  # NumPy defers to our reflected operators

    def __init__(
        self, graph: Graph, tensor_id: str, name: str, spec: TensorSpec, producer: Op | None = None
    ) -> None:
        self._graph = graph
        self._id = tensor_id
        self._name = name
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
        """The virtual IPU and tile set of the tensor, as PopART finds them: its producer's,
        else those of the first op that consumes it; ``(-1, "undefined")`` for a tensor no
        op touches (a variable, constant or graph input not used yet).

        Raises:
            UndefinedValue: the IPU (or tile set) is undefined and asked to raise.
        """
        op = self._producer
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
    def location_info(self) -> None:
        return None

    @property
    def in_sync_with_ipu(self) -> bool:
        return True

    @property
    def producer(self) -> Op | None:
        return self._producer

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
        if not self.shape:
            raise ValueError(f"Tensor {self._id!r} doesn't have a length: it is a scalar")
        return self.shape[0]

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(f"tensor {self._id!r} is not iterable (index it instead)")

    def __contains__(self, item: object) -> bool:
        raise TypeError(f"`in` is not supported on tensor {self._id!r} (use ops.equal)")

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of tensor {self._id!r} is undefined on the host")

    # ---- operators (ops imported on use: the op layer builds on this module) ----
    def _ops(self) -> Any:
        from tremula.popxl import ops

        return ops

    def _ensure(self, value: Any) -> Tensor:
        if isinstance(value, Tensor):
            return value
        data = np.asarray(value)
        if data.size == 0:
            raise ValueError(f"cannot combine tensor {self._id!r} with an empty value")
        return constant(data, dtype=self.dtype)

    def _binary(self, op_name: str, other: Any, reflected: bool = False) -> Tensor:
        """``ops.<op_name>(self, other)`` (``(other, self)`` when reflected); a host value
        ``other`` becomes a constant of this tensor's dtype, removed again if the op is
        refused."""
        fn = getattr(self._ops(), op_name)
        with undo_on_error():
            o = self._ensure(other)
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
            self._ops().add_(self, self._ensure(o))
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
            raise ValueError(f"diag: tensor {self._id!r} must be 2-D, has shape {self.shape}")
        n = min(self.shape)
        return self.flatten()[0 : n * self.shape[1] : self.shape[1] + 1]

    def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
        return self._ops().ipu_copy(self, destination, source)


class Variable(Tensor):
    """A tensor whose value persists across runs: initialised from host data, read back with
    ``Session.get_tensor_data``."""

    def __init__(
        self,
        graph: Graph,
        tensor_id: str,
        name: str,
        spec: TensorSpec,
        data: np.ndarray,
        replica_grouping: ReplicaGrouping,
        retrieval_mode: str,
    ) -> None:
        super().__init__(graph, tensor_id, name, spec)
        self._data = data  # host data: shape_on_host (the initial value, then the host copy)
        self._replica_grouping = replica_grouping
        self._retrieval_mode = retrieval_mode
        self._remote: tuple[Any, int] | None = None  # (RemoteBuffer, entry)
        self._shard: tuple[Any, int] | None = None  # (shard tensor, shard_over)

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


class Constant(Tensor):
    """A tensor with a value fixed when the graph is built."""

    def __init__(
        self, graph: Graph, tensor_id: str, name: str, spec: TensorSpec, data: np.ndarray
    ) -> None:
        super().__init__(graph, tensor_id, name, spec)
        self._data = data


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


def _new_id(graph: Graph, name: str | None, default: str) -> tuple[str, str]:
    scope = get_current_context().name_scope
    base = name or default
    full = f"{scope}/{base}" if scope else base
    return graph._unique_id(full), full


def constant(
    data: Any,
    dtype: dtypes.dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Constant:
    """A constant in the current graph. A float8 ``dtype`` takes float8 / uint8 codes, or
    numbers with ``log2_scale`` (see :func:`to_numpy`)."""
    from tremula.popxl.context import get_current_graph

    arr = to_numpy(data, dtype, downcast, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    graph = get_current_graph()
    tid, short = _new_id(graph, name, "c")
    t = Constant(
        graph,
        tid,
        short,
        TensorSpec(arr.shape, dtypes.dtype.as_dtype(arr.dtype)),
        np.array(arr, order="C"),
    )
    graph._add_tensor(t)
    return t


def _named(factory: str, name: str | None) -> str:
    """How messages name a variable being made: ``variable 'w'`` (or ``variable``)."""
    return f"{factory} {name!r}" if name else factory


def _main_graph(what: str) -> Graph:
    from tremula.popxl.context import get_current_graph

    graph = get_current_graph()
    if graph is not graph.ir.main_graph:
        raise ValueError(
            f"You cannot initialise a variable tensor within a graph other than the main "
            f"graph ({what} in {graph!r}): variables can only be created in the main graph"
        )
    return graph


def _grouping(graph: Graph, replica_grouping: ReplicaGrouping | None, what: str) -> ReplicaGrouping:
    from tremula.popxl.replica_grouping import ReplicaGrouping

    if replica_grouping is None:
        return graph.ir.replica_grouping()
    if not isinstance(replica_grouping, ReplicaGrouping):
        raise TypeError(
            f"{what}: replica_grouping must be a popxl.ReplicaGrouping, got "
            f"{type(replica_grouping).__name__}"
        )
    if replica_grouping._ir is not graph.ir:
        raise ValueError(f"{what}: {replica_grouping!r} belongs to another Ir")
    return replica_grouping


def _host_data(
    data: Any,
    dtype: dtypes.dtype | None,
    downcast: bool,
    rg: ReplicaGrouping,
    retrieval_mode: str | None,
    what: str,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> tuple[np.ndarray, tuple[int, ...], str]:
    """Checked host data of a variable: (array of shape_on_host, shape on a replica, mode)."""
    mode = retrieval_mode or "one_per_group"
    if mode not in ("one_per_group", "all_replicas"):
        raise ValueError(
            f"{what}: retrieval_mode must be 'one_per_group' or 'all_replicas', got "
            f"{retrieval_mode!r}"
        )
    arr = to_numpy(data, dtype, downcast, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    if isinstance(data, np.memmap) and dtype is None:
        arr = data  # kept by reference: weights_to_host writes into it and flushes
    shape = arr.shape
    if rg.num_groups > 1:
        if not shape or shape[0] != rg.num_groups:
            raise VariableDataError(
                f"{what}: {rg!r} has {rg.num_groups} groups, so the data needs a leading "
                f"axis of {rg.num_groups} (one row per group); got shape {shape} (PopART: "
                f"Return mismatch with possibly appended outer dimension)"
            )
        shape = shape[1:]
    return arr, shape, mode


def _add_variable(
    graph: Graph,
    arr: np.ndarray,
    shape: tuple[int, ...],
    rg: ReplicaGrouping,
    mode: str,
    name: str | None,
    meta_shape: tuple[int, ...] = (),
) -> Variable:
    if isinstance(arr, np.memmap) and not rg.is_const:
        import warnings

        warnings.warn(
            f"variable {name!r}: a memmap with the non-constant {rg!r} is copied (its rows "
            f"are regrouped), so weights_to_host does not write into the memmap",
            UserWarning,
            stacklevel=3,
        )
        arr = np.array(arr)
    tid, short = _new_id(graph, name, "t")
    spec = TensorSpec(shape, dtypes.dtype.as_dtype(arr.dtype), meta_shape)
    t = Variable(graph, tid, short, spec, arr, rg, mode)
    graph._add_tensor(t)
    return t


def variable(
    data: Any,
    dtype: dtypes.dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Variable:
    """A variable in the main graph (``ValueError`` elsewhere).

    Args:
        data: the initial value (NumPy-convertible; a ``np.memmap`` is kept by reference).
            With a grouping of several groups it has a leading axis of one row per group,
            row ``g`` initialising every replica of group ``g``.
        dtype: the dtype (default: the data's, 64-bit types downcast unless ``downcast`` is
            False).
        name: the tensor name.
        downcast: downcast 64-bit host data to 32 bits.
        replica_grouping: the grouping of replicas sharing a value (default: all replicas).
        retrieval_mode: ``"one_per_group"`` (default) or ``"all_replicas"``: what
            ``Session.get_tensor_data`` returns.
        log2_scale, nan_on_overflow: for a float8 ``dtype`` and data that are not float8
            or uint8 codes: the data are encoded as ``cast(data * 2**log2_scale)``
            (``log2_scale`` required), NaN or saturating on overflow (default NaN).

    Raises:
        ValueError: not in the main graph, or a bad retrieval mode.
        VariableDataError: (a ``ValueError`` and ``popart.popart_exception``) data
            without the leading group axis of a grouping of several groups.
    """
    graph = _main_graph("variable")
    rg = _grouping(graph, replica_grouping, "variable")
    what = _named("variable", name)
    arr, shape, mode = _host_data(
        data, dtype, downcast, rg, retrieval_mode, what, log2_scale, nan_on_overflow
    )
    return _add_variable(graph, arr, shape, rg, mode, name)


def _check_remote(buffer: Any, graph: Graph, what: str) -> None:
    from tremula.popxl.remote_buffer import RemoteBuffer

    if not isinstance(buffer, RemoteBuffer):
        raise TypeError(
            f"{what}: remote_buffer must be a RemoteBuffer, got {type(buffer).__name__}"
        )
    if buffer._current_ir is not graph.ir:
        raise ValueError(f"{what}: {buffer!r} belongs to another Ir")


def _entry(offset: Any, what: str) -> int:
    """The buffer entry: a non-negative integer (its range is checked against the buffer's
    ``entries`` when a Session compiles the Ir: PopXL programs may grow ``entries`` later)."""
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"{what}: offset must be an int, got {type(offset).__name__} {offset!r}")
    if offset < 0:
        raise ValueError(f"{what}: offset {offset} must be >= 0")
    return int(offset)


def remote_variable(
    data: Any,
    remote_buffer: Any,
    offset: int = 0,
    dtype: dtypes.dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = "one_per_group",
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Variable:
    """A variable stored in entry ``offset`` of a remote buffer (not in tile memory): each
    replica's entry holds its group's value. Read it with ``ops.remote_load(buffer, offset)``;
    ``Session`` writes the entry when weights go to the device and reads it back.

    Args:
        data, dtype, name, downcast, replica_grouping, retrieval_mode: as :func:`variable`.
        remote_buffer: the buffer. An entry holds the variable's value on a replica: the
            buffer's tensor shape is the variable's shape without the group axis (or any
            shape of as many elements), its dtype the variable's. As in PopXL this is not
            compared here (``remote_buffer.entries`` may still grow): ``Session`` checks it.
        offset: the buffer entry (``0 <= offset < entries`` when the Session is made).

    Raises:
        ValueError: as :func:`variable`, or a negative offset.
        TypeError: ``remote_buffer`` is not a RemoteBuffer, or ``offset`` not an int.
    """
    what = _named("remote_variable", name)
    graph = _main_graph(what)
    rg = _grouping(graph, replica_grouping, what)
    _check_remote(remote_buffer, graph, what)
    arr, shape, mode = _host_data(
        data, dtype, downcast, rg, retrieval_mode, what, log2_scale, nan_on_overflow
    )
    entry = _entry(offset, what)
    v = _add_variable(graph, arr, shape, rg, mode, name)
    v._remote = (remote_buffer, entry)
    return v


def _shard_over(rg: ReplicaGrouping, shard_over: int | None, what: str) -> int:
    n = rg.group_size if shard_over is None else shard_over
    if isinstance(n, bool) or int(n) != n or not 0 < n <= rg.group_size or rg.group_size % n:
        raise ValueError(
            f"{what}: shard_over {shard_over!r} must divide the group size {rg.group_size} "
            f"of {rg!r} (1 <= shard_over <= {rg.group_size})"
        )
    if rg.const_rg.group_size % n:
        raise NotImplementedError(
            f"{what}: sharding over {n} replicas of the non-constant {rg!r}, whose constant "
            f"groups have {rg.const_rg.group_size} replicas"
        )
    return int(n)


#: shard_over of the buffers made by replica_sharded_buffer
_SHARD_OVER: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def replica_sharded_buffer(
    shape: tuple[int, ...],
    dtype: dtypes.dtype,
    replica_grouping: ReplicaGrouping | None = None,
    shard_over: int | None = None,
    entries: int = 1,
) -> Any:
    """A RemoteBuffer for replica-sharded (RTS) values of ``shape`` (on a replica).

    Its tensor shape is the flat shard ``(ceil(nelms / shard_over),)`` and its ``meta_shape``
    is ``shape``. A group's value is sharded once over group members ``0..shard_over-1``,
    once over the next ``shard_over`` members, and so on.

    Args:
        shape: the shape of the (unsharded) value on a replica.
        dtype: its dtype.
        replica_grouping: the grouping of the variables it will hold (default: all replicas).
        shard_over: how many members of a group share one copy of the value (default: the
            group size); it must divide the group size.
        entries: the number of entries.

    Raises:
        ValueError: ``shard_over`` does not divide the group size, or bad ``entries``.
    """
    from tremula.popxl.context import get_current_graph
    from tremula.popxl.remote_buffer import RemoteBuffer

    graph = get_current_graph()
    rg = _grouping(graph, replica_grouping, "replica_sharded_buffer")
    n = _shard_over(rg, shard_over, "replica_sharded_buffer")
    shape = tuple(int(d) for d in shape)
    buffer = RemoteBuffer((-(-math.prod(shape) // n),), dtype, entries)
    buffer.meta_shape = shape
    _SHARD_OVER[buffer] = n  # read by remote_replica_sharded_variable
    return buffer


def _buffer_shard_over(rg: ReplicaGrouping, nelms: int, buffer: Any, what: str) -> int:
    """The ``shard_over`` a buffer not made by :func:`replica_sharded_buffer` implies: the
    group size when its shards fit the buffer's entries, else the largest divisor of the
    group size whose shards do (``Session`` refuses a buffer no divisor fits)."""
    size = math.prod(buffer.tensor_shape)
    fits = [n for n in range(rg.group_size, 0, -1) if rg.group_size % n == 0]
    fits = [n for n in fits if -(-nelms // n) == size and rg.const_rg.group_size % n == 0]
    return fits[0] if fits else _shard_over(rg, None, what)


def _sharded(
    data: Any,
    buffer: Any,
    offset: int,
    dtype: dtypes.dtype | None,
    name: str | None,
    downcast: bool,
    replica_grouping: ReplicaGrouping | None,
    retrieval_mode: str | None,
    what: str,
    make_buffer: bool = False,
    shard_over: int | None = None,
    fp8: tuple[int | None, bool | None] = (None, None),
) -> Variable:
    """A remote replica-sharded variable (checked before anything is added to the Ir);
    ``fp8`` is ``(log2_scale, nan_on_overflow)``."""
    graph = _main_graph(what)
    rg = _grouping(graph, replica_grouping, what)
    arr, shape, mode = _host_data(data, dtype, downcast, rg, retrieval_mode, what, *fp8)
    if make_buffer:
        _shard_over(rg, shard_over, what)
        buffer = replica_sharded_buffer(shape, dtypes.dtype.as_dtype(arr.dtype), rg, shard_over)
    _check_remote(buffer, graph, what)
    if buffer.meta_shape and tuple(buffer.meta_shape) != shape:
        raise ValueError(
            f"Cannot use {buffer!r} for replica sharded variable {name!r} of shape {shape}: "
            f"the buffer's meta_shape {tuple(buffer.meta_shape)} differs"
        )
    n = _SHARD_OVER.get(buffer) or _buffer_shard_over(rg, math.prod(shape), buffer, what)
    entry = _entry(offset, what)
    buffer.meta_shape = shape
    v = _add_variable(graph, arr, shape, rg, mode, name)
    v._remote = (buffer, entry)
    v._shard = (None, n)
    return v


def remote_replica_sharded_variable(
    data: Any,
    remote_buffer: Any,
    offset: int = 0,
    dtype: dtypes.dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = "one_per_group",
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Variable:
    """A variable stored sharded in entry ``offset`` of a remote buffer: each replica holds
    ``ceil(nelms / shard_over)`` flat elements of its group's value (zero-padded). Sets the
    buffer's ``meta_shape`` to the variable's shape. Needs ``replication_factor > 1``.

    Args:
        data, dtype, name, downcast, replica_grouping, retrieval_mode: as :func:`variable`.
        remote_buffer: a buffer of flat shards, e.g. from :func:`replica_sharded_buffer`
            (whose ``shard_over`` is used; otherwise the divisor of the group size whose
            shards fit the buffer, preferring the group size). Its shape and dtype are
            checked by ``Session``, as for :func:`remote_variable`.
        offset: the buffer entry.

    Raises:
        ValueError: replication 1, a buffer whose ``meta_shape`` is another shape, and as
            :func:`remote_variable`.
    """
    what = _named("remote_replica_sharded_variable", name)
    graph = _main_graph(what)
    if graph.ir.replication_factor <= 1:
        raise ValueError(f"{what}: replica sharding needs replication_factor > 1")
    return _sharded(
        data, remote_buffer, offset, dtype, name, downcast, replica_grouping, retrieval_mode, what,
        fp8=(log2_scale, nan_on_overflow),
    )  # fmt: skip


def replica_sharded_variable(
    data: Any,
    dtype: dtypes.dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    shard_over: int | None = None,
    retrieval_mode: str | None = "one_per_group",
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> tuple[Variable, Tensor]:
    """A replica-sharded variable and its shard on the device.

    The variable lives in a new :func:`replica_sharded_buffer`; the shard (flat,
    ``ceil(nelms / shard_over)`` elements, ``meta_shape`` the variable's shape) is loaded
    from it when weights go to the device and stored back when they come to the host, so it
    behaves like on-device state. Use ``var`` with ``Session.get/write_*`` and ``shard`` in
    the graph (``ops.collectives.replicated_all_gather(shard)`` gives the full value).

    Returns:
        ``(var, shard)``.

    Raises:
        ValueError: as :func:`variable`, or ``shard_over`` not dividing the group size.
    """
    what = _named("replica_sharded_variable", name)
    var = _sharded(
        data,
        None,
        0,
        dtype,
        name,
        downcast,
        replica_grouping,
        retrieval_mode,
        what,
        make_buffer=True,
        shard_over=shard_over,
        fp8=(log2_scale, nan_on_overflow),
    )
    from tremula.popxl.replica_grouping import shard_rows

    rg, n = var.replica_grouping, var._shard[1]  # type: ignore[index]
    ungrouped = var.ir.replica_grouping(group_size=1)
    rows = shard_rows(rg, n, var._data, var.shape)
    shard = _add_variable(
        var.graph,
        rows if rg.num_replicas > 1 else rows[0],
        rows.shape[1:],
        ungrouped,
        "one_per_group",
        f"{var.name}_shard",
        var.shape,
    )
    var._shard = (shard, n)
    return var, shard


def graph_input(
    shape: tuple[int, ...],
    dtype: dtypes.dtype,
    name: str | None = None,
    by_ref: bool = False,
    meta_shape: tuple[int, ...] | None = None,
) -> Tensor:
    """A new input of the current graph."""
    from tremula.popxl.context import get_current_graph

    graph = get_current_graph()
    tid, short = _new_id(graph, name, "input")
    t = Tensor(graph, tid, short, TensorSpec(tuple(shape), dtype, meta_shape or ()))
    graph._add_tensor(t)
    graph._add_input(t, by_ref)
    return t


def graph_output(t: Tensor) -> None:
    """Mark ``t`` as an output of the current graph (``ValueError`` if it is not in it)."""
    from tremula.popxl.context import get_current_graph

    graph = get_current_graph()
    if not isinstance(t, Tensor) or t.graph is not graph:
        where = t.graph.name if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(
            f"graph_output: {t!r} is not a tensor of the current graph "
            f"{graph.name!r} (it belongs to {where!r})"
        )
    graph._add_output(t)
