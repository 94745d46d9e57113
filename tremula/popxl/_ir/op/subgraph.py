"""The bindings of ops that call graphs (``CallOp``, ``LoopOp``, ``IfOp``) and of the ops
with settings of their own (``IpuCopyOp``, ``MatMulOp``).

A ``LoopOp`` is Tremula's ``repeat``: its body is the graph ``repeat`` was given (output
``i`` carried into input ``i``), its trip count an attribute. PopART numbers a loop's
inputs from 2 (0 and 1 are the trip count and the condition), so op input ``i + 2`` feeds
body input ``i``, and op output ``i`` is body output ``i``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tremula.errors import PopartException
from tremula.popxl._ir.op.base import Op
from tremula.popxl._ir.op.edit import graph_tensor, new_tensor
from tremula.popxl._ir.view import any_written

if TYPE_CHECKING:
    from tremula.popxl._ir.graph import Graph
    from tremula.popxl.graph import Graph as XlGraph


class SubgraphOp(Op):
    """An op that calls graphs, passing some inputs by reference."""

    def addModified(self, index: int, regions: Any) -> None:
        """Mark input ``index`` modified by the called graph where ``regions`` cover any
        element: the graph's writes to it then reach the parent tensor."""
        if any_written(regions):
            rec = self._in_index(index)
            self.modified = tuple(sorted({*self.modified, rec}))

    def removeModified(self, index: int) -> None:
        rec = self._in_index(index)
        self.modified = tuple(i for i in self.modified if i != rec)


class _OneGraph(SubgraphOp):
    """A subgraph op that calls one graph."""

    def getCalledGraph(self) -> Graph:
        from tremula.popxl._ir.graph import graph_handle

        return graph_handle(self._body())

    def _body(self) -> XlGraph:
        return self.attrs["graphs"][0]

    def opInToSubgraphInIndex(self, index: int) -> int:
        return self._in_index(index)

    def subgraphInToOpInIndex(self, index: int) -> int:
        return int(index) + self._IN_OFFSET

    def opOutToSubgraphOutIndex(self, index: int) -> int:
        return int(index)

    def subgraphOutToOpOutIndex(self, index: int) -> int:
        return int(index)


class CallOp(_OneGraph):
    """``ops.call``."""


class LoopOp(_OneGraph):
    """``ops.repeat``."""

    _IN_OFFSET = 2

    def getTripCountValue(self) -> int:
        return int(self.attrs["count"])

    def setTripCountValue(self, value: int) -> None:
        if int(value) != value or value < 0:
            raise PopartException(f"setTripCountValue: {value!r} is not a trip count")
        self.attrs["count"] = int(value)

    def getNumExplicitInputs(self) -> int:
        """PopART's count of explicit inputs, the trip count and condition slots included:
        the index the next ``addLoopInput`` appends at."""
        return self._IN_OFFSET + len(self.inputs)

    def getNumImplicitInputs(self) -> int:
        return 0

    def _only_caller(self, what: str) -> XlGraph:
        body = self._body()
        for g in body.ir.graphs:
            for op in g._ops:
                if op is not self and body in op.called_graphs:
                    raise PopartException(
                        f"{what}: the loop body {body.name!r} is also called by "
                        f"{op!r}, whose inputs would no longer match"
                    )
        return body

    def addLoopInput(
        self, index: int, tensorId: str, subgraphTensorId: str, overwrite: bool
    ) -> None:
        """Feed parent tensor ``tensorId`` to the loop at op input ``index`` through a new
        body input ``subgraphTensorId``. Inputs past the loop-carried ones stay fixed
        across iterations; an input may not be put among the loop-carried ones.

        Raises:
            PopartException: ``index`` among the loop-carried inputs or past the end, an
                id in use, or a body called by another op too.
        """
        body = self._only_caller("addLoopInput")
        rec = self._in_index(index)
        if overwrite or not len(body.outputs) <= rec <= len(self.inputs):
            raise PopartException(
                f"addLoopInput: index {index} must be a new fixed input, between "
                f"{len(body.outputs) + self._IN_OFFSET} and {len(self.inputs) + self._IN_OFFSET}"
            )
        parent = graph_tensor(self.graph, tensorId)
        inner = new_tensor(body, subgraphTensorId, None, parent.spec)
        inner._ipu, inner._tile_set = parent._ipu, parent._tile_set
        body._inputs.insert(rec, inner)
        self.inputs = (*self.inputs[:rec], parent, *self.inputs[rec:])
        self.modified = tuple(i + (i >= rec) for i in self.modified)

    def addLoopOutput(
        self, index: int, tensorId: str, subgraphTensorId: str, overwrite: bool
    ) -> None:
        """Make body tensor ``subgraphTensorId`` the body's output ``index`` and the loop's
        output ``index`` tensor ``tensorId``: with ``overwrite``, replacing the body output
        already there (the loop's output tensor stays); else appending a loop-carried
        output (body input ``index`` must match it).

        Raises:
            PopartException: a position that would break the loop-carried pairing, or a
                body tensor whose shape or type differ.
        """
        body = self._only_caller("addLoopOutput")
        inner = graph_tensor(body, subgraphTensorId)
        i, outs = int(index), body._outputs
        if overwrite and i < len(outs) and i < len(self.outputs) and self.outputs[i].id == tensorId:
            _same_spec(inner, outs[i], "addLoopOutput")
            outs[i] = inner
            return
        if overwrite or i != len(outs) or i >= len(body._inputs):
            raise PopartException(
                f"addLoopOutput: output {i} of the loop body {body.name!r} ({len(outs)} "
                f"outputs, {len(body._inputs)} inputs) cannot be set to {subgraphTensorId!r}"
            )
        _same_spec(inner, body._inputs[i], "addLoopOutput")
        outs.append(inner)
        self.createAndConnectOutTensor(i, tensorId)
        self.outputs[i]._spec = inner.spec


