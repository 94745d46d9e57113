"""Lowering of ``cross_entropy_sharded_loss.py`` as its C++ Opx grows it.

Forward: ``popops.reduce`` MAX over the classes, gcl all-reduce MAX over the group, a
subtraction, ``exp``, ``reduce`` ADD, gcl all-reduce ADD, ``log`` (cast to the logits'
type), the subtraction and negation in place: the negative log-softmax. The true class's
value is picked by ``popops.multi_slice`` (PopLibs' ``groupedMultiSlice`` takes one
element per sample: here one slice of the flattened ``[N * C, 1]`` table at ``n * C +
index``, an out-of-range index mapped past the table so the slice gives 0, as the C++
zeroes it), and the partial losses all-reduced (ADD) over the group.

Gradient: ``neg``, ``exp`` and a multiplication by the loss gradient in place, then
``popops.multi_update_add`` of ``-dloss`` at the true classes (out-of-range indices are
ignored, as PopLibs' ``groupedMultiUpdateAdd`` ignores them).

Cycles and memory are popops' and gcl's estimates; compute sets carry the op's debug name
(``<scope>/CrossEntropySharded/...``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs import gcl, popops
from tremula.libs.popops import expr as pe
from tremula.popxl.ops.base import OpNode

ADD, MAX = gcl.CollectiveOperator.ADD, gcl.CollectiveOperator.MAX


def flat_indices(
    lw: Any,
    indices: poplar.Tensor,
    classes: int,
    prog: poplar.Sequence,
    name: str,
    start: int = 0,
) -> poplar.Tensor:
    """``n * classes + (indices[n] - start)`` (unsigned) where ``0 <= indices[n] - start <
    classes``, else ``N * classes`` (past the flattened ``[N * classes]`` table)."""
    n = indices.shape[0]
    offsets = lw.graph.add_constant(
        poplar.UNSIGNED_INT, (n,), np.arange(n, dtype=np.uint32) * classes, f"{name}/rowStarts"
    )
    lw.graph.set_tile_mapping(offsets, lw.graph.tiles_of(indices))
    shifted = pe._1 - start if start else pe._1  # unsigned indices wrap below the start
    in_range = pe.Lt(shifted, classes)
    if indices.dtype is not poplar.UNSIGNED_INT:
        in_range = pe.And(pe.Gte(shifted, 0), in_range)
    flat = pe.Select(pe.Cast(shifted, poplar.UNSIGNED_INT) + pe._2, n * classes, in_range)
    return popops.map(lw.graph, flat, [indices, offsets], prog, name=f"{name}/uIndices")


def cross_entropy_sharded(lw: Any, op: OpNode, env: Any, prog: poplar.Sequence) -> None:
    logits, indices = (env[t] for t in op.inputs)
    group = op.attrs["group"].grouping
    g, (n, c), dt = lw.graph, logits.shape, logits.dtype
    name = lw.name(op.debug_name)
    mx = popops.reduce(g, logits, [1], popops.Operation.MAX, prog, name=f"{name}/reduce_max_logits")
    mx = gcl.all_reduce(g, mx, MAX, prog, group, name=f"{name}/all_reduce_max_logits_partial")
    nls = popops.sub(g, logits, mx.expand([1]).broadcast(c, 1), prog, name=f"{name}/sub_logits_max")
    numerators = popops.exp(g, nls, prog, name=f"{name}/exp_sub")
    den = popops.reduce(
        g, numerators, [1], popops.Operation.ADD, prog, name=f"{name}/reduce_numerators"
    )
    den = gcl.all_reduce(g, den, ADD, prog, group, name=f"{name}/all_reduce_denominator")
    log_den = popops.map(g, pe.Cast(pe.Log(pe._1), dt), [den], prog, name=f"{name}/log_denominator")
    popops.sub_in_place(
        g, nls, log_den.expand([1]).broadcast(c, 1), prog, name=f"{name}/stableLogSoftmax"
    )
    popops.neg_in_place(g, nls, prog, name=f"{name}/negLogSoftmax")
    flat = flat_indices(lw, indices, c, prog, name)
    partial = popops.multi_slice(g, nls.reshape((n * c, 1)), flat, prog, name=f"{name}/lossPartial")
    loss = gcl.all_reduce(
        g, partial.flatten(), ADD, prog, group, name=f"{name}/allreduce_partial_losses"
    )
    env.update(zip(op.outputs, (loss, nls)))


def cross_entropy_sharded_grad(lw: Any, op: OpNode, env: Any, prog: poplar.Sequence) -> None:
    dloss, _, nls, _, labels = (env[t] for t in op.inputs)
    g, (n, c) = lw.graph, nls.shape
    name = lw.name(op.debug_name)
    dlogits = popops.neg(g, nls, prog, name=f"{name}/neg_negLogSoftmax")
    popops.exp_in_place(g, dlogits, prog, name=f"{name}/softmax")
    popops.mul_in_place(
        g, dlogits, dloss.expand([1]).broadcast(c, 1), prog, name=f"{name}/mul_softmax_scale"
    )
    flat = flat_indices(lw, labels, c, prog, name)
    popops.multi_update_add(
        g, dlogits.reshape((n * c, 1)), flat, dloss.reshape((n, 1)), -1.0, prog,
        name=f"{name}/groupedMultiUpdateAdd",
    )  # fmt: skip
    env[op.outputs[0]] = dlogits


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {
    "CrossEntropySharded": cross_entropy_sharded,
    "CrossEntropyShardedGrad": cross_entropy_sharded_grad,
}
