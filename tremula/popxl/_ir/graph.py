"""``popart._internal.ir.Graph`` (``graph._pb_graph``), ``GraphId`` and ``TopoCons``: a
view of a Tremula graph with PopART's methods. Reading and editing through it reads and
edits the popxl graph itself (one handle per graph)."""

from __future__ import annotations

import builtins
import heapq
from typing import TYPE_CHECKING, Any, cast

from tremula.errors import PopartException
from tremula.popxl._ir.build import GraphBuilding, op_factory
from tremula.popxl._ir.handles import register, view_of
from tremula.popxl._ir.topocons import TopoCons
from tremula.popxl._ir.unsupported import unsupported_attr
from tremula.popxl.graph import Graph as XlGraph
from tremula.popxl.graph import new_graph

if TYPE_CHECKING:
    from tremula.popxl._ir.ir import Ir
    from tremula.popxl._ir.op import Op
    from tremula.popxl._ir.tensor import Tensor


class GraphId:
    """PopART's ``GraphId``: a graph's id string (the main graph's is ``""``; a subgraph's
    is its name). Compares equal to the GraphId of the same string."""

    def __init__(self, value: str = "") -> None:
        self._value = str(value)

    def str(self) -> builtins.str:
        return self._value

    def __str__(self) -> builtins.str:
        return self._value

    def __repr__(self) -> builtins.str:
        return f"GraphId({self._value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GraphId) and other._value == self._value

    def __lt__(self, other: GraphId) -> bool:
        return self._value < other._value

    def __hash__(self) -> int:
        return hash(("GraphId", self._value))


def graph_id(g: XlGraph) -> GraphId:
    return GraphId(g.id)


def _op_of(graph: XlGraph, op_id: Any) -> Any:
    for op in graph._ops:
        if op.id == int(getattr(op_id, "id", op_id)):
            return op
    raise PopartException(f"Failed to find op {op_id} in Graph::getOp (graph {graph.name!r})")


