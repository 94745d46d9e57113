"""``repeat`` and ``repeat_with_info``, built as PopXL builds them: a ``Loop`` op (Tremula's
``Repeat``) whose called graph is a wrapper, ``<body>__loop_wrapper_subgraph(<n>)``, that holds one
``Call`` of the user's graph.

The wrapper's inputs are ``Iterator___`` (int32) and ``LoopCond___`` (bool), then one per
body input; its outputs are ``LoopCond___``, then the call's outputs. In PopART's numbering
loop input ``k`` (from 2: inputs 0 and 1, the trip count and the condition, are attributes
here) is wrapper input ``k``, and loop output ``j`` is wrapper output ``j + 1``; in the op
record, ``op.inputs[k - 2]`` is loop input ``k``. Programs that edit the IR through
``popart._internal.ir`` (popxl-addons' pipelining) see and edit exactly this structure.

The wrapper only routes tensors: :func:`loop_plan` reads, through it, which loop input feeds
which body input and which body output each loop output carries, and the lowering loops
the body's call directly with that plan (the same program, cycles and profile as a loop of
the body), so the wrapper costs nothing on the device.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tremula.errors import PopartException
from tremula.popxl import dtypes
from tremula.popxl.context import get_current_graph
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OpNode, create_op, defop
from tremula.popxl.ops.call import CallSiteInfo, _connect
from tremula.popxl.tensor import Tensor, TensorSpec, graph_input, graph_output

#: the names of the wrapper's first two inputs (PopART's reserved loop prefixes)
ITERATOR = "Iterator___"
CONDITION = "LoopCond___"
#: loop input ``k`` of PopART is ``op.inputs[k - IN_OFFSET]``, wrapper input ``k``
IN_OFFSET = 2


def _loop_outputs(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    return [t.spec for t in attrs["graphs"][0].outputs[1:]]


defop("Repeat", _loop_outputs, graphs="loop")


@dataclass(frozen=True)
class LoopPlan:
    """What a loop's wrapper routes.

    Attributes:
        body: the graph the wrapper's ``Call`` calls (the user's graph).
        call: that ``Call`` op.
        feeds: for each body input, the loop input (index into ``op.inputs``) feeding it.
        carries: for each loop output, where its value comes from: ``("output", m)``, body
            output ``m``; or ``("input", k)``, loop input ``k`` passed through unchanged.
    """

    body: Graph
    call: OpNode
    feeds: tuple[int, ...]
    carries: tuple[tuple[str, int], ...]


def loop_plan(op: OpNode) -> LoopPlan:
    """Read the wrapper of ``Repeat`` op ``op``.

    Raises:
        PopartException: a wrapper Tremula cannot loop: other ops than one ``Call``, a
            condition computed in the body, the iterator read, or an output that is neither
            a call output nor an input passed through. Only an edited wrapper can be so.
    """
    wrapper: Graph = op.attrs["graphs"][0]
    ins, outs = wrapper._inputs, wrapper._outputs
    calls = [o for o in wrapper._ops if o.definition.graphs == "call"]
    if len(wrapper._ops) != 1 or len(calls) != 1 or len(ins) < IN_OFFSET:
        raise _unloopable(op, wrapper, "it must hold exactly one Call of the loop body")
    call = calls[0]
    if not outs or outs[0] is not ins[1]:
        raise _unloopable(
            op, wrapper, f"its output 0 must be its input {CONDITION} (a fixed count)"
        )
    position = {id(t): k - IN_OFFSET for k, t in enumerate(ins)}
    feeds = []
    for i, t in enumerate(call.inputs):
        k = position.get(id(t), -IN_OFFSET) if t is not None else -IN_OFFSET
        if k < 0:
            what = "unconnected" if t is None else f"{t.id!r}, not a loop input"
            raise _unloopable(op, wrapper, f"the call's input {i} is {what}")
        feeds.append(k)
    made = {id(t): m for m, t in enumerate(call.outputs) if t is not None}
    carries: list[tuple[str, int]] = []
    for j, t in enumerate(outs[1:]):
        if id(t) in made:
            carries.append(("output", made[id(t)]))
        elif position.get(id(t), -1) >= 0:
            carries.append(("input", position[id(t)]))
        else:
            raise _unloopable(op, wrapper, f"its output {j + 1} {t.id!r} is not a call output")
    return LoopPlan(call.attrs["graphs"][0], call, tuple(feeds), tuple(carries))


def _unloopable(op: OpNode, wrapper: Graph, why: str) -> PopartException:
    return PopartException(
        f"Loop {op.debug_name!r} in {op.graph.name!r}: its graph {wrapper.name!r} is not a loop "
        f"wrapper Tremula can run: {why}"
    )


def _wrap(body: Graph) -> Graph:
    """The wrapper graph of a loop of ``body``, calling it once (PopXL's
    ``_setup_call_and_repeat``)."""
    wrapper = body.ir.create_empty_graph(f"{body.name}__loop_wrapper")
    wrapper._loop_wrapper = True
    by_ref = [i for i, t in enumerate(body.inputs) if t in body._by_ref_inputs]
    with wrapper:
        graph_input((), dtypes.int32, ITERATOR)
        cond = graph_input((), dtypes.bool, CONDITION)
        ins = [
            graph_input(t.shape, t.dtype, t.name, i in by_ref, t.meta_shape or None)
            for i, t in enumerate(body.inputs)
        ]
        outs = create_op("Call", ins, {"graphs": (body,)}, names=[t.name for t in body.outputs])
        wrapper.ops[-1].modified = tuple(by_ref)
        graph_output(cond)
        for t in outs:
            graph_output(t)
    return wrapper


class RepeatSiteInfo(CallSiteInfo):
    """The call site of a ``repeat``: ``_op`` is the ``Loop`` op, ``called_graph`` the
    repeated graph, and the index maps go through the wrapper (the identity as ``repeat``
    builds it; edits through the bindings may change them)."""

    def _plan(self) -> LoopPlan:
        return loop_plan(self._op)

    @property
    def called_graph(self) -> Graph:
        return self._plan().body

    def graph_to_parent_input_index(self, index: int) -> int:
        return self._plan().feeds[index]

    def parent_to_graph_input_index(self, index: int) -> int:
        return _find(self._plan().feeds, index, "input")

    def graph_to_parent_output_index(self, index: int) -> int:
        return _find(self._plan().carries, ("output", index), "output")

    def parent_to_graph_output_index(self, index: int) -> int:
        kind, m = self._plan().carries[index]
        if kind != "output":
            raise IndexError(f"loop output {index} passes loop input {m} through: no graph output")
        return m

    def set_parent_input_modified(
        self, parent_tensor: Tensor, infer_modified_regions: bool = False
    ) -> None:
        """The repeated graph's changes to this input reach the parent tensor (the loop and
        the wrapper's call both mark it)."""
        super().set_parent_input_modified(parent_tensor, infer_modified_regions)
        plan = self._plan()
        body_ins = [i for i, k in enumerate(plan.feeds) if k in self._op.modified]
        plan.call.modified = tuple(sorted(set(plan.call.modified) | set(body_ins)))


