"""What the binding classes of served custom ops share, defined once: ``connect`` makes an
op as ``createOpInGraph`` does (PopART's ``Graph::createConnectedOp``: inputs by tensor id,
outputs created with the ids the wrapper made with ``graph._create_tensor_id``); the
replica grouping a wrapper passes (``group._pb_replica_grouping``) as the Ir's
``ReplicaGrouping``; and the surface of PopART's ``ParameterizedOp`` bindings
(``makeParameterizedOpBindings``: ``create_op_in_graph(graph, inputs, outputs, params,
settings)`` and ``default_opid()``), which popxl-addons' ``*_impl`` modules export.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from tremula.errors import PopartException
from tremula.libs.gcl.grouping import ReplicaGrouping as Grouping
from tremula.popxl._ir.op.base import Op
from tremula.popxl._ir.op.edit import graph_tensor
from tremula.popxl.context import get_current_context
from tremula.popxl.ops.base import create_op
from tremula.popxl.replica_grouping import ReplicaGrouping
from tremula.popxl.tensor import Tensor

__all__ = ["OperatorIdentifier", "connect", "grouping", "parameterized_binding"]


class OperatorIdentifier(NamedTuple):
    """PopART's ``OperatorIdentifier`` as the C++ source of a custom op declares it."""

    domain: str
    type: str
    version: int
    num_inputs: tuple[int, int] = (1, 1)
    num_outputs: int = 1


def _graph_of(graph: Any, what: str) -> Any:
    """The PopXL graph behind what a wrapper passes as ``graph`` (``g._pb_graph``)."""
    inner = getattr(graph, "_g", None)
    if inner is None or not hasattr(inner, "_tensors"):
        raise PopartException(
            f"{what}: graph must be a graph of the IR bindings (popxl Graph's _pb_graph), got "
            f"{type(graph).__name__}"
        )
    return inner


def _base_name(graph: Any, tensor_id: str) -> str:
    """The name ``create_op`` turns back into ``tensor_id`` in the current context: the id
    without the graph's prefix and the current name scope."""
    name = str(tensor_id)
    if graph is not graph.ir.main_graph and name.startswith(f"{graph.name}/"):
        name = name[len(graph.name) + 1 :]
    scope = get_current_context().name_scope
    if scope and name.startswith(f"{scope}/"):
        name = name[len(scope) + 1 :]
    return name


def _output_names(graph: Any, outputs: Mapping[int, str], what: str) -> list[str]:
    """The names to give outputs ``0 .. k-1`` so that they get the ids the wrapper chose."""
    if sorted(outputs) != list(range(len(outputs))):
        raise PopartException(f"{what}: outputs at indices 0 .. k-1, got indices {sorted(outputs)}")
    names = []
    for k in range(len(outputs)):
        tid = str(outputs[k])
        if tid in graph._tensors:
            raise PopartException(
                f"{what}: output id {tid!r} is already a tensor of {graph.name!r}"
            )
        names.append(_base_name(graph, tid))
    return names


def connect(
    what: str,
    graph: Any,
    op_type: str,
    inputs: Mapping[int, str],
    outputs: Mapping[int, str],
    num_inputs: int,
    attrs: dict[str, Any],
) -> Op:
    """An op of ``op_type`` made in ``graph`` (the ``_pb_graph`` handle a wrapper passes)
    from the tensors named by ``inputs`` (ids at indices ``0 .. num_inputs - 1``), its
    outputs given the ids in ``outputs`` (indices ``0 .. k-1``, the rest named by the op);
    returns the op (the wrapper reads ``outTensor``). ``what`` names the binding in errors.

    Raises:
        PopartException: a graph that is not the bindings', input indices that are not
            ``0 .. num_inputs - 1``, output indices that are not ``0 .. k-1``, an output id
            the graph already holds, an unknown tensor id (PopART's message).
    """
    g = _graph_of(graph, what)
    want = list(range(num_inputs))
    if sorted(inputs) != want:
        raise PopartException(f"{what}: inputs at indices {want}, got indices {sorted(inputs)}")
    tensors: list[Tensor] = [graph_tensor(g, inputs[i]) for i in want]
    with g:
        names = _output_names(g, outputs, what)
        outs = create_op(op_type, tensors, attrs, names, graph=g)
    producer = outs[0].producer
    assert isinstance(producer, Op)  # op records are made as their binding classes
    return producer


def grouping(ir: Any, group: Grouping | ReplicaGrouping | None) -> ReplicaGrouping:
    """The Ir's ``ReplicaGrouping`` of what a wrapper passes (its ``_pb_replica_grouping``;
    ``None``: all replicas)."""
    if group is None:
        return ir.replica_grouping()
    if isinstance(group, ReplicaGrouping):
        return group
    # the bindings' ReplicaGrouping (what ``_pb_replica_grouping`` is) holds a GCL grouping
    inner = group if isinstance(group, Grouping) else getattr(group, "grouping", None)
    if not isinstance(inner, Grouping):
        raise TypeError(
            f"group must be a ReplicaGrouping's _pb_replica_grouping, got {type(group).__name__}"
        )
    return ReplicaGrouping._wrap(ir, inner)


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
        return connect(class_name, graph, opid.type, inputs, outputs, n_in, attrs_of(params))

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
