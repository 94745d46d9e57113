"""What the served binding modules share: connecting an op of a Tremula op type from the
``createOpInGraph`` arguments a Python wrapper passes (input and output tensor ids by
index), and the surface of PopART's ``ParameterizedOp`` bindings
(``makeParameterizedOpBindings``: ``create_op_in_graph(graph, inputs, outputs, params,
settings)`` and ``default_opid()``), which popxl-addons' ``*_impl`` modules export.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from tremula.errors import PopartException
from tremula.popxl.ops.base import Op, create_op
from tremula.popxl.tensor import Tensor

__all__ = ["OperatorIdentifier", "connect", "parameterized_binding"]


class OperatorIdentifier(NamedTuple):
    """PopART's ``OperatorIdentifier`` as the C++ source of a custom op declares it."""

    domain: str
    type: str
    version: int
    num_inputs: tuple[int, int] = (1, 1)
    num_outputs: int = 1


def _graph_of(graph: Any) -> Any:
    """The PopXL graph behind what a wrapper passes as ``graph`` (``g._pb_graph``)."""
    inner = getattr(graph, "_g", None)
    if inner is None or not hasattr(inner, "_tensors"):
        raise PopartException(
            f"createOpInGraph: graph must be a graph of the IR bindings (popxl Graph's "
            f"_pb_graph), got {type(graph).__name__}"
        )
    return inner


def _output_name(graph: Any, outputs: Mapping[int, str], what: str) -> str | None:
    """The name to give output 0 so that it gets the id the wrapper chose (the wrapper's
    ``g._create_tensor_id`` already holds the name scope, which ``create_op`` adds)."""
    if set(outputs) - {0}:
        raise PopartException(f"{what}: one output at index 0, got indices {sorted(outputs)}")
    tid = outputs.get(0)
    if tid is None:
        return None
    tid = str(tid)
    if tid in graph._tensors:
        raise PopartException(f"{what}: output id {tid!r} is already a tensor of {graph.name!r}")
    from tremula.popxl.context import get_current_context

    scope = get_current_context().name_scope
    return tid[len(scope) + 1 :] if scope and tid.startswith(scope + "/") else tid


def connect(
    graph: Any,
    op_type: str,
    inputs: Mapping[int, str],
    outputs: Mapping[int, str],
    attrs: dict[str, Any],
    num_inputs: int,
    what: str,
) -> Op:
    """Add an op of ``op_type`` to ``graph`` (the bindings' graph a wrapper passes) with the
    tensors named by ``inputs`` (ids at indices ``0 .. num_inputs - 1``) and return the op
    (its ``outTensor(0)`` is the output, with the id ``outputs[0]`` where given)."""
    from tremula.popxl._ir.op.edit import graph_tensor

    g = _graph_of(graph)
    want = set(range(num_inputs))
    if set(inputs) != want:
        raise PopartException(
            f"{what}: inputs at indices {sorted(want)}, got indices {sorted(inputs)}"
        )
    tensors: list[Tensor] = [graph_tensor(g, inputs[i]) for i in range(num_inputs)]
    with g:
        name = _output_name(g, outputs, what)
        (out,) = create_op(op_type, tensors, attrs, names=[name], graph=g)
    producer = out._producer
    assert producer is not None
    return producer


def parameterized_binding(
    class_name: str,
    opid: OperatorIdentifier,
    attrs_of: Callable[[Any], dict[str, Any]],
    doc: str,
) -> type:
    """A binding class as ``makeParameterizedOpBindings`` makes one: ``default_opid()`` and
    ``create_op_in_graph(graph, inputs, outputs, params, settings)``; ``attrs_of(params)``
    checks the params object and gives the op's attributes."""

    def default_opid() -> OperatorIdentifier:
        return opid

    def create_op_in_graph(
        graph: Any,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        params: Any,
        settings: Any = None,
    ) -> Op:
        n_in = opid.num_inputs[0]
        return connect(graph, opid.type, inputs, outputs, attrs_of(params), n_in, class_name)

    return type(
        class_name,
        (),
        {
            "__doc__": doc,
            "default_opid": staticmethod(default_opid),
            "create_op_in_graph": staticmethod(create_op_in_graph),
            "createOpInGraph": staticmethod(create_op_in_graph),
        },
    )