def _find(items: Sequence[Any], value: Any, what: str) -> int:
    for i, v in enumerate(items):
        if v == value:
            return i
    raise IndexError(f"Invalid graph {what} index: nothing of the loop site maps to {value!r}")


def repeat_with_info(
    graph: Graph,
    repeat_count: int,
    *inputs: Any,
    inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> CallSiteInfo:
    """Run ``graph`` ``repeat_count`` times; output ``i`` feeds input ``i`` of the next
    iteration (loop-carried), the other inputs stay; returns the call site (its ``_op`` is
    the ``Loop`` op, which calls the wrapper graph that calls ``graph``)."""
    if not isinstance(repeat_count, numbers.Integral):  # (PopXL's binding takes an int)
        raise TypeError(
            f"repeat of {graph.name!r}: the repeat count must be an int, got "
            f"{type(repeat_count).__name__} {repeat_count!r}"
        )
    if repeat_count < 0:
        raise ValueError(
            f"Repeat count must be >= 0 (an integer), got {repeat_count!r} (repeat of "
            f"{graph.name!r})"
        )
    if len(graph.outputs) > len(graph.inputs):
        raise ValueError(
            f"To repeat the subgraph ({graph.name}) the number of inputs must be greater than "
            f"or equal to the number of outputs: it has {len(graph.outputs)} outputs but "
            f"only {len(graph.inputs)} inputs (output i feeds input i)"
        )
    for i, (o, t) in enumerate(zip(graph.outputs, graph.inputs)):
        if o.shape != t.shape or o.dtype != t.dtype:
            raise ValueError(
                f"repeat: output {i} ({o.dtype} {o.shape}) of {graph.name!r} "
                f"does not match input {i} ({t.dtype} {t.shape})"
            )
    parents = _connect(graph, inputs, inputs_dict, "repeat", check_inputs)
    parent = get_current_graph()
    with graph.ir._undo_on_error():
        wrapper = _wrap(graph)
        create_op("Repeat", parents, {"graphs": (wrapper,), "count": int(repeat_count)})
    op = parent.ops[-1]
    op.modified = tuple(i for i, t in enumerate(graph.inputs) if t in graph._by_ref_inputs)
    return RepeatSiteInfo(op)


def repeat(
    graph: Graph, repeat_count: int, *inputs: Any, inputs_dict: Mapping[Tensor, Any] | None = None
) -> tuple[Tensor, ...]:
    """Call ``graph`` ``repeat_count`` times, output i of one iteration feeding input i of
    the next; the outputs of the last iteration (see :func:`repeat_with_info`)."""
    return repeat_with_info(graph, repeat_count, *inputs, inputs_dict=inputs_dict).outputs
