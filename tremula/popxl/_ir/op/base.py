"""``popart._internal.ir.Op``: the binding methods of an op of Tremula's IR.

Every op record (``tremula.popxl.ops.base.OpNode``) is made as an instance of a subclass of
:class:`Op` (one class per PopART op, see ``classes.py``), so the ops that graphs hold, that
op-created hooks receive and that ``CallSiteInfo._op`` names are themselves the binding
objects: ``isinstance(op, _ir.op.CallOp)`` works on them, and what is read or edited through
these methods is the op the lowering sees.

Indices are PopART's: for most ops an input index is the position in ``op.inputs``; a
``LoopOp`` (``repeat``) numbers its inputs from 2 (PopART's inputs 0 and 1, the trip count
and the condition, are attributes in Tremula), see ``_IN_OFFSET``.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from tremula.errors import PopartException
from tremula.popxl._ir import unsupported
from tremula.popxl._ir.names import (
    INPLACE_VIEW_CHANGES,
    INPUT_SLOTS,
    OPTIMIZER_OPS,
    OUTPLACE_VIEW_CHANGES,
    op_name,
)
from tremula.popxl._ir.op.edit import Editing
from tremula.popxl.ops.base import OpNode as _Record
from tremula.popxl.tensorlocation import ExecutionContext, TileSet

if TYPE_CHECKING:
    from tremula.popxl._ir.graph import Graph, GraphId
    from tremula.popxl._ir.ir import Ir
    from tremula.popxl._ir.tensor import Tensor, TensorInfo
    from tremula.popxl.tensor import Tensor as XlTensor


def _view(t: XlTensor) -> Tensor:
    from tremula.popxl._ir.tensor import tensor_handle

    return tensor_handle(t)


def _xl(t: Any) -> XlTensor:
    """The popxl tensor of a binding tensor (or of a popxl tensor)."""
    return getattr(t, "_t", t)


class OpSettingsView:
    """An op's settings as PopART's ``Op::Settings`` names them, read from the op record
    (ops are placed by popxl contexts: ``popxl.ipu``, ``io_tiles``, ``name_scope``)."""

    def __init__(self, op: Op) -> None:
        self._op = op

    @property
    def name(self) -> builtins.str:
        return self._op.name()

    @property
    def scope(self) -> builtins.str:
        """The name scope the op was made in (also the start of its name)."""
        debug = self._op.debug_name
        return debug.rpartition("/")[0]

    @property
    def schedulePriority(self) -> float:
        """0.0: PopXL sets no schedule priority (ops are ordered by ``in_sequence``)."""
        return 0.0

    def getIr(self) -> Ir:
        return self._op.getIr()

    @property
    def tileSet(self) -> TileSet:
        return TileSet.IO if self._op.tile_set == "io" else TileSet.Compute

    @property
    def executionContext(self) -> ExecutionContext:
        return self._op.execution_context

    @property
    def vgraphId(self) -> int | None:
        """The virtual IPU (0 outside ``popxl.ipu``; None under ``popxl.ipu(None)``)."""
        ipu = self._op.ipu
        return 0 if ipu is None else (int(ipu) if ipu >= 0 else None)

    @property
    def graph(self) -> Graph:
        return self._op.getGraph()

    def __repr__(self) -> builtins.str:
        return (
            f"Settings(name={self.name!r}, vgraphId={self.vgraphId}, tileSet={self.tileSet}, "
            f"executionContext={self.executionContext})"
        )


class Op(_Record, Editing):
    """An op of Tremula's IR, with PopART's ``Op`` bindings (``popart._internal.ir.Op``)."""

    _IN_OFFSET = 0  # PopART input index of ``inputs[0]``

    # ---- names ----
    def opType(self) -> builtins.str:
        """PopART's op type (``"Add"``, ``"MatMul"``, ``"Loop"``, ...)."""
        return op_name(self.type).op_type

    def str(self) -> builtins.str:
        """``"<id> (<type>)"``."""
        return f"{self.id} ({self.opType()})"

    def debugName(self) -> builtins.str:
        """``Op(<name>, inputs=[...], outputs=[...])``, as PopART's ``Op::debugName`` (the op
        type where the op has no name)."""
        ins = ", ".join(t.id for t in self.inputs if t is not None)
        outs = ", ".join(t.id for t in self.outputs if t is not None)
        return f"Op({self.name() or self.opType()}, inputs=[{ins}], outputs=[{outs}])"

    def name(self) -> builtins.str:
        """The op's settings name (``OpNode.settings_name``): ``"add"`` for ``ops.add``,
        ``"scope/add"`` under ``popxl.name_scope("scope")``; a ``Settings``' name for an op
        made through the bindings (``""`` if it has none)."""
        return self.settings_name

    getName = name

    # ---- where ----
    def getGraph(self) -> Graph:
        from tremula.popxl._ir.graph import graph_handle

        return graph_handle(self.graph)

    def getIr(self) -> Ir:
        from tremula.popxl._ir.ir import ir_handle

        return ir_handle(self.graph.ir)

    def getVirtualGraphId(self) -> int:
        """The virtual IPU (0 for ops made outside ``popxl.ipu``, PopXL's default).

        Raises:
            popart_exception: an op made under ``popxl.ipu(None)``, which has none (PopART's
                words).
        """
        if not self.hasVirtualGraphId():
            raise PopartException(
                f"Cannot return vGraphId for Op {self.debugName()}. It has not had this "
                f"attribute set"
            )
        return 0 if self.ipu is None else int(self.ipu)

    def hasVirtualGraphId(self) -> bool:
        """False only for an op made under ``popxl.ipu(None)``."""
        return self.ipu is None or self.ipu >= 0

    def setVirtualGraphId(self, value: int | None) -> None:
        """Place the op on virtual IPU ``value``; None leaves it with none (as an op made
        under ``popxl.ipu(None)``: ``hasVirtualGraphId()`` is then False)."""
        from tremula.popxl.context import NO_IPU

        self.ipu = NO_IPU if value is None else int(value)

    def getCalledGraphs(self) -> list[Graph]:
        """The graphs this op calls (none for ops that are not subgraph ops)."""
        from tremula.popxl._ir.graph import graph_handle

        return [graph_handle(g) for g in self.called_graphs]

    def getCalledGraphIds(self) -> list[GraphId]:
        """The ids of the graphs this op calls, in ``getCalledGraphs`` order."""
        from tremula.popxl._ir.graph import graph_id

        return [graph_id(g) for g in self.called_graphs]

    def getCalledGraphIndex(self, id: GraphId | builtins.str) -> int:
        """The position of the graph ``id`` among the graphs this op calls.

        Raises:
            popart_exception: the op does not call that graph.
        """
        ids = [g.str() for g in self.getCalledGraphIds()]
        key = builtins.str(id)  # (a GraphId prints as its string)
        if key not in ids:
            raise PopartException(f"Op {self.str()} does not call graph {key!r} (it calls {ids})")
        return ids.index(key)

    # ---- inputs and outputs (PopART indices) ----
    def _slot_map(self) -> dict[int, int] | None:
        """PopART input index -> position in ``inputs``, for ops whose operands PopART
        indexes by role (``names.INPUT_SLOTS``; None: position + ``_IN_OFFSET``)."""
        table = INPUT_SLOTS.get(self.definition.outplace)
        slots = self.attrs.get("slots")
        if table is None or slots is None:
            return None
        return {table[role]: pos for role, pos in slots.items() if role in table}

    def _in_index(self, index: int) -> int:
        slots = self._slot_map()
        if slots is not None:
            return slots.get(int(index), -1)
        return int(index) - self._IN_OFFSET

    def _inputs(self) -> dict[int, XlTensor]:
        slots = self._slot_map()
        if slots is not None:
            ins = self.inputs
            return {
                i: ins[p] for i, p in sorted(slots.items()) if p < len(ins) and ins[p] is not None
            }
        off = self._IN_OFFSET
        return {i + off: t for i, t in enumerate(self.inputs) if t is not None}

    def _outputs(self) -> dict[int, XlTensor]:
        return {i: t for i, t in enumerate(self.outputs) if t is not None}

    def getInputIndexMap(self) -> dict[int, Tensor]:
        return {i: _view(t) for i, t in self._inputs().items()}

    def getOutputIndexMap(self) -> dict[int, Tensor]:
        return {i: _view(t) for i, t in self._outputs().items()}

    def getInputTensors(self) -> list[Tensor]:
        return [_view(t) for _, t in sorted(self._inputs().items())]

    def getOutputTensors(self) -> list[Tensor]:
        return [_view(t) for _, t in sorted(self._outputs().items())]

    def _tensor_at(self, where: dict[int, XlTensor], index: int, what: builtins.str) -> XlTensor:
        t = where.get(int(index))
        if t is None:
            raise PopartException(
                f"{self.debugName()}: no {what} tensor at index {index} (connected: "
                f"{sorted(where)})"
            )
        return t

    def inTensor(self, index: int) -> Tensor:
        return _view(self._tensor_at(self._inputs(), index, "input"))

    def outTensor(self, index: int) -> Tensor:
        return _view(self._tensor_at(self._outputs(), index, "output"))

    def inId(self, index: int) -> builtins.str:
        return self._tensor_at(self._inputs(), index, "input").id

    def outId(self, index: int) -> builtins.str:
        return self._tensor_at(self._outputs(), index, "output").id

    def hasInput(self, index: int) -> bool:
        return int(index) in self._inputs()

    def hasOutput(self, index: int) -> bool:
        return int(index) in self._outputs()

    def hasInputTensor(self, tensor: Any) -> bool:
        return any(t is _xl(tensor) for t in self._inputs().values())

    def hasOutputTensor(self, tensor: Any) -> bool:
        return any(t is _xl(tensor) for t in self._outputs().values())

    def _index_of(self, where: dict[int, XlTensor], tensor: Any, what: builtins.str) -> int:
        t = _xl(tensor)
        for i, u in sorted(where.items()):
            if u is t:
                return i
        raise PopartException(f"{self.debugName()}: {t.id!r} is not an {what} of this op")

    def inIndex(self, tensor: Any) -> int:
        """The (first) input index of ``tensor``."""
        return self._index_of(self._inputs(), tensor, "input")

    def outIndex(self, tensor: Any) -> int:
        return self._index_of(self._outputs(), tensor, "output")

    # ---- the connected tensors' infos ----
    def inInfo(self, index: int) -> TensorInfo:
        return self.inTensor(index).info

    def outInfo(self, index: int) -> TensorInfo:
        return self.outTensor(index).info

    def inShape(self, index: int) -> list[int]:
        return self.inInfo(index).shape()

    def outShape(self, index: int) -> list[int]:
        return self.outInfo(index).shape()

    def inRank(self, index: int) -> int:
        return self.inInfo(index).rank()

    def outRank(self, index: int) -> int:
        return self.outInfo(index).rank()

    @property
    def settings(self) -> OpSettingsView:
        """The settings the op was made with (PopART's ``Op.settings``, read-only here:
        ``name``, ``tileSet``, ``executionContext``, ``vgraphId``, ``scope``,
        ``schedulePriority``, ``graph``, ``getIr()``)."""
        return OpSettingsView(self)

    def inTensorCount(self) -> int:
        return len(self._inputs())

    def outTensorCount(self) -> int:
        return len(self._outputs())

    def isOptimizerOp(self) -> bool:
        """Whether the op is part of an optimizer step: the variable updates
        (``ops.var_updates``) and the optimizer ops they are made from (``AdamUpdater``,
        ``LambSquare``)."""
        return self.type in OPTIMIZER_OPS

    def isInplaceViewChange(self) -> bool:
        """Whether the op's output is an alias of its input in another shape, order or
        region (``reshape_``, ``transpose_``, in-place slicing)."""
        return self.type in INPLACE_VIEW_CHANGES

    def isOutplaceViewChange(self) -> bool:
        """Whether the op copies its input into another shape, order or region
        (``reshape``, ``transpose``, slicing)."""
        return self.type in OUTPLACE_VIEW_CHANGES

    def modifiesIndex(self, index: int) -> bool:
        """Whether the op writes its input ``index`` in place."""
        return self._in_index(index) in self.modified

    # ---- PopART methods Tremula does not bind: NotImplementedError naming them ----
    def __getattr__(self, name: builtins.str) -> Any:
        return unsupported.unsupported_attr(self, name)
