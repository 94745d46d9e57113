"""Remote and replica-sharded variables: ``remote_variable``,
``remote_replica_sharded_variable``, ``replica_sharded_buffer``, ``replica_sharded_variable``
(PopXL's ``popxl.tensor`` names them; their home is here). A remote variable lives in an
entry of a ``RemoteBuffer``; a replica-sharded one is split over the replicas of its group,
each holding one shard (``shard_over`` replicas share the variable's elements).
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.popxl import dtypes
from tremula.popxl._variables import _add_variable, _grouping, _host_data, _main_graph, _named
from tremula.popxl.tensor import Tensor, Variable

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.replica_grouping import ReplicaGrouping


def _check_remote(buffer: Any, graph: Graph, what: str) -> None:
    from tremula.popxl.remote_buffer import RemoteBuffer

    if not isinstance(buffer, RemoteBuffer):
        raise TypeError(
            f"{what}: remote_buffer must be a RemoteBuffer, got {type(buffer).__name__}"
        )
    if buffer._ir is not graph.ir:
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
    v = _add_variable(graph, arr, shape, rg, mode, name, what=what)
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
    """A RemoteBuffer for replica-sharded (RTS) values of ``shape``.

    ``shape`` is the variable's, with the replica-grouping axis first where the grouping
    has several groups (as PopXL's: popxl-addons' ``create_remote_buffer`` passes
    ``(num_groups, *shape)``); that axis is taken off. The tensor shape is the flat shard
    ``(ceil(nelms / shard_over),)`` of the per-group value and the ``meta_shape`` is that
    value's shape. A group's value is sharded once over group members
    ``0..shard_over-1``, once over the next ``shard_over`` members, and so on.

    Args:
        shape: the shape of the (unsharded) variable: ``(num_groups, *value_shape)`` where
            the grouping has several groups, else the value's shape.
        dtype: its dtype.
        replica_grouping: the grouping of the variables it will hold (default: all replicas).
        shard_over: how many members of a group share one copy of the value (default: the
            group size); it must divide the group size.
        entries: the number of entries.

    Raises:
        ValueError: ``shard_over`` does not divide the group size, ``shape`` lacks the
            grouping's axis, or bad ``entries``.
    """
    from tremula.popxl.context import get_current_graph
    from tremula.popxl.remote_buffer import RemoteBuffer

    graph = get_current_graph()
    rg = _grouping(graph, replica_grouping, "replica_sharded_buffer")
    n = _shard_over(rg, shard_over, "replica_sharded_buffer")
    shape = tuple(int(d) for d in shape)
    if rg.num_groups > 1:
        if not shape or shape[0] != rg.num_groups:
            raise ValueError(
                f"replica_sharded_buffer: shape {shape} must start with the replica "
                f"grouping's {rg.num_groups} groups ({rg}): PopXL takes the variable's shape "
                f"with the grouping axis first, (num_groups, *value_shape)"
            )
        shape = shape[1:]
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
        grouped = (rg.num_groups, *shape) if rg.num_groups > 1 else shape
        buffer = replica_sharded_buffer(grouped, dtypes.dtype.as_dtype(arr.dtype), rg, shard_over)
    _check_remote(buffer, graph, what)
    if buffer.meta_shape and tuple(buffer.meta_shape) != shape:
        named = "" if name is None else f" {name!r}"
        raise ValueError(
            f"Cannot use {buffer!r} for replica sharded variable{named} of shape {shape}: "
            f"the buffer's meta_shape {tuple(buffer.meta_shape)} differs"
        )
    n = _SHARD_OVER.get(buffer) or _buffer_shard_over(rg, math.prod(shape), buffer, what)
    entry = _entry(offset, what)
    buffer.meta_shape = shape
    v = _add_variable(graph, arr, shape, rg, mode, name, what=what)
    v._remote = (buffer, entry)
    v._shard_over = n
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
        raise ValueError(
            f"The IR's global replication factor is {graph.ir.replication_factor}: {what} "
            f"shards a variable between replicas and needs replication_factor > 1"
        )
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
    """A replica-sharded variable and its shard on the device, built as PopXL builds it:
    a :func:`remote_replica_sharded_variable` in a new :func:`replica_sharded_buffer`, whose
    shard (flat, ``ceil(nelms / shard_over)`` elements, ``meta_shape`` the variable's shape)
    is an ``ops.remote_load`` named ``<name>_rts`` made in the weights-from-host fragment
    (so it is loaded each time weights go to the device) and stored back by an
    ``ops.remote_store`` made in the weights-to-host fragment (before weights are read
    back). Use ``var`` with ``Session.get/write_*`` and ``shard`` in the graph
    (``ops.collectives.replicated_all_gather(shard)`` gives the full value); the shard is
    an activation, not a Variable.

    Returns:
        ``(var, shard)``.

    Raises:
        ValueError: as :func:`variable`, or ``shard_over`` not dividing the group size.
    """
    from tremula.popxl.context import _execution_context
    from tremula.popxl.ops.io import remote_load, remote_store
    from tremula.popxl.tensorlocation import ExecutionContext

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
    buffer, entry = var._remote  # type: ignore[misc]
    with _execution_context(ExecutionContext.WeightsFromHostFragment):
        shard = remote_load(buffer, entry, f"{var.name}_rts")
    with _execution_context(ExecutionContext.WeightsToHostFragment):
        remote_store(buffer, entry, shard)
    return var, shard
