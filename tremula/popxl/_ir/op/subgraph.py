"""The bindings of ops that call graphs (``CallOp``, ``LoopOp``, ``IfOp``) and of the ops
with settings of their own (``IpuCopyOp``, ``MatMulOp``).

A ``LoopOp`` is Tremula's ``repeat``, built as PopXL builds it (``ops/repeat.py``): it calls
a wrapper graph whose inputs are ``Iterator___``, ``LoopCond___`` and the loop's inputs,
and whose outputs are ``LoopCond___`` and the loop's outputs; the wrapper holds the
``CallOp`` of the repeated graph. Its trip count is an attribute. PopART's indices: op
input ``k`` (from 2: inputs 0 and 1, the trip count and the condition, are not connected)
is wrapper input ``k``, op output ``j`` is wrapper output ``j + 1``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tremula.errors import PopartException
from tremula.popxl._ir.core.enums import PopartEnum
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

    _OUT_OFFSET = 0  # called graph output of op output 0

    def getCalledGraph(self) -> Graph:
        from tremula.popxl._ir.graph import graph_handle

        return graph_handle(self._body())

    def _body(self) -> XlGraph:
        return self.attrs["graphs"][0]

    def opInToSubgraphInIndex(self, index: int) -> int:
        return int(index) - self._IN_OFFSET + self._GRAPH_IN_OFFSET

    def subgraphInToOpInIndex(self, index: int) -> int:
        return int(index) - self._GRAPH_IN_OFFSET + self._IN_OFFSET

    def opOutToSubgraphOutIndex(self, index: int) -> int:
        return int(index) + self._OUT_OFFSET

    def subgraphOutToOpOutIndex(self, index: int) -> int:
        return int(index) - self._OUT_OFFSET

    _GRAPH_IN_OFFSET = 0  # called graph input of ``inputs[0]``


class CallOp(_OneGraph):
    """``ops.call`` (and the call of the repeated graph in a loop's wrapper)."""


class LoopOp(_OneGraph):
    """``ops.repeat``: loops its wrapper graph (PopXL's ``<graph>__loop_wrapper``)."""

    _IN_OFFSET = 2
    _GRAPH_IN_OFFSET = 2  # the wrapper's inputs 0 and 1: Iterator___, LoopCond___
    _OUT_OFFSET = 1  # the wrapper's output 0: LoopCond___

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
        wrapper = self._body()
        for g in wrapper.ir.graphs:
            for op in g._ops:
                if op is not self and wrapper in op.called_graphs:
                    raise PopartException(
                        f"{what}: the loop's graph {wrapper.name!r} is also called by "
                        f"{op!r}, whose inputs would no longer match"
                    )
        return wrapper

    def _carried(self) -> int:
        return len(self._body().outputs) - self._OUT_OFFSET

    def addLoopInput(
        self, index: int, tensorId: str, subgraphTensorId: str, overwrite: bool
    ) -> None:
        """Feed parent tensor ``tensorId`` to the loop at op input ``index`` through a new
        input ``subgraphTensorId`` of the loop's (wrapper) graph, at the same index. Inputs
        past the loop-carried ones stay fixed across iterations; an input may not be put
        among the loop-carried ones.

        Raises:
            PopartException: ``index`` among the loop-carried inputs or past the end, an
                id in use, or a loop graph called by another op too.
        """
        wrapper = self._only_caller("addLoopInput")
        rec = self._in_index(index)
        if overwrite or not self._carried() <= rec <= len(self.inputs):
            raise PopartException(
                f"addLoopInput: index {index} must be a new fixed input, between "
                f"{self._carried() + self._IN_OFFSET} and {len(self.inputs) + self._IN_OFFSET}"
            )
        parent = graph_tensor(self.graph, tensorId)
        inner = new_tensor(wrapper, subgraphTensorId, None, parent.spec)
        inner._ipu, inner._tile_set = parent._ipu, parent._tile_set
        wrapper._inputs.insert(self.opInToSubgraphInIndex(index), inner)
        self.inputs = (*self.inputs[:rec], parent, *self.inputs[rec:])
        self.modified = tuple(i + (i >= rec) for i in self.modified)

    def addLoopOutput(
        self, index: int, tensorId: str, subgraphTensorId: str, overwrite: bool
    ) -> None:
        """Make graph tensor ``subgraphTensorId`` the loop graph's output ``index + 1`` and
        the loop's output ``index`` tensor ``tensorId``: with ``overwrite``, replacing the
        graph output already there (the loop's output tensor stays); else appending a
        loop-carried output (graph input ``index + 2`` must match it).

        Raises:
            PopartException: a position that would break the loop-carried pairing, or a
                graph tensor whose shape or type differ.
        """
        wrapper = self._only_caller("addLoopOutput")
        inner = graph_tensor(wrapper, subgraphTensorId)
        i, outs = int(index), wrapper._outputs
        at = self.opOutToSubgraphOutIndex(i)
        if (
            overwrite
            and at < len(outs)
            and i < len(self.outputs)
            and self.outputs[i].id == tensorId
        ):
            _same_spec(inner, outs[at], "addLoopOutput")
            outs[at] = inner
            return
        g_in = self.opInToSubgraphInIndex(i + self._IN_OFFSET)
        if overwrite or at != len(outs) or g_in >= len(wrapper._inputs):
            raise PopartException(
                f"addLoopOutput: output {i} of the loop cannot be {subgraphTensorId!r} (its "
                f"graph {wrapper.name!r} has {len(outs)} outputs, {len(wrapper._inputs)} inputs)"
            )
        _same_spec(inner, wrapper._inputs[g_in], "addLoopOutput")
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

    def setup(self) -> None:
        """As any op's, once the source IPU is known (PopART's copy takes it with its
        input: ``connectInTensor(0, id, sourceIpu)``)."""
        if "source" not in self.attrs:
            raise PopartException(
                f"{self.debugName()}: no source IPU; connect the input with "
                f"connectInTensor(0, tensorId, sourceIpu)"
            )
        super().setup()


class MatMulPartialsType(PopartEnum):
    """PopART's ``MatMulPartialsType`` (``popart._internal.ir.op.MatMulPartialsType``)."""

    HALF = 0
    FLOAT = 1


class SerialiseSettingsMode(PopartEnum):
    """PopART's ``MatMulBaseOp::SerialiseSettings::Mode``."""

    NoSerialisation = 0
    InputChannels = 1
    ReducingDim = 2
    OutputChannels = 3


class SerialiseSettings:
    """PopART's ``MatMulBaseOp::SerialiseSettings`` (``mode``, ``factor``,
    ``keep_precision``), what PopXL's matmul passes: no serialisation."""

    def __init__(self) -> None:
        self.mode = SerialiseSettingsMode.NoSerialisation
        self.factor = 0
        self.keep_precision = False


class MatMulOp(Op):
    """``ops.matmul``: with the planner's memory proportion, fully-connected pass and
    partials type."""

    def getPartialsType(self) -> MatMulPartialsType:
        """``HALF`` for ``partials_type=popxl.float16``, else ``FLOAT`` (PopART's default)."""
        half = getattr(self.attrs.get("partials_type"), "name", None) == "float16"
        return MatMulPartialsType.HALF if half else MatMulPartialsType.FLOAT

    def setPartialsType(self, value: Any) -> None:
        """Set the partials type (a ``MatMulPartialsType``), as ``ops.matmul(...,
        partials_type=)`` does: the lowering gives it to PopLin's matmul (``partialsType``)."""
        from tremula.popxl import dtypes

        kind = MatMulPartialsType(int(value))
        half = kind == MatMulPartialsType.HALF
        self.attrs["partials_type"] = dtypes.float16 if half else dtypes.float32

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
