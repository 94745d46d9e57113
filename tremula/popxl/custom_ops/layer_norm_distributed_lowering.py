"""Lowering of ``layer_norm_distributed.py`` as its C++ Opx grows it:
the statistics through ``poplin.distributed_norm_statistics`` on ``x^T`` (channels: the
samples) with gcl's all-reduce over the op's group as the reduce callback (all partials in
one all-reduce), the output through ``popnn.layer_normalise``; the gradient through
``popnn.layer_norm_whiten``, ``poplin.distributed_norm_statistics_gradients`` and
``popnn.layer_norm_param_gradients``. Cycles and memory are those libraries' estimates
(popops' reductions, maps and casts; gcl's exchanges). Compute sets and tensors carry the
op's debug name (``<scope>/LayerNormDistributed/...``)."""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.libs import gcl, poplin, popnn
from tremula.popxl.ops.base import OpNode


def _all_reduce(group: gcl.ReplicaGrouping) -> poplin.NormReduceCallback:
    """The C++ ``GetDistributedNormReduceCallback``: one gcl all-reduce (ADD) over the
    group of all the partials, flattened and concatenated."""

    def callback(
        graph: poplar.Graph,
        parts: list[poplar.Tensor],
        prog: poplar.Sequence,
        group_size: int,
        name: str,
    ) -> list[poplar.Tensor]:
        flat = poplar.concat([p.flatten() for p in parts])
        total = gcl.all_reduce(graph, flat, gcl.CollectiveOperator.ADD, prog, group, name=name)
        out, start = [], 0
        for p in parts:
            out.append(total[start : start + p.num_elements].reshape(p.shape))
            start += p.num_elements
        return out

    return callback


def _stable(op: OpNode) -> bool:
    """PopART's session option ``enableStableNorm`` of the op's Ir (False unless set)."""
    from tremula.popxl._ir.ir import _OPTIONS

    opts = _OPTIONS.get(op.graph.ir)
    return bool(getattr(opts, "enableStableNorm", False))


def layer_norm_distributed(lw: Any, op: OpNode, env: Any, prog: poplar.Sequence) -> None:
    x, w, b = (env[t] for t in op.inputs)
    rg = op.attrs["group"]
    name = lw.name(op.debug_name)
    mean, inv = poplin.distributed_norm_statistics(
        lw.graph, x.transpose(), op.attrs["epsilon"], prog, False,
        _all_reduce(rg.grouping), x.shape[1] * rg.group_size, _stable(op), rg.group_size,
        name=f"{name}/groupNormStatistics",
    )  # fmt: skip
    y, _ = popnn.layer_normalise(lw.graph, x, w, b, mean, inv, prog, name=f"{name}/layerNorm")
    env.update(zip(op.outputs, (y, mean, inv)))


def layer_norm_distributed_grad(lw: Any, op: OpNode, env: Any, prog: poplar.Sequence) -> None:
    x, _, mean, inv, dy = (env[t] for t in op.inputs)
    rg = op.attrs["group"]
    name = lw.name(op.debug_name)
    xh = popnn.layer_norm_whiten(lw.graph, x, mean, inv, prog, name=f"{name}/whitenedActs")
    dx = poplin.distributed_norm_statistics_gradients(
        lw.graph, xh.transpose(), dy.transpose(), inv, prog, _all_reduce(rg.grouping),
        x.shape[1] * rg.group_size, rg.group_size, name=f"{name}/operandGrad",
    )  # fmt: skip
    dw, db = popnn.layer_norm_param_gradients(
        lw.graph, xh, dy, None, inv, prog, name=f"{name}/scaleOffsetGrads"
    )
    env.update(zip(op.outputs, (dx.transpose(), dw, db)))


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {
    "LayerNormDistributed": layer_norm_distributed,
    "LayerNormDistributedGrad": layer_norm_distributed_grad,
}
