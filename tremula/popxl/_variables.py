"""The factories of constants and variables (``popxl.constant``, ``popxl.variable``), of graph
inputs and outputs (``popxl.graph_input``, ``popxl.graph_output``) and what the remote and
replica-sharded factories share with them: the main-graph check, the
replica grouping, the host data of a grouping and the making of a variable. Their public
home is :mod:`tremula.popxl.tensor`, as in PopXL."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.errors import VariableDataError
from tremula.popxl import dtypes
from tremula.popxl.tensor import Constant, Tensor, TensorSpec, Variable
from tremula.popxl.utils import to_numpy

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.replica_grouping import ReplicaGrouping


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
    t = Constant._create_constant(
        graph,
        graph._create_tensor_id(name),
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
    return replica_grouping._for_ir(graph.ir, what)


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
    from tremula.popxl.replica_grouping import retrieval_mode_of

    mode = retrieval_mode_of(retrieval_mode, what)
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


#: where the memmap warning is logged (besides the Python warning)
_LOG = logging.getLogger("popxl")


def _warn_memmap_copied(what: str, rg: ReplicaGrouping) -> None:
    """Warn (a ``UserWarning``, also logged at WARNING on the ``popxl`` logger) that a
    variable's ``np.memmap`` data cannot be kept: with a non-constant grouping the
    variable holds one row per group of the grouping's constant refinement
    (``data[rg.to_device_map]``), which is a copy in memory."""
    import warnings

    text = (
        f"{what}: the data is a np.memmap, but {rg!r} is not a constant replica grouping, "
        f"so the variable stores a copy of it in memory, one row per group of "
        f"{rg.const_rg!r} (data[replica_grouping.to_device_map]); the memmap is not kept: "
        f"weights_to_host will not write into it and get_tensor_data will not return it"
    )
    warnings.warn(text, UserWarning, stacklevel=4)
    _LOG.warning(text)


def _add_variable(
    graph: Graph,
    arr: np.ndarray,
    shape: tuple[int, ...],
    rg: ReplicaGrouping,
    mode: str,
    name: str | None,
    meta_shape: tuple[int, ...] = (),
    what: str = "variable",
) -> Variable:
    if isinstance(arr, np.memmap) and not rg.is_const:
        _warn_memmap_copied(what, rg)
        arr = np.array(arr)
    spec = TensorSpec(shape, dtypes.dtype.as_dtype(arr.dtype), meta_shape)
    t = Variable._create_variable(graph, graph._create_tensor_id(name), spec, arr, rg, mode)
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
    what = _named("variable", name)
    rg = _grouping(graph, replica_grouping, what)
    arr, shape, mode = _host_data(
        data, dtype, downcast, rg, retrieval_mode, what, log2_scale, nan_on_overflow
    )
    return _add_variable(graph, arr, shape, rg, mode, name, what=what)


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
    spec = TensorSpec(tuple(shape), dtype, meta_shape or ())
    t = Tensor._create(graph, graph._create_tensor_id(name), spec)
    graph._add_tensor(t)
    graph._add_input(t, by_ref)
    return t


def graph_output(t: Tensor) -> None:
    """Mark ``t`` as an output of the current graph.

    Raises:
        TypeError: ``t`` is not a Tensor (PopXL's ``check_in_graph``).
        ValueError: ``t`` is not in the current graph (PopXL's ``check_in_graph``).
    """
    from tremula.popxl.context import get_current_graph
    from tremula.popxl.ops.utils import check_in_graph

    graph = get_current_graph()
    check_in_graph(graph, t=t)
    graph._add_output(t)
