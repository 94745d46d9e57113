"""``Ir``: a PopXL program: its main graph, subgraphs, streams, remote buffers, replication."""

from __future__ import annotations

import inspect
import itertools
import typing
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tremula.popxl.graph import Graph, new_graph
from tremula.popxl.module import Module
from tremula.popxl.replica_grouping import ReplicaGrouping
from tremula.popxl.tensor import Tensor, TensorByRef, TensorSpec, graph_input, graph_output

_IR_IDS = itertools.count()


class Ir:
    """A PopXL IR. ``Ir(replication=R)`` runs ``R`` replicas of the program.

    ``Ir(replication="popdist")`` takes the layout of the PopRun job the program runs in
    (``popdist``): ``replication_factor`` is the global replica count, and this instance
    drives ``instance_replication_factor`` of them (replicas ``[offset, offset + L)``);
    without poprun it is one replica. Replica groupings, collectives and variables' host
    data are global; host streams feed this instance's replicas.

    Raises:
        ValueError: a replication that is not a positive integer or ``"popdist"``;
            ``DistributedConfigError`` (a ``ValueError``) when the ``POPDIST_*`` variables
            contradict each other or the MPI world.
    """

    def __init__(self, replication: int | str = 1) -> None:
        from tremula.popdist import env as popdist_env

        self._layout = popdist_env.Layout()
        #: made with "popdist": the replication session options are PopDist's (the layout's)
        self._popdist = replication == "popdist"
        if self._popdist:
            self._layout = popdist_env.layout()
            replication = self._layout.total_replicas
        elif isinstance(replication, str) or int(replication) != replication or replication < 1:
            raise ValueError(
                f"Ir: replication must be a positive integer or 'popdist', got {replication!r}"
            )
        self._id = next(_IR_IDS)
        self._replication = int(replication)
        self._num_host_transfers = 1
        # counters as plain ints, so that a refused call can put them back
        self._next_graph_id = 0
        self._next_subgraph = 0
        self._next_rb = 1
        self._next_intermediate = 0
        self._graphs: list[Graph] = []
        self._streams: list[Any] = []
        self._stream_names: set[str] = set()
        self._remote_buffers: list[Any] = []
        self._prepared = False
        self._main = self._new_graph("main_graph")

    # ---- graphs ----
    def _new_graph(self, name: str) -> Graph:
        g = new_graph(self, name, self._next_graph_id)
        self._next_graph_id += 1
        self._graphs.append(g)
        return g

    def _subgraph_id(self) -> int:
        """The next ``n`` of the ``_subgraph(n)`` graph names."""
        self._next_subgraph += 1
        return self._next_subgraph - 1

    def _intermediate_id(self, base: str) -> str:
        """``<base>__t<n>``, ``n`` counting the calls so far in this Ir (PopART's
        ``Ir::createIntermediateTensorId``, one counter for the bindings' method and the
        clash suffix of ``Graph._create_tensor_id``)."""
        self._next_intermediate += 1
        return f"{base}__t{self._next_intermediate - 1}"

    @property
    def main_graph(self) -> Graph:
        return self._main

    @property
    def graphs(self) -> tuple[Graph, ...]:
        return tuple(self._graphs)

    def create_empty_graph(self, name: str | None = None) -> Graph:
        """An empty subgraph named ``<name>_subgraph(<n>)`` (``n`` counts the Ir's
        subgraphs, as PopXL names them: names are unique)."""
        return self._new_graph(f"{name or 'graph'}_subgraph({self._subgraph_id()})")

    def create_graph(self, fn: Callable[..., Any] | Module, *args: Any, **kwargs: Any) -> Graph:
        """Trace ``fn`` (or ``module.build``) into a new subgraph. Tensor or TensorSpec
        arguments become graph inputs of the same spec (the parent tensors are not
        connected); other arguments pass through; the returned tensors become outputs.

        Raises:
            ValueError: arguments that do not fit ``fn``'s signature, or a return value
                other than None, a Tensor or an iterable of Tensors.
            TypeError: a list, tuple, ``*args`` or ``**kwargs`` mixing tensors and other
                values; ``fn`` neither a function (anything with a ``__qualname__``, which
                names the graph) nor a Module.

        A refused call (or an error raised by ``fn``) leaves the Ir as it was: no graph, and
        the next graph gets the name this one would have had.
        """
        if isinstance(fn, Module):  # PopXL names the graph after the class's qualified name
            func, qual = fn.build, type(fn).__qualname__
        elif callable(fn) and hasattr(fn, "__qualname__"):
            func, qual = fn, fn.__qualname__
        else:
            raise TypeError(
                f"create_graph: callable `fn` must be either a function or a class that "
                f"extends popxl.Module, got {type(fn).__name__} {fn!r} (PopXL names the graph "
                f"after its __qualname__)"
            )
        sig = inspect.signature(func)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as err:
            raise ValueError(
                f"create_graph({qual}): arguments do not match the signature {sig}: {err}"
            ) from None
        hints = _hints(func)
        with self._undo_on_error():  # a refused trace leaves no graph (and no name) behind
            base = qual.replace(".<locals>", "")
            graph = self._new_graph(f"{base}_subgraph({self._subgraph_id()})")
            with graph:
                call_args, call_kwargs = _trace_inputs(sig, bound, hints, graph.name)
                result = func(*call_args, **call_kwargs)
                for out in _outputs(result, graph.name):
                    graph_output(out)
        return graph

    # ---- undo (a refused call leaves the Ir as it was) ----
    # Building only appends, so a mark is lengths: of the graph list, of each graph's
    # tensors, ops, inputs and outputs (Graph._mark), of the streams and remote buffers;
    # plus the name counters and, optionally, the outputs of existing ops (call sites that
    # autodiff extends).
    def _mark(self, op_outputs: bool = False) -> tuple[Any, ...]:
        graphs = [(g, g._mark()) for g in self._graphs]
        outputs = [(op, op.outputs) for g in self._graphs for op in g.ops] if op_outputs else []
        counters = (
            self._next_graph_id, self._next_subgraph, self._next_rb, self._next_intermediate
        )  # fmt: skip
        sizes = (len(self._graphs), len(self._streams), len(self._remote_buffers))
        return graphs, outputs, counters, sizes

    def _truncate(self, mark: tuple[Any, ...]) -> None:
        graphs, outputs, counters, (n_graphs, n_streams, n_buffers) = mark
        del self._graphs[n_graphs:]
        for g, graph_mark in graphs:
            g._truncate(graph_mark)
        for op, outs in outputs:
            op.outputs = outs
        self._stream_names.difference_update(s.tensor_id for s in self._streams[n_streams:])
        del self._streams[n_streams:]
        del self._remote_buffers[n_buffers:]
        (
            self._next_graph_id, self._next_subgraph, self._next_rb, self._next_intermediate
        ) = counters  # fmt: skip

    @contextmanager
    def _undo_on_error(self, op_outputs: bool = False) -> Iterator[None]:
        """If the block raises, undo what it added to the Ir (see :meth:`_mark`)."""
        mark = self._mark(op_outputs)
        try:
            yield
        except BaseException:
            self._truncate(mark)
            raise

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
            raise RuntimeError(
                f"{self!r}: replication_factor cannot change once a Session was created "
                f"for the Ir (it is {self._replication}, asked {value!r})"
            )
        if int(value) != value or value < 1:
            raise ValueError(f"replication_factor must be a positive integer, got {value!r}")
        if self._layout.num_instances > 1:
            raise RuntimeError(
                f"{self!r}: replication_factor is set by poprun ({self._replication} replicas "
                f"over {self._layout.num_instances} instances) and cannot be changed"
            )
        self._replication = int(value)
        if self._popdist:  # one instance: it drives them all
            self._layout = self._layout._replace(
                total_replicas=self._replication, local_replicas=self._replication
            )

    @property
    def instance_replication_factor(self) -> int:
        """The replicas this instance drives (``replication_factor`` without poprun)."""
        if self._layout.num_instances > 1:
            return self._layout.local_replicas
        return self._replication

    @property
    def _replica_offset(self) -> int:
        """The global index of this instance's first replica."""
        return self._layout.replica_offset

    def replica_grouping(self, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        return ReplicaGrouping._from_params(self, stride, group_size)

    def replica_grouping_from_assignments(self, assignment: list[int]) -> ReplicaGrouping:
        return ReplicaGrouping._from_assignments(self, assignment)

    # ---- streams and buffers ----
    def _next_remote_buffer_id(self) -> int:
        self._next_rb += 1
        return self._next_rb - 1

    def _streams_used(self, op_type: str) -> set[Any]:
        from tremula.popxl.ops.multi_exchange import exchange_parts

        return {
            part.attrs["stream"]
            for g in self._graphs
            for op in g.ops
            for part in exchange_parts(op)
            if part.type == op_type
        }

    def get_all_d2h_streams(self) -> set[Any]:
        return self._streams_used("HostStore")

    def get_all_h2d_streams(self) -> set[Any]:
        return self._streams_used("HostLoad")

    # ---- identity ----
    @property
    def id(self) -> int:
        return self._id

    def dot_checkpoint(self, check: str, save_dir: str | None = None) -> str:
        """Write the Ir as a Graphviz file ``<save_dir>/<check>.dot`` (default: the current
        directory): one cluster per graph, a node per op and per tensor, edges along the
        data flow.

        Args:
            check: The checkpoint's name (the file name).
            save_dir: The directory (made if missing).

        Returns:
            The path written.
        """
        import pathlib

        lines = [f'digraph "{check}" {{']
        for g in self._graphs:
            lines.append(f'  subgraph "cluster_{g._id}" {{ label="{g.name}";')
            for t in g._tensors.values():
                label = f"{t.id}\\n{t.dtype.name} {list(t.shape)}"
                lines.append(f'    "{g._id}:{t.id}" [label="{label}"];')
            for op in g.ops:
                node = f"op{op.id}"
                lines.append(f'    "{node}" [shape=box label="{op.type}"];')
                lines += [f'    "{g._id}:{t.id}" -> "{node}";' for t in op.inputs]
                lines += [f'    "{node}" -> "{g._id}:{t.id}";' for t in op.outputs]
            lines.append("  }")
        lines.append("}")
        path = pathlib.Path(save_dir or ".") / f"{check}.dot"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    @property
    def _pb_ir(self) -> Any:
        """This Ir in PopXL's IR bindings (``popart._internal.ir.Ir``)."""
        from tremula.popxl._ir import ir_handle

        return ir_handle(self)

    @classmethod
    def _from_pb(cls, pb_ir: Any) -> Ir:
        """The Ir of a binding handle."""
        return pb_ir._ir

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


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (Tensor, TensorSpec))


