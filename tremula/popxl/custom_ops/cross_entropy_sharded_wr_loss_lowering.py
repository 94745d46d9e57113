"""Lowering of ``cross_entropy_sharded_wr_loss.py`` (classes sharded over
the IPUs of a replica) as its C++ Opx grows it: each shard's work on its own IPU's tiles
(``Lowerer.on_ipu``), the row maxima and the sums of exponentials reduced across the IPUs
by ``gcl.all_reduce_within_replica`` (MAX, then ADD), the log-softmax subtracted and
negated in place. Each shard picks its classes' values with ``popops.multi_slice`` at the
indices shifted by its first class (out of range: 0; the C++ slices row by row, "slow to
avoid OOM", then masks: here one slice per shard), the partial losses are copied to
``ipus[0]`` and added there (``popops.reduce``). The gradient copies ``dloss`` from
``ipus[0]`` to every shard, then on each: ``neg``, ``exp``, the scaling in place and
``popops.multi_update_add`` of ``-dloss`` at the shifted indices (out of range: ignored).
Cycles and memory are popops' and gcl's estimates, the copies the engine's exchanges;
compute sets carry the op's debug name."""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.libs import gcl, popops
from tremula.libs.popops import expr as pe
from tremula.popxl.custom_ops.cross_entropy_sharded_loss_lowering import flat_indices
from tremula.popxl.ops.base import OpNode

ADD, MAX = gcl.CollectiveOperator.ADD, gcl.CollectiveOperator.MAX


def _to_ipu(lw: Any, t: poplar.Tensor, ipu: int, prog: poplar.Sequence, name: str):
    """A copy of ``t`` on IPU ``ipu``'s tiles."""
    with lw.on_ipu(ipu):
        out = lw.new_tensor(None, t.dtype, t.shape, name)
    prog.add(poplar.Copy(t, out))
    return out


def _starts(shards: list[poplar.Tensor]) -> list[int]:
    starts, total = [], 0
    for t in shards:
        starts.append(total)
        total += t.shape[1]
    return starts


def cross_entropy_sharded_wr(lw: Any, op: OpNode, env: Any, prog: poplar.Sequence) -> None:
    ipus = op.attrs["ipus"]
    s = len(ipus)
    logits = [env[t] for t in op.inputs[:s]]
    indices = [env[t] for t in op.inputs[s:]]
    name = lw.name(op.debug_name)
    maxima = []
    for i, x in zip(ipus, logits):
        with lw.on_ipu(i):
            m = popops.reduce(lw.graph, x, [1], popops.Operation.MAX, prog,
                              name=f"{name}/reduce_partial_max")  # fmt: skip
        maxima.append(m)
    maxima = gcl.all_reduce_within_replica(
        lw.replica_graph, maxima, MAX, prog, name=f"{name}/all_reduce_max"
    )
    nls, dens = [], []
    for i, x, m in zip(ipus, logits, maxima):
        with lw.on_ipu(i):
            t = popops.sub(lw.graph, x, m.expand([1]).broadcast(x.shape[1], 1), prog,
                           name=f"{name}/partial_sub_max")  # fmt: skip
            e = popops.exp(lw.graph, t, prog, name=f"{name}/partial_exp")
            dens.append(popops.reduce(lw.graph, e, [1], popops.Operation.ADD, prog,
                                      name=f"{name}/reduce_partial_denom"))  # fmt: skip
        nls.append(t)
    dens = gcl.all_reduce_within_replica(
        lw.replica_graph, dens, ADD, prog, name=f"{name}/all_reduce_denominator"
    )
    partials = []
    n = logits[0].shape[0]
    for k, (i, t, d, idx, start) in enumerate(zip(ipus, nls, dens, indices, _starts(logits))):
        c = t.shape[1]
        with lw.on_ipu(i):
            log_den = popops.map(lw.graph, pe.Cast(pe.Log(pe._1), t.dtype), [d], prog,
                                 name=f"{name}/log_denominator")  # fmt: skip
            popops.sub_in_place(lw.graph, t, log_den.expand([1]).broadcast(c, 1), prog,
                                name=f"{name}/subtract_logsum")  # fmt: skip
            popops.neg_in_place(lw.graph, t, prog, name=f"{name}/neg_log_softmax{k}")
            flat = flat_indices(lw, idx, c, prog, f"{name}/adjust_indices_{k}", start)
            p = popops.multi_slice(lw.graph, t.reshape((n * c, 1)), flat, prog,
                                   name=f"{name}/take_shard_{k}")  # fmt: skip
        p = p.flatten()
        partials.append(p if i == ipus[0] else _to_ipu(lw, p, ipus[0], prog, f"{name}/part{k}"))
    stacked = poplar.concat([p.expand([0]) for p in partials])
    with lw.on_ipu(ipus[0]):
        loss = popops.reduce(
            lw.graph, stacked, [0], popops.Operation.ADD, prog, name=f"{name}/reduce_partials"
        )
    env.update(zip(op.outputs, [loss, *nls]))


def cross_entropy_sharded_grad_wr(lw: Any, op: OpNode, env: Any, prog: poplar.Sequence) -> None:
    ipus = op.attrs["ipus"]
    s = len(ipus)
    dloss = env[op.inputs[0]]
    nls = [env[t] for t in op.inputs[2 : 2 + s]]
    labels = [env[t] for t in op.inputs[2 + 2 * s :]]
    starts = _starts([env[t] for t in op.inputs[2 + s : 2 + 2 * s]])
    name = lw.name(op.debug_name)
    n = dloss.shape[0]
    for k, (i, t, idx, start) in enumerate(zip(ipus, nls, labels, starts)):
        g = dloss if i == ipus[0] else _to_ipu(lw, dloss, i, prog, f"{name}/broadcast_grad_{k}")
        c = t.shape[1]
        with lw.on_ipu(i):
            d = popops.neg(lw.graph, t, prog, name=f"{name}/recover_softmax_acts")
            popops.exp_in_place(lw.graph, d, prog, name=f"{name}/recover_softmax_acts")
            popops.mul_in_place(lw.graph, d, g.expand([1]).broadcast(c, 1), prog,
                                name=f"{name}/scale_softmax_acts")  # fmt: skip
            flat = flat_indices(lw, idx, c, prog, f"{name}/adjust_indices_{k}", start)
            popops.multi_update_add(lw.graph, d.reshape((n * c, 1)), flat, g.reshape((n, 1)),
                                    -1.0, prog, name=f"{name}/scatter_gradients_{k}")  # fmt: skip
        env[op.outputs[k]] = d


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {
    "CrossEntropyShardedWR": cross_entropy_sharded_wr,
    "CrossEntropyShardedGradWR": cross_entropy_sharded_grad_wr,
}
