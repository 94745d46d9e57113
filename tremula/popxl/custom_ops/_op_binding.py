"""What the binding classes of served custom ops share: ``createOpInGraph`` as PopART's
``Graph::createConnectedOp`` does it (inputs by tensor id, outputs created with the ids
the wrapper made with ``graph._create_tensor_id``), and the replica grouping a wrapper
passes (``group._pb_replica_grouping``) as the Ir's ``ReplicaGrouping``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tremula.errors import PopartException
from tremula.libs.gcl.grouping import ReplicaGrouping as Grouping
from tremula.popxl._ir.op.base import Op
from tremula.popxl._ir.op.edit import graph_tensor
from tremula.popxl.context import get_current_context
from tremula.popxl.ops.base import create_op
from tremula.popxl.replica_grouping import ReplicaGrouping
from tremula.popxl.tensor import Tensor


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


def connected_op(
    what: str,
    pb_graph: Any,
    op_type: str,
    inputs: Mapping[int, str],
    outputs: Mapping[int, str],
    num_inputs: int | Sequence[int],
    attrs: dict[str, Any],
) -> Op:
    """An op of ``op_type`` made in ``pb_graph`` (a ``_pb_graph`` handle) from the input ids
    at indices ``0 .. n-1`` (``num_inputs``: a count or the allowed counts), its outputs
    named by ``outputs``; returns the op (the wrapper reads ``outTensor``).

    Raises:
        PopartException: input indices that are not ``0 .. n-1`` or not allowed, an unknown
            tensor id (PopART's message).
    """
    graph = pb_graph._g
    counts = (num_inputs,) if isinstance(num_inputs, int) else tuple(num_inputs)
    if sorted(inputs) != list(range(len(inputs))) or len(inputs) not in counts:
        raise PopartException(
            f"{what}: inputs at indices 0 .. n-1 with n in {list(counts)}, got indices "
            f"{sorted(inputs)}"
        )
    ts: list[Tensor] = [graph_tensor(graph, inputs[i]) for i in range(len(inputs))]
    with graph:
        names = [_base_name(graph, outputs[k]) for k in sorted(outputs)]
        outs = create_op(op_type, ts, attrs, names)
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
