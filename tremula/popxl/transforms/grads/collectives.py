"""Gradient rules of ``popxl/ops/collectives``, as PopART's grad ops define them
(``op/collectives/*.cpp`` and its autodiff's ``gradgrowerop.cpp``):

- PopXL's ``replicated_all_reduce`` (``ReplicatedAllReduceOp``) has no grad op: it is
  defined not differentiable, so no gradient passes through it (an input that no other
  gradient reaches gets zeros, as for every op that passes none);
- an all-gather's gradient is each replica's own slice of the gradient (a "local"
  reduce-scatter, no summing);
- a reduce-scatter has a gradient only with op "local" (the all-gather of the gradients);
  any other op raises ``popart_exception`` (``ReplicatedReduceScatterOp::getGradOps``);
- a replicated slice's gradient is the all-gather of the gradients;
- popxl-addons' all-reduces (``ReplicatedAllReduceStridedOp``, ``ReplicatedAllReduceTPOp``)
  have a grad op: the same op with the identical-inputs and identical-grad-inputs flags
  swapped; its strided all-gather and reduce-scatter have none (defined so);
- the cross-IPU ``AllReduce`` has a gradient for "add" only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tremula.errors import PopartException
from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.ops.collectives.all_reduce import create_all_reduce
from tremula.popxl.ops.collectives.collectives import ADDONS_ALL_REDUCES, create_addons_all_reduce
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad


@grad(*ADDONS_ALL_REDUCES)
def _addons_all_reduce(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """popxl-addons' ``getGradOps``: the same all-reduce with the identical-inputs and
    identical-grad-inputs flags swapped (identical inputs give an all-reduce of the
    gradients, identical gradients an identity)."""
    swapped = op.attrs.get("identical_grad_inputs", False), op.attrs.get("identical_inputs", False)
    return [create_addons_all_reduce(op.type, g[0], op.attrs["op"], op.attrs["group"], *swapped)]


def _gather(g: Tensor, group: object, axis: int) -> Tensor:
    attrs = {"group": group, "output_shape": "concat", "axis": axis}
    return create_op("ReplicatedAllGather", [g], attrs)[0]


@grad("ReplicatedAllGather")
def _all_gather(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    x, group = op.inputs[0], op.attrs["group"]
    gg, axis = g[0], op.attrs["axis"] if op.attrs["output_shape"] == "concat" else 0
    perm = (axis, *(d for d in range(gg.rank) if d != axis))
    if axis:
        gg = ops.transpose(gg, perm)
    attrs = {
        "op": "local",
        "group": group,
        "configure_output_for_replicated_tensor_sharding": False,
    }
    (mine,) = create_op("ReplicatedReduceScatter", [gg], attrs)
    if mine.nelms != x.nelms:
        raise NotImplementedError(
            f"autodiff: the gradient of {op!r} does not split into shards of {x.id!r}'s "
            f"{x.nelms} elements"
        )
    if not axis:
        return [ops.reshape(mine, x.shape)]
    mine = ops.reshape(mine, tuple(x.shape[d] for d in perm))
    return [ops.transpose(mine, tuple(int(i) for i in np.argsort(perm)))]


@grad("ReplicatedReduceScatter")
def _reduce_scatter(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """PopART's ``ReplicatedReduceScatterOp::getGradOps``: for a "local" reduce-scatter (each
    replica's own chunk, no reduction) the all-gather of the gradients, cut to the input's
    elements; for any other op a ``popart_exception``."""
    if op.attrs["op"] != "local":
        raise PopartException(
            f"Cannot create grad op for ReplicatedReduceScatterOp {op.describe()} with "
            f"collective operator {op.attrs['op']!r}: only CollectiveOperator::Local has a "
            f"gradient"
        )
    x, group = op.inputs[0], op.attrs["group"]
    full = _gather(ops.reshape(g[0], (g[0].nelms,)), group, 0)
    if full.nelms != x.nelms:
        full = create_op("Slice", [full], {"key": (slice(0, x.nelms),)})[0]
    return [ops.reshape(full, x.shape)]


@grad("ReplicatedSlice")
def _replicated_slice(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    x, group, axis = op.inputs[0], op.attrs["group"], op.attrs["axis"]
    gg = g[0]
    if gg.rank < x.rank:  # a slice of size 1 dropped the axis
        gg = ops.reshape(gg, (*x.shape[:axis], 1, *x.shape[axis + 1 :]))
    return [_gather(gg, group, axis)]


@grad("AllReduce")
def _all_reduce_across_ipus(
    c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]
) -> Grads:
    """PopART's AllReduceGradOp: an AllReduce of the gradients with the identical-inputs
    and identical-grad-inputs flags swapped (so identical inputs give an all-reduce of the
    gradients, identical gradients an identity); only for "add"."""
    if op.attrs["op"] != "add":
        raise PopartException(
            f"Cannot create grad op for AllReduceOp {op!r} with op {op.attrs['op']!r}: only "
            f"'add' is differentiable"
        )
    grads = [g[i] for i in range(len(op.outputs))]
    return create_all_reduce(
        grads, op.attrs["ipus"], "add", op.attrs["identical_grad_inputs"],
        op.attrs["identical_inputs"],
    )  # fmt: skip