def schedule(graph: XlGraph) -> list[Any]:
    """The graph's ops in a valid order: each op after the producers of its inputs and
    after the ops it is constrained to follow (``in_sequence``, ``TopoCons``), otherwise in
    the graph's order (creation order)."""
    ops = list(graph._ops)
    pos = {id(op): i for i, op in enumerate(ops)}
    producer = {id(t): op for op in ops for t in op.outputs if t is not None}
    constrained: dict[int, set[int]] = {}
    for before, after in graph.topocons():
        constrained.setdefault(id(after), set()).add(id(before))
    waits: dict[int, int] = {}
    users: dict[int, list[Any]] = {}
    for op in ops:
        deps = {id(producer[id(t)]) for t in op.inputs if t is not None and id(t) in producer}
        deps |= constrained.get(id(op), set())
        deps.discard(id(op))
        waits[id(op)] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(op)
    ready = [(pos[id(op)], op.id, op) for op in ops if waits[id(op)] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, _, op = heapq.heappop(ready)
        out.append(op)
        for u in users.get(id(op), ()):
            waits[id(u)] -= 1
            if waits[id(u)] == 0:
                heapq.heappush(ready, (pos[id(u)], u.id, u))
    if len(out) != len(ops):
        stuck = [repr(op) for op in ops if waits[id(op)] > 0]
        raise PopartException(f"graph {graph.name!r} has a cycle through {stuck}")
    return out


def restore_order(graph: XlGraph) -> None:
    """Reorder the graph's ops into :func:`schedule` if edits made its order invalid."""
    order = schedule(graph)
    if any(a is not b for a, b in zip(order, graph._ops)):
        graph._ops[:] = order


class Graph(GraphBuilding):
    """A Tremula graph as PopART's ``Graph`` bindings show it (``graph._pb_graph``).

    ``Graph(ir, graphId)`` makes a graph of ``ir`` that the Ir does not list (as PopART's
    constructor: ``ir.createGraph`` makes one the Ir holds); ``Graph(popxl_graph)`` is the
    view of a popxl graph (one per graph, ``graph_handle``)."""

    def __init__(self, *args: Any) -> None:
        if len(args) == 2:
            ir, gid = args
            xl_ir = getattr(ir, "_ir", None)
            if xl_ir is None:
                raise TypeError(f"Graph(ir, graphId): expected an Ir, got {type(ir).__name__}")
            graph = new_graph(xl_ir, builtins.str(gid), xl_ir._next_graph_id)
            xl_ir._next_graph_id += 1
            register(graph, self)
        else:
            (graph,) = args
        self._g = graph

    # ---- identity ----
    @property
    def id(self) -> GraphId:
        return graph_id(self._g)

    def getGraphString(self) -> str:
        return (
            "the main graph" if self._g is self._g.ir.main_graph else f"subgraph '{self._g.name}'"
        )

    def getIr(self) -> Ir:
        from tremula.popxl._ir.ir import ir_handle

        return ir_handle(self._g.ir)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and other._g is self._g

    def __hash__(self) -> int:
        return id(self._g)

    def __repr__(self) -> str:
        return f"popart._internal.ir.Graph({self.id.str()!r})"

    # ---- ops ----
    def getOps(self) -> list[Op]:
        """The ops, by id (creation order)."""
        return cast("list[Op]", sorted(self._g._ops, key=lambda op: op.id))

    def getOpIds(self) -> list[int]:
        return [op.id for op in self.getOps()]

    def getOpSchedule(self, requireOptimalSchedule: bool = True) -> list[Op]:
        """The ops in the order they run."""
        return cast("list[Op]", schedule(self._g))

    def getOp(self, opId: int) -> Op:
        return _op_of(self._g, opId)

    def eraseOp(self, opId: int) -> None:
        """Remove an op whose inputs and outputs were disconnected.

        Raises:
            PopartException: no such op, or it is still connected.
        """
        op = _op_of(self._g, opId)
        if any(t is not None for t in (*op.inputs, *op.outputs)):
            raise PopartException(
                f"eraseOp: {op.debugName()} is still connected; call disconnectAllInputs() "
                f"and disconnectAllOutputs() first"
            )
        self._g._ops.remove(op)

    def getCalledGraphs(self) -> list[Graph]:
        """The graphs the graph's ops call (each once)."""
        return [graph_handle(g) for g in self._g.called_graphs]

    def getCallSiteOps(self, anySchedule: bool = False) -> list[Op]:
        """The ops of the Ir that call this graph (graphs by id, each graph's ops by id, as
        ``Ir.getAllOps`` lists them)."""
        return [op for op in self.getIr().getAllOps() if self._g in op.called_graphs]

    def topoCons(self) -> TopoCons:
        return TopoCons(self._g)

    # ---- tensors ----
    def getTensor(self, tensorId: str) -> Tensor:
        from tremula.popxl._ir.op.edit import graph_tensor
        from tremula.popxl._ir.tensor import tensor_handle

        return tensor_handle(graph_tensor(self._g, tensorId))

    def hasTensor(self, tensorId: str) -> bool:
        return str(tensorId) in self._g._tensors

    def __contains__(self, tensorId: object) -> bool:
        """``tensor_id in graph``: whether the graph holds a tensor of that id (what PopXL's
        ``Graph._create_tensor_id`` asks)."""
        return str(tensorId) in self._g._tensors

    def getTensorIds(self) -> list[str]:
        return sorted(self._g._tensors)

    # ---- inputs and outputs ----
    def getInputIds(self) -> list[str]:
        return [t.id for t in self._g._inputs]

    def getOutputIds(self) -> list[str]:
        return [t.id for t in self._g._outputs]

    def getNumInputs(self) -> int:
        return len(self._g._inputs)

    def getNumOutputs(self) -> int:
        return len(self._g._outputs)

    def _at(self, ts: list[Any], index: int, what: str) -> Any:
        if not 0 <= int(index) < len(ts):
            raise PopartException(
                f"{what} index {index} out of range for {self.getGraphString()} ({len(ts)} {what}s)"
            )
        return ts[int(index)]

    def getInputId(self, index: int) -> str:
        return self._at(self._g._inputs, index, "input").id

    def getOutputId(self, index: int) -> str:
        return self._at(self._g._outputs, index, "output").id

    def getInputTensor(self, index: int) -> Tensor:
        from tremula.popxl._ir.tensor import tensor_handle

        return tensor_handle(self._at(self._g._inputs, index, "input"))

    def getOutputTensor(self, index: int) -> Tensor:
        from tremula.popxl._ir.tensor import tensor_handle

        return tensor_handle(self._at(self._g._outputs, index, "output"))

    def _index(self, ts: list[Any], tensor_id: str, what: str) -> int:
        for i, t in enumerate(ts):
            if t.id == str(tensor_id):
                return i
        raise PopartException(f"Could not find {what} {tensor_id} in {self.getGraphString()}")

    def getInputIndex(self, tensorId: str) -> int:
        return self._index(self._g._inputs, tensorId, "input")

    def getOutputIndex(self, tensorId: str) -> int:
        return self._index(self._g._outputs, tensorId, "output")

    def hasInputId(self, tensorId: str) -> bool:
        return any(t.id == str(tensorId) for t in self._g._inputs)

    def hasOutputId(self, tensorId: str) -> bool:
        return any(t.id == str(tensorId) for t in self._g._outputs)

    def markAsOutput(self, *args: Any) -> None:
        """``markAsOutput(tensorId)`` appends an output; ``markAsOutput(index, tensorId,
        overwrite)`` puts it at ``index`` (replacing the output there if ``overwrite``)."""
        from tremula.popxl._ir.op.edit import graph_tensor

        if len(args) == 1:
            self._g._add_output(graph_tensor(self._g, args[0]))
            return
        index, tensor_id, overwrite = args
        t = graph_tensor(self._g, tensor_id)
        outs = self._g._outputs
        if not 0 <= index <= len(outs) or (overwrite and index == len(outs)):
            raise PopartException(f"markAsOutput: index {index} out of range ({len(outs)})")
        if overwrite:
            if outs[index].spec != t.spec:
                self._check_uncalled("markAsOutput(index, ..., True) of another shape or type")
            outs[index] = t
        else:
            self._check_uncalled("markAsOutput(index, ...)")
            outs.insert(index, t)

    def removeOutput(self, where: int | str) -> None:
        """Remove an output, by index or by tensor id; the tensor stays in the graph.

        An index past the end removes the last output: what PopART's ``removeOutput(index)``
        does on Graphcore's SDK (``std::vector::erase`` past the end in a release build),
        which popxl-addons' ``autodiff_with_accumulation`` relies on when it removes the
        trailing outputs in ascending order.

        Raises:
            PopartException: a negative index, a graph with no outputs or not having the id,
                or a graph called by an op (its call sites would lose an output).
        """
        outs = self._g._outputs
        if isinstance(where, str):
            index = self.getOutputIndex(where)
        else:
            index = int(where)
            if index < 0 or not outs:
                raise PopartException(
                    f"removeOutput: no output {index} in {self.getGraphString()} "
                    f"({len(outs)} outputs)"
                )
        self._check_uncalled("removeOutput")
        del outs[min(index, len(outs) - 1)]

    def _check_uncalled(self, what: str) -> None:
        """Changing the numbering of a graph's outputs is refused once an op calls it."""
        for g in self._g.ir.graphs:
            for op in g._ops:
                if self._g in op.called_graphs and op.outputs:
                    raise PopartException(
                        f"{what}: {self.getGraphString()} is called by {op!r}, "
                        f"whose outputs follow the graph's outputs"
                    )

    # ---- autodiff ----
    def setCanBeRecursivelyAutodiffed(self, value: bool) -> None:
        """Whether ``autodiff`` may differentiate this graph where a differentiated graph
        calls it (a graph with its own gradient graph says False)."""
        self._g._recursive_autodiff = bool(value)

    def canBeRecursivelyAutodiffed(self) -> bool:
        return self._g._recursive_autodiff

    def __getattr__(self, name: str) -> Any:
        factory = op_factory(self, name)  # createOp_<X> / createConnectedOp_<X>
        if factory is not None:
            return factory
        return unsupported_attr(self, name)


def graph_handle(graph: XlGraph) -> Graph:
    """The binding handle of a popxl graph (one per graph)."""
    return view_of(graph, Graph)
