"""Calling subgraphs: ``call``, ``call_with_info`` (with :class:`CallSiteInfo`); ``repeat``
is in ``repeat.py``.

Inputs are passed by value: the subgraph works on copies, and the parent sees a modification
only for inputs marked by-ref in the subgraph or with ``set_parent_input_modified``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tremula.errors import OpSetupError
from tremula.popxl.context import get_current_graph
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OpNode, create_op, defop
from tremula.popxl.tensor import Tensor, TensorSpec, constant


def _graph_outputs(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    return [t.spec for t in attrs["graphs"][0].outputs]


defop("Call", _graph_outputs, graphs="call")


class CallSiteInfo:
    """A call site: which parent tensors feed which subgraph inputs, and which subgraph
    outputs become which parent tensors (for ``call`` the indices are the identity)."""

    def __init__(self, op: OpNode) -> None:
        self._op = op

    @property
    def called_graph(self) -> Graph:
        return self._op.attrs["graphs"][0]

    @property
    def parent_graph(self) -> Graph:
        """The graph the call op is in."""
        return self._op.graph

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The parent tensors connected to the call (PopXL's ``getInputTensors()``: an input
        left unconnected by ``check_inputs=False`` is not listed)."""
        return tuple(t for t in self._op.inputs if t is not None)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._op.outputs

    def graph_to_parent_input_index(self, index: int) -> int:
        return index

    def parent_to_graph_input_index(self, index: int) -> int:
        return index

    def graph_to_parent_output_index(self, index: int) -> int:
        return index

    def parent_to_graph_output_index(self, index: int) -> int:
        return index

    def parent_input(self, index: int) -> Tensor:
        """The parent tensor at input ``index`` of the call.

        Raises:
            IndexError: ``index`` out of range.
        """
        return _at(self._op.inputs, index, "parent graph input")

    def parent_output(self, index: int) -> Tensor:
        """The parent tensor at output ``index`` of the call.

        Raises:
            IndexError: ``index`` out of range.
        """
        return _at(self._op.outputs, index, "parent graph output")

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor of a subgraph input or output."""
        g = self.called_graph
        for i, t in enumerate(g.inputs):
            if t is graph_tensor:
                return self._op.inputs[self.graph_to_parent_input_index(i)]
        for i, t in enumerate(g.outputs):
            if t is graph_tensor:
                return self._op.outputs[self.graph_to_parent_output_index(i)]
        raise ValueError(
            f"Tensor {graph_tensor.id!r} is not an input or output of the called graph {g.name!r}"
        )

    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The subgraph input fed by ``parent_tensor`` (its first occurrence)."""
        for i, t in enumerate(self._op.inputs):
            if t is parent_tensor:
                return self.called_graph.inputs[self.parent_to_graph_input_index(i)]
        raise ValueError(
            f"Tensor {parent_tensor.id!r} is not a parent graph input of the call site of "
            f"{self.called_graph.name!r}"
        )

    def set_parent_input_modified(
        self, parent_tensor: Tensor, infer_modified_regions: bool = False
    ) -> None:
        """The subgraph's changes to this input reach the parent tensor (every input of the
        call site it feeds).

        Raises:
            ValueError: ``parent_tensor`` is not an input of the call site (PopXL looks it
                up with :meth:`parent_to_graph`, whose error this is).
        """
        self.parent_to_graph(parent_tensor)
        indices = [i for i, t in enumerate(self._op.inputs) if t is parent_tensor]
        self._op.modified = tuple(sorted(set(self._op.modified) | set(indices)))


def _at(tensors: tuple[Tensor, ...], index: int, what: str) -> Tensor:
    if not -len(tensors) <= index < len(tensors):
        raise IndexError(f"Invalid {what} index: {index} (the call site has {len(tensors)})")
    return tensors[index]