def _unmixed(values: Iterable[Any], name: str, graph: str) -> None:
    """``TypeError`` if a container argument holds both tensors and other values."""
    kinds = {_is_tensor(v) for v in values}
    if len(kinds) == 2:
        raise TypeError(
            f"create_graph({graph}): argument {name!r} can't contain a mixture of Tensors "
            f"and other types; pass the tensors and the other values as separate arguments"
        )


def _as_input(value: Any, name: str, by_ref: bool, graph: str) -> Any:
    """A graph input for a Tensor/TensorSpec, a list of them for a list, else the value."""
    if _is_tensor(value):
        return _spec_input(value, name, by_ref)
    if isinstance(value, (list, tuple)) and value:
        _unmixed(value, name, graph)
        if _is_tensor(value[0]):
            made = [_spec_input(v, f"{name}_{i}", by_ref) for i, v in enumerate(value)]
            return type(value)(made)
    return value


def _trace_inputs(
    sig: inspect.Signature, bound: inspect.BoundArguments, hints: dict[str, Any], graph: str
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments ``fn`` is traced with: tensors become graph inputs. ``*args`` and
    ``**kwargs`` are containers too: mixing tensors and other values in one is refused.
    A parameter after one left to its default is passed by keyword, so that it binds to
    itself and not to the skipped one."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    skipped = False  # a positional parameter before this one was left to its default
    for pname, param in sig.parameters.items():
        if pname not in bound.arguments:
            skipped = skipped or param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            continue
        value, kind = bound.arguments[pname], param.kind
        by_ref = _is_by_ref(hints.get(pname))
        if kind is inspect.Parameter.VAR_POSITIONAL:
            _unmixed(value, f"*{pname}", graph)
            args.extend(_as_input(v, f"{pname}_{i}", by_ref, graph) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            _unmixed(value.values(), f"**{pname}", graph)
            kwargs.update({k: _as_input(v, k, by_ref, graph) for k, v in value.items()})
        elif kind is inspect.Parameter.KEYWORD_ONLY or skipped:
            kwargs[pname] = _as_input(value, pname, by_ref, graph)
        else:
            args.append(_as_input(value, pname, by_ref, graph))
    return args, kwargs


def _outputs(result: Any, graph: str) -> Iterable[Tensor]:
    if result is None:
        return ()
    if isinstance(result, Tensor):
        return (result,)
    if isinstance(result, Iterable) and not isinstance(result, (str, bytes)):
        items = list(result)
        if all(isinstance(t, Tensor) for t in items):
            return items
        if any(isinstance(t, Tensor) for t in items):
            others = sorted({type(t).__name__ for t in items if not isinstance(t, Tensor)})
            raise TypeError(
                f"Output of subgraph can't contain a mixture of Tensors and other types: "
                f"create_graph({graph}) returned Tensors and {', '.join(others)}"
            )
    raise ValueError(
        f"Output of subgraph must be None, a Tensor or an iterable of Tensors. Output type: "
        f"{type(result).__name__} (create_graph({graph}))"
    )
