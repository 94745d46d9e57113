"""Editing ops through the bindings: clone an op into a graph, connect and disconnect its
tensors, ``setup()`` it. Edits change the op records the lowering reads, so what a program
edits here is what runs.

An op may be half-connected between edits (PopART's ops are too): ``setup()`` checks it and
infers its outputs, and a ``Session`` refuses an Ir with an op left inconsistent
(``verify.py``), naming the op.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from tremula.errors import PopartException
from tremula.popxl import dtypes
from tremula.popxl.ops import base as _base
from tremula.popxl.tensor import Tensor as XlTensor
from tremula.popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph as XlGraph

_UNSET = TensorSpec((), dtypes.float32)  # an output's spec before setup()


def graph_tensor(graph: XlGraph, tensor_id: str) -> XlTensor:
    """The tensor ``tensor_id`` of ``graph`` (PopART's message when it has none)."""
    t = graph._tensors.get(str(tensor_id))
    if t is None:
        raise PopartException(
            f"No Ir::Tensor with TensorId '{tensor_id}' in Tensors::get(..) (graph {graph.name!r})"
        )
    return t


def _put(seq: tuple[Any, ...], index: int, value: Any) -> tuple[Any, ...]:
    """``seq`` with ``value`` at ``index``, padding with unconnected slots (``None``: an
    op keeps its number of inputs and outputs while they are disconnected, so that a
    ``Session`` can tell a half-connected op)."""
    items = list(seq) + [None] * (index + 1 - len(seq))
    items[index] = value
    return tuple(items)


def new_tensor(
    graph: XlGraph, tensor_id: str, producer: Any, spec: TensorSpec = _UNSET
) -> XlTensor:
    """A new tensor ``tensor_id`` of ``graph`` (PopART refuses an id in use)."""
    tensor_id = str(tensor_id)
    if tensor_id in graph._tensors:
        raise PopartException(
            f"Tensor '{tensor_id}' already exists in graph {graph.name!r}: choose a new id "
            f"(Graph._create_tensor_id makes one)"
        )
    t = XlTensor._create(graph, tensor_id, spec, producer)
    if producer is not None:
        t._ipu, t._tile_set = producer.ipu, producer.tile_set
    graph._add_tensor(t)
    return t


class Editing:
    """The editing methods of ``popart._internal.ir.Op`` (mixed into :class:`Op`)."""

    id: int
    type: str
    graph: XlGraph
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    attrs: dict[str, Any]
    modified: tuple[int, ...]
    ipu: int | None
    tile_set: str
    _IN_OFFSET = 0

    if TYPE_CHECKING:  # defined by Op

        def _in_index(self, index: int) -> int: ...

        def debugName(self) -> str: ...

    def cloneIntoGraph(self, graph: Any) -> Any:
        """A copy of this op (type, attributes, placement; no tensors) added to ``graph``
        (a binding or popxl graph of the same Ir). Connect its tensors, then ``setup()``."""
        target: XlGraph = getattr(graph, "_g", graph)
        if target.ir is not self.graph.ir:
            raise PopartException(f"cloneIntoGraph: {target!r} belongs to another Ir")
        clone = dataclasses.replace(
            self,  # type: ignore[type-var]
            id=_base._next_op_id[0],
            graph=target,
            inputs=(None,) * len(self.inputs),  # unconnected, as many as the original's
            outputs=(None,) * len(self.outputs),
            attrs=dict(self.attrs),
        )
        _base._next_op_id[0] += 1
        target._ops.append(cast(_base.OpNode, clone))
        return clone

    def connectInTensor(self, index: int, tensor_id: str, vgraph_id: int | None = None) -> None:
        """Connect tensor ``tensor_id`` of the op's graph at input ``index``."""
        rec = self._in_index(index)
        if rec < 0:
            raise PopartException(f"{self.debugName()}: input index {index} is not bindable")
        t = graph_tensor(self.graph, tensor_id)
        self.inputs = _put(self.inputs, rec, t)

    def connectOutTensor(self, index: int, tensor_id: str) -> None:
        """Make the existing tensor ``tensor_id`` (with no producer) output ``index``."""
        t = graph_tensor(self.graph, tensor_id)
        if t._producer is not None and t._producer is not self:
            raise PopartException(
                f"connectOutTensor: {t.id!r} is already produced by {t._producer!r}"
            )
        t._producer = cast(_base.OpNode, self)
        self.outputs = _put(self.outputs, int(index), t)

    def createAndConnectOutTensor(self, index: int, tensor_id: str) -> None:
        """Create tensor ``tensor_id`` in the op's graph as output ``index`` (its shape and
        type are set by ``setup()``)."""
        t = new_tensor(self.graph, tensor_id, self)
        self.outputs = _put(self.outputs, int(index), t)

    def disconnectInTensor(self, where: Any, tensor: Any = None) -> None:
        """Disconnect an input, given by index, by tensor, or by (index, tensor)."""
        if isinstance(where, int):
            rec = self._in_index(where)
            if not 0 <= rec < len(self.inputs) or self.inputs[rec] is None:
                raise PopartException(f"{self.debugName()}: no input at index {where}")
            self.inputs = _put(self.inputs, rec, None)
            return
        t = getattr(where, "_t", where)
        self.inputs = tuple(None if u is t else u for u in self.inputs)

    def disconnectOutTensor(self, tensor: Any) -> None:
        t = getattr(tensor, "_t", tensor)
        if not any(u is t for u in self.outputs):
            raise PopartException(f"{self.debugName()}: {t.id!r} is not an output")
        t._producer = None
        self.outputs = tuple(None if u is t else u for u in self.outputs)

    def disconnectAllInputs(self) -> None:
        self.inputs = (None,) * len(self.inputs)

    def disconnectAllOutputs(self) -> None:
        for t in self.outputs:
            if t is not None:
                t._producer = None
        self.outputs = (None,) * len(self.outputs)

    def setup(self) -> None:
        """Check the connected inputs and infer the outputs (creating any output a
        multi-output op needs that was not connected); the graph's op order is restored to
        a valid schedule if the new connections need it.

        Raises:
            PopartException: an unconnected input, inputs the op refuses, or more outputs
                connected than the op has.
        """
        from tremula.popxl._ir.graph import restore_order

        missing = [i + self._IN_OFFSET for i, t in enumerate(self.inputs) if t is None]
        if missing:
            raise PopartException(f"{self.debugName()}: inputs {missing} are not connected")
        from tremula.popxl._ir.constructors import at_setup

        try:
            at_setup(self, [t.spec for t in self.inputs])
            specs = _base.OPS[self.type].infer([t.spec for t in self.inputs], self.attrs)
        except (TypeError, ValueError, KeyError, IndexError) as err:
            raise PopartException(f"{self.debugName()}: setup failed: {err}") from None
        if len(self.outputs) > len(specs):
            raise PopartException(
                f"{self.debugName()}: {len(self.outputs)} outputs connected, the op has "
                f"{len(specs)}"
            )
        self._complete_outputs(len(specs))
        for t, spec in zip(self.outputs, specs):
            t._spec = spec
        self._check_site()
        restore_order(self.graph)

    def _complete_outputs(self, count: int) -> None:
        """Fill unconnected outputs below ``count`` (all of them, but for a ``Call`` whose
        trailing outputs may stay unconnected) with new tensors."""
        upto = len(self.outputs) if _base.OPS[self.type].graphs == "call" else count
        outs = list(self.outputs) + [None] * (upto - len(self.outputs))
        for i, t in enumerate(outs):
            if t is None:
                tid = self.graph._unique_id(f"{self.type.lower()}_{self.id}_out{i}")
                outs[i] = new_tensor(self.graph, tid, self)
        self.outputs = tuple(outs)

    def _check_site(self) -> None:
        """Subgraph ops: the inputs match the called graph's (PopXL's CallOp message)."""
        from tremula.popxl._ir.verify import check_site

        check_site(self)
