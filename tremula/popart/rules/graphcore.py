"""``ai.graphcore`` ops: PopART's losses (``L1``, ``Nll``, ``IdentityLoss``), collectives
and the element-wise ops PopART adds to ONNX."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tremula.libs.gcl.grouping import CommGroup, CommGroupType
from tremula.popart.rules.control import call
from tremula.popart.rules.elementwise import python_mod, round_half_even
from tremula.popxl import ops

_REDUCTIONS = {"Sum": "sum", "Mean": "mean", "None": "none"}


def _reduced(node: Any, per_element: Any) -> Any:
    reduction = node.attr("reduction", "Mean")
    if reduction == "Sum":
        return ops.sum(per_element)
    if reduction == "Mean":
        return ops.mean(per_element)
    return per_element


def _l1(node: Any) -> list[Any]:
    lam = float(node.attr("lambda"))
    return [ops.mul(_reduced(node, ops.abs(node.tensor(0))), lam)]


def _nll(node: Any) -> list[Any]:
    probs, labels = node.tensor(0), node.tensor(1)
    ignore = node.attr("ignoreIndex")
    reduction = _REDUCTIONS[node.attr("reduction", "Mean")]
    log_prob = bool(node.attr("inputIsLogProbability", 0))
    if len(probs.shape) > 2:  # [N, C, d1 ...] -> [N * d1 ..., C] with labels [N * d1 ...]
        C = probs.shape[1]
        order = [0, *range(2, len(probs.shape)), 1]
        probs = ops.reshape(ops.transpose(probs, order), (probs.nelms // C, C))
        out = ops.nll_loss(probs, ops.reshape(labels, (labels.nelms,)), ignore, reduction, log_prob)
        return [out if reduction != "none" else ops.reshape(out, node.tensor(1).shape)]
    return [ops.nll_loss(probs, labels, ignore, reduction, log_prob)]


def _comm_group(node: Any) -> Any:
    """The popxl ReplicaGrouping of a collective node (``__collectiveCommGroup``)."""
    value = node.attr("__collectiveCommGroup")
    if value is None:
        return None
    cg = CommGroup(CommGroupType(int(value[0])), int(value[1]))
    ir = node.tensor(0).ir
    g = cg.to_grouping(ir.replication_factor)
    return ir.replica_grouping(g.stride, g.group_size)


_OPS = {
    1: "add",
    2: "mean",
    3: "mul",
    4: "min",
    5: "max",
    6: "logical_and",
    7: "logical_or",
    8: "square_add",
    9: "local",
}


def _all_reduce(node: Any) -> list[Any]:
    op = _OPS.get(int(node.attr("op", 1)), "add")
    return [ops.collectives.replicated_all_reduce(node.tensor(0), op, _comm_group(node))]


def _reduce_scatter(node: Any) -> list[Any]:
    op = _OPS.get(int(node.attr("op", 1)), "add")
    return [ops.collectives.replicated_reduce_scatter(node.tensor(0), op, _comm_group(node))]


def _unary(fn: Callable[[Any], Any]) -> Callable[[Any], list]:
    return lambda node: [fn(node.tensor(0))]


def _print(node: Any) -> list[Any]:
    title = node.attr("title", "") or None
    gradient = bool(node.attr("print_gradient", 1))
    return [ops.print_tensor(node.tensor(0), title, print_gradient=gradient)]


def _increment_mod(node: Any) -> list[Any]:
    """``(x + increment) mod modulus`` (C's remainder); integral attributes for integers."""
    x = node.tensor(0)
    increment, modulus = float(node.attr("increment")), float(node.attr("modulus"))
    if x.dtype.is_int and increment.is_integer() and modulus.is_integer():
        return [ops.increment_mod(x, int(increment), int(modulus))]
    return [ops.increment_mod(x, increment, modulus)]


GRAPHCORE: dict[str, Callable[[Any], list]] = {
    "L1": _l1,
    "Nll": _nll,
    "IdentityLoss": lambda node: [_reduced(node, node.tensor(0))],
    "ReplicatedAllReduce": _all_reduce,
    "ReplicatedReduceScatter": _reduce_scatter,
    "Gelu": _unary(ops.gelu),
    "Swish": _unary(ops.swish),
    "Detach": _unary(ops.detach),
    "Expm1": _unary(lambda x: ops.sub(ops.exp(x), 1.0)),
    "Log1p": _unary(lambda x: ops.log(ops.add(x, 1.0))),
    "Scale": lambda node: [ops.mul(node.tensor(0), float(node.attr("scale")))],
    "Subsample": lambda node: [ops.subsample(node.tensor(0), node.attr("strides"))],
    "Fmod": lambda node: [ops.fmod(node.tensor(0), node.tensor(1))],
    "Atan2": lambda node: [ops.atan2(node.tensor(0), node.tensor(1))],
    "Remainder": lambda node: [python_mod(node.tensor(0), node.tensor(1))],
    "Round": lambda node: [round_half_even(node.tensor(0))],
    "IncrementMod": _increment_mod,
    "Call": call,
    "PrintTensor": _print,
    "GroupNormalization": lambda node: [
        ops.group_norm(
            node.tensor(0),
            node.tensor(1),
            node.tensor(2),
            int(node.attr("num_groups")),
            float(node.attr("epsilon", 1e-5)),
        )
    ],
    "ShapedDropout": lambda node: [
        ops.shaped_dropout(
            node.tensor(0), node.seed(), node.attr("shape"), float(node.attr("ratio", 0.5))
        )
        if node.training
        else node.tensor(0)
    ],
}
