"""Gradient rules of ``popxl/ops/gather.py``: a gather's gradient adds the output gradient
into the rows it read (a one-hot matmul, so repeated indices add up); a grouped gather's is
its transpose op, a grouped scatter-add; a dynamic slice's is a dynamic update of zeros, and
the other way round; ``onehot``'s goes to its two values."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tremula.popxl import dtypes, ops
from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.tensor import Tensor, constant
from tremula.popxl.transforms.grads.base import (
    GradContext,
    Grads,
    OutputGrads,
    as_float,
    grad,
    pick,
)


def _one_hot(idx: Tensor, n: int, like: Tensor) -> Tensor:
    """``[*idx.shape, n]``: 1 where the last axis equals the index (none when out of
    range)."""
    positions = constant(np.arange(n, dtype=idx.dtype.as_numpy()), name="positions")
    return as_float(ops.equal(ops.reshape(idx, (*idx.shape, 1)), positions), like)


@grad("Gather", "TiedGather")
def _gather(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    t, indices = op.inputs
    axis = op.attrs["axis"]
    n = t.shape[axis]
    before, after = math.prod(t.shape[:axis]), math.prod(t.shape[axis + 1 :])
    p = indices.nelms
    hit = _one_hot(ops.reshape(c.fwd(indices), (p,)), n, g[0])  # [p, n]
    g3 = ops.reshape(g[0], (before, p, after))
    if before > 1:
        g3 = ops.transpose(g3, (1, 0, 2))
    gt = ops.transpose(hit, (1, 0)) @ ops.reshape(g3, (p, before * after))  # [n, before*after]
    gt = ops.reshape(gt, (n, before, after))
    if before > 1:
        gt = ops.transpose(gt, (1, 0, 2))
    return [ops.reshape(gt, t.shape), None]


@grad("OneHot")
def _onehot(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """PopART's OnehotGradOp: ``values``' gradient is ``[off, on]``, the sums of the output
    gradient where the output took ``values[0]`` and where it took ``values[1]`` (the
    forward's one-hot of the indices as the mask); the indices and the depth get none."""
    if not need[2]:
        return [None, None, None]
    indices, _depth, values = op.inputs
    a = op.attrs
    zero_one = constant(np.array([0, 1], g[0].dtype.as_numpy()), name="off_on")
    on = ops.onehot(c.fwd(indices), a["num_classes"], zero_one, a["axis"])
    sums = [ops.reshape(ops.sum(g[0] * mask), (1,)) for mask in (1.0 - on, on)]
    return [None, None, ops.reshape(ops.concat(sums, 0), values.shape)]


@grad("GroupedGather")
def _grouped_gather(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """A grouped scatter-add of the output gradient into the data (``GroupedGatherGrad``)."""
    if not need[0]:
        return [None, None]
    t, indices = op.inputs
    attrs = {"axis": op.attrs["axis"], "data_shape": t.shape}
    return [create_op("GroupedGatherGrad", [g[0], c.fwd(indices)], attrs)[0], None]


@grad("GroupedGatherGrad")
def _grouped_gather_grad(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """The transpose of the transpose: a grouped gather of the gradient."""
    if not need[0]:
        return [None, None]
    attrs = {
        "axis": op.attrs["axis"],
        "group_size": op.attrs["data_shape"][0],
        "available_memory_proportion": None,
        "zero_OOR": True,
    }
    return [create_op("GroupedGather", [g[0], c.fwd(op.inputs[1])], attrs)[0], None]


@grad("Scatter")
def _scatter(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """``t``'s gradient where nothing was written; each value's gradient at its target."""
    t, indices, values = op.inputs
    axis = op.attrs["axis"]
    idx = c.fwd(indices)

    def grad_t() -> Tensor:
        zeros = ops.init(values.shape, values.dtype, "zeros")
        return create_op("Scatter", [g[0], idx, zeros], op.attrs)[0]

    def grad_values() -> Tensor:
        n = t.shape[axis]
        if idx.dtype.is_signed:  # negative indices count from the end
            idx_n = idx + ops.cast(ops.less(idx, constant(0, idx.dtype)), idx.dtype) * n
        else:
            idx_n = idx
        order = (*(d for d in range(t.rank) if d != axis), axis)
        hit = _one_hot(ops.transpose(idx_n, order), n, g[0])  # [..., k, n]
        key = tuple(slice(0, indices.shape[d]) for d in order[:-1])
        gl = create_op("Slice", [ops.transpose(g[0], order)], {"key": key})[0]  # [..., n]
        picked = ops.sum(hit * ops.reshape(gl, (*gl.shape[:-1], 1, n)), hit.rank - 1)
        return ops.transpose(picked, tuple(int(i) for i in np.argsort(order)))

    return pick(need, grad_t, lambda: None, grad_values)


def _gather_targets(g: Tensor, idx: Tensor, data_shape: tuple[int, ...], a: dict) -> Tensor:
    """``g[target(p)]`` for every element ``p`` of a ScatterReduce's data (0 where its index
    is out of range): one gather from the flattened ``g``."""
    ax, n, out_shape = a["axis"], a["axis_size"], g.shape
    if a["broadcast"]:  # the 1-D index along the axis, across the other axes
        idx = ops.reshape(idx, tuple(-1 if d == ax else 1 for d in range(len(data_shape))))
        idx = idx + constant(np.zeros(data_shape, idx.dtype.as_numpy()), name="broadcast")
    if idx.dtype.is_signed:  # negative indices count from the end
        idx = idx + ops.cast(ops.less(idx, constant(0, idx.dtype)), idx.dtype) * n
    strides = [math.prod(out_shape[d + 1 :]) for d in range(len(out_shape))]
    pos = np.indices(data_shape)
    pos[ax] = 0
    base = np.tensordot(np.array(strides), pos, axes=1).astype(idx.dtype.as_numpy())
    total = math.prod(out_shape)
    inside = ops.less(idx, constant(n, idx.dtype))
    if idx.dtype.is_signed:  # below -n (uint32 indices have no lower bound to check)
        inside = ops.logical_and(inside, ops.greater(idx, constant(-1, idx.dtype)))
    flat = ops.where(inside, constant(base, name="base") + idx * strides[ax], total)
    return ops.gather(ops.reshape(g, (total,)), flat, zero_OOR=True)


@grad("ScatterReduce")
def _scatter_reduce(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """sum: each value gets its target's gradient, ``initial_values`` all of it; max and
    min: only the values (and initial values) equal to the result, ties each in full; none:
    only the last value written to a position, and the initial values nothing overwrote
    (found on the device by scattering each value's position with the same indices)."""
    data, indices = op.inputs[:2]
    a, red = op.attrs, op.attrs["reduction"]
    idx = c.fwd(indices)
    if red == "mul":
        return _scatter_mul(c, op, g, need, idx)
    made: dict[str, Tensor] = {}  # made once, shared by both gradients

    def ids() -> Tensor:
        """Each data element's flat position."""
        if "ids" not in made:
            positions = np.arange(data.nelms, dtype=np.int32).reshape(data.shape)
            made["ids"] = constant(positions, name="ids")
        return made["ids"]

    def last_writer() -> Tensor:
        """Per output position, the flat position of the data element written last (-1
        where none was)."""
        if "writer" not in made:
            none = constant(np.full(op.outputs[0].shape, -1, np.int32), name="unwritten")
            attrs = {**a, "reduction": "none"}
            made["writer"] = create_op("ScatterReduce", [ids(), idx, none], attrs)[0]
        return made["writer"]

    def grad_data() -> Tensor:
        picked = _gather_targets(g[0], idx, data.shape, a)
        if red == "sum":
            return picked
        if red == "none":
            won = ops.equal(_gather_targets(last_writer(), idx, data.shape, a), ids())
            return picked * as_float(won, picked)
        y = _gather_targets(c.fwd(op.outputs[0]), idx, data.shape, a)
        return picked * as_float(ops.equal(c.fwd(data), y), picked)

    def grad_initial() -> Tensor:
        if red == "sum":
            return g[0]
        if red == "none":
            kept = ops.less(last_writer(), constant(0, dtypes.int32))
            return g[0] * as_float(kept, g[0])
        hit = ops.equal(c.fwd(op.inputs[2]), c.fwd(op.outputs[0]))
        return g[0] * as_float(hit, g[0])

    makers = [grad_data, lambda: None, grad_initial][: len(op.inputs)]
    return pick(need, *makers)


def _scatter_mul(
    c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool], idx: Tensor
) -> Grads:
    """mul: each factor's gradient is its target's gradient times the product of the other
    factors there. Without dividing by zero: per target, the product ``P`` of its non-zero
    factors and the count ``Z`` of its zero factors; the others' product is ``P / x`` for a
    non-zero ``x`` when ``Z == 0`` and ``P`` for a zero ``x`` when ``Z == 1``, else 0."""
    data = op.inputs[0]
    x = c.fwd(data)
    a = op.attrs
    has_initial = len(op.inputs) > 2
    zero = constant(0, x.dtype)

    def parts(t: Tensor) -> tuple[Tensor, Tensor]:
        is_zero = ops.equal(t, zero)
        return is_zero, ops.where(is_zero, constant(1, x.dtype), t)

    x_zero, x_safe = parts(x)
    extra: list[Tensor] = []
    if has_initial:
        init = c.fwd(op.inputs[2])
        i_zero, i_safe = parts(init)
        extra = [i_safe]
        count0: Tensor = ops.cast(i_zero, x.dtype)
    else:
        shape, np_type = op.outputs[0].shape, x.dtype.as_numpy()
        count0 = constant(np.zeros(shape, np_type), name="no_zeros")
        extra = [constant(np.ones(shape, np_type), name="ones")]
    attrs = dict(a)
    P = create_op("ScatterReduce", [x_safe, idx, extra[0]], {**attrs, "reduction": "mul"})[0]
    Z = create_op(
        "ScatterReduce", [ops.cast(x_zero, x.dtype), idx, count0], {**attrs, "reduction": "sum"}
    )[0]

    def others(t_zero: Tensor, t_safe: Tensor, P_t: Tensor, Z_t: Tensor) -> Tensor:
        nonzero_case = as_float(ops.equal(Z_t, zero), P_t) * (P_t / t_safe)
        zero_case = as_float(ops.equal(Z_t, constant(1, x.dtype)), P_t) * P_t
        return ops.where(t_zero, zero_case, nonzero_case)

    def grad_data() -> Tensor:
        picked = _gather_targets(g[0], idx, data.shape, a)
        P_t = _gather_targets(P, idx, data.shape, a)
        Z_t = _gather_targets(Z, idx, data.shape, a)
        return picked * others(x_zero, x_safe, P_t, Z_t)

    def grad_initial() -> Tensor:
        return g[0] * others(i_zero, i_safe, P, Z)

    makers = [grad_data, lambda: None, grad_initial][: len(op.inputs)]
    return pick(need, *makers)


def _attrs(op: OpNode) -> dict[str, object]:
    return {k: op.attrs[k] for k in ("axes", "sizes", "no_overlap")}


@grad("DynamicSlice")
def _dynamic_slice(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    t, index = op.inputs
    zeros = ops.init(t.shape, t.dtype, "zeros")
    return [create_op("DynamicUpdate", [zeros, c.fwd(index), g[0]], _attrs(op))[0], None]


@grad("DynamicUpdate")
def _dynamic_update(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    _, index, update = op.inputs

    def grad_t() -> Tensor:
        zeros = ops.init(update.shape, update.dtype, "zeros")
        return create_op("DynamicUpdate", [g[0], c.fwd(index), zeros], _attrs(op))[0]

    return pick(
        need,
        grad_t,
        lambda: None,
        lambda: create_op("DynamicSlice", [g[0], c.fwd(index)], _attrs(op))[0],
    )