def _same_spec(a: Any, b: Any, what: str) -> None:
    if a.spec != b.spec:
        raise PopartException(f"{what}: {a.id!r} is {a.spec}, {b.id!r} is {b.spec}")


class IfOp(SubgraphOp):
    """``ops.conditional``: called graphs (then, else); inputs: the condition, then the
    then-branch's inputs, then the else-branch's."""

    def getThenGraph(self) -> Graph:
        return self.getCalledGraphs()[0]

    def getElseGraph(self) -> Graph:
        return self.getCalledGraphs()[1]


class IpuCopyOp(Op):
    """``ops.ipu_copy``: one tensor from its source IPU to the destination IPU."""

    def getSourceIpu(self, tensorId: str | None = None) -> int:
        return int(self.attrs["source"])

    def getSourceIpus(self) -> dict[str, int]:
        return {t.id: int(self.attrs["source"]) for t in self.inputs if t is not None}

    def getDestIpu(self) -> int:
        return int(self.attrs["destination"])

    def connectInTensor(self, index: int, tensor_id: str, vgraph_id: int | None = None) -> None:
        """Connect the tensor to copy (a copy op moves one tensor, at index 0), from IPU
        ``vgraph_id`` if given."""
        if int(index) != 0:
            raise PopartException(f"{self.debugName()}: Tremula's IpuCopy copies one tensor")
        super().connectInTensor(index, tensor_id)
        if vgraph_id is not None:
            self.attrs["source"] = int(vgraph_id)


class MatMulOp(Op):
    """``ops.matmul``: with the planner's memory proportion and fully-connected pass."""

    def getAvailableMemoryProportion(self) -> float | None:
        return self.attrs.get("available_memory_proportion")

    def setAvailableMemoryProportion(self, value: Any) -> None:
        """The proportion of tile memory the matmul's planner may use (None: the default)."""
        v = getattr(value, "value", value)  # an OptionalFloat or a number
        if v is not None and not 0 < float(v) <= 1:
            raise PopartException(f"availableMemoryProportion {v} is not in (0, 1]")
        self.attrs["available_memory_proportion"] = None if v is None else float(v)

    def useFullyConnectedPass(self) -> bool:
        return bool(self.attrs.get("fully_connected_pass", True))

    def setUseFullyConnectedPass(self, value: bool) -> None:
        """Whether the weights are laid out for the backward pass too (PopART's fully
        connected pass): a layout choice, recorded; the numbers do not change."""
        self.attrs["fully_connected_pass"] = bool(value)
