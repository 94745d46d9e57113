"""Collectives across replicas (``popxl.ops.collectives``), over a ``ReplicaGrouping``.

Every ``group`` argument is a :class:`~tremula.popxl.ReplicaGrouping` of the tensor's Ir
(default: all replicas); a non-constant grouping raises ``NotImplementedError``, as in
PopXL. ``op`` is one of ``"add"``, ``"mean"``, ``"mul"``, ``"min"``, ``"max"``, ``"and"``,
``"or"``, ``"square_add"``; ``"mul"`` reduces as ``"mean"`` (PopXL maps it to Mean: an
upstream quirk kept on purpose).

The op types are defined once here (shape rules and NumPy references); their lowering onto
``tremula.libs.gcl`` is ``tremula/lowering/collectives.py``. A collective's reference works
on per-replica stacks: each input array is ``[R, *shape]`` (row ``r`` is replica ``r``'s
value) and each output is ``[R, *out_shape]``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from tremula.libs.gcl.operators import COLLECTIVE_RULES
from tremula.libs.gcl.operators import CollectiveOperator as GclOperator
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.replica_grouping import ReplicaGrouping
from tremula.popxl.tensor import Tensor, TensorSpec

#: PopXL's op strings and the GCL operator each one runs ("mul" -> MEAN: upstream's mapping)
OPERATORS: dict[str, GclOperator] = {
    "add": GclOperator.ADD,
    "mean": GclOperator.MEAN,
    "mul": GclOperator.MEAN,
    "min": GclOperator.MIN,
    "max": GclOperator.MAX,
    "and": GclOperator.LOGICAL_AND,
    "or": GclOperator.LOGICAL_OR,
    "square_add": GclOperator.SQUARE_ADD,
    "local": GclOperator.LOCAL,  # internal: replica_sharded_slice, replicated_slice
}

#: the ``op`` names PopXL's collectives take (``popxl.ops.collectives.collectives``)
CollectiveOps = Literal["add", "mean", "mul", "min", "max", "and", "or", "square_add", "local"]


class CollectiveOperator(enum.Enum):
    """PopART's ``CollectiveOperator`` as PopXL's IR bindings give it
    (``popart._internal.ir.CollectiveOperator``); the value is PopXL's name of the op."""

    Add = "add"
    Mean = "mean"
    Mul = "mul"
    Min = "min"
    Max = "max"
    LogicalAnd = "and"
    LogicalOr = "or"
    SquareAdd = "square_add"
    Local = "local"


def to_collective_op(op: CollectiveOps) -> CollectiveOperator:
    """The IR's operator for PopXL's ``op`` name, as custom ops pass it to their op
    constructors. ``"mul"`` gives ``Mean``, as in PopXL (its mapping, kept on purpose).

    Args:
        op: one of :data:`CollectiveOps`.

    Returns:
        The :class:`CollectiveOperator` member.

    Raises:
        ValueError: ``op`` is not one of :data:`CollectiveOps` (the message lists them).
    """
    if not isinstance(op, str) or op not in OPERATORS:
        raise ValueError(f"Not a valid op: {op}. Must choose from: {', '.join(OPERATORS)}")
    return CollectiveOperator("mean" if op == "mul" else op)


_KINDS = {"f": "floating-point", "i": "integer", "b": "bool"}
_GATHER_MODES = ("auto", "new_axis", "concat", "meta_shape")


# ---- argument checks ----
def _group(t: Tensor, group: ReplicaGrouping | None, what: str) -> ReplicaGrouping:
    if not isinstance(t, Tensor):  # PopXL's check_in_graph words
        raise TypeError(f"The input `t` is not a Tensor. Type: {type(t)}. Value: {t}. ({what})")
    if group is None:
        return t.ir.replica_grouping()
    if not isinstance(group, ReplicaGrouping):
        raise TypeError(
            f"{what}: group must be a popxl.ReplicaGrouping (from ir.replica_grouping), got "
            f"{type(group).__name__}"
        )
    group._for_ir(t.ir, f"{what} of {t.id!r}")
    try:
        group._pb_replica_grouping  # noqa: B018  (NotImplementedError if not constant)
    except NotImplementedError as err:
        raise NotImplementedError(f"{what} of {t.id!r}: {err}") from None
    return group


def check_op(op: str) -> str:
    """``op`` if PopXL takes it (``ValueError`` naming the choices otherwise)."""
    if not isinstance(op, str) or op not in OPERATORS or op == "local":
        names = ", ".join(k for k in OPERATORS if k != "local")
        raise ValueError(f"Not a valid op: {op}. Must choose from: {names}")
    return op


