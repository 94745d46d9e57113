"""Lowering of ``popxl/ops/nn.py``: softmax through ``popnn.softmax`` (the axis moved last
by a view), the NLL losses through ``popnn.nll_loss`` (log-probabilities) or
``popnn.nll_loss_from_probs`` (probabilities; ignored labels become PopLibs' masked label),
group / layer norm through ``popnn.group_norm_*`` with consecutive channel groups,
batch-norm inference as one fused popops map."""

from __future__ import annotations

import math

from tremula import poplar
from tremula.libs import popnn, popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Constant

Operation = popops.Operation


@rule("Softmax")
def softmax(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, axis = env[op.inputs[0]], op.attrs["axis"]
    last = t.rank - 1
    y = popnn.softmax(lw.graph, t.dim_roll(axis, last), prog, name=op.outputs[0].id)
    env[op.outputs[0]] = y.dim_roll(last, axis)


def _rows_and_labels(
    lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence
) -> tuple[poplar.Tensor, poplar.Tensor, poplar.Tensor | None]:
    """(the (log-)probabilities as rows [N, C], labels [N] with ignored ones masked, the
    bool mask of the labels kept or None when nothing is ignored)."""
    probs, labels = env[op.inputs[0]], env[op.inputs[1]]
    c = probs.shape[-1]
    n = probs.num_elements // c if c else math.prod(probs.shape[:-1])
    rows, labels = probs.reshape((n, c)), labels.reshape((n,))
    name = op.outputs[0].id
    ignore = op.attrs["ignore_index"]
    unsigned = op.inputs[1].dtype.as_numpy().kind == "u"
    label_type = poplar.UNSIGNED_INT if unsigned else poplar.INT
    if labels.dtype != label_type:  # PopLibs' losses take 32-bit labels
        labels = popops.cast(lw.graph, labels, label_type, prog, name=f"{name}/labels32")
    if ignore is None or (unsigned and ignore < 0):
        return rows, labels, None
    kept = popops.map(
        lw.graph, pe.NotEqual(pe._1, int(ignore)), [labels], prog, name=f"{name}/kept"
    )
    code = popnn.MASKED_LABEL_CODE if unsigned else -1
    masked = popops.map(
        lw.graph, pe.Select(pe._1, code, pe._2), [labels, kept], prog, name=f"{name}/labels"
    )
    return rows, masked, kept


def _reduce_loss(
    lw: Lowerer, op: OpNode, per: poplar.Tensor, kept: poplar.Tensor | None, prog: poplar.Sequence
) -> poplar.Tensor:
    out = op.outputs[0]
    mode = op.attrs["reduction"]
    if mode == "none":
        return per.reshape(out.shape)
    name = out.id
    if mode == "sum" or kept is not None:
        total = popops.reduce(lw.graph, per, [0], Operation.ADD, prog, name=name)
        if mode == "mean":
            count = _count(lw, kept, per.dtype, prog, name)  # type: ignore[arg-type]
            popops.map_in_place(
                lw.graph, pe._1 / pe.Max(pe._2, 1), [total, count], prog, name=f"{name}/mean"
            )
        return total
    r = lw.new_tensor(None, per.dtype, (), name)
    popops.reduce_with_output(
        lw.graph, per, r, [0], Operation.ADD, prog, scale=1.0 / max(per.shape[0], 1), name=name
    )
    return r


def _count(
    lw: Lowerer, kept: poplar.Tensor, dtype: poplar.Type, prog: poplar.Sequence, name: str
) -> poplar.Tensor:
    ones = popops.cast(lw.graph, kept, dtype, prog, name=f"{name}/kept")
    return popops.reduce(lw.graph, ones, [0], Operation.ADD, prog, name=f"{name}/count")


@rule("Nll")
def nll(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    rows, labels, kept = _rows_and_labels(lw, op, env, prog)
    loss = popnn.nll_loss if op.attrs["log_prob"] else popnn.nll_loss_from_probs
    per, _ = loss(lw.graph, rows, labels, prog, name=op.outputs[0].id)
    env[op.outputs[0]] = _reduce_loss(lw, op, per, kept, prog)


def _deltas_scale(
    lw: Lowerer, op: OpNode, env: Env, kept: poplar.Tensor | None, n: int, prog: poplar.Sequence
) -> float | poplar.Tensor:
    """``loss_grad`` over the samples counted by the mean: a number when both are known
    when the graph is built, else a one-element tensor of the probabilities' type."""
    g_ir, dtype = op.inputs[2], op.inputs[0].dtype.as_poplar()
    divisor = n if op.attrs["reduction"] == "mean" else 1
    if isinstance(g_ir, Constant) and kept is None:
        return float(g_ir.host_data.reshape(())) / max(divisor, 1)
    g = popops.cast(lw.graph, env[g_ir].reshape((1,)), dtype, prog, name=f"{g_ir.id}/cast")
    if op.attrs["reduction"] != "mean":
        return g
    if kept is None:
        return popops.map(lw.graph, pe._1 / max(n, 1), [g], prog, name=f"{g_ir.id}/scale")
    count = _count(lw, kept, dtype, prog, op.outputs[0].id).reshape((1,))
    return popops.map(lw.graph, pe._1 / pe.Max(pe._2, 1), [g, count], prog, name=f"{g_ir.id}/s")


@rule("NllWithSoftmaxGrad")
def nll_with_softmax_grad(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    probs, labels, kept = _rows_and_labels(lw, op, env, prog)
    scale = _deltas_scale(lw, op, env, kept, probs.shape[0], prog)
    per, deltas = popnn.nll_loss_from_probs(
        lw.graph, probs, labels, prog, deltas_scale=scale, name=op.outputs[0].id
    )
    if kept is not None:
        popops.map_in_place(
            lw.graph, pe.Select(pe._1, 0, pe._2), [deltas, kept.expand([1])], prog,
            name=f"{op.outputs[1].id}/ignore",
        )  # fmt: skip
    env[op.outputs[0]] = _reduce_loss(lw, op, per, kept, prog)
    env[op.outputs[1]] = deltas.reshape(op.outputs[1].shape)


_CONSECUTIVE = {"groupNormStridedChannelGrouping": False}  # PyTorch's (and PopART's) groups


@rule("GroupNorm")
def group_norm(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, w, b = (env[i] for i in op.inputs)
    name = op.outputs[0].id
    mean, inv = popnn.group_norm_statistics(
        lw.graph, t, op.attrs["eps"], prog, op.attrs["num_groups"], stable_algo=True,
        name=f"{name}/stats", options=_CONSECUTIVE,
    )  # fmt: skip
    out, _ = popnn.group_normalise(
        lw.graph, t, w, b, mean, inv, prog, name=name, options=_CONSECUTIVE
    )
    env[op.outputs[0]] = out
    env[op.outputs[1]], env[op.outputs[2]] = mean, inv


@rule("BatchNormInference")
def batch_norm_inference(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t, *params = (env[i] for i in op.inputs)
    shape = (1, t.shape[1]) + (1,) * (t.rank - 2)
    scale, bias, mean, var = (p.reshape(shape) for p in params)
    e = (pe._1 - pe._4) * pe.Rsqrt(pe._5 + op.attrs["epsilon"]) * pe._2 + pe._3
    env[op.outputs[0]] = popops.map(
        lw.graph, e, [t, scale, bias, mean, var], prog, name=op.outputs[0].id
    )
