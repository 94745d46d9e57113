"""PopXL graphs: the main graph and subgraphs of an Ir, holding tensors and ops in creation
order."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tremula.errors import TensorIdError
from tremula.popxl.context import get_current_context
from tremula.popxl.tensor import Constant, Tensor, Variable

if TYPE_CHECKING:
    from tremula.popxl.ir import Ir
    from tremula.popxl.ops.base import OpNode

_TOKEN = object()


class Graph:
    """A graph of an Ir. Made by ``Ir`` (``ir.main_graph``, ``ir.create_graph``), never
    directly. ``with graph:`` makes it the graph new ops go into."""

    def __init__(self, *args: Any, _token: object = None, **kwargs: Any) -> None:
        if _token is not _TOKEN:
            raise TypeError(
                "Graph cannot be constructed directly: use ir.main_graph, "
                "ir.create_graph(fn, ...) or ir.create_empty_graph()"
            )
        ir, name, graph_id = args
        self._ir: Ir = ir
        self._name = name
        self._id = graph_id
        self._ops: list[OpNode] = []
        self._tensors: dict[str, Tensor] = {}
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._by_ref_inputs: set[Tensor] = set()
        self._hooks: dict[int, Callable[[OpNode], Any]] = {}
        self._next_hook = 0
        # False for a graph with a gradient graph of its own: autodiff must not recurse
        # into it (PopART's setCanBeRecursivelyAutodiffed, through graph._pb_graph)
        self._recursive_autodiff = True
        # the wrapper graph a repeat loops (ops/repeat.py), which only routes tensors
        self._loop_wrapper = False
        # topological constraints (PopART's TopoCons): id(after) -> (after, its befores).
        # Entries of ops no longer in the graph stay: they carry the order through them
        # (see topocons())
        self._topo_before: dict[int, tuple[OpNode, list[OpNode]]] = {}
        # id(op) -> the op that replaced it (merged exchanges)
        self._replaced: dict[int, OpNode] = {}
        # where the next in_sequence(True) block outside any other continues from
        self._sequence_frontier: list[OpNode] = []

    # ---- properties ----
    @property
    def name(self) -> str:
        return self._name

    @property
    def id(self) -> str:
        """PopXL's ``str(graph._pb_graph.id)``: PopART's ``GraphId``, ``""`` for the main
        graph and the graph's name (``<fn>_subgraph(<n>)``) for a subgraph."""
        return "" if self is self._ir.main_graph else self._name

    @property
    def ir(self) -> Ir:
        return self._ir

    @property
    def main_graph(self) -> Graph:
        return self._ir.main_graph

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(self._inputs)

    @property
    def inputs_by_name(self) -> dict[str, Tensor]:
        return {t.name: t for t in self._inputs}

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(self._outputs)

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor of this graph, sorted by id, as PopART lists them: variables,
        constants, the main graph's stream tensors, graph inputs and op outputs (helper
        tensors such as the ``init`` of ``host_load`` and in-place outputs included); not
        the tensors of other graphs."""
        return tuple(sorted(self._tensors.values(), key=lambda t: t.id))

    @property
    def variables(self) -> tuple[Variable, ...]:
        """The variables of this graph, sorted by id."""
        return tuple(t for t in self.tensors if isinstance(t, Variable))

    @property
    def constants(self) -> tuple[Constant, ...]:
        """The constants of this graph, sorted by id."""
        return tuple(t for t in self.tensors if isinstance(t, Constant))

    @property
    def ops(self) -> tuple[OpNode, ...]:
        return tuple(self._ops)

    @property
    def called_graphs(self) -> tuple[Graph, ...]:
        seen: dict[int, Graph] = {}
        for op in self._ops:
            for g in op.called_graphs:
                seen.setdefault(id(g), g)
        return tuple(seen.values())

    @property
    def _pb_graph(self) -> Any:
        """This graph in PopXL's IR bindings (``popart._internal.ir.Graph``)."""
        from tremula.popxl._ir import graph_handle

        return graph_handle(self)

    @classmethod
    def _from_pb(cls, pb_graph: Any) -> Graph:
        """The graph of a binding handle."""
        return pb_graph._g

    def get_tensor(self, tensor_id: str) -> Tensor:
        """The tensor ``tensor_id`` of this graph.

        Raises:
            TensorIdError: (``popart.popart_exception`` and ``KeyError``) no such tensor.
        """
        try:
            return self._tensors[tensor_id]
        except KeyError:
            raise TensorIdError(
                f"No Ir::Tensor with TensorId '{tensor_id}' in Tensors::get(..) (graph "
                f"{self._name!r})"
            ) from None

    # ---- context ----
    def __enter__(self) -> Graph:
        get_current_context().push_graph(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        get_current_context().pop_graph(self)

    # ---- comparisons ----
    def __contains__(self, t: object) -> bool:
        if not isinstance(t, Tensor):
            raise TypeError(f"`in` on graph {self._name!r} needs a Tensor, got {type(t).__name__}")
        return self._tensors.get(t.id) is t

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            raise TypeError(f"cannot compare graph {self._name!r} with {type(other).__name__}")
        return self is other

    def __hash__(self) -> int:
        return hash((id(self._ir), self._id))

    def __repr__(self) -> str:
        return f"Graph[id={self.id} name={self._name}]"

    # ---- hooks ----
    def register_op_created_hook(self, fn: Callable[[OpNode], Any]) -> int:
        handle = self._next_hook
        self._next_hook += 1
        self._hooks[handle] = fn
        return handle

    def remove_op_created_hook(self, handle: int) -> None:
        if handle not in self._hooks:
            raise ValueError(f"no op-created hook with handle {handle} in {self!r}")
        del self._hooks[handle]

    # ---- building (used by tensors and ops) ----
    def _create_tensor_id(self, name: str | None = None) -> str:
        """A new tensor id for ``name`` in this graph, by PopXL's rule: ``name`` (``"t"``
        when empty) under the current name scopes (``scope/name``), then as
        :meth:`_unique_id` makes it unique in this graph."""
        scope = get_current_context().name_scope
        name = name or "t"
        return self._unique_id(f"{scope}/{name}" if scope else name)

    def _unique_id(self, name: str) -> str:
        """``name`` under this graph's scope (``<graph>/name`` in a subgraph, PopART's
        ``addScope``); if the graph has a tensor of that id already, the Ir's
        ``createIntermediateTensorId`` of it (``<id>__t<n>``, one counter per Ir), asked
        again while that one is taken too (by an id a program chose)."""
        base = name if self is self._ir.main_graph else f"{self._name}/{name}"
        tid = base
        while tid in self._tensors:
            tid = self._ir._intermediate_id(base)
        return tid

    def _tensor_name(self, tensor_id: str) -> str:
        """The name of tensor ``tensor_id`` of this graph: the id without the graph's scope
        (PopART's ``removeScope``; an id outside the scope, which the IR bindings allow, is
        its own name)."""
        prefix = f"{self._name}/"
        if self is self._ir.main_graph or not tensor_id.startswith(prefix):
            return tensor_id
        return tensor_id[len(prefix) :]

    def _add_tensor(self, t: Tensor) -> None:
        self._tensors[t.id] = t

    def _rename_tensor(self, t: Tensor, tensor_id: str) -> None:
        """Give ``t``, a tensor of this graph, the free id ``tensor_id`` (autodiff names a
        gradient so once it knows the tensor is one)."""
        if self._tensors.get(t.id) is not t or tensor_id in self._tensors:
            raise ValueError(f"cannot rename {t.id!r} of {self._name!r} to {tensor_id!r}")
        del self._tensors[t.id]
        t._id, t._name = tensor_id, self._tensor_name(tensor_id)
        self._tensors[tensor_id] = t

    def _add_input(self, t: Tensor, by_ref: bool) -> None:
        self._inputs.append(t)
        if by_ref:
            self._by_ref_inputs.add(t)

    def _add_output(self, t: Tensor) -> None:
        self._outputs.append(t)

    def _add_op(self, op: OpNode) -> None:
        self._ops.append(op)
        get_current_context()._op_created(op)

    # ---- topological constraints ----
    def _add_topocon(self, before: OpNode, after: OpNode) -> None:
        """Constrain ``before`` to run before ``after`` (both ops of this graph)."""
        if before is after:
            return
        entry = self._topo_before.setdefault(id(after), (after, []))
        if not any(b is before for b in entry[1]):
            entry[1].append(before)

    def _replace_ops(self, old: list[OpNode], new: OpNode) -> None:
        """``new`` stands for ``old`` (ops taken out of the graph): their constraints with
        other ops become ``new``'s."""
        members = {id(op) for op in old}
        for op in old:
            self._replaced[id(op)] = new
        for after, befores in list(self._topo_before.values()):
            if id(after) in members:
                for b in befores:
                    if id(b) not in members:
                        self._add_topocon(b, new)
            elif any(id(b) in members for b in befores):
                self._add_topocon(new, after)

    def _alive(self, op: OpNode) -> bool:
        return any(o is op for o in reversed(self._ops))

    def _resolve(self, op: OpNode, alive: set[int] | None = None) -> list[OpNode]:
        """The ops of the graph that stand where ``op`` stood: itself while it is in the
        graph; the op that replaced it; else (an op undone or erased) the ops constrained
        before it, resolved in turn."""
        out: list[OpNode] = []
        seen: set[int] = set()
        todo = [op]
        while todo:
            u = todo.pop()
            if id(u) in seen:
                continue
            seen.add(id(u))
            if (id(u) in alive) if alive is not None else self._alive(u):
                out.append(u)
            elif id(u) in self._replaced:
                todo.append(self._replaced[id(u)])
            else:
                entry = self._topo_before.get(id(u))
                todo.extend(entry[1] if entry else ())
        return out

    def topocons(self) -> list[tuple[OpNode, OpNode]]:
        """The (before, after) constraints between the graph's ops: ``in_sequence`` ones and
        those inserted through the bindings' ``TopoCons``, carried through ops taken out
        of the graph since."""
        alive = {id(op) for op in self._ops}
        pairs: list[tuple[OpNode, OpNode]] = []
        seen: set[tuple[int, int]] = set()
        for after, befores in self._topo_before.values():
            while id(after) not in alive and id(after) in self._replaced:
                after = self._replaced[id(after)]
            if id(after) not in alive:  # undone or erased: carried by the ops after it
                continue
            for b in befores:
                for r in self._resolve(b, alive):
                    if r is not after and (id(r), id(after)) not in seen:
                        seen.add((id(r), id(after)))
                        pairs.append((r, after))
        return pairs

    # ---- undo (a refused call leaves the graph as it was) ----
    # Building only appends (tensors, ops, inputs, outputs), so a mark is four lengths and
    # undoing is truncating to them: dicts pop their latest items first.
    def _mark(self) -> tuple[int, int, int, int]:
        return len(self._tensors), len(self._ops), len(self._inputs), len(self._outputs)

    def _truncate(self, mark: tuple[int, int, int, int]) -> None:
        n_tensors, n_ops, n_inputs, n_outputs = mark
        while len(self._tensors) > n_tensors:
            self._tensors.popitem()
        del self._ops[n_ops:]
        self._by_ref_inputs.difference_update(self._inputs[n_inputs:])
        del self._inputs[n_inputs:]
        del self._outputs[n_outputs:]


def new_graph(ir: Ir, name: str, graph_id: int) -> Graph:
    return Graph(ir, name, graph_id, _token=_TOKEN)