def _flatten(values: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out.extend(_flatten(v))
        else:
            out.append(v)
    return out


def _check_callable(graph: Graph, parent: Graph, what: str) -> None:
    """``graph`` may be called from ``parent``: a subgraph of the same Ir that does not call
    ``parent`` (itself or through the graphs it calls), since a graph cannot run inside
    itself.

    Raises:
        ValueError: naming the graphs.
    """
    if graph.ir is not parent.ir:
        raise ValueError(
            f"{what}: graph {graph.name!r} belongs to {graph.ir!r}, but the current graph "
            f"{parent.name!r} belongs to {parent.ir!r}: a graph can only be called in its Ir"
        )
    if graph is graph.ir.main_graph:
        raise ValueError(f"{what}: the main graph cannot be called (from {parent.name!r})")
    path = _call_path(graph, parent)
    if path is not None:
        chain = " -> ".join(repr(g.name) for g in [parent, *path])
        raise ValueError(
            f"{what}: graph {graph.name!r} cannot be called from {parent.name!r}: the calls "
            f"would make a cycle ({chain}); a graph cannot run inside itself"
        )


def _call_path(start: Graph, target: Graph) -> list[Graph] | None:
    """The graphs from ``start`` to ``target`` along the calls (``start`` first), if
    ``start`` is ``target`` or calls it, directly or not; else None."""
    todo: list[list[Graph]] = [[start]]
    seen: set[int] = set()
    while todo:
        path = todo.pop()
        g = path[-1]
        if g is target:
            return path
        if id(g) in seen:
            continue
        seen.add(id(g))
        todo.extend([*path, c] for c in g.called_graphs)
    return None


def _connect(
    graph: Graph,
    inputs: Sequence[Any],
    inputs_dict: Mapping[Tensor, Any] | None,
    what: str,
    check_inputs: bool = True,
) -> list[Tensor | None]:
    """Parent tensors for each input of ``graph``, in its input order; the checks and
    messages are PopXL's. With ``check_inputs=False`` an input not given is ``None``: the
    op leaves it unconnected (connect it through the bindings before a Session compiles).

    Raises:
        ValueError: too many or too few inputs, an input given twice, a dict key that is
            not an input of ``graph``, a parent tensor of another graph.
        TypeError: a value that cannot become a tensor of the input's dtype.
        OpSetupError: (``popart.popart_exception``) a parent tensor whose shape or dtype
            differ from the graph input's.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"{what}: expected a Graph, got {type(graph).__name__}")
    parent = get_current_graph()
    _check_callable(graph, parent, what)
    g_inputs = graph.inputs
    values = _flatten(inputs)
    if len(values) > len(g_inputs):
        raise ValueError(
            f"Too many inputs have been provided to the called graph {graph.name!r} ({what}): "
            f"{len(values)} given, it takes {len(g_inputs)}"
        )
    for i, v in enumerate(values):
        if isinstance(v, Tensor) and v.graph is not parent:
            raise ValueError(
                f"Parent input tensor {v.id!r} at position {i} is not in parent graph "
                f"{parent.name!r} ({what} of {graph.name!r}); it is in {v.graph.name!r}"
            )
    chosen: dict[int, Any] = dict(enumerate(values))
    for g_t, v in (inputs_dict or {}).items():
        idx = next((i for i, t in enumerate(g_inputs) if t is g_t), None)
        if idx is None:
            raise ValueError(
                f"The graph input tensor {g_t!r} in inputs_dict is not in the called graph "
                f"{graph.name!r} ({what})"
            )
        if idx in chosen:
            raise ValueError(
                f"Graph input tensor is specified twice, by position and in inputs_dict: "
                f"{g_t.id!r} of {graph.name!r} ({what})"
            )
        chosen[idx] = v
    missing = [g_inputs[i].id for i in range(len(g_inputs)) if i not in chosen]
    if missing and check_inputs:
        raise ValueError(
            f"Not enough inputs have been provided for the called graph {graph.name!r} "
            f"({what}): inputs {missing} are not given"
        )
    out: list[Tensor | None] = []
    for i, g_t in enumerate(g_inputs):
        if i not in chosen:  # check_inputs=False: left unconnected, as PopXL leaves it
            out.append(None)
            continue
        v = chosen[i]
        if not isinstance(v, Tensor):
            try:
                v = constant(v, g_t.dtype)
            except (TypeError, ValueError) as err:
                raise TypeError(
                    f"Input at position {i} could not be coerced into a tensor: the value for "
                    f"{g_t.id!r} of {graph.name!r} cannot become a {g_t.dtype} tensor: {err}"
                ) from None
        if v.graph is not parent:
            raise ValueError(
                f"Parent input tensor {v.id!r} for {g_t.id!r} is not in parent graph "
                f"{parent.name!r} ({what} of {graph.name!r}); it is in {v.graph.name!r}"
            )
        if v.shape != g_t.shape or v.dtype != g_t.dtype:
            raise OpSetupError(
                f"CallOp input (@{i}) does not match callee input tensor (@{i}) of "
                f"{graph.name!r} ({what}): {v.id!r} is {v.dtype._popart} {list(v.shape)}, "
                f"{g_t.id!r} is {g_t.dtype._popart} {list(g_t.shape)}"
            )
        out.append(v)
    return out


def call_with_info(
    graph: Graph,
    *inputs: Any,
    inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> CallSiteInfo:
    """Call ``graph`` and return the call site."""
    parents = _connect(graph, inputs, inputs_dict, "call", check_inputs)
    # the outputs are named like the callee's outputs (PopXL's call), made unique here
    create_op("Call", parents, {"graphs": (graph,)}, [t.name for t in graph.outputs])
    op = get_current_graph().ops[-1]
    by_ref = [i for i, t in enumerate(graph.inputs) if t in graph._by_ref_inputs]
    op.modified = tuple(by_ref)
    return CallSiteInfo(op)


def call(
    graph: Graph, *inputs: Any, inputs_dict: Mapping[Tensor, Any] | None = None
) -> tuple[Tensor, ...]:
    """Run ``graph`` on copies of the inputs; returns its outputs (as a tuple)."""
    return call_with_info(graph, *inputs, inputs_dict=inputs_dict).outputs