def check_dtype(t: Tensor, op: str, what: str) -> None:
    """``TypeError`` unless ``op`` reduces ``t``'s dtype."""
    kind = t.dtype.as_numpy().kind
    kind = "i" if kind in "iu" else kind
    rule = COLLECTIVE_RULES[OPERATORS[op]]
    if kind not in rule.kinds:
        allowed = " or ".join(_KINDS[k] for k in sorted(rule.kinds))
        alias = " (reduced as 'mean', as in PopXL)" if op == "mul" else ""
        raise TypeError(
            f"{what}: op {op!r}{alias} does not apply to {t.id!r} of dtype {t.dtype}; it "
            f"takes {allowed} tensors"
        )


def _operator(t: Tensor, op: str, what: str) -> str:
    check_dtype(t, check_op(op), what)
    return op


def _axis(axis: int, rank: int, what: str) -> int:
    if isinstance(axis, bool) or int(axis) != axis or not -rank <= axis < rank:
        raise ValueError(f"{what}: axis {axis!r} out of range for a tensor of rank {rank}")
    return int(axis) % rank


# ---- shape rules ----
def _same(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    return [specs[0]]


def _gather_shape(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    s, G, mode = specs[0], attrs["group"].group_size, attrs["output_shape"]
    if mode == "new_axis":
        return [TensorSpec((G, *s.shape), s.dtype)]
    if mode == "meta_shape":
        return [TensorSpec(s.meta_shape, s.dtype)]
    axis = attrs["axis"]
    shape = list(s.shape)
    shape[axis] *= G
    return [TensorSpec(tuple(shape), s.dtype)]


def _scatter_shape(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    s, G = specs[0], attrs["group"].group_size
    meta = s.shape if attrs["configure_output_for_replicated_tensor_sharding"] else ()
    return [TensorSpec((-(-math.prod(s.shape) // G),), s.dtype, meta)]


def _slice_shape(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    s, G, axis = specs[0], attrs["group"].group_size, attrs["axis"]
    size = s.shape[axis] // G
    shape = s.shape[:axis] + ((size,) if size != 1 else ()) + s.shape[axis + 1 :]
    return [TensorSpec(shape, s.dtype)]


# ---- NumPy references over per-replica stacks [R, ...] ----
def _by_group(x: np.ndarray, rg: ReplicaGrouping) -> np.ndarray:
    """``[num_groups, G, ...]``: the members' values of each group, in replica order."""
    return x[rg.grouping.group_matrix]


def reduce_stack(m: np.ndarray, op: str) -> np.ndarray:
    """Reduce ``[num_groups, G, ...]`` over axis 1 as ``op`` does."""
    gop = OPERATORS[op]
    if gop is GclOperator.MEAN:
        return m.mean(axis=1).astype(m.dtype)
    if gop is GclOperator.SQUARE_ADD:
        return (m * m).sum(axis=1, dtype=m.dtype)
    table = {
        GclOperator.ADD: lambda a: a.sum(axis=1, dtype=a.dtype),
        GclOperator.MIN: lambda a: a.min(axis=1),
        GclOperator.MAX: lambda a: a.max(axis=1),
        GclOperator.LOGICAL_AND: lambda a: a.all(axis=1),
        GclOperator.LOGICAL_OR: lambda a: a.any(axis=1),
    }
    return table[gop](m)


def _to_replicas(per_group: np.ndarray, rg: ReplicaGrouping) -> np.ndarray:
    return per_group[rg.grouping.assignment_array]


def _ref_all_reduce(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, rg = np.asarray(arrays[0]), attrs["group"]
    if attrs.get("identical_inputs"):  # the members hold one value: its reduction is it
        return [np.array(x)]
    return [_to_replicas(reduce_stack(_by_group(x, rg), attrs["op"]), rg)]


def _chunks(x: np.ndarray, G: int) -> np.ndarray:
    """``[R, G, C]``: each replica's value flattened, zero-padded and cut in ``G`` chunks."""
    R = x.shape[0]
    flat = x.reshape(R, -1)
    c = -(-flat.shape[1] // G)
    padded = np.zeros((R, G * c), dtype=x.dtype)
    padded[:, : flat.shape[1]] = flat
    return padded.reshape(R, G, c)


def _ref_reduce_scatter(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, rg = np.asarray(arrays[0]), attrs["group"]
    chunks = _chunks(x, rg.group_size)
    index = rg.grouping.indices_in_group
    if attrs["op"] == "local":
        return [chunks[np.arange(x.shape[0]), index]]
    reduced = _to_replicas(reduce_stack(_by_group(chunks, rg), attrs["op"]), rg)  # [R, G, C]
    return [reduced[np.arange(x.shape[0]), index]]


def _ref_all_gather(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, rg = np.asarray(arrays[0]), attrs["group"]
    gathered = _to_replicas(_by_group(x, rg), rg)  # [R, G, *shape]
    R, mode = x.shape[0], attrs["output_shape"]
    if mode == "new_axis":
        return [gathered]
    if mode == "meta_shape":
        meta = attrs["meta_shape"]
        return [gathered.reshape(R, -1)[:, : math.prod(meta)].reshape(R, *meta)]
    return [np.concatenate(list(np.moveaxis(gathered, 1, 0)), axis=attrs["axis"] + 1)]


def _ref_slice(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, rg, axis = np.asarray(arrays[0]), attrs["group"], attrs["axis"]
    G = rg.group_size
    size = x.shape[axis + 1] // G
    parts = np.stack(np.split(x, G, axis=axis + 1), axis=1)  # [R, G, ...]
    mine = parts[np.arange(x.shape[0]), rg.grouping.indices_in_group]
    return [mine if size != 1 else np.squeeze(mine, axis=axis + 1)]


# PopART's ReplicatedAllReduceOp has no grad op: autodiff passes no gradient through it
defop("ReplicatedAllReduce", _same, _ref_all_reduce, differentiable=False)
defop(
    "ReplicatedAllReduceInplace",
    _same,
    _ref_all_reduce,
    modifies=(0,),
    differentiable=False,
    inplace_of="ReplicatedAllReduce",
)
defop("ReplicatedAllGather", _gather_shape, _ref_all_gather)
defop("ReplicatedReduceScatter", _scatter_shape, _ref_reduce_scatter)
defop("ReplicatedSlice", _slice_shape, _ref_slice)

#: popxl-addons' C++ custom collectives (``popxl.addons.ops`` domain): op types of their own,
#: as PopART's op identity is their ``OperatorIdentifier``. They compute what PopXL's ops of
#: the same kind compute and lower alike; they differ in gradient, as their C++ defines it
#: (``transforms/grads/collectives.py``): the all-reduces (``ReplicatedAllReduceStridedOp``,
#: ``ReplicatedAllReduceTPOp``) have a grad op with the identical-inputs flags swapped, the
#: strided all-gather and reduce-scatter (``CollectivesBaseOp``s without ``getGradOps``) none.
ADDONS_ALL_REDUCES = ("ReplicatedAllReduceStrided", "ReplicatedAllReduceTP")
# outputs named as popxl-addons' wrappers name them (replicated_all_reduce_TP_out ...)
defop("ReplicatedAllReduceStrided", _same, _ref_all_reduce)
defop("ReplicatedAllReduceTP", _same, _ref_all_reduce, out="replicated_all_reduce_TP_out")
defop("ReplicatedAllGatherStrided", _gather_shape, _ref_all_gather, differentiable=False)
defop("ReplicatedReduceScatterStrided", _scatter_shape, _ref_reduce_scatter, differentiable=False)


# ---- the functions ----
def _all_reduce(t: Tensor, op: str, group: ReplicaGrouping | None, inplace: bool) -> Tensor:
    what = "replicated_all_reduce" + ("_" if inplace else "")
    rg = _group(t, group, what)
    attrs: dict[str, Any] = {"op": _operator(t, op, what), "group": rg}
    (out,) = create_op("ReplicatedAllReduce" + ("Inplace" if inplace else ""), [t], attrs)
    return out


def create_addons_all_reduce(
    op_type: str,
    t: Tensor,
    op: str,
    group: ReplicaGrouping,
    identical_inputs: bool,
    identical_grad_inputs: bool,
) -> Tensor:
    """An all-reduce of popxl-addons (``op_type`` one of :data:`ADDONS_ALL_REDUCES`) with
    PopART's two flags. ``identical_inputs``: every member holds the same value, so the op is
    an identity, lowered to a copy with no exchange (PopART's ``OpToIdentity`` pattern).
    ``identical_grad_inputs``: the members' gradients are the same. Its gradient is the same
    op with the two flags swapped (``transforms/grads/collectives.py``).

    Raises:
        ValueError: an ``op_type`` that is not one of :data:`ADDONS_ALL_REDUCES`; else as
            :func:`replicated_all_reduce`.
    """
    if op_type not in ADDONS_ALL_REDUCES:
        raise ValueError(f"op_type {op_type!r} is not one of {ADDONS_ALL_REDUCES}")
    what = op_type
    rg = _group(t, group, what)
    attrs: dict[str, Any] = {"op": _operator(t, op, what), "group": rg}
    flags = {"identical_inputs": identical_inputs, "identical_grad_inputs": identical_grad_inputs}
    attrs.update({name: True for name, on in flags.items() if on})
    (out,) = create_op(op_type, [t], attrs)
    return out


def replicated_all_reduce(
    t: Tensor, op: str = "add", group: ReplicaGrouping | None = None
) -> Tensor:
    """Reduce ``t`` over the replicas of each group; every member gets the result.

    Args:
        t: the tensor (its value on each replica).
        op: the reduction (module docstring; ``"mul"`` reduces as ``"mean"``).
        group: the grouping (default: all replicas); it must be constant.

    Returns:
        A new tensor shaped like ``t``.

    Raises:
        ValueError: an unknown op or a grouping of another number of replicas.
        TypeError: an op that does not apply to ``t``'s dtype.
        NotImplementedError: a non-constant grouping.
    """
    return _all_reduce(t, op, group, inplace=False)


def replicated_all_reduce_(
    t: Tensor, op: str = "add", group: ReplicaGrouping | None = None
) -> Tensor:
    """:func:`replicated_all_reduce` in place: the result is written into ``t``."""
    return _all_reduce(t, op, group, inplace=True)


def replicated_all_gather(
    t: Tensor,
    axis: int = 0,
    group: ReplicaGrouping | None = None,
    output_shape: str = "auto",
) -> Tensor:
    """Gather ``t`` from every member of each group (in replica order).

    Args:
        t: the tensor.
        axis: the axis of ``"concat"``.
        group: the grouping (default: all replicas); it must be constant.
        output_shape: ``"new_axis"`` gives ``(group_size, *shape)``; ``"concat"``
            concatenates along ``axis``; ``"meta_shape"`` gives ``t.meta_shape`` (the
            gathered flat shards cut to it: a replica-sharded value made whole again);
            ``"auto"`` is ``"meta_shape"`` when ``t`` has a meta shape, else ``"concat"``.

    Raises:
        ValueError: an unknown ``output_shape``, an axis that is not an int or out of range,
            ``"meta_shape"`` for a tensor without one (or one larger than what is gathered),
            or a grouping of another number of replicas.
        NotImplementedError: a non-constant grouping.
    """
    what = "replicated_all_gather"
    rg = _group(t, group, what)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"{what}: axis must be an int, got {type(axis).__name__} {axis!r}")
    if output_shape not in _GATHER_MODES:
        raise ValueError(f"{what}: output_shape {output_shape!r} unknown; expected {_GATHER_MODES}")
    mode = output_shape
    if mode == "auto":
        mode = "meta_shape" if t.meta_shape else "concat"
    if mode == "meta_shape":
        if not t.meta_shape or math.prod(t.meta_shape) > rg.group_size * t.nelms:
            raise ValueError(
                f"{what}: {t.id!r} (shape {t.shape}, meta_shape {t.meta_shape}) has no meta "
                f"shape that {rg.group_size} gathered shards cover"
            )
        attrs = {"group": rg, "output_shape": mode, "axis": 0, "meta_shape": t.meta_shape}
        (out,) = create_op("ReplicatedAllGather", [t], attrs)
        return out
    if mode == "concat" and t.rank == 0:
        raise ValueError(f"{what}: cannot concatenate the scalar {t.id!r}; use 'new_axis'")
    ax = _axis(axis, t.rank + (mode == "new_axis"), what)
    return _gather_flat(t, rg, mode, ax)


def create_strided_all_gather(t: Tensor, group: ReplicaGrouping) -> Tensor:
    """popxl-addons' ``ReplicatedAllGatherStrided`` op: :func:`replicated_all_gather` of the
    1-D ``t`` along axis 0 (``"concat"``) as an op of that type (no gradient, as its C++).
    Errors as :func:`replicated_all_gather`."""
    what = "ReplicatedAllGatherStrided"
    rg = _group(t, group, what)
    if t.rank != 1:
        raise ValueError(f"{what}: expected a 1-D tensor, got {t.id!r} of shape {t.shape}")
    return _gather_flat(t, rg, "concat", 0, op_type=what)


def _gather_flat(
    t: Tensor, rg: ReplicaGrouping, mode: str, axis: int, op_type: str = "ReplicatedAllGather"
) -> Tensor:
    """PopXL's all-gather: the flattened tensor is gathered (the group's copies one after
    the other) and reshaped; the group axis moves to ``axis`` (``"new_axis"``) or is merged
    into it (``"concat"``). So ``graph.tensors`` holds the same tensors as PopXL's (input,
    flatten, gather, reshape)."""
    from tremula.popxl.ops.tensor_ops import reshape, transpose

    G = rg.group_size
    attrs = {"group": rg, "output_shape": "concat", "axis": 0}
    (flat,) = create_op(op_type, [t.flatten()], attrs)
    if mode == "concat" and axis == 0:
        return reshape(flat, (G * t.shape[0], *t.shape[1:]))
    out = reshape(flat, (G, *t.shape))
    if axis:
        out = transpose(out, (*range(1, axis + 1), 0, *range(axis + 1, t.rank + 1)))
    if mode == "new_axis":
        return out
    shape = list(t.shape)
    shape[axis] *= G
    return reshape(out, tuple(shape))


def replicated_reduce_scatter(
    t: Tensor,
    op: str = "add",
    group: ReplicaGrouping | None = None,
    configure_output_for_replicated_tensor_sharding: bool = False,
) -> Tensor:
    """Reduce ``t`` over each group and give each member one chunk of the result.

    ``t`` is flattened and zero-padded to a multiple of the group size ``G``; the member at
    index ``k`` in its group gets the ``k``-th reduced chunk (1-D, ``ceil(nelms / G)``
    elements). With ``configure_output_for_replicated_tensor_sharding`` the output's
    ``meta_shape`` is ``t.shape`` (a replica-sharded tensor).

    Raises:
        ValueError, TypeError, NotImplementedError: as :func:`replicated_all_reduce`.
    """
    rts = configure_output_for_replicated_tensor_sharding
    return _reduce_scatter(t, op, group, rts, "ReplicatedReduceScatter")


def create_strided_reduce_scatter(
    t: Tensor, op: str, group: ReplicaGrouping, configure_output_for_rts: bool
) -> Tensor:
    """popxl-addons' ``ReplicatedReduceScatterStrided`` op: :func:`replicated_reduce_scatter`
    as an op of that type (no gradient, as its C++). Errors as that function."""
    return _reduce_scatter(t, op, group, configure_output_for_rts, "ReplicatedReduceScatterStrided")


def _reduce_scatter(
    t: Tensor, op: str, group: ReplicaGrouping | None, rts: bool, op_type: str
) -> Tensor:
    what = "replicated_reduce_scatter" if op_type == "ReplicatedReduceScatter" else op_type
    rg = _group(t, group, what)
    attrs = {
        "op": _operator(t, op, what),
        "group": rg,
        "configure_output_for_replicated_tensor_sharding": bool(rts),
    }
    (out,) = create_op(op_type, [t], attrs)
    return out


def replica_sharded_slice(t: Tensor, group: ReplicaGrouping | None = None) -> Tensor:
    """The replica's shard of ``t`` without reduction: ``t`` flattened and zero-padded, the
    member at index ``k`` in its group taking chunk ``k``; ``meta_shape`` is ``t.shape``.

    Raises:
        ValueError, NotImplementedError: as :func:`replicated_all_reduce`.
    """
    rg = _group(t, group, "replica_sharded_slice")
    attrs = {
        "op": "local",
        "group": rg,
        "configure_output_for_replicated_tensor_sharding": True,
    }
    (out,) = create_op("ReplicatedReduceScatter", [t], attrs)
    return out


def replicated_slice(t: Tensor, axis: int = 0, group: ReplicaGrouping | None = None) -> Tensor:
    """Each member of a group takes its equal slice of ``t`` along ``axis`` (the member at
    index ``k`` takes slice ``k``); the axis is dropped when the slice size is 1.

    Raises:
        ValueError: the group size does not divide ``t.shape[axis]``, a bad axis, or a
            grouping of another number of replicas.
        NotImplementedError: a non-constant grouping.
    """
    what = "replicated_slice"
    rg = _group(t, group, what)
    if t.rank == 0:
        raise ValueError(f"{what}: cannot slice the scalar {t.id!r}")
    ax = _axis(axis, t.rank, what)
    if t.shape[ax] % rg.group_size:
        raise ValueError(
            f"Replicated slice must equally divide axis {ax} of {t.id!r} (shape {t.shape}) "
            f"between the {rg.group_size} replicas of a group: size {t.shape[ax]} is not a "
            f"multiple of {rg.group_size}"
        )
    (out,) = create_op("ReplicatedSlice", [t], {"group": rg, "axis": ax})
    return out
