"""Stand-ins for popxl-addons' collective custom ops (its
``replicated_{all_gather,reduce_scatter,all_reduce}_strided_binding`` and
``replicated_all_reduce_TP_binding`` C++ modules, see ``native.py``): the op classes with the
``createOpInGraph`` popxl-addons calls, built from Tremula's replicated collectives over the
replica grouping ``(stride, groupSize)`` (the TP all-reduce: the grouping it is given).

- all-gather: the flattened inputs of the group's members, concatenated (1-D,
  ``groupSize * nelms``), as the C++ op's ``setup`` shapes it;
- reduce-scatter: ``ceil(nelms / groupSize)`` elements of the reduction per member (with the
  input's shape as ``meta_shape`` when configured for replicated tensor sharding);
- all-reduce: one ``ReplicatedAllReduceStrided`` (``ReplicatedAllReduceTP``) op carrying
  the two flags: ``identicalInputs`` makes it an identity forward (a copy, no exchange: what
  PopART's ``OpToIdentity`` pattern does to it after autodiff), else an all-reduce; its
  gradient is the same op with the two flags swapped (the C++ ``getGradOps``, Tremula's
  gradient rule of the op): an identity where ``identicalGradInputs``, else an all-reduce.

Each is an op type of its own (``ops/collectives/collectives.py``), as in PopART, where the
op's identity is its ``OperatorIdentifier``: PopXL's plain all-reduce has no gradient and
its non-local reduce-scatter refuses one, while these follow their C++ (the strided
all-gather and reduce-scatter, ``CollectivesBaseOp``s without ``getGradOps``, pass none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tremula.errors import PopartException
from tremula.libs.gcl.grouping import ReplicaGrouping as Grouping
from tremula.popxl import ops
from tremula.popxl._ir.graph import Graph
from tremula.popxl._ir.op.edit import graph_tensor
from tremula.popxl.ops.collectives.collectives import (
    CollectiveOperator,
    create_addons_all_reduce,
    create_strided_all_gather,
    create_strided_reduce_scatter,
)
from tremula.popxl.replica_grouping import ReplicaGrouping
from tremula.popxl.tensor import Tensor

__all__ = [
    "ReplicatedAllGatherStridedOp",
    "ReplicatedAllReduceStridedOp",
    "ReplicatedAllReduceTPOp",
    "ReplicatedReduceScatterStridedOp",
]


def _operand(graph: Graph, inputs: Mapping[int, str], what: str) -> Tensor:
    if set(inputs) != {0}:
        raise PopartException(f"{what}: one input at index 0, got indices {sorted(inputs)}")
    return graph_tensor(graph._g, inputs[0])


def _group(t: Tensor, stride: int, group_size: int, what: str) -> ReplicaGrouping:
    if stride <= 0 or group_size <= 0:
        raise PopartException(
            f"Cannot create {what} op stride and group size must be > 0 (stride {stride}, "
            f"group size {group_size})."
        )
    return t.ir.replica_grouping(stride=int(stride), group_size=int(group_size))


def _op_name(op: Any) -> str:
    """Tremula's name of a collective operator (``CollectiveOperator`` or a string)."""
    return str(op.value if isinstance(op, CollectiveOperator) else op)


def _producer(t: Tensor) -> Any:
    return t._pb_tensor.getProducer()


class ReplicatedAllGatherStridedOp:
    """popxl-addons' ``ReplicatedAllGatherStridedOp``."""

    @staticmethod
    def createOpInGraph(
        graph: Graph,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        stride: int,
        groupSize: int,
        settings: Any = None,
    ) -> Any:
        what = "ReplicatedAllGatherStrided"
        t = _operand(graph, inputs, what)
        rg = _group(t, stride, groupSize, what)
        with graph._g:
            flat = ops.reshape(t, (t.nelms,)) if t.rank != 1 else t
            out = create_strided_all_gather(flat, rg)
        return _producer(out)


class ReplicatedReduceScatterStridedOp:
    """popxl-addons' ``ReplicatedReduceScatterStridedOp`` (``add`` or ``mean``)."""

    @staticmethod
    def createOpInGraph(
        graph: Graph,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        op: Any,
        stride: int,
        groupSize: int,
        configureOutputForReplicatedTensorSharding: bool = False,
        settings: Any = None,
    ) -> Any:
        what = "ReplicatedReduceScatterStrided"
        name = _op_name(op)
        if name not in ("add", "mean"):
            raise PopartException(
                f"Cannot create ReplicatedReduceScatterStridedOp op. CollectiveOperator::Add "
                f"and CollectiveOperator::Mean are the only collective operators that are "
                f"currently implemented (got {name!r})."
            )
        t = _operand(graph, inputs, what)
        rg = _group(t, stride, groupSize, what)
        with graph._g:
            rts = bool(configureOutputForReplicatedTensorSharding)
            out = create_strided_reduce_scatter(t, name, rg, rts)
        return _producer(out)


def _all_reduce(
    op_type: str,
    graph: Graph,
    t: Tensor,
    name: str,
    rg: ReplicaGrouping,
    identical_inputs: bool,
    identical_grad_inputs: bool,
) -> Any:
    """The all-reduce of ``t`` over ``rg`` with popxl-addons' two flags (module docstring)."""
    with graph._g:
        out = create_addons_all_reduce(
            op_type, t, name, rg, identical_inputs, identical_grad_inputs
        )
    return _producer(out)


class ReplicatedAllReduceStridedOp:
    """popxl-addons' ``ReplicatedAllReduceStridedOp``."""

    @staticmethod
    def createOpInGraph(
        graph: Graph,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        op: Any,
        stride: int,
        groupSize: int,
        identicalInputs: bool,
        identicalGradInputs: bool,
        settings: Any = None,
    ) -> Any:
        what = "ReplicatedAllReduceStrided"
        name = _op_name(op)
        if name not in ("add", "mean"):
            raise PopartException(
                "Cannot create ReplicatedAllReduceStridedOp op. CollectiveOperator::Add and "
                "CollectiveOperator::Mean are the only collective operators that are "
                f"currently implemented (got {name!r})."
            )
        t = _operand(graph, inputs, what)
        rg = _group(t, stride, groupSize, what)
        flags = bool(identicalInputs), bool(identicalGradInputs)
        return _all_reduce(what, graph, t, name, rg, *flags)


class ReplicatedAllReduceTPOp:
    """popxl-addons' ``ReplicatedAllReduceTPOp`` (tensor-parallel all-reduce, ``add`` only),
    over the replica grouping its Python side passes (``group._pb_replica_grouping``)."""

    @staticmethod
    def createOpInGraph(
        graph: Graph,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        op: Any,
        group: Grouping,
        identicalInputs: bool,
        identicalGradInputs: bool,
        settings: Any = None,
    ) -> Any:
        name = _op_name(op)
        if name != "add":
            raise PopartException(
                "Cannot create ReplicatedAllReduceTPOp op. CollectiveOperator::Add is the only "
                f"collective operator that is currently implemented (got {name!r})."
            )
        t = _operand(graph, inputs, "ReplicatedAllReduceTP")
        rg = ReplicaGrouping._wrap(t.ir, group)
        flags = bool(identicalInputs), bool(identicalGradInputs)
        return _all_reduce("ReplicatedAllReduceTP", graph, t, name, rg, *flags)
