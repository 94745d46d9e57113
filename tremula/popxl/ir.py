"""``Ir``: a PopXL program: its main graph, subgraphs, streams, remote buffers, replication."""

from __future__ import annotations

import inspect
import itertools
import typing
from collections.abc import Callable, Iterable
from typing import Any

from tremula.popxl.graph import Graph, new_graph
from tremula.popxl.module import Module
from tremula.popxl.replica_grouping import ReplicaGrouping
from tremula.popxl.tensor import Tensor, TensorByRef, TensorSpec, graph_input, graph_output

_IR_IDS = itertools.count()


class Ir:
    """A PopXL IR. ``Ir(replication=R)`` runs ``R`` replicas of the program."""

    def __init__(self, replication: int | str = 1) -> None:
        if replication == "popdist":
            replication = 1  # single process: popdist would give the local replica count
        if int(replication) != replication or int(replication) < 1:
            raise ValueError(f"Ir: replication must be a positive integer, got {replication!r}")
        self._id = next(_IR_IDS)
        self._replication = int(replication)
        self._num_host_transfers = 1
        self._graph_ids = itertools.count()
        self._subgraph_counter = itertools.count()
        self._rb_counter = itertools.count(1)
        self._graphs: list[Graph] = []
        self._streams: list[Any] = []
        self._stream_names: set[str] = set()
        self._remote_buffers: list[Any] = []
        self._prepared = False
        self._main = self._new_graph("main_graph")

    # ---- graphs ----
    def _new_graph(self, name: str) -> Graph:
        g = new_graph(self, name, next(self._graph_ids))
        self._graphs.append(g)
        return g

    @property
    def main_graph(self) -> Graph:
        return self._main

    @property
    def graphs(self) -> tuple[Graph, ...]:
        return tuple(self._graphs)

    def create_empty_graph(self, name: str | None = None) -> Graph:
        return self._new_graph(name or f"graph_subgraph({next(self._subgraph_counter)})")

    def create_graph(self, fn: Callable[..., Any] | Module, *args: Any, **kwargs: Any) -> Graph:
        """Trace ``fn`` (or ``module.build``) into a new subgraph. Tensor or TensorSpec
        arguments become graph inputs of the same spec (the parent tensors are not
        connected); other arguments pass through; the returned tensors become outputs."""
        func = fn.build if isinstance(fn, Module) else fn
        qual = (
            type(fn).__name__
            if isinstance(fn, Module)
            else getattr(fn, "__qualname__", type(fn).__name__)
        )
        name = f"{qual.replace('.<locals>', '')}_subgraph({next(self._subgraph_counter)})"
        sig = inspect.signature(func)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as err:
            raise ValueError(
                f"create_graph({qual}): arguments do not match the signature {sig}: {err}"
            ) from None
        hints = _hints(func)
        graph = self._new_graph(name)
        with graph:
            call_args, call_kwargs = _trace_inputs(sig, bound, hints)
            result = func(*call_args, **call_kwargs)
            for out in _outputs(result, qual):
                graph_output(out)
        return graph

    # ---- settings ----
    @property
    def num_host_transfers(self) -> int:
        return self._num_host_transfers

    @num_host_transfers.setter
    def num_host_transfers(self, value: int) -> None:
        if int(value) != value or value < 1:
            raise ValueError(f"num_host_transfers must be a positive integer, got {value!r}")
        self._num_host_transfers = int(value)

    @property
    def replication_factor(self) -> int:
        return self._replication

    @replication_factor.setter
    def replication_factor(self, value: int) -> None:
        if self._prepared:
            raise RuntimeError("replication_factor cannot change once a Session was created")
        if int(value) != value or value < 1:
            raise ValueError(f"replication_factor must be a positive integer, got {value!r}")
        self._replication = int(value)

    @property
    def instance_replication_factor(self) -> int:
        return self._replication

    def replica_grouping(self, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        return ReplicaGrouping._build(self, stride, group_size)

    def replica_grouping_from_assignments(self, assignment: list[int]) -> ReplicaGrouping:
        return ReplicaGrouping._from_assignments(self, assignment)

    # ---- streams and buffers ----
    def _unique_stream(self, base: str) -> str:
        name, n = base, 0
        while name in self._stream_names:
            n += 1
            name = f"{base}_{n}"
        self._stream_names.add(name)
        return name

    def _next_remote_buffer_id(self) -> int:
        return next(self._rb_counter)

    def _streams_used(self, op_type: str) -> set[Any]:
        return {op.attrs["stream"] for g in self._graphs for op in g.ops if op.type == op_type}

    def get_all_d2h_streams(self) -> set[Any]:
        return self._streams_used("HostStore")

    def get_all_h2d_streams(self) -> set[Any]:
        return self._streams_used("HostLoad")

    # ---- identity ----
    @property
    def id(self) -> int:
        return self._id

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return hash(self._id)

    def __repr__(self) -> str:
        return f"Ir[id={self._id}]"


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:
        return {}


def _is_by_ref(hint: Any) -> bool:
    if hint is TensorByRef:
        return True
    args = typing.get_args(hint)
    return bool(args) and any(a is TensorByRef for a in args)


def _spec_input(value: Tensor | TensorSpec, name: str, by_ref: bool) -> Tensor:
    spec = value.spec if isinstance(value, Tensor) else value
    return graph_input(spec.shape, spec.dtype, name, by_ref, spec.meta_shape or None)


def _as_input(value: Any, name: str, by_ref: bool) -> Any:
    """A graph input for a Tensor/TensorSpec, a list of them for a list, else the value."""
    if isinstance(value, (Tensor, TensorSpec)):
        return _spec_input(value, name, by_ref)
    if isinstance(value, (list, tuple)) and value:
        kinds = {isinstance(v, (Tensor, TensorSpec)) for v in value}
        if kinds == {True}:
            made = [_spec_input(v, f"{name}_{i}", by_ref) for i, v in enumerate(value)]
            return type(value)(made)
        if len(kinds) == 2:
            raise TypeError(f"create_graph: argument {name!r} mixes tensors and non-tensors")
    return value


def _trace_inputs(
    sig: inspect.Signature, bound: inspect.BoundArguments, hints: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for pname, value in bound.arguments.items():
        kind = sig.parameters[pname].kind
        by_ref = _is_by_ref(hints.get(pname))
        if kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(_as_input(v, f"{pname}_{i}", by_ref) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update({k: _as_input(v, k, by_ref) for k, v in value.items()})
        elif kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[pname] = _as_input(value, pname, by_ref)
        else:
            args.append(_as_input(value, pname, by_ref))
    return args, kwargs


def _outputs(result: Any, qual: str) -> Iterable[Tensor]:
    if result is None:
        return ()
    if isinstance(result, Tensor):
        return (result,)
    if isinstance(result, Iterable) and not isinstance(result, (str, bytes)):
        items = list(result)
        if all(isinstance(t, Tensor) for t in items):
            return items
    raise ValueError(
        f"create_graph({qual}): the function must return None, a Tensor or an "
        f"iterable of Tensors, got {type(result).__name__}"
    )
